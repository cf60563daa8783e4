package tp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// TestUpProjectionSetWeight: on the host engine, steps that leave the
// weight out use the one SetWeight gave, and give the blocks (bit for bit)
// of steps that pass that weight themselves, within the float64
// reference's tolerance; a later SetWeight replaces it.
func TestUpProjectionSetWeight(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	for i, tc := range []struct {
		desc               string
		tp, hidden, latent int
		ms                 []int
	}{
		{desc: "one rank", tp: 1, hidden: 64, latent: 40, ms: []int{1, 3, 2}},
		{desc: "three ranks", tp: 3, hidden: 144, latent: 64, ms: []int{4, 1, 8, 2}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			maxM := slices.Max(tc.ms)
			a := newWeightSteps(t, seed+uint64(2*i), tc.hidden, tc.latent, tc.ms)
			b := newWeightSteps(t, seed+uint64(2*i+1), tc.hidden, tc.latent, tc.ms) // another weight
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			own := make([][][]kernel.BF16, tc.tp)    // SetWeight(a), then SetWeight(b)
			passed := make([][][]kernel.BF16, tc.tp) // a's weight with every step
			errs := onUpRanks(tc.tp, func(r int, ex mailbox.Exchanger) (err error) {
				up, err := NewUpProjection(ctx, ex, tc.hidden, tc.latent, maxM, WithBackend(BackendHost))
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, up.Close()) }()
				shard := tc.hidden / tc.tp
				run := func(ws weightSteps, w []kernel.BF16, got *[][]kernel.BF16) error {
					for i, d := range ws.steps {
						out := make([]kernel.BF16, maxM*tc.hidden+3)
						for j := range out {
							out[j] = poison
						}
						in := UpInputs{M: d.m, Latent: d.latent, Weight: w, Shared: d.shared[r*shard:], SharedStride: tc.hidden}
						if err := up.Step(ctx, in, out); err != nil {
							return err
						}
						if err := keepBlock(i, d.m, tc.hidden, out, got); err != nil {
							return err
						}
					}
					return nil
				}
				if err := run(a, nil, new([][]kernel.BF16)); !errors.Is(err, ErrNoWeight) {
					return fmt.Errorf("a step without a weight before SetWeight: %v, want ErrNoWeight", err)
				}
				w := slices.Clone(a.shard(r, tc.tp))
				if err := up.SetWeight(ctx, w); err != nil {
					return err
				}
				clear(w) // the op keeps its own copy
				if err := run(a, nil, &own[r]); err != nil {
					return err
				}
				if err := run(a, a.shard(r, tc.tp), &passed[r]); err != nil {
					return err
				}
				if err := up.SetWeight(ctx, b.shard(r, tc.tp)); err != nil {
					return err
				}
				return run(b, nil, &own[r])
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			n := len(tc.ms)
			for r := range tc.tp {
				for i := range n {
					if !equalBlocks(own[r][i], passed[r][i]) {
						t.Errorf("rank %d, step %d: the op's own weight gave another block than the same weight passed with the step", r, i)
					}
				}
				own[r], passed[r] = own[r][n:], own[r][:n]
			}
			checkBlocks(t, a.steps, passed, tc.hidden)
			checkBlocks(t, b.steps, own, tc.hidden)
		})
	}
}

// TestCUDAEngineFakeSetWeight: on the fake CUDA engine, the op's own
// weight, from the host (SetWeight) or from device memory
// (SetWeightDevice), packed by the op (the kernels read no other layout),
// gives the blocks (bit for bit) of steps that pass the row-major weight
// themselves (packed by the op at every step).
func TestCUDAEngineFakeSetWeight(t *testing.T) {
	const tp, hidden, latent, maxM = 2, 128, 48, 4
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ms := []int{4, 1, 3}
	ws := newWeightSteps(t, seed, hidden, latent, ms)
	shard := hidden / tp
	for _, tc := range []struct {
		desc   string
		device bool // SetWeightDevice
	}{
		{"host weight", false},
		{"device weight", true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			gpu := newFakeGPU()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			own := make([][][]kernel.BF16, tp)
			passed := make([][][]kernel.BF16, tp)
			errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
				up, err := newFakeUp(ctx, ex, gpu, hidden, latent, maxM, 0, 10*time.Second)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, up.Close()) }()
				e, _, _ := fakeParts(up)
				w := slices.Clone(ws.shard(r, tp))
				if tc.device {
					err = up.SetWeightDevice(ctx, devBuf(t, gpu, w))
				} else {
					err = up.SetWeight(ctx, w)
				}
				if err != nil {
					return err
				}
				clear(w)
				if !e.weightPacked {
					return fmt.Errorf("the op keeps its weight row-major, want packed")
				}
				kept, err := gpu.bytes(e.weight, 2*shard*latent)
				if err != nil {
					return err
				}
				if slices.Equal(bf16s(kept), ws.shard(r, tp)) {
					return fmt.Errorf("the op's weight buffer is row-major, want packed")
				}
				for i, d := range ws.steps {
					for k, w := range [][]kernel.BF16{nil, ws.shard(r, tp)} {
						out := make([]kernel.BF16, maxM*hidden+3)
						for j := range out {
							out[j] = poison
						}
						in := UpInputs{M: d.m, Latent: d.latent, Weight: w, Shared: d.shared[r*shard:], SharedStride: hidden}
						if k == 0 && i == 1 {
							// One of the own-weight steps on device operands.
							o := devBuf(t, gpu, out)
							din := DeviceInputs{M: d.m, Latent: devBuf(t, gpu, d.latent), Shared: devBuf(t, gpu, d.shared[r*shard:]), SharedStride: hidden}
							if err := up.StepDevice(ctx, din, o); err != nil {
								return err
							}
							b, err := gpu.at(o, 2*len(out))
							if err != nil {
								return err
							}
							copy(out, bf16s(b))
						} else if err := up.Step(ctx, in, out); err != nil {
							return err
						}
						got := &own[r]
						if k == 1 {
							got = &passed[r]
						}
						if err := keepBlock(i, d.m, hidden, out, got); err != nil {
							return err
						}
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for r := range tp {
				for i := range ms {
					if !equalBlocks(own[r][i], passed[r][i]) {
						t.Errorf("rank %d, step %d: the op's own weight gave another block than the weight passed with the step", r, i)
					}
				}
			}
			checkBlocks(t, ws.steps, own, hidden)
			checkNoLeaks(t, gpu)
		})
	}
}
