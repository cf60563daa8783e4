package launcher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/proctest"
)

// TestLingeringHolder: a rank that dies while a process it started still
// holds its stdout and stderr open gets its peers stopped at once, not
// once the pipes reach EOF; every line it wrote itself is forwarded; the
// holder is named on tprun's stderr and in the report, and killed with the
// rank's process group, or, out of that group's reach, left alone without
// holding up the end of the job.
func TestLingeringHolder(t *testing.T) {
	// On a loaded 2-core machine a stop takes tens of milliseconds; the
	// wait this guards against was a whole drain timeout (2 s).
	const bound = time.Second
	for _, tc := range []struct {
		desc   string
		end    string // HELPER_LINGER_END
		setsid bool
		status int
	}{
		{desc: "exit 1, holder in its process group", end: "exit1", status: 1},
		{desc: "SIGKILL, holder in its process group", end: "kill", status: 137},
		{desc: "exit 1, holder in a session of its own", end: "exit1", setsid: true, status: 1},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			const n = 3
			victim := rand.IntN(n)
			lines := 500 + rand.IntN(1500)
			env := helperEnviron("HELPER_SYNC_DIR="+t.TempDir(), "HELPER_LINGER_RANK="+strconv.Itoa(victim),
				"HELPER_LINGER_LINES="+strconv.Itoa(lines), "HELPER_LINGER_END="+tc.end,
				"GORACE=atexit_sleep_ms=0")
			if tc.setsid {
				env = append(env, "HELPER_LINGER_SETSID=1")
			}
			var stdout, stderr lockedBuffer
			res, err := Run(context.Background(), Config{
				WorldSize: n, Command: helperCommand("linger"), Env: env,
				Stdout: &stdout, Stderr: &stderr,
			})
			end := time.Now()
			if err != nil {
				t.Fatal(err)
			}
			out := splitRankLines(t, stdout.String())
			var holder int
			var dying int64
			for _, l := range out[victim] {
				fmt.Sscanf(l, "holder %d", &holder)
				fmt.Sscanf(l, "dying %d", &dying)
			}
			if holder <= 0 || dying == 0 {
				t.Fatalf("rank %d printed no holder pid or death time:\n%s\n%s", victim, stdout.String(), stderr.String())
			}
			if tc.setsid {
				// tprun leaves it alone: the test ends it.
				defer syscall.Kill(holder, syscall.SIGKILL)
			} else {
				proctest.WaitGone(t, "holder", []int{holder}, 2*time.Second)
			}
			died := time.Unix(0, dying)
			if res.ExitStatus != tc.status || res.FirstFailed != victim {
				t.Fatalf("status %d first %d, want %d %d\n%s", res.ExitStatus, res.FirstFailed, tc.status, victim, stderr.String())
			}
			for r := 0; r < n; r++ {
				if r == victim {
					continue
				}
				var term int64
				for _, l := range out[r] {
					fmt.Sscanf(l, "term %d", &term)
				}
				if term == 0 {
					t.Errorf("rank %d never got tprun's SIGTERM: %q", r, out[r])
					continue
				}
				d := time.Unix(0, term).Sub(died)
				t.Logf("rank %d got SIGTERM %s after rank %d died", r, d, victim)
				if d > bound {
					t.Errorf("rank %d got SIGTERM %s after rank %d died, want under %s", r, d, victim, bound)
				}
			}
			if d := end.Sub(died); d > 2*bound {
				t.Errorf("Run returned %s after rank %d died, want under %s", d, victim, 2*bound)
			}
			// Every line the rank wrote itself, in order.
			var got []string
			for _, l := range out[victim] {
				if strings.HasPrefix(l, "out line ") {
					got = append(got, l)
				}
			}
			if len(got) != lines || got[lines-1] != fmt.Sprintf("out line %d", lines-1) {
				t.Errorf("rank %d: %d of its %d stdout lines forwarded", victim, len(got), lines)
			}
			if tail := res.Ranks[victim].Tail; len(tail) == 0 || tail[len(tail)-1] != fmt.Sprintf("err line %d", lines-1) {
				t.Errorf("rank %d's stderr tail ends %q, want its last line", victim, tail)
			}
			if l := res.Ranks[victim].Leftovers; len(l) != 1 || l[0].PID != holder || l[0].Holds != "stdout and stderr" || l[0].Killed == tc.setsid {
				t.Errorf("rank %d's leftovers %+v, want pid %d holding its stdout and stderr, killed %v", victim, l, holder, !tc.setsid)
			}
			report := res.Report()
			t.Logf("stderr:\n%s", stderr.String())
			want := fmt.Sprintf("pid %d (", holder)
			if !strings.Contains(report, want) || !strings.Contains(stderr.String(), report) {
				t.Errorf("report does not name the holder (%q):\n%s", want, report)
			}
		})
	}
}
