package tp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/tprun/tprun/mailbox"
)

// StepChecksEnv, set to 1, turns step checks on for every UpProjection
// of the process, as WithStepChecks does (every rank must agree: set it
// for the whole job, e.g. `TPRUN_CHECK_STEPS=1 tprun --tp 8 -- ./rank`).
const StepChecksEnv = "TPRUN_CHECK_STEPS"

// ErrStepMismatch is matched when step checks are on and the ranks are
// about to run different calls: another M, another step number (a rank
// ran a step more or less), or a step on one rank and a capture or replay
// on another.
var ErrStepMismatch = errors.New("tp: ranks disagree about a step")

// WithStepChecks makes every Step, StepDevice, Capture and Replay of the
// op first all-gather what each rank is about to run (the call, the op's
// step number, each step's M) and the outcome of its own argument checks,
// through the exchanger (the hub, for a Group): ranks that disagree fail
// at once with ErrStepMismatch, naming what each rank passed, and a rank
// whose arguments are bad makes every rank fail (mailbox.ErrPeer), instead
// of a wrong block or a wait for the deadline. Nothing is sent to the
// mailbox then, and the op stays usable. It costs a hub round trip per
// call (tens of microseconds or more): a debugging aid, like
// TORCH_DISTRIBUTED_DEBUG=DETAIL. A rank that does not reach the check
// within the op's deadline (WithDeadline) fails the others' check; with a
// Group, giving up on the sent all-gather ends the job. Every rank must turn it on or none
// (NewUpProjection checks); StepChecksEnv does it without a code change.
func WithStepChecks() UpOption { return func(c *upConfig) { c.stepChecks = true } }

// stepChecksFromEnv reports whether StepChecksEnv turns the checks on.
func stepChecksFromEnv() bool { return os.Getenv(StepChecksEnv) == "1" }

// checkCall runs the step check of one call when the op has checks on:
// what names the call ("step", "capture", ...), ms its steps' M, and
// local the outcome of this rank's own argument checks, which it returns
// unchanged when the checks are off.
func (u *UpProjection) checkCall(ctx context.Context, what string, ms []int, local error) error {
	if u.checks == nil {
		return local
	}
	var m []string
	for _, v := range ms {
		m = append(m, strconv.Itoa(v))
	}
	desc := fmt.Sprintf("%s at step %d with M %s", what, u.next, strings.Join(m, ","))
	msg := append([]byte{0}, desc...)
	if local != nil {
		msg = append([]byte{1}, local.Error()...)
	}
	if len(msg) > 1024 {
		msg = msg[:1024]
	}
	// A rank that never comes (its own call failed before the check, or
	// it does not step at all) costs a deadline, as it would in the
	// mailbox; with a Group the hub then ends the job (a collective given
	// up after it was sent).
	actx, cancel := context.WithTimeout(ctx, cmp.Or(u.checkWait, mailbox.DefaultDeadline))
	defer cancel()
	all, err := u.checks.AllGather(actx, msg)
	if err != nil {
		return errors.Join(local, fmt.Errorf("step check: all-gather: %w", err))
	}
	if local != nil {
		return local
	}
	var bad, differ []string
	for r, b := range all {
		switch {
		case len(b) == 0:
			bad = append(bad, fmt.Sprintf("rank %d sent nothing", r))
		case b[0] != 0:
			bad = append(bad, fmt.Sprintf("rank %d: %s", r, b[1:]))
		case string(b[1:]) != desc:
			differ = append(differ, fmt.Sprintf("rank %d: %s", r, b[1:]))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: step check: %s", mailbox.ErrPeer, strings.Join(bad, "; "))
	}
	if len(differ) > 0 {
		return fmt.Errorf("%w: this rank (%d): %s; %s", ErrStepMismatch, u.rank, desc, strings.Join(differ, "; "))
	}
	return nil
}
