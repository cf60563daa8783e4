package launcher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestRankExitsBeforeJoin: a rank that exits 0 without ever saying hello
// fails its peers' rendezvous at once, naming it and how it ended, instead
// of leaving them to the rendezvous timeout.
func TestRankExitsBeforeJoin(t *testing.T) {
	const n, rendezvous = 3, 10 * time.Second
	gone := 1 + rand.IntN(n-1)
	var stdout, stderr lockedBuffer
	start := time.Now()
	res, err := Run(context.Background(), Config{
		WorldSize: n, Command: helperCommand("hub"),
		Env:               helperEnviron("HELPER_NOJOIN_RANK=" + strconv.Itoa(gone)),
		RendezvousTimeout: rendezvous,
		Stdout:            &stdout, Stderr: &stderr,
	})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > rendezvous/2 {
		t.Errorf("job took %v with a %v rendezvous timeout; want it to end at once", took, rendezvous)
	}
	if res.ExitStatus != 10 || res.FirstFailed < 0 || res.FirstFailed == gone {
		t.Errorf("status %d first %d, want 10 from a rank that waited (not %d)", res.ExitStatus, res.FirstFailed, gone)
	}
	if st := res.Ranks[gone].Status; st.Failed() {
		t.Errorf("rank %d ended %s, want exit status 0", gone, st)
	}
	want := fmt.Sprintf("rendezvous failed: rank %d exited (exit status 0) before joining", gone)
	if !strings.Contains(stderr.String(), "tprun: hub: "+want) {
		t.Errorf("tprun's stderr lacks %q:\n%s", want, stderr.String())
	}
	// The report names it too: it never joined, and it exited 0 before the
	// failure it caused.
	report := res.Report()
	if !slices.Contains(res.NeverJoined, gone) || !strings.Contains(report, "tprun: never joined the rendezvous (tp.Join): rank") ||
		!strings.Contains(report, fmt.Sprintf("exited 0 before rank %d failed: rank %d (", res.FirstFailed, gone)) {
		t.Errorf("never joined %v; report:\n%s", res.NeverJoined, report)
	}
	lines := splitRankLines(t, stdout.String())
	for r := range n {
		if r == gone || (r != res.FirstFailed && len(lines[r]) == 0 && res.Ranks[r].Stopped) {
			continue // tprun stopped it before it dialled: the first failure ends the job
		}
		if len(lines[r]) != 1 || !strings.HasPrefix(lines[r][0], "dial-failed ") || !strings.Contains(lines[r][0], want) {
			t.Errorf("rank %d printed %q, want its Dial to fail with %q", r, lines[r], want)
		}
	}
}

// TestStopQuietHub: when tprun stops a job whose ranks wait in a hub
// collective, the ranks give their calls up (which ends the job in the
// hub); the hub's "job aborted" lines are the stop's own doing and are not
// printed, and the report says what happened.
func TestStopQuietHub(t *testing.T) {
	const n = 3
	var stdout, stderr lockedBuffer
	sigs := make(chan os.Signal, 1)
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for strings.Count(stdout.String(), "waiting") < n && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // let ranks 1..n-1 send their barrier
		sigs <- syscall.SIGINT
	}()
	res, err := Run(context.Background(), Config{
		WorldSize: n, Command: helperCommand("hub"),
		Env:     helperEnviron("HELPER_STOP_WAIT=1"),
		Signals: sigs, Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 130 {
		t.Errorf("status %d, want 130\n%s", res.ExitStatus, stderr.String())
	}
	// The ranks' own lines may quote the hub's error; tprun's may not.
	if strings.Contains(stderr.String(), "tprun: hub: job aborted") {
		t.Errorf("tprun printed the hub's failure while it stopped the job:\n%s", stderr.String())
	}
	if !strings.Contains(stderr.String(), "tprun: job stopped: tprun got SIGINT") {
		t.Errorf("no stop line in the report:\n%s", stderr.String())
	}
}

// TestStopQuietRendezvous: when tprun stops a job whose rendezvous has not
// completed, the rank that never joined is killed before its hello, which
// fails the rendezvous in the hub; that failure is the stop's doing and is
// not printed either.
func TestStopQuietRendezvous(t *testing.T) {
	const n, late = 3, 2
	var stdout, stderr lockedBuffer
	sigs := make(chan os.Signal, 1)
	go func() {
		deadline := time.Now().Add(10 * time.Second)
		for (strings.Count(stdout.String(), "dialing") < n-1 || !strings.Contains(stdout.String(), "late")) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // let the others' hellos reach the hub
		sigs <- syscall.SIGINT
	}()
	res, err := Run(context.Background(), Config{
		WorldSize: n, Command: helperCommand("hub"),
		Env:     helperEnviron("HELPER_LATE_RANK=" + strconv.Itoa(late)),
		Signals: sigs, Stdout: &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 130 {
		t.Errorf("status %d, want 130\n%s", res.ExitStatus, stderr.String())
	}
	if strings.Contains(stderr.String(), "tprun: hub: ") {
		t.Errorf("tprun printed the hub's failure while it stopped the job:\n%s", stderr.String())
	}
}
