package kernel

import "math"

// BF16 is a bfloat16 value as its bit pattern: the upper half of an IEEE
// float32 (1 sign bit, 8 exponent bits, 7 fraction bits).
type BF16 uint16

// Notable bf16 bit patterns and the mailbox sentinel.
const (
	// NegZero is bf16 -0. The operation never stores it (it writes +0), so
	// that no written 32-bit word can equal Sentinel.
	NegZero BF16 = 0x8000
	// MaxFinite is the largest finite bf16, (2 - 2^-7) * 2^127.
	MaxFinite BF16 = 0x7F7F
	// PosInf and NegInf are the bf16 infinities.
	PosInf BF16 = 0x7F80
	NegInf BF16 = 0xFF80
	// QuietNaN is the canonical quiet NaN.
	QuietNaN BF16 = 0x7FC0

	// Sentinel is the "not yet written" mailbox word: two bf16 negative
	// zeros. SanitizeWord never returns it.
	Sentinel uint32 = 0x80000000
)

// bf16 quiet bit: the top fraction bit.
const quietBit = 0x0040

// BF16FromFloat32 rounds f to the nearest bf16, ties to even. NaN stays NaN
// (sign and the top 7 payload bits are kept, the quiet bit is set, so a
// payload held only in the low bits cannot turn into an infinity);
// infinities stay infinite; finite values that round past MaxFinite become
// infinities; subnormals are rounded like any other value.
func BF16FromFloat32(f float32) BF16 {
	b := math.Float32bits(f)
	if b&0x7FFFFFFF > 0x7F800000 {
		return BF16(b>>16) | quietBit
	}
	// Adding 0x7FFF plus the lowest kept bit carries into the kept half
	// exactly when the dropped half is above one half, or equal to it with
	// an odd kept half. A carry out of the fraction increments the exponent,
	// which is also right for subnormal -> normal and MaxFinite -> Inf.
	b += 0x7FFF + (b>>16)&1
	return BF16(b >> 16)
}

// BF16FromFloat64 rounds f to the nearest bf16, ties to even, with one
// rounding (not float64 -> float32 -> bf16, which can round twice). Special
// values behave as in BF16FromFloat32.
func BF16FromFloat64(f float64) BF16 {
	if math.IsNaN(f) {
		return BF16(math.Float32bits(float32(f))>>16) | quietBit
	}
	// Round to odd into float32, then to nearest even into bf16: float32
	// keeps 16 more fraction bits (and reaches 16 binades further into the
	// subnormals), so the second rounding sees whether the first was exact
	// and the result equals a direct rounding.
	g := float32(f)
	if d := float64(g); d != f {
		if math.Abs(d) > math.Abs(f) { // rounded away from zero: take the truncation
			g = math.Float32frombits(math.Float32bits(g) - 1)
		}
		g = math.Float32frombits(math.Float32bits(g) | 1) // sticky bit
	}
	return BF16FromFloat32(g)
}

// Float32 widens b to float32 exactly.
func (b BF16) Float32() float32 { return math.Float32frombits(uint32(b) << 16) }

// Float64 widens b to float64 exactly.
func (b BF16) Float64() float64 { return float64(b.Float32()) }

// IsNaN reports whether b is a NaN.
func (b BF16) IsNaN() bool { return b&0x7FFF > 0x7F80 }

// IsInf reports whether b is an infinity.
func (b BF16) IsInf() bool { return b&0x7FFF == 0x7F80 }

// FromFloat32s rounds src into dst element by element and returns the
// number of elements converted, min(len(dst), len(src)).
func FromFloat32s(dst []BF16, src []float32) int {
	n := min(len(dst), len(src))
	for i, f := range src[:n] {
		dst[i] = BF16FromFloat32(f)
	}
	return n
}

// ToFloat32s widens src into dst and returns min(len(dst), len(src)).
func ToFloat32s(dst []float32, src []BF16) int {
	n := min(len(dst), len(src))
	for i, b := range src[:n] {
		dst[i] = b.Float32()
	}
	return n
}

// SanitizeWord turns each bf16 negative zero in a packed pair into +0, so
// the result is never Sentinel. Other values, NaNs included, are unchanged.
func SanitizeWord(w uint32) uint32 {
	if w&0xFFFF == uint32(NegZero) {
		w &^= 0xFFFF
	}
	if w>>16 == uint32(NegZero) {
		w &= 0xFFFF
	}
	return w
}

// PackWord packs two consecutive elements into the 32-bit word that holds
// them in little-endian memory: even (the lower address) in the low half.
func PackWord(even, odd BF16) uint32 { return uint32(even) | uint32(odd)<<16 }

// UnpackWord is the inverse of PackWord.
func UnpackWord(w uint32) (even, odd BF16) { return BF16(w), BF16(w >> 16) }

// PackWords packs src pairwise into sanitized words, dst[i] holding
// src[2i] and src[2i+1], and returns the number of words written,
// min(len(dst), len(src)/2). A trailing odd element is not packed; callers
// keep slices even (shard_dim is a multiple of 8).
func PackWords(dst []uint32, src []BF16) int {
	n := min(len(dst), len(src)/2)
	for i := range dst[:n] {
		dst[i] = SanitizeWord(PackWord(src[2*i], src[2*i+1]))
	}
	return n
}
