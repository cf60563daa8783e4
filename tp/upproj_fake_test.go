package tp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/exchangetest"
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

// TestCUDAEngineRefusesMPastGPUKernels: a maxM past the GPU kernels' limit
// is refused by the CUDA engine on every rank before anything is
// allocated, naming maxM and the limit; the host backend takes it.
func TestCUDAEngineRefusesMPastGPUKernels(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gpu := newFakeGPU()
	errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) error {
		up, err := newFakeUpKind(ctx, ex, gpu, 64, 40, MaxGPUM+1, 0, time.Second, mailbox.KindUnicast, realEngineDeps())
		if err == nil {
			return errors.Join(errors.New("maxM 9 on the GPU path: no error"), up.Close())
		}
		if !errors.Is(err, ErrShape) {
			return fmt.Errorf("error %v does not match ErrShape", err)
		}
		for _, w := range []string{"maxM = 9", "at most 8 on the GPU path", "host backend"} {
			if !strings.Contains(err.Error(), w) {
				return fmt.Errorf("error %q does not mention %q", err, w)
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if l := gpu.leaks(); l != "" {
		t.Errorf("left after the refusal: %s", l)
	}
}
