package tp

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// TestUpProjectionJobFails: an op made from a Group ends a step that waits
// for a peer as soon as the job fails (here the peer aborts; a dead peer's
// lost connection is the same to the hub), with the failure naming that
// peer, instead of waiting out the step's deadline.
func TestUpProjectionJobFails(t *testing.T) {
	const n, hidden, latent = 2, 48, 16
	const deadline = 20 * time.Second
	rng := kernel.NewRand(uint64(time.Now().UnixNano()))
	in := randomInputs(rng, 2, hidden, latent, n, 1)
	tmp, job := shortTempDir(t), newJobID()
	errs := runRanks(t, n, func(r int) map[string]string { return srunEnv(tmp, job, r, n) },
		[]JoinOption{WithTimeout(10 * time.Second)}, func(r int, g *Group) (err error) {
			ctx := context.Background()
			up, err := g.NewUpProjection(ctx, hidden, latent, 2, WithBackend(mailbox.KindHost), WithDeadline(deadline))
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, up.Close()) }()
			out := make([]kernel.BF16, 2*hidden)
			if err := up.Step(ctx, in, out); err != nil {
				return err
			}
			if r == 1 {
				// Let rank 0 start waiting in its second step, then give up.
				time.Sleep(100 * time.Millisecond)
				return g.Abort("test: rank 1 gives up")
			}
			start := time.Now()
			err = up.Step(ctx, in, out)
			took := time.Since(start)
			var re *RankError
			if !errors.As(err, &re) || re.Rank != 1 || !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "rank 1 gives up") {
				return fmt.Errorf("second step: %v, want a *RankError naming rank 1", err)
			}
			if took > 5*time.Second {
				return fmt.Errorf("second step failed after %v; the job failed after about 100ms", took)
			}
			t.Logf("rank 0's second step failed after %v: %v", took.Round(time.Millisecond), err)
			// A step after the job failed fails at once, before it
			// writes anything, with the job's failure.
			if err := up.Step(ctx, in, out); !errors.As(err, &re) || re.Rank != 1 || !strings.Contains(err.Error(), "the job has failed") {
				return fmt.Errorf("third step: %v, want the job's failure", err)
			}
			return nil
		})
	noErrors(t, errs)
}
