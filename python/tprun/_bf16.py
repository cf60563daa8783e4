"""bf16 and fp32 rounding in pure Python, for callers without a framework.

A bf16 value travels as its 16-bit pattern (the upper half of an IEEE
float32), as an int or in an array('H').
"""

import math
import struct
from array import array

__all__ = ["bf16_from_float", "bf16_to_float", "f32_round", "to_bf16", "from_bf16"]


def _round(x, bits, min_exp, max_field):
    """Rounds the float x to a binary format with a bits-bit significand
    (hidden bit included), subnormal quantum 2**min_exp and largest exponent
    field max_field, ties to even, in one rounding. Returns (sign, n, q):
    the value is (-1)**sign * n * 2**q, or n None for an infinity."""
    sign = 1 if math.copysign(1.0, x) < 0 else 0
    a = abs(x)
    if a == 0:
        return sign, 0, min_exp
    m, e = math.frexp(a)  # a = m * 2**e, m in [0.5, 1)
    q = max(e - 1 - (bits - 1), min_exp)
    # a * 2**-q is exact in binary; rounding it to an integer, ties to even,
    # is the rounding of a to a multiple of 2**q.
    n = round(math.ldexp(a, -q))
    if n >= 1 << bits:
        n >>= 1
        q += 1
    if n >= 1 << (bits - 1) and q - min_exp + 1 > max_field - 1:
        return sign, None, q
    return sign, n, q


def bf16_from_float(x):
    """Rounds the float x to the nearest bf16, ties to even, in one rounding
    (not through float32), and returns its bit pattern. NaN gives the quiet
    NaN 0x7FC0 (with x's sign); values past the largest finite bf16 round to
    infinity."""
    if math.isnan(x):
        return 0xFFC0 if math.copysign(1.0, x) < 0 else 0x7FC0
    if math.isinf(x):
        return 0xFF80 if x < 0 else 0x7F80
    sign, n, q = _round(x, 8, -133, 255)
    if n is None:
        return sign << 15 | 0x7F80
    if n < 128:  # subnormal (q == -133) or zero
        return sign << 15 | n
    return sign << 15 | (q + 134) << 7 | (n - 128)


def bf16_to_float(b):
    """Widens the bf16 bit pattern b to a float, exactly."""
    return struct.unpack("<f", struct.pack("<I", (b & 0xFFFF) << 16))[0]


def f32_round(x):
    """Rounds the float x to the nearest float32 value, ties to even, and
    returns it as a float (infinite past the float32 range)."""
    if math.isnan(x) or math.isinf(x):
        return x
    sign, n, q = _round(x, 24, -149, 255)
    if n is None:
        return -math.inf if sign else math.inf
    v = math.ldexp(n, q)
    return -v if sign else v


def to_bf16(values):
    """Rounds every float of values to bf16 and returns the bit patterns as
    an array('H'), the buffer type the op takes."""
    return array("H", (bf16_from_float(float(v)) for v in values))


def from_bf16(buf):
    """Widens every bf16 bit pattern of buf (an array('H') or any buffer of
    uint16) to a float and returns them as a list."""
    mv = memoryview(buf)
    if mv.format != "H":
        mv = mv.cast("B").cast("H")
    return [bf16_to_float(b) for b in mv]
