package launcher

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Report is the text tprun prints on stderr when the job did not end with
// every rank succeeding: the first failing rank, how it ended and its last
// stderr lines; else why tprun stopped the job; then the other ranks that
// failed before tprun could stop them, the ranks tprun stopped, the ranks
// that exited 0 before the first failure, and the exit status. It is empty
// for a clean run.
func (r *Result) Report() string {
	if r.ExitStatus == 0 && r.StopReason == "" {
		return ""
	}
	var b strings.Builder
	if r.FirstFailed >= 0 {
		f := r.Ranks[r.FirstFailed]
		fmt.Fprintf(&b, "tprun: rank %d failed first: %s after %s\n", f.Rank, f.Status, f.Duration.Round(time.Millisecond))
		if len(f.Tail) == 0 {
			fmt.Fprintf(&b, "tprun: rank %d wrote nothing to stderr\n", f.Rank)
		} else {
			fmt.Fprintf(&b, "tprun: last stderr lines of rank %d:\n", f.Rank)
			for _, l := range f.Tail {
				fmt.Fprintf(&b, "tprun:   | %s\n", l)
			}
		}
	} else if r.StopReason != "" {
		fmt.Fprintf(&b, "tprun: job stopped: %s\n", r.StopReason)
	}
	var also, stopped, early []string
	after := map[int][]string{} // by the rank the hub blamed
	for _, rr := range r.Ranks {
		if r.FirstFailed >= 0 && rr.Rank != r.FirstFailed && !rr.Stopped && !rr.Status.Failed() &&
			rr.Duration < r.Ranks[r.FirstFailed].Duration {
			// Succeeded, but before the first failure: a rank that left
			// a job its peers were still running is often its cause.
			early = append(early, fmt.Sprintf("rank %d (after %s)", rr.Rank, rr.Duration.Round(time.Millisecond)))
		}
		switch {
		case rr.Rank == r.FirstFailed:
			// It may have been signalled too (it crashed while tprun
			// stopped it, after the hub had named it); it is reported
			// above.
		case rr.Stopped && rr.Status.Signal == 0:
			// It ended with a status of its own after tprun's SIGTERM:
			// it caught the signal, or was ending anyway.
			stopped = append(stopped, fmt.Sprintf("rank %d (%s after tprun's SIGTERM)", rr.Rank, rr.Status))
		case rr.Stopped:
			stopped = append(stopped, fmt.Sprintf("rank %d (%s)", rr.Rank, rr.Status))
		case rr.Status.Failed() && rr.AfterHubFailure:
			// Ended before tprun signalled it, once the hub had failed the
			// calls it waited in: most likely the first failure's doing.
			after[rr.HubBlamed] = append(after[rr.HubBlamed], fmt.Sprintf("rank %d (%s)", rr.Rank, rr.Status))
		case rr.Status.Failed():
			// Ended before tprun signalled it: a failure of its own,
			// often caused by the first one (a peer it waited for died).
			also = append(also, fmt.Sprintf("rank %d (%s)", rr.Rank, rr.Status))
		}
	}
	for _, blamed := range slices.Sorted(maps.Keys(after)) {
		fmt.Fprintf(&b, "tprun: failed once the hub had ended the job for rank %d: %s\n", blamed, strings.Join(after[blamed], ", "))
	}
	if len(also) > 0 {
		fmt.Fprintf(&b, "tprun: also failed before tprun stopped the job: %s\n", strings.Join(also, ", "))
	}
	if len(stopped) > 0 {
		fmt.Fprintf(&b, "tprun: stopped by tprun: %s\n", strings.Join(stopped, ", "))
	}
	if len(early) > 0 {
		fmt.Fprintf(&b, "tprun: exited 0 before rank %d failed: %s\n", r.FirstFailed, strings.Join(early, ", "))
	}
	fmt.Fprintf(&b, "tprun: exit status %d\n", r.ExitStatus)
	return b.String()
}

func (j *job) report(res *Result) {
	if s := res.Report(); s != "" {
		j.out.writeString(j.cfg.Stderr, s)
	}
}
