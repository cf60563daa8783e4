package kernel

import "math"

// CPU runs the fused op on the host in fp32, as the host backend does. It
// keeps its scratch buffers between calls so that steps do not allocate.
// The zero value is ready to use; a CPU is not safe for concurrent use.
type CPU struct {
	lat []float32 // latent widened to fp32, [M, K]
}

// UpProjectCPU runs the fused op once with fresh scratch; see CPU.UpProject.
func UpProjectCPU(s Shape, latent, weightShard, shared []BF16, sharedStride int, out []BF16, outStride int) error {
	var c CPU
	return c.UpProject(s, latent, weightShard, shared, sharedStride, out, outStride)
}

// UpProject computes one rank's slice of the fused op:
//
//	S        = sum_k f32(latent[m*K+k]) * f32(weightShard[n*K+k])   (fp32)
//	out[m*outStride+n] = bf16(f32(bf16(S)) + f32(shared[m*sharedStride+n]))
//
// for m < M, n < shard (K = s.Latent), both roundings to nearest even, and
// a negative zero result stored as +0. To write straight into a mailbox
// slot row layout, pass out = slot[rank*shard:] and outStride = hidden_dim.
// Elements of out outside those positions are left alone. Shape and
// buffer lengths are validated first; nothing is written on error.
func (c *CPU) UpProject(s Shape, latent, weightShard, shared []BF16, sharedStride int, out []BF16, outStride int) error {
	l := Layout{LatentLen: len(latent), WeightLen: len(weightShard), SharedLen: len(shared), SharedStride: sharedStride, OutLen: len(out), OutStride: outStride}
	if err := validateOperands("UpProjectCPU", s, l); err != nil {
		return err
	}
	M, K, shard := s.M, s.Latent, s.Shard()
	c.lat = grow(c.lat, M*K)
	ToFloat32s(c.lat, latent[:M*K])
	row := func(m int) []float32 { return c.lat[m*K : (m+1)*K] }
	store := func(m, n int, sum float32) {
		out[m*outStride+n] = finish(sum, shared[m*sharedStride+n])
	}
	for n := range shard {
		w := weightShard[n*K : (n+1)*K]
		// Rows go in groups of 4, 2 and 1 so that one pass over the weight
		// row feeds several independent accumulators; the row stays in L1
		// between the passes of one n. (Eight rows at once spill registers
		// and measured slower than two passes of four.)
		m := 0
		for ; M-m >= 4; m += 4 {
			s0, s1, s2, s3 := dot4(row(m), row(m+1), row(m+2), row(m+3), w)
			store(m, n, s0)
			store(m+1, n, s1)
			store(m+2, n, s2)
			store(m+3, n, s3)
		}
		if M-m >= 2 {
			s0, s1 := dot2(row(m), row(m+1), w)
			store(m, n, s0)
			store(m+1, n, s1)
			m += 2
		}
		if M-m >= 1 {
			store(m, n, dot1(row(m), w))
		}
	}
	return nil
}

// finish applies the epilogue: round S to bf16, add shared in fp32, round
// again, and never store -0 (it would make a sentinel half-word).
func finish(sum float32, shared BF16) BF16 {
	v := BF16FromFloat32(BF16FromFloat32(sum).Float32() + shared.Float32())
	if v == NegZero {
		v = 0
	}
	return v
}

func grow(b []float32, n int) []float32 {
	if cap(b) < n {
		return make([]float32, n)
	}
	return b[:n]
}

// The dot kernels take the weight row as bf16 and widen it in the loop (a
// shift), which costs less than a separate widening pass through memory.
// Latent rows must be at least as long as w; len(w) is a multiple of 8
// (LatentAlign), the tails are there only for safety. Accumulators are
// plain locals, not arrays, so the compiler keeps them in registers.

func wf(b BF16) float32 { return math.Float32frombits(uint32(b) << 16) }

func dot1(l []float32, w []BF16) float32 {
	var a0, a1, a2, a3 float32
	for len(w) >= 4 && len(l) >= 4 {
		a0 += l[0] * wf(w[0])
		a1 += l[1] * wf(w[1])
		a2 += l[2] * wf(w[2])
		a3 += l[3] * wf(w[3])
		l, w = l[4:], w[4:]
	}
	for k := range min(len(l), len(w)) {
		a0 += l[k] * wf(w[k])
	}
	return (a0 + a1) + (a2 + a3)
}

func dot2(l0, l1 []float32, w []BF16) (float32, float32) {
	var a0, a1, b0, b1 float32
	for len(w) >= 2 && len(l0) >= 2 && len(l1) >= 2 {
		w0, w1 := wf(w[0]), wf(w[1])
		a0 += l0[0] * w0
		b0 += l1[0] * w0
		a1 += l0[1] * w1
		b1 += l1[1] * w1
		l0, l1, w = l0[2:], l1[2:], w[2:]
	}
	if len(w) > 0 && len(l0) > 0 && len(l1) > 0 {
		a0 += l0[0] * wf(w[0])
		b0 += l1[0] * wf(w[0])
	}
	return a0 + a1, b0 + b1
}

func dot4(l0, l1, l2, l3 []float32, w []BF16) (float32, float32, float32, float32) {
	l0, l1, l2, l3 = l0[:len(w)], l1[:len(w)], l2[:len(w)], l3[:len(w)]
	var a0, a1, a2, a3 float32
	for k, b := range w {
		wk := wf(b)
		a0 += l0[k] * wk
		a1 += l1[k] * wk
		a2 += l2[k] * wk
		a3 += l3[k] * wk
	}
	return a0, a1, a2, a3
}
