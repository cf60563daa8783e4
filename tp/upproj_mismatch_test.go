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

// mismatchedStep runs one agreed step, then a step where rank r passes
// ms[r] rows, and checks that every rank fails the second step with a
// timeout that names the ranks that passed another M (no rank may return
// a block), and that the op is broken afterwards.
func mismatchedStep(ctx context.Context, up *UpProjection, r int, ms []int, hidden, latent int, deadline time.Duration) error {
	rng := kernel.NewRand(uint64(time.Now().UnixNano()) + uint64(r))
	in := randomInputs(rng, 2, hidden, latent, len(ms), 1)
	out := make([]kernel.BF16, up.shape.M*hidden)
	if err := up.Step(ctx, in, out); err != nil {
		return fmt.Errorf("rank %d: the agreed step: %w", r, err)
	}
	in = randomInputs(rng, ms[r], hidden, latent, len(ms), 1)
	start := time.Now()
	err := up.Step(ctx, in, out)
	waited := time.Since(start)
	var te *mailbox.TimeoutError
	if !errors.As(err, &te) || !errors.Is(err, mailbox.ErrTimeout) {
		return fmt.Errorf("rank %d (M = %d): %v, want a *mailbox.TimeoutError", r, ms[r], err)
	}
	var want []mailbox.RankRows
	for p, m := range ms {
		if m != ms[r] {
			want = append(want, mailbox.RankRows{Rank: p, M: m})
		}
	}
	switch {
	case te.Step != 1 || te.M != ms[r] || !slices.Equal(te.OtherM, want):
		return fmt.Errorf("rank %d: step %d M %d others %v, want step 1 M %d others %v (%v)", r, te.Step, te.M, te.OtherM, ms[r], want, err)
	case !strings.Contains(err.Error(), "every rank must pass the same M"):
		return fmt.Errorf("rank %d: %q does not say that M must agree", r, err)
	case waited < deadline || waited > deadline+5*time.Second:
		return fmt.Errorf("rank %d: gave up after %v with a deadline of %v", r, waited, deadline)
	}
	if err := up.Step(ctx, in, out); !errors.Is(err, mailbox.ErrBroken) {
		return fmt.Errorf("rank %d: step after the mismatch gave %v, want mailbox.ErrBroken", r, err)
	}
	return nil
}

// TestStepMismatchedM: ranks that pass different M for one step get an
// error on every rank, never a block (the host engine and the CUDA engine
// on the fake driver, unicast and multicast; TestGPUStepMismatchedM runs
// it on a GPU).
func TestStepMismatchedM(t *testing.T) {
	const hidden, latent = 48, 16
	const deadline = 200 * time.Millisecond
	for _, ms := range [][]int{{1, 2}, {3, 3, 2}} {
		for _, eng := range []string{"host", "fake unicast", "fake multicast"} {
			t.Run(fmt.Sprintf("%s M %v", eng, ms), func(t *testing.T) {
				gpu := newFakeGPU()
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				err := mismatchedSteps(ctx, ms, hidden, latent, deadline, func(ex mailbox.Exchanger) (*UpProjection, error) {
					switch eng {
					case "host":
						return NewUpProjection(ctx, ex, hidden, latent, 4, WithBackend(mailbox.KindHost), WithDeadline(deadline))
					case "fake unicast":
						return newFakeUp(ctx, ex, gpu, hidden, latent, 4, 0, deadline)
					default:
						return newFakeUpKind(ctx, ex, gpu, hidden, latent, 4, 0, deadline, mailbox.KindMulticast, fakeMulticastDeps())
					}
				})
				if err != nil {
					t.Fatal(err)
				}
				if l := gpu.leaks(); l != "" {
					t.Errorf("left alive: %s", l)
				}
			})
		}
	}
}

// TestGPUStepMismatchedM is TestStepMismatchedM with goroutine ranks
// sharing one GPU, through the unicast mailbox.
func TestGPUStepMismatchedM(t *testing.T) {
	const hidden, latent = 384, 256
	const deadline = 300 * time.Millisecond
	f := openTestGPU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err := mismatchedSteps(ctx, []int{2, 1}, hidden, latent, deadline, func(ex mailbox.Exchanger) (*UpProjection, error) {
		return f.newUp(ctx, ex, hidden, latent, 4, deadline)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// mismatchedSteps runs mismatchedStep on len(ms) goroutine ranks, each
// with an op from newUp, which it closes.
func mismatchedSteps(ctx context.Context, ms []int, hidden, latent int, deadline time.Duration,
	newUp func(ex mailbox.Exchanger) (*UpProjection, error)) error {
	return errors.Join(onUpRanks(len(ms), func(r int, ex mailbox.Exchanger) (err error) {
		up, err := newUp(ex)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		return mismatchedStep(ctx, up, r, ms, hidden, latent, deadline)
	})...)
}
