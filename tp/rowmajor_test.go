package tp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// TestCUDAEngineFakeRowMajorWeight: the kernels (the fake's too, as
// kernel.LaunchSkinny) read the weight only packed. A row-major weight in
// device memory passed with a step (StepDevice, Enqueue, Capture) is
// refused by tp's own validation with ErrArgument, before anything is
// launched or sent, and the op goes on; a row-major weight passed with
// Step (host operands) is packed by the op, into the same staging buffers
// at every step, and gives bit for bit the blocks of the same weight
// passed packed in device memory.
func TestCUDAEngineFakeRowMajorWeight(t *testing.T) {
	const tp, hidden, latent, maxM = 2, 128, 40, 4 // latent: a partial K chunk of the packed layout
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ms := []int{4, 1, 3, 2}
	steps := newUpSteps(t, seed, hidden, latent, ms)
	shard := hidden / tp
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	host := make([][][]kernel.BF16, tp)
	dev := make([][][]kernel.BF16, tp)
	errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := newFakeUp(ctx, ex, gpu, hidden, latent, maxM, 0, 10*time.Second)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		e, d, k := fakeParts(up)
		cs, err := d.StreamCreate(0)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, d.StreamDestroy(cs)) }()

		// Refused: every kind of device step with a row-major weight.
		d0 := steps[0]
		w0 := d0.weight[r*shard*latent : (r+1)*shard*latent]
		rowMajor := DeviceInputs{M: d0.m, Latent: devBuf(t, gpu, d0.latent), Weight: devBuf(t, gpu, w0),
			Shared: devBuf(t, gpu, d0.shared) + DevicePtr(2*r*shard), SharedStride: hidden}
		out := poisoned(t, gpu, maxM*hidden)
		_, capErr := up.Capture(ctx, []DeviceStep{{In: rowMajor, Out: out}})
		for _, c := range []struct {
			what string
			err  error
		}{
			{"StepDevice", up.StepDevice(ctx, rowMajor, out)},
			{"Enqueue", up.Enqueue(rowMajor, out, Stream(cs))},
			{"Capture", capErr},
		} {
			if !errors.Is(c.err, ErrArgument) {
				return fmt.Errorf("%s with a row-major device weight: %v, want ErrArgument", c.what, c.err)
			}
			for _, s := range []string{"row-major", "SetWeightDevice", "PackWeight", "WeightPacked"} {
				if !strings.Contains(c.err.Error(), s) {
					return fmt.Errorf("%s with a row-major device weight: %q does not say %q", c.what, c.err, s)
				}
			}
		}
		if n := len(k.launchedOn()); n != 0 {
			return fmt.Errorf("%d launches after refused steps", n)
		}
		if up.Steps() != 0 || up.Err() != nil {
			return fmt.Errorf("after refused steps: Steps() = %d, Err() = %v", up.Steps(), up.Err())
		}
		b, err := gpu.at(out, 2*maxM*hidden)
		if err != nil {
			return err
		}
		if slices.ContainsFunc(bf16s(b), func(v kernel.BF16) bool { return v != poison }) {
			return fmt.Errorf("a refused step wrote its output block")
		}

		// Accepted: the same weights row-major from the host, and packed
		// in device memory; the op stays usable after the refusals.
		var stWeight DevicePtr
		var scratch *kernel.BF16
		for i, st := range steps {
			w := st.weight[r*shard*latent : (r+1)*shard*latent]
			o := slices.Repeat([]kernel.BF16{poison}, maxM*hidden+3)
			in := UpInputs{M: st.m, Latent: st.latent, Weight: slices.Clone(w), Shared: st.shared[r*shard:], SharedStride: hidden}
			if err := up.Step(ctx, in, o); err != nil {
				return fmt.Errorf("step %d, row-major host weight: %w", i, err)
			}
			if !slices.Equal(in.Weight, w) {
				return fmt.Errorf("step %d: the op changed the caller's host weight", i)
			}
			if i == 0 {
				stWeight, scratch = DevicePtr(e.stWeight), &e.weightScratch[0]
			} else if DevicePtr(e.stWeight) != stWeight || &e.weightScratch[0] != scratch {
				return fmt.Errorf("step %d: the host weight went through new staging buffers", i)
			}
			if err := keepBlock(i, st.m, hidden, o, &host[r]); err != nil {
				return err
			}
			do := poisoned(t, gpu, maxM*hidden)
			din := DeviceInputs{M: st.m, Latent: devBuf(t, gpu, st.latent), Weight: devPacked(t, gpu, w, latent), WeightPacked: true,
				Shared: devBuf(t, gpu, st.shared) + DevicePtr(2*r*shard), SharedStride: hidden}
			if err := up.StepDevice(ctx, din, do); err != nil {
				return fmt.Errorf("step %d, packed device weight: %w", i, err)
			}
			b, err := gpu.at(do, 2*maxM*hidden)
			if err != nil {
				return err
			}
			if err := keepBlock(i, st.m, hidden, slices.Clone(bf16s(b)), &dev[r]); err != nil {
				return err
			}
		}
		if n := up.Steps(); n != uint64(2*len(steps)) {
			return fmt.Errorf("Steps() = %d after %d steps", n, 2*len(steps))
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	for r := range tp {
		for i := range steps {
			if !equalBlocks(host[r][i], dev[r][i]) {
				t.Errorf("rank %d, step %d: the row-major host weight gave another block than the packed device weight", r, i)
			}
		}
	}
	checkBlocks(t, steps, host, hidden)
	checkBlocks(t, steps, dev, hidden)
	checkNoLeaks(t, gpu)
}
