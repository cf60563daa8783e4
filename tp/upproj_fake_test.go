package tp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/exchangetest"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// The in-process stand-in for the rendezvous hub, for running up-projection
// ranks as goroutines, lives in internal/exchangetest.
var _ mailbox.Exchanger = (*exchangetest.Rank)(nil)

type upHub struct{ *exchangetest.Hub }

func newUpHub(size int) upHub { return upHub{exchangetest.NewHub(size)} }

// rank returns rank r's Exchanger; each is used by one goroutine.
func (h upHub) rank(r int) *exchangetest.Rank { return h.Rank(r) }

// onUpRanks runs fn for every rank of a fresh fake hub, each on its own
// goroutine, and returns the errors, index = rank.
func onUpRanks(size int, fn func(r int, ex mailbox.Exchanger) error) []error {
	return exchangetest.Run(size, func(r int, ex *exchangetest.Rank) error { return fn(r, ex) })
}

// fakeJob is the job of goroutine ranks for tests that decide when a
// failure reaches them: the ranks' abortJob records the reason and fails
// the job after delay, or never when delay is negative.
type fakeJob struct {
	ctx    context.Context
	fail   context.CancelCauseFunc
	delay  time.Duration
	mu     sync.Mutex
	aborts []string
}

func newFakeJob(delay time.Duration) *fakeJob {
	ctx, fail := context.WithCancelCause(context.Background())
	return &fakeJob{ctx: ctx, fail: fail, delay: delay}
}

// reasons is what the ranks aborted with so far.
func (j *fakeJob) reasons() []string {
	j.mu.Lock()
	defer j.mu.Unlock()
	return slices.Clone(j.aborts)
}

// exRank is exchangetest.Rank under a name that, embedded, does not hide
// its Rank method.
type exRank = exchangetest.Rank

// jobRank is a rank of a fake group that watches and can fail a fakeJob,
// as a Group does its job (jobWatcher).
type jobRank struct {
	*exRank
	job *fakeJob
}

func (r jobRank) jobContext() context.Context { return r.job.ctx }

func (r jobRank) abortJob(reason string) error {
	j := r.job
	j.mu.Lock()
	j.aborts = append(j.aborts, reason)
	j.mu.Unlock()
	if j.delay >= 0 {
		time.AfterFunc(j.delay, func() { j.fail(fmt.Errorf("fake job: rank %d aborted: %s", r.Rank(), reason)) })
	}
	return nil
}

// TestCUDAEngineLargeM: the CUDA engine takes a maxM up to MaxM, and with
// the fused receive (the default) a step of M above kernel.MaxSkinnyM
// launches the larger-M kernel without it, followed by the receive
// kernel, while steps of M up to it keep the fused receive; every block
// is the reference's.
func TestCUDAEngineLargeM(t *testing.T) {
	const hidden, latent = 64, 40
	ms := []int{MaxM, 9, 8, 100, 1, 64}
	steps := newUpSteps(t, uint64(time.Now().UnixNano()), hidden, latent, ms)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gpu := newFakeGPU()
	got := make([][][]kernel.BF16, 2)
	errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := newFakeUp(ctx, ex, gpu, hidden, latent, MaxM, 0, 5*time.Second)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		for i, d := range steps {
			out := poisonBlock(d.m * hidden)
			if err := up.Step(ctx, hostInputs(d, r, 2, hidden, latent), out); err != nil {
				return fmt.Errorf("step %d (M %d): %w", i, d.m, err)
			}
			if err := keepBlock(i, d.m, hidden, out, &got[r]); err != nil {
				return err
			}
		}
		_, _, k := fakeParts(up)
		small := 0
		for _, m := range ms {
			if m <= kernel.MaxSkinnyM {
				small++
			}
		}
		if f, l := k.fused.Load(), k.large.Load(); f != int64(small) || l != int64(len(ms)-small) {
			return fmt.Errorf("rank %d: %d fused receives and %d larger-M launches, want %d and %d", r, f, l, small, len(ms)-small)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	checkBlocks(t, steps, got, hidden)
	if l := gpu.leaks(); l != "" {
		t.Errorf("left alive: %s", l)
	}
}
