package kernel

import (
	"math"
	"testing"
)

// largeMs are the row counts past the GPU skinny kernels that the op takes
// on the CPU: powers of two, odd counts and the limit, so that the CPU
// kernel's groups of 4, 2 and 1 rows all meet a remainder.
var largeMs = []int{9, 16, 31, 32, 64, 100, MaxM}

// TestLargeMAgainstFloat64 runs the CPU kernel and the reference at every
// M of largeMs, at tp 3 and at latents that are no multiple of 32 or 64,
// with fresh random inputs and a poisoned output, against a float64 sum
// computed here independently of Expect.
func TestLargeMAgainstFloat64(t *testing.T) {
	rng := testSeed(t)
	shapes := []struct{ hidden, latent, tp int }{
		{3 * 40, 200, 3}, // shard 40, latent 200 = 6*32+8
		{3 * 16, 72, 3},  // latent 72 = 64+8
		{64, 8 * (1 + rng.IntN(40)), 1},
		{4 * 24, 8 * (13 + 2*rng.IntN(10)), 4}, // an odd multiple of 8
	}
	var c CPU // reused across shapes and M, as the host backend does
	for _, g := range shapes {
		for _, m := range largeMs {
			s := Shape{M: m, Hidden: g.hidden, Latent: g.latent, TP: g.tp}
			if err := s.Validate(); err != nil {
				t.Fatalf("%v: %v", s, err)
			}
			o := newOperands(rng, s, rng.IntN(g.tp))
			o.run(t, &c)
			e := o.expect(t)
			// Expect against a plain float64 loop: both sum exact bf16
			// products in float64, so they differ by float64 rounding only.
			shard, K := s.Shard(), s.Latent
			for mm := range m {
				for n := range shard {
					sum, abs := 0.0, 0.0
					for k := range K {
						p := o.latent[mm*K+k].Float64() * o.weight[n*K+k].Float64()
						sum += p
						abs += math.Abs(p)
					}
					want := sum + o.shared[mm*s.Hidden+o.off()+n].Float64()
					if got := e.Ideal[mm*shard+n]; math.Abs(got-want) > float64(K)*0x1p-50*abs+0x1p-60 {
						t.Fatalf("%v: Expect ideal[%d,%d] = %g, float64 loop %g", s, mm, n, got, want)
					}
				}
			}
			ref, err := Reference(s, o.latent, o.weight, o.sharedSlice(), s.Hidden)
			if err != nil {
				t.Fatalf("%v: Reference: %v", s, err)
			}
			for i := range ref {
				if ref[i] != e.Ideal[i] {
					t.Fatalf("%v: Reference[%d] = %g, Expect %g", s, i, ref[i], e.Ideal[i])
				}
			}
			r := o.check(t, e)
			if r.Wrong != 0 || r.Checked != m*shard {
				t.Errorf("%v rank %d: %d of %d wrong, first %v", s, o.rank, r.Wrong, r.Checked, r.First)
			}
			for mm := range m {
				for n := range s.Hidden {
					v := o.out[mm*s.Hidden+n]
					mine := n >= o.off() && n < o.off()+shard
					if !mine && v != NegZero {
						t.Fatalf("%v rank %d: wrote out[%d,%d] outside its slice", s, o.rank, mm, n)
					}
					if mine && v == NegZero {
						t.Fatalf("%v rank %d: out[%d,%d] left unwritten or -0", s, o.rank, mm, n)
					}
				}
			}
		}
	}
}

// TestLargeMCatchesAWrongRow makes sure the check above can fail at a large
// M: one row's latent changed after the run puts that row out of bounds.
func TestLargeMCatchesAWrongRow(t *testing.T) {
	rng := testSeed(t)
	s := Shape{M: MaxM, Hidden: 3 * 40, Latent: 200, TP: 3}
	o := newOperands(rng, s, 1)
	var c CPU
	o.run(t, &c)
	row := MaxM - 1 - rng.IntN(MaxM-MaxSkinnyM)
	FillRandom(rng, o.latent[row*s.Latent:(row+1)*s.Latent], 1)
	if r := o.check(t, o.expect(t)); r.Wrong == 0 {
		t.Errorf("%v: changing latent row %d after the run went unnoticed", s, row)
	}
}
