package launcher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
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
