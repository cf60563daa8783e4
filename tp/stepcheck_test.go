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

// newCheckedFakeUp is newFakeUp (a 10 s deadline) with step checks on;
// newFakeUp bypasses NewUpProjection's options.
func newCheckedFakeUp(ctx context.Context, ex mailbox.Exchanger, gpu *fakeGPU, hidden, latent, maxM, slots int) (*UpProjection, error) {
	up, err := newFakeUp(ctx, ex, gpu, hidden, latent, maxM, slots, 10*time.Second)
	if err == nil {
		up.checks = ex
	}
	return up, err
}

// fakeDeviceStep copies in to fake device memory, with an output block of
// maxM rows.
func fakeDeviceStep(t *testing.T, gpu *fakeGPU, in UpInputs, maxM, hidden int) DeviceStep {
	return DeviceStep{Out: devBuf(t, gpu, make([]kernel.BF16, maxM*hidden)), In: DeviceInputs{M: in.M,
		Latent: devBuf(t, gpu, in.Latent), Weight: devPacked(t, gpu, in.Weight, len(in.Latent)/in.M), WeightPacked: true,
		Shared: devBuf(t, gpu, in.Shared), SharedStride: hidden}}
}

// hostInputs is rank r's slice of step d's operands on the host.
func hostInputs(d upStepData, r, tp, hidden, latent int) UpInputs {
	shard := hidden / tp
	return UpInputs{M: d.m, Latent: d.latent, Weight: d.weight[r*shard*latent : (r+1)*shard*latent],
		Shared: d.shared[r*shard:], SharedStride: hidden}
}

// TestStepChecks: with step checks on, ranks that pass different M, or a
// rank with a bad argument, make every rank fail the step at once (not
// at the deadline), with nothing sent; the op then runs the next, agreed
// step right. The host engine, the fake CUDA engine's StepDevice, and the
// environment variable.
func TestStepChecks(t *testing.T) {
	const tp, hidden, latent, maxM = 2, 64, 32, 4
	const deadline = 10 * time.Second // a wait for it would fail the test's time bound
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	steps := newUpSteps(t, seed, hidden, latent, []int{2, 3, 2})
	for _, eng := range []string{"host", "host, by the environment", "fake unicast, StepDevice"} {
		t.Run(eng, func(t *testing.T) {
			opts := []UpOption{WithStepChecks()}
			if eng == "host, by the environment" {
				t.Setenv(StepChecksEnv, "1")
				opts = nil
			}
			gpu := newFakeGPU()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got := make([][][]kernel.BF16, tp)
			errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
				var up *UpProjection
				if strings.HasPrefix(eng, "fake") {
					up, err = newCheckedFakeUp(ctx, ex, gpu, hidden, latent, maxM, 0)
				} else {
					up, err = NewUpProjection(ctx, ex, hidden, latent, maxM, append(opts, WithBackend(mailbox.KindHost), WithDeadline(deadline))...)
				}
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, up.Close()) }()
				step := func(d upStepData) ([]kernel.BF16, error) {
					in := hostInputs(d, r, tp, hidden, latent)
					out := slices.Repeat([]kernel.BF16{poison}, maxM*hidden)
					if !strings.HasPrefix(eng, "fake") {
						return out, up.Step(ctx, in, out)
					}
					o := devBuf(t, gpu, out)
					din := DeviceInputs{M: in.M, Latent: devBuf(t, gpu, in.Latent), Weight: devPacked(t, gpu, in.Weight, latent), WeightPacked: true,
						Shared: devBuf(t, gpu, in.Shared), SharedStride: hidden}
					if err := up.StepDevice(ctx, din, o); err != nil {
						return nil, err
					}
					b, err := gpu.at(o, 2*maxM*hidden)
					return slices.Clone(bf16s(b)), err
				}
				// Step 0 agrees; at step 1 rank 1 passes M = 3, rank 0 M = 2.
				out, err := step(steps[0])
				if err != nil {
					return err
				}
				got[r] = append(got[r], out[:steps[0].m*hidden])
				d := steps[2]
				if r == 1 {
					d = steps[1]
				}
				start := time.Now()
				_, err = step(d)
				want := fmt.Sprintf("rank %d: op #0: step at step 1 with M %d", 1-r, map[int]int{0: 3, 1: 2}[r])
				if !errors.Is(err, ErrStepMismatch) || !strings.Contains(err.Error(), want) || time.Since(start) > deadline/4 {
					return fmt.Errorf("rank %d: mismatched step gave %v after %v; want ErrStepMismatch at once, naming %q", r, err, time.Since(start), want)
				}
				// Then rank 0 passes a bad M: it fails on its own check, rank 1
				// because of it.
				d = steps[2]
				if r == 0 {
					d.m = maxM + 1
				}
				_, err = step(d)
				switch {
				case r == 0 && !errors.Is(err, kernel.ErrShape):
					return fmt.Errorf("rank 0: bad M gave %v, want kernel.ErrShape", err)
				case r == 1 && (!errors.Is(err, mailbox.ErrPeer) || !strings.Contains(err.Error(), "rank 0: ")):
					return fmt.Errorf("rank 1: peer's bad M gave %v, want mailbox.ErrPeer naming rank 0", err)
				}
				// Nothing was sent: the next agreed step is step 1 and right.
				out, err = step(steps[2])
				if err != nil {
					return fmt.Errorf("rank %d: agreed step after the mismatch: %w", r, err)
				}
				got[r] = append(got[r], out[:steps[2].m*hidden])
				if up.Steps() != 2 {
					return fmt.Errorf("rank %d: Steps() = %d, want 2", r, up.Steps())
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			checkBlocks(t, []upStepData{steps[0], steps[2]}, got, hidden)
		})
	}
}

// TestStepChecksMustAgree: ranks that disagree about the step checks fail
// at setup (the checks are collectives every rank must take part in).
func TestStepChecksMustAgree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) error {
		opts := []UpOption{WithBackend(mailbox.KindHost)}
		if r == 1 {
			opts = append(opts, WithStepChecks())
		}
		up, err := NewUpProjection(ctx, ex, 64, 32, 2, opts...)
		if err == nil {
			return errors.Join(up.Close(), fmt.Errorf("rank %d: set up", r))
		}
		if !errors.Is(err, mailbox.ErrConfig) || !strings.Contains(err.Error(), "with step checks") {
			return fmt.Errorf("rank %d: %v, want ErrConfig naming the step checks", r, err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestStepChecksGraph: with step checks on, ranks that capture graphs of
// different M, or replay a graph a different number of times, fail at once
// (fake CUDA engine).
func TestStepChecksGraph(t *testing.T) {
	const tp, hidden, latent, maxM, slots = 2, 64, 32, 4, 2
	steps := newUpSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{2, 3})
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := newCheckedFakeUp(ctx, ex, gpu, hidden, latent, maxM, slots)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		ds := func(ms ...int) []DeviceStep {
			var out []DeviceStep
			for _, m := range ms {
				out = append(out, fakeDeviceStep(t, gpu, hostInputs(steps[m-2], r, tp, hidden, latent), maxM, hidden))
			}
			return out
		}
		mine := ds(2, 2)
		if r == 1 {
			mine = ds(2, 3)
		}
		if _, err := up.Capture(ctx, mine); !errors.Is(err, ErrStepMismatch) || !strings.Contains(err.Error(), "op #0: capture at step 0 with M 2,") {
			return fmt.Errorf("rank %d: captures of different M gave %v, want ErrStepMismatch", r, err)
		}
		g, err := up.Capture(ctx, ds(2, 3))
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, g.Close()) }()
		if err := g.Replay(ctx, 1+r); !errors.Is(err, ErrStepMismatch) || !strings.Contains(err.Error(), fmt.Sprintf("rank %d: op #0: %d replays of a graph", 1-r, 2-r)) {
			return fmt.Errorf("rank %d: different replay counts gave %v, want ErrStepMismatch", r, err)
		}
		if err := g.Replay(ctx, 2); err != nil {
			return fmt.Errorf("rank %d: agreed replays: %w", r, err)
		}
		if up.Steps() != 4 {
			return fmt.Errorf("rank %d: Steps() = %d, want 4", r, up.Steps())
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	checkNoLeaks(t, gpu)
}

// TestStepChecksBounded: a rank whose peer never reaches the check fails
// after the op's deadline, as a step would, instead of waiting for ever.
func TestStepChecksBounded(t *testing.T) {
	const hidden, latent, deadline = 64, 32, 200 * time.Millisecond
	steps := newUpSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{2})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stepped := make(chan struct{})
	errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := NewUpProjection(ctx, ex, hidden, latent, 2, WithBackend(mailbox.KindHost), WithDeadline(deadline), WithStepChecks())
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		if r == 1 {
			<-stepped // never steps
			return nil
		}
		defer close(stepped)
		start := time.Now()
		err = up.Step(ctx, hostInputs(steps[0], r, 2, hidden, latent), make([]kernel.BF16, 2*hidden))
		if took := time.Since(start); err == nil || took < deadline || took > deadline+5*time.Second {
			return fmt.Errorf("step whose peer never checks: %v after %v, want an error after about %v", err, took, deadline)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestStepChecksLongAndForeign: a capture whose description is long (520
// steps) passes its check on ranks that agree (the check compares a hash
// of the whole description), and a rank whose collective at that point is
// the program's own AllGather is named as such.
func TestStepChecksLongAndForeign(t *testing.T) {
	const tp, hidden, latent, maxM, slots, n = 2, 64, 32, 2, 2, 520
	d := newUpSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{2})[0]
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := newCheckedFakeUp(ctx, ex, gpu, hidden, latent, maxM, slots)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		st := fakeDeviceStep(t, gpu, hostInputs(d, r, tp, hidden, latent), maxM, hidden)
		g, err := up.Capture(ctx, slices.Repeat([]DeviceStep{st}, n))
		if err != nil {
			return fmt.Errorf("rank %d: a long capture the ranks agree on: %w", r, err)
		}
		defer func() { err = errors.Join(err, g.Close()) }()
		if r == 0 {
			// The program's own collective where rank 1 steps.
			_, err := ex.AllGather(ctx, []byte("app data"))
			return err
		}
		err = up.StepDevice(ctx, st.In, st.Out)
		if !errors.Is(err, mailbox.ErrPeer) || !strings.Contains(err.Error(), "rank 0 made another collective of the group") {
			return fmt.Errorf("rank 1: step against rank 0's own AllGather gave %v, want mailbox.ErrPeer naming it", err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
