"""The op's result computed in pure Python, to check a block against.

The op accumulates each dot product in fp32 in an order of its own, so the
sum it rounds lies within e = gamma_K*sum|l*w| + K*2**-149 of the exact one
(gamma_K = K*2**-24 / (1 - K*2**-24), K = latent; Higham, Accuracy and
Stability of Numerical Algorithms, Thm 4.4). Its epilogue,

    out = bf16( f32( f32(bf16(S)) + f32(shared) ) ),  -0 stored as +0,

is monotone in S, so a correct element lies between epilogue(S - e) and
epilogue(S + e), with S the exact sum (math.fsum of exact products). That
interval is one or two bf16 values wide: the check allows the roundings the
op makes and nothing else.
"""

import math

from ._bf16 import bf16_from_float, bf16_to_float, f32_round

__all__ = ["epilogue", "bounds", "check_block"]


def epilogue(s, shared):
    """The bf16 bit pattern the op stores for accumulated sum s and the
    residual's bf16 bit pattern shared."""
    t = f32_round(bf16_to_float(bf16_from_float(s)) + bf16_to_float(shared))
    v = bf16_from_float(t)
    return 0 if v == 0x8000 else v


def bounds(latent_row, weight_row, shared):
    """The lowest and highest value a correct op may store for one element:
    latent_row and weight_row are sequences of K bf16 values as floats,
    shared a bf16 bit pattern."""
    k = len(latent_row)
    products = [a * b for a, b in zip(latent_row, weight_row)]  # exact: 8-bit significands
    s = math.fsum(products)
    gamma = k * 2.0**-24 / (1 - k * 2.0**-24)
    e = (gamma + k * 2.0**-53) * math.fsum(abs(p) for p in products) + k * 2.0**-149
    return bf16_to_float(epilogue(s - e, shared)), bf16_to_float(epilogue(s + e, shared))


def check_block(out, latent, weight, shared, m, hidden, latent_dim):
    """Checks a whole [m, hidden] block (bf16 bit patterns, row-major)
    computed from latent [m, latent_dim], the full weight [hidden,
    latent_dim] and the full residual shared [m, hidden], all bf16 bit
    patterns. Returns the list of wrong elements as (row, column, got,
    lowest, highest); empty when every element is right."""
    lat = [bf16_to_float(b) for b in latent[: m * latent_dim]]
    w = [bf16_to_float(b) for b in weight[: hidden * latent_dim]]
    wrong = []
    for i in range(m):
        row = lat[i * latent_dim:(i + 1) * latent_dim]
        for n in range(hidden):
            lo, hi = bounds(row, w[n * latent_dim:(n + 1) * latent_dim], shared[i * hidden + n])
            got = out[i * hidden + n]
            g = bf16_to_float(got)
            if got == 0x8000 or math.isnan(g) or not lo <= g <= hi:
                wrong.append((i, n, g, lo, hi))
    return wrong
