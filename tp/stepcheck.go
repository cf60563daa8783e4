package tp

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

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
// TORCH_DISTRIBUTED_DEBUG=DETAIL.
//
// Each check is a collective of the group: with checks on, every call of
// every op joins the group's one order of collectives, beside the
// program's own AllGather and Barrier calls, so they must come in the same
// order on every rank (ops used from several goroutines at once then fail
// their checks, naming each rank's op). A rank that does not reach the
// check within the op's deadline (WithDeadline) fails the others' check,
// and a ctx that ends while a check waits ends the call as a failed
// collective does: with a Group, the job ends. The op stays usable only
// after a check that found a disagreement or a bad argument. Every rank must turn it on or none
// (NewUpProjection checks); StepChecksEnv does it without a code change.
func WithStepChecks() UpOption { return func(c *upConfig) { c.stepChecks = true } }

// stepChecksFromEnv reports whether StepChecksEnv turns the checks on
// (1, true, ...: strconv.ParseBool).
func stepChecksFromEnv() bool {
	on, _ := strconv.ParseBool(os.Getenv(StepChecksEnv))
	return on
}

// opIDs numbers the ops made with step checks on each exchanger, in the
// order they were made: the same on every rank, since making an op is a
// collective. The checks name the op, so that two ops whose calls reach
// the group in different orders on different ranks are told apart.
var opIDs struct {
	sync.Mutex
	next map[mailbox.Exchanger]int
}

func nextOpID(ex mailbox.Exchanger) int {
	opIDs.Lock()
	defer opIDs.Unlock()
	if opIDs.next == nil {
		opIDs.next = map[mailbox.Exchanger]int{}
	}
	id := opIDs.next[ex]
	opIDs.next[ex] = id + 1
	return id
}

// checkTag starts every step check's contribution, so that a rank whose
// collective at that point is something else (the program's own
// AllGather) is named as such instead of being read as a check.
const checkTag = "tprun step check\x00"

// maxCheckText bounds the text a check sends (a description, or this
// rank's own error) for the peers' messages; the comparison uses a hash of
// the whole description.
const maxCheckText = 512

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
	desc := fmt.Sprintf("op #%d: %s at step %d with M %s", u.opID, what, u.next, strings.Join(m, ","))
	// Tag, outcome (0 ok, 1 failed), the description's hash, then text.
	sum := sha256.Sum256([]byte(desc))
	msg := append([]byte(checkTag), 0)
	text := desc
	if local != nil {
		msg[len(checkTag)] = 1
		text = local.Error()
	}
	msg = append(append(msg, sum[:16]...), clip(text)...)
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
		body, ok := bytes.CutPrefix(b, []byte(checkTag))
		switch {
		case !ok || len(body) < 17:
			bad = append(bad, fmt.Sprintf("rank %d made another collective of the group, not this check (with step checks on, every call of an op is one)", r))
		case body[0] != 0:
			bad = append(bad, fmt.Sprintf("rank %d: %s", r, body[17:]))
		case !bytes.Equal(body[1:17], sum[:16]):
			differ = append(differ, fmt.Sprintf("rank %d: %s", r, body[17:]))
		}
	}
	if len(bad) > 0 {
		return fmt.Errorf("%w: step check: %s", mailbox.ErrPeer, strings.Join(bad, "; "))
	}
	if len(differ) > 0 {
		return fmt.Errorf("%w: this rank (%d): %s; %s", ErrStepMismatch, u.rank, clip(desc), strings.Join(differ, "; "))
	}
	return nil
}

// clip shortens s to maxCheckText bytes, on a rune boundary.
func clip(s string) string {
	if len(s) <= maxCheckText {
		return s
	}
	return strings.ToValidUTF8(s[:maxCheckText], "") + "…"
}
