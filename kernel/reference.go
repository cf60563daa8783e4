package kernel

import (
	"fmt"
	"math"
)

// ToleranceFormula states, for people reading results, the bound that
// Tolerance computes per element. S is the exact dot product (computed in
// float64), ref = S + shared, K = latent_dim.
const ToleranceFormula = "|out - ref| <= (2^-8+2^-15)*(|S| + |S+shared|) + (1+2^-6)*(gamma_K*sum_k|l*w| + K*2^-149) + 2^-132, " +
	"gamma_K = K*2^-24/(1-K*2^-24); ref = S + shared and S = sum_k l*w in float64"

// Why this bound holds (u = 2^-24 for fp32, 2^-8 for bf16 = half an ulp
// relative, the bf16 subnormal quantum being 2^-133):
//
//   - Every product of two bf16 values is exact in fp32 (8+8 significand
//     bits) unless it underflows, which costs at most 2^-150 each. Summing K
//     terms in fp32 in any order, FMA or not, errs by at most
//     e1 = gamma_K*sum|l*w| + K*2^-149 (Higham, Accuracy and Stability,
//     Thm 4.4 / 3.1).
//   - b = bf16(Ŝ) errs by at most 2^-8*|Ŝ| + 2^-134 <= 2^-8*(|S|+e1) + 2^-134.
//   - The fp32 sum t = fl(b + shared) errs by at most 2^-24*|b+shared|, and
//     |b + shared| <= |S+shared| + e1 + 2^-8*(|S|+e1) + 2^-134 =: B.
//   - out = bf16(t) errs by at most 2^-8*|t| + 2^-134 <= 2^-8*(1+2^-24)*B + 2^-134.
//
// Adding these up, |out - (S+shared)| <= e1 + 2^-8*(|S|+e1) + c*B + 2^-133
// with c = 2^-24 + 2^-8*(1+2^-24): coefficient 2^-8+2^-16+... on |S|, c on
// |S+shared|, 1+2^-7+2^-16+... on e1. ToleranceFormula rounds each up, and
// the slack also covers the float64 reference's own error (about K*2^-53
// times sum|l*w|), so a correct kernel can never fail the check.
//
// The bound is tight where the two bf16 roundings dominate: over a few
// thousand random elements some error reaches 0.9 of it. The gamma_K term
// is a worst case a real summation rarely meets; with latent_dim 3584 and
// weights scaled by 1/sqrt(latent_dim) the whole bound is about 2% of |S|.
// A result computed from a wrong weight row, a shifted k, the wrong shared
// element or another rank's slice is off by about |S|, tens of times the
// bound; a single dropped product or a one-ulp error is not caught, by
// design (no tolerance can separate those from rounding).

// Expected is the yardstick for one rank's output slice: the ideal value of
// every element and the absolute bound a correct kernel stays within.
type Expected struct {
	Shape Shape
	// Ideal[m*shard+n] = S + shared[m,n] with S = sum_k latent[m,k]*weight[n,k],
	// all in float64 without the kernel's roundings.
	Ideal []float64
	// Tol[m*shard+n] is the bound of ToleranceFormula for that element.
	Tol []float64
}

// Expect computes the ideal result and its tolerance for one rank's slice
// in one pass. Its arguments are those of UpProjectCPU without the output.
//
// Because every output column depends only on its own weight row and shared
// column, Expect with a TP=1 shape, the full weight and a shared row stride
// of hidden_dim gives the yardstick for a whole [M, hidden_dim] block.
func Expect(s Shape, latent, weightShard, shared []BF16, sharedStride int) (*Expected, error) {
	l := Layout{LatentLen: len(latent), WeightLen: len(weightShard), SharedLen: len(shared), SharedStride: sharedStride, OutLen: -1}
	if err := validateOperands("Expect", s, l); err != nil {
		return nil, err
	}
	M, K, shard := s.M, s.Latent, s.Shard()
	e := &Expected{Shape: s, Ideal: make([]float64, M*shard), Tol: make([]float64, M*shard)}

	lat := make([]float64, M*K)
	for i, b := range latent[:M*K] {
		lat[i] = b.Float64()
	}
	gamma, tolConst := toleranceTerms(K)
	row := func(m int) []float64 { return lat[m*K : (m+1)*K] }
	put := func(m, n int, sum, abs float64) {
		ideal := sum + shared[m*sharedStride+n].Float64()
		e.Ideal[m*shard+n] = ideal
		e.Tol[m*shard+n] = (0x1p-8+0x1p-15)*(math.Abs(sum)+math.Abs(ideal)) + (1+0x1p-6)*(gamma*abs) + tolConst
	}
	for n := range shard {
		w := weightShard[n*K : (n+1)*K]
		m := 0
		for ; M-m >= 2; m += 2 {
			s0, a0, s1, a1 := dot64x2(row(m), row(m+1), w)
			put(m, n, s0, a0)
			put(m+1, n, s1, a1)
		}
		if m < M {
			s0, a0 := dot64(row(m), w)
			put(m, n, s0, a0)
		}
	}
	return e, nil
}

// toleranceTerms returns gamma_K and the constant part of the bound that
// does not depend on the data. Validate keeps K*2^-24 <= 1/16, where the
// classical bound holds.
func toleranceTerms(K int) (gamma, constant float64) {
	ku := float64(K) * 0x1p-24
	return ku / (1 - ku), (1+0x1p-6)*float64(K)*0x1p-149 + 0x1p-132
}

// dot64x2 returns sum(l[k]*w[k]) and sum(|l[k]*w[k]|) for two latent
// rows. Each product of two widened bf16 values is exact in float64.
func dot64x2(l0, l1 []float64, w []BF16) (s0, a0, s1, a1 float64) {
	l0, l1 = l0[:len(w)], l1[:len(w)]
	for k, b := range w {
		wk := b.Float64()
		p0, p1 := l0[k]*wk, l1[k]*wk
		s0 += p0
		a0 += math.Abs(p0)
		s1 += p1
		a1 += math.Abs(p1)
	}
	return s0, a0, s1, a1
}

// dot64 is dot64x2 for one row.
func dot64(l []float64, w []BF16) (sum, abs float64) {
	l = l[:len(w)]
	var s1, a1 float64
	for len(w) >= 2 && len(l) >= 2 {
		p0, p1 := l[0]*w[0].Float64(), l[1]*w[1].Float64()
		sum += p0
		abs += math.Abs(p0)
		s1 += p1
		a1 += math.Abs(p1)
		l, w = l[2:], w[2:]
	}
	if len(w) > 0 && len(l) > 0 {
		p := l[0] * w[0].Float64()
		sum += p
		abs += math.Abs(p)
	}
	return sum + s1, abs + a1
}

// Reference returns the ideal float64 result for one rank's slice,
// out[m*shard+n] (see Expected.Ideal). It is the yardstick: no fp32
// accumulation, no bf16 rounding.
func Reference(s Shape, latent, weightShard, shared []BF16, sharedStride int) ([]float64, error) {
	e, err := Expect(s, latent, weightShard, shared, sharedStride)
	if err != nil {
		return nil, err
	}
	return e.Ideal, nil
}

// Tolerance returns the per-element absolute bound of ToleranceFormula for
// comparing a bf16 result of the fused op with Reference.
func Tolerance(s Shape, latent, weightShard, shared []BF16, sharedStride int) ([]float64, error) {
	e, err := Expect(s, latent, weightShard, shared, sharedStride)
	if err != nil {
		return nil, err
	}
	return e.Tol, nil
}

// Mismatch describes one wrong output element.
type Mismatch struct {
	M, N   int // row, and column within the slice
	Got    BF16
	Want   float64 // Expected.Ideal
	Tol    float64
	Reason string // "outside tolerance", "NaN", "negative zero stored"
}

func (m Mismatch) String() string {
	return fmt.Sprintf("out[%d,%d] = %g (0x%04x), want %g ± %.3g: %s", m.M, m.N, m.Got.Float32(), uint16(m.Got), m.Want, m.Tol, m.Reason)
}

// CheckResult summarizes a comparison of a computed slice with Expected.
type CheckResult struct {
	Checked, Wrong int
	// Worst is the largest |out - ideal| / tol over the elements within
	// tolerance; it shows how much room a correct result leaves.
	Worst float64
	First Mismatch // valid when Wrong > 0
}

// Check compares out[m*outStride+n] (m < M, n < shard) with e. A stored
// negative zero counts as wrong (the op promises +0); an infinity counts
// as right only when the ideal value lies within tolerance of bf16
// overflow.
func (e *Expected) Check(out []BF16, outStride int) (CheckResult, error) {
	s := e.Shape
	shard := s.Shard()
	if err := s.Validate(); err != nil {
		return CheckResult{}, fmt.Errorf("kernel: Check (%v): %w", s, err)
	}
	if n := s.M * shard; len(e.Ideal) != n || len(e.Tol) != n {
		return CheckResult{}, fmt.Errorf("kernel: Check (%v): %w", s, &ShapeError{Field: "len(Expected.Ideal)", Value: len(e.Ideal), Rule: fmt.Sprintf("must be M*shard_dim = %d with as many tolerances", n)})
	}
	// Only the output's checks apply; the input lengths are given as met.
	l := Layout{LatentLen: s.M * s.Latent, WeightLen: shard * s.Latent, SharedLen: s.M * shard, SharedStride: shard, OutLen: len(out), OutStride: outStride}
	if err := s.ValidateLayout(l); err != nil {
		return CheckResult{}, fmt.Errorf("kernel: Check (%v): %w", s, err)
	}
	// Values at or beyond this round to infinity in bf16.
	const overflow = 0x1p128 - 0x1p119
	var r CheckResult
	for m := range s.M {
		for n, got := range out[m*outStride : m*outStride+shard] {
			want, tol := e.Ideal[m*shard+n], e.Tol[m*shard+n]
			r.Checked++
			reason := ""
			g := got.Float64()
			switch {
			case got == NegZero:
				reason = "negative zero stored"
			case got.IsNaN():
				reason = "NaN"
			case got.IsInf():
				if math.Abs(want)+tol < overflow || math.Signbit(want) != math.Signbit(g) {
					reason = "outside tolerance"
				}
			default:
				d := math.Abs(g - want)
				if !(d <= tol) { // a NaN anywhere fails
					reason = "outside tolerance"
				} else if tol > 0 {
					r.Worst = max(r.Worst, d/tol)
				}
			}
			if reason != "" {
				if r.Wrong == 0 {
					r.First = Mismatch{M: m, N: n, Got: got, Want: want, Tol: tol, Reason: reason}
				}
				r.Wrong++
			}
		}
	}
	return r, nil
}
