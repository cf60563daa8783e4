package launcher

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"
)

// Report is the text tprun prints on stderr when the job did not end with
// every rank succeeding or lost output: the first failing rank, how it
// ended and its last stderr lines; else why tprun stopped the job; then the
// ranks with a suspended process (a stop signal or a tracer) at that
// moment, the other ranks that failed before tprun could stop them, the
// ranks tprun stopped, the ranks that exited 0 before the first failure,
// the output that could not be written, and the exit status. It is empty
// for a clean run.
func (r *Result) Report() string {
	if r.ExitStatus == 0 && r.StopReason == "" && len(r.OutputLost) == 0 {
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
	var also, stopped, early, suspended []rankNote
	after := map[int][]rankNote{} // by the rank the hub blamed
	for _, rr := range r.Ranks {
		if rr.Suspended != "" {
			suspended = append(suspended, rankNote{rr.Rank, rr.Suspended})
		}
		if r.FirstFailed >= 0 && rr.Rank != r.FirstFailed && !rr.Stopped && !rr.Status.Failed() &&
			rr.Ended.Before(r.Ranks[r.FirstFailed].Ended) {
			// Succeeded, but before the first failure: a rank that left
			// a job its peers were still running is often its cause.
			early = append(early, rankNote{rr.Rank, "after " + rr.Duration.Round(time.Millisecond).String()})
		}
		switch {
		case rr.Rank == r.FirstFailed:
			// It may have been signalled too (it crashed while tprun
			// stopped it, after the hub had named it); it is reported
			// above.
		case rr.Stopped && rr.Status.Signal == 0:
			// It ended with a status of its own after tprun's SIGTERM:
			// it caught the signal, or was ending anyway.
			stopped = append(stopped, rankNote{rr.Rank, rr.Status.String() + " after tprun's SIGTERM"})
		case rr.Stopped:
			stopped = append(stopped, rankNote{rr.Rank, rr.Status.String()})
		case rr.Status.Failed() && rr.AfterHubFailure:
			// Ended before tprun signalled it, once the hub had failed the
			// calls it waited in: most likely the first failure's doing.
			after[rr.HubBlamed] = append(after[rr.HubBlamed], rankNote{rr.Rank, rr.Status.String()})
		case rr.Status.Failed():
			// Ended before tprun signalled it: a failure of its own,
			// often caused by the first one (a peer it waited for died).
			also = append(also, rankNote{rr.Rank, rr.Status.String()})
		}
	}
	if len(suspended) > 0 {
		// Said early: a rank that could not run is the likeliest cause of
		// the peers' failures (a receive that timed out waiting for it).
		fmt.Fprintf(&b, "tprun: suspended when tprun stopped the job (a suspended rank sends nothing; its peers wait for it): %s\n", joinRanks(suspended))
	}
	for _, blamed := range slices.Sorted(maps.Keys(after)) {
		fmt.Fprintf(&b, "tprun: failed once the hub had ended the job for rank %d: %s\n", blamed, joinRanks(after[blamed]))
	}
	if len(also) > 0 {
		fmt.Fprintf(&b, "tprun: also failed before tprun stopped the job: %s\n", joinRanks(also))
	}
	if len(stopped) > 0 {
		fmt.Fprintf(&b, "tprun: stopped by tprun: %s\n", joinRanks(stopped))
	}
	if len(early) > 0 {
		fmt.Fprintf(&b, "tprun: exited 0 before rank %d failed: %s\n", r.FirstFailed, joinRanks(early))
	}
	for _, rr := range r.Ranks {
		var killed, outside []Leftover
		for _, l := range rr.Leftovers {
			if l.Killed {
				killed = append(killed, l)
			} else {
				outside = append(outside, l)
			}
		}
		if len(killed) > 0 {
			fmt.Fprintf(&b, "tprun: rank %d left processes running when it ended, killed with its process group: %s\n", rr.Rank, joinLeftovers(killed))
		}
		if len(outside) > 0 {
			fmt.Fprintf(&b, "tprun: rank %d left processes running outside its process group, not killed (their output was read until the job ended): %s\n", rr.Rank, joinLeftovers(outside))
		}
	}
	if len(r.OutputLost) > 0 {
		fmt.Fprintf(&b, "tprun: output lost (writes failed, the job went on): %s\n", strings.Join(r.OutputLost, "; "))
	}
	if n := len(r.NeverJoined); n > 0 {
		fmt.Fprintf(&b, "tprun: never joined the rendezvous (tp.Join): %s %s\n", plural(n, "rank", "ranks"), rankRanges(r.NeverJoined))
	}
	fmt.Fprintf(&b, "tprun: exit status %d\n", r.ExitStatus)
	return b.String()
}

// rankNote is a rank and what the report says about it.
type rankNote struct {
	rank int
	note string
}

// joinRanks lists ns (ascending ranks) grouped by note, in the order the
// notes first appear, each group's ranks as ranges: "rank 3 (note)",
// "ranks 0, 2-199 (note)", so that the report of a large job stays
// readable.
func joinRanks(ns []rankNote) string {
	var order []string
	byNote := map[string][]int{}
	for _, n := range ns {
		if _, ok := byNote[n.note]; !ok {
			order = append(order, n.note)
		}
		byNote[n.note] = append(byNote[n.note], n.rank)
	}
	parts := make([]string, len(order))
	for i, note := range order {
		ranks := byNote[note]
		if len(ranks) == 1 {
			parts[i] = fmt.Sprintf("rank %d (%s)", ranks[0], note)
			continue
		}
		parts[i] = fmt.Sprintf("ranks %s (%s)", rankRanges(ranks), note)
	}
	return strings.Join(parts, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// rankRanges writes ascending ranks as "0, 2-5, 9".
func rankRanges(ranks []int) string {
	var parts []string
	for i := 0; i < len(ranks); {
		j := i + 1
		for j < len(ranks) && ranks[j] == ranks[j-1]+1 {
			j++
		}
		if j-i == 1 {
			parts = append(parts, fmt.Sprint(ranks[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", ranks[i], ranks[j-1]))
		}
		i = j
	}
	return strings.Join(parts, ", ")
}

func (j *job) report(res *Result) {
	if s := res.Report(); s != "" {
		j.out.writeErr(s)
	}
}
