package launcher

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReport: the report's lines for a constructed result, every rank in
// the line its end belongs to: the first failure with its stderr tail, the
// other ranks that failed on their own before the stop, the ranks tprun
// stopped (a status of their own after the SIGTERM said so), and none for
// a rank that succeeded.
func TestReport(t *testing.T) {
	term := Status{Code: -1, Signal: syscall.SIGTERM}
	t0 := time.Now()
	res := &Result{ExitStatus: 3, FirstFailed: 0, StopReason: "rank 0 exit status 3", Ranks: []RankResult{
		{Rank: 0, Status: Status{Code: 3}, Duration: 1500 * time.Millisecond, Ended: t0.Add(1500 * time.Millisecond), Tail: []string{"boom"}},
		{Rank: 1, Status: Status{Code: 4}, Duration: time.Second},
		{Rank: 2, Status: Status{Code: 5}, Stopped: true},
		{Rank: 3, Status: term, Stopped: true},
		{Rank: 4, Status: Status{}, Duration: 20 * time.Millisecond, Ended: t0.Add(30 * time.Millisecond)},
		{Rank: 5, Status: Status{Code: -1, Signal: syscall.SIGKILL}, Stopped: true, Killed: true},
		{Rank: 6, Status: Status{Code: 1}, AfterHubFailure: true, HubBlamed: 0},
		// Exited 0 after rank 0's failure, though its run was shorter:
		// it started later.
		{Rank: 7, Status: Status{}, AfterHubFailure: true, HubBlamed: 0, Duration: time.Second, Ended: t0.Add(1600 * time.Millisecond)},
		{Rank: 8, Status: Status{Code: 2}, AfterHubFailure: true, HubBlamed: 3},
	}}
	want := `tprun: rank 0 failed first: exit status 3 after 1.5s
tprun: last stderr lines of rank 0:
tprun:   | boom
tprun: failed once the hub had ended the job for rank 0: rank 6 (exit status 1)
tprun: failed once the hub had ended the job for rank 3: rank 8 (exit status 2)
tprun: also failed before tprun stopped the job: rank 1 (exit status 4)
tprun: stopped by tprun: rank 2 (exit status 5 after tprun's SIGTERM), rank 3 (killed by signal SIGTERM), rank 5 (killed by signal SIGKILL)
tprun: exited 0 before rank 0 failed: rank 4 (after 20ms)
tprun: exit status 3
`
	if got := res.Report(); got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
	// Stopped by a signal to tprun: no first failure, the reason instead.
	res = &Result{ExitStatus: 130, FirstFailed: -1, StopReason: "tprun got SIGINT", Ranks: []RankResult{
		{Rank: 0, Status: Status{Code: 1}, Stopped: true},
		{Rank: 1, Status: term, Stopped: true},
	}}
	want = `tprun: job stopped: tprun got SIGINT
tprun: stopped by tprun: rank 0 (exit status 1 after tprun's SIGTERM), rank 1 (killed by signal SIGTERM)
tprun: exit status 130
`
	if got := res.Report(); got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
	// Ranks with the same status are one entry, their ranks as ranges.
	res = &Result{ExitStatus: 1, FirstFailed: 0, Ranks: []RankResult{
		{Rank: 0, Status: Status{Code: 1}, Duration: time.Second, Tail: []string{"x"}},
		{Rank: 1, Status: term, Stopped: true},
		{Rank: 2, Status: term, Stopped: true},
		{Rank: 3, Status: term, Stopped: true},
		{Rank: 4, Status: Status{Code: 1}, Stopped: true},
		{Rank: 5, Status: term, Stopped: true},
	}}
	want = `tprun: rank 0 failed first: exit status 1 after 1s
tprun: last stderr lines of rank 0:
tprun:   | x
tprun: stopped by tprun: ranks 1-3, 5 (killed by signal SIGTERM), rank 4 (exit status 1 after tprun's SIGTERM)
tprun: exit status 1
`
	if got := res.Report(); got != want {
		t.Errorf("report:\n%s\nwant:\n%s", got, want)
	}
	// Ranks that never joined a job whose others did.
	res.NeverJoined = []int{4, 5}
	if got, want := res.Report(), "tprun: never joined the rendezvous (tp.Join): ranks 4-5\n"; !strings.Contains(got, want) {
		t.Errorf("report lacks %q:\n%s", want, got)
	}
	res.NeverJoined = nil
	// reportLists, which other tests use, reads such groups.
	rep := res.Report()
	for _, c := range []struct {
		rank int
		how  string
		want bool
	}{{1, "killed by signal SIGTERM", true}, {5, "killed by signal SIGTERM", true}, {4, "killed by signal SIGTERM", false},
		{4, "exit status 1 after tprun's SIGTERM", true}, {0, "exit status 1", false}} {
		if got := reportLists(rep, "stopped by tprun", c.rank, c.how); got != c.want {
			t.Errorf("reportLists(rank %d, %q) = %v, want %v", c.rank, c.how, got, c.want)
		}
	}
	if got := (&Result{FirstFailed: -1, Ranks: []RankResult{{Rank: 0}}}).Report(); got != "" {
		t.Errorf("clean run: report %q", got)
	}
}
