package kernel

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestFillRandom(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const n = 1 << 16
	a, b, c := make([]BF16, n), make([]BF16, n), make([]BF16, n)
	FillRandom(NewRand(seed), a, 0.25)
	FillRandom(NewRand(seed), b, 0.25)
	FillRandom(NewRand(seed+1), c, 0.25)
	if !slices.Equal(a, b) {
		t.Error("the same seed gave different values")
	}
	if slices.Equal(a, c) {
		t.Error("different seeds gave the same values")
	}
	var sum, sq float64
	neg := 0
	for i, v := range a {
		if v&0x7FFF == 0 || v.IsNaN() || v.IsInf() {
			t.Fatalf("a[%d] = %#04x: zero or not finite", i, uint16(v))
		}
		f := v.Float64()
		sum += f
		sq += f * f
		if f < 0 {
			neg++
		}
	}
	mean, sd := sum/n, math.Sqrt(sq/n-(sum/n)*(sum/n))
	if math.Abs(mean) > 0.01 || math.Abs(sd-0.25) > 0.01 || neg < n*45/100 || neg > n*55/100 {
		t.Errorf("mean %.4f, sd %.4f, %d of %d negative: not a normal draw with scale 0.25", mean, sd, neg, n)
	}
}

func TestFillRandomNeverZero(t *testing.T) {
	// A scale so small that most draws flush to zero in bf16.
	const scale = 0x1p-133
	d := make([]BF16, 4096)
	FillRandom(NewRand(7), d, scale)
	for i, v := range d {
		if v&0x7FFF == 0 {
			t.Fatalf("d[%d] is zero", i)
		}
	}
}
