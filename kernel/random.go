package kernel

import "math/rand/v2"

// NewRand returns a generator whose sequence depends only on seed, so that
// every rank given the same seed draws the same inputs.
func NewRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, 0x9E3779B97F4A7C15))
}

// FillRandom fills dst with bf16(scale * x), x drawn from a standard normal
// distribution by rng, so the same generator state gives the same values.
// A draw that rounds to zero is replaced by ±scale: results and checks
// must never hinge on zeros. scale should be a positive finite value that
// bf16 can represent without flushing to zero.
func FillRandom(rng *rand.Rand, dst []BF16, scale float32) {
	for i := range dst {
		v := BF16FromFloat32(float32(rng.NormFloat64()) * scale)
		if v&0x7FFF == 0 {
			v = BF16FromFloat32(scale) | v&NegZero
		}
		dst[i] = v
	}
}
