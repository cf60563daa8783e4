package launcher

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/hub"
	"github.com/tprun/tprun/internal/proctest"
)

// lockedBuffer is a bytes.Buffer safe to read while Run writes to it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// recordingHub wraps the real hub and records Abort calls.
type recordingHub struct {
	hubServer
	mu     sync.Mutex
	aborts []string
}

func (h *recordingHub) Abort(rank int, reason string) {
	h.mu.Lock()
	h.aborts = append(h.aborts, fmt.Sprintf("%d: %s", rank, reason))
	h.mu.Unlock()
	h.hubServer.Abort(rank, reason)
}

func (h *recordingHub) Aborts() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.aborts...)
}

func recordingListen(rec **recordingHub) listenFunc {
	return func(c hubConfig) (hubServer, error) {
		s, err := listenHub(c)
		if err != nil {
			return nil, err
		}
		*rec = &recordingHub{hubServer: s}
		return *rec, nil
	}
}

// shortTempDir is a TMPDIR for a launcher under test: t.TempDir's long
// names would push the hub's socket path past sun_path's 107 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tpl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func waitReady(t *testing.T, dir string, n int) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !allReady(dir, n) {
		if time.Now().After(deadline) {
			t.Fatalf("ranks never became ready in %s", dir)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRunEnvironment(t *testing.T) {
	tests := []struct {
		desc    string
		n       int
		devices []string
		wantDev string
	}{
		{desc: "one rank", n: 1, wantDev: "<unset>"},
		{desc: "two ranks with --devices longer than --tp", n: 2, devices: []string{"3", "5", "7"}, wantDev: "3,5"},
		{desc: "eight ranks", n: 8, wantDev: "<unset>"},
		{desc: "four ranks sharing one GPU", n: 4, devices: []string{"0", "0", "0", "0"}, wantDev: "0,0,0,0"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var stdout, stderr lockedBuffer
			res, err := Run(context.Background(), Config{
				WorldSize: tc.n,
				Devices:   tc.devices,
				Command:   helperCommand("env"),
				// Stale values from an outer launcher must be replaced;
				// CUDA_VISIBLE_DEVICES and the rest pass through.
				Env:    helperEnviron("RANK=99", "TPRUN_DEVICES=9,9", "CUDA_VISIBLE_DEVICES=1,0", "HELPER_MARK=kept"),
				Stdout: &stdout, Stderr: &stderr,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitStatus != 0 || res.FirstFailed != -1 || res.Report() != "" {
				t.Fatalf("status %d first %d report %q; stderr:\n%s", res.ExitStatus, res.FirstFailed, res.Report(), stderr.String())
			}
			lines := splitRankLines(t, stdout.String())
			if len(lines[-1]) != 0 {
				t.Errorf("unprefixed lines: %q", lines[-1])
			}
			token, hub := "", ""
			for r := 0; r < tc.n; r++ {
				env := map[string]string{}
				for _, l := range lines[r] {
					k, v, _ := strings.Cut(l, "=")
					env[k] = v
				}
				rs, ns := strconv.Itoa(r), strconv.Itoa(tc.n)
				want := map[string]string{
					"TPRUN_RANK": rs, "TPRUN_WORLD_SIZE": ns, "TPRUN_LOCAL_RANK": rs,
					"RANK": rs, "WORLD_SIZE": ns, "LOCAL_RANK": rs, "LOCAL_WORLD_SIZE": ns,
					"TPRUN_DEVICES": tc.wantDev, "CUDA_VISIBLE_DEVICES": "1,0", "HELPER_MARK": "kept",
				}
				for k, v := range want {
					if env[k] != v {
						t.Errorf("rank %d: %s=%q, want %q", r, k, env[k], v)
					}
				}
				if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(env["TPRUN_JOB_TOKEN"]) {
					t.Errorf("rank %d: token %q is not 32 hex digits", r, env["TPRUN_JOB_TOKEN"])
				}
				if r == 0 {
					token, hub = env["TPRUN_JOB_TOKEN"], env["TPRUN_HUB"]
				} else if env["TPRUN_JOB_TOKEN"] != token || env["TPRUN_HUB"] != hub {
					t.Errorf("rank %d: token/hub %q %q differ from rank 0's %q %q", r, env["TPRUN_JOB_TOKEN"], env["TPRUN_HUB"], token, hub)
				}
			}
			if hub == "" || !filepath.IsAbs(hub) {
				t.Fatalf("TPRUN_HUB %q", hub)
			}
			if _, err := os.Stat(filepath.Dir(hub)); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("hub directory %s still there after Run: %v", filepath.Dir(hub), err)
			}
		})
	}
}

func TestRunOutput(t *testing.T) {
	const n, longLen = 3, 300_000 // over bufio.Scanner's 64 KiB and our 64 KiB read buffer
	logDir := filepath.Join(t.TempDir(), "logs", "nested")
	var stdout, stderr lockedBuffer
	res, err := Run(context.Background(), Config{
		WorldSize: n,
		Command:   helperCommand("output", strconv.Itoa(longLen)),
		Env:       helperEnviron(),
		LogDir:    logDir,
		Stdout:    &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 0 {
		t.Fatalf("exit status %d\n%s", res.ExitStatus, stderr.String())
	}
	outs, errs := splitRankLines(t, stdout.String()), splitRankLines(t, stderr.String())
	if len(outs[-1])+len(errs[-1]) != 0 {
		t.Errorf("unprefixed lines: %q %q", outs[-1], errs[-1])
	}
	for r := 0; r < n; r++ {
		var long strings.Builder
		fmt.Fprintf(&long, "long %d ", r)
		for i := 0; i < longLen; i++ {
			long.WriteByte('a' + byte((i+r)%26))
		}
		wantOut := []string{long.String()}
		var wantErr []string
		for i := 0; i < 200; i++ {
			wantOut = append(wantOut, fmt.Sprintf("out %d line %d of rank %d", r, i, r))
			wantErr = append(wantErr, fmt.Sprintf("err %d line %d of rank %d", r, i, r))
		}
		wantOut = append(wantOut, fmt.Sprintf("last out %d", r))
		wantErr = append(wantErr, fmt.Sprintf("last err %d", r))
		checkLines(t, fmt.Sprintf("rank %d stdout", r), outs[r], wantOut)
		checkLines(t, fmt.Sprintf("rank %d stderr", r), errs[r], wantErr)
		if got, want := res.Ranks[r].Tail, wantErr[len(wantErr)-TailLines:]; !slices.Equal(got, want) {
			t.Errorf("rank %d tail = %q, want %q", r, got, want)
		}

		// The log file has both streams, unprefixed; each stream keeps
		// its own order.
		b, err := os.ReadFile(filepath.Join(logDir, fmt.Sprintf("rank-%d.log", r)))
		if err != nil {
			t.Fatal(err)
		}
		var logOut, logErr []string
		for _, l := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
			if strings.HasPrefix(l, "err ") || strings.HasPrefix(l, "last err ") {
				logErr = append(logErr, l)
			} else {
				logOut = append(logOut, l)
			}
		}
		checkLines(t, fmt.Sprintf("rank-%d.log stdout part", r), logOut, wantOut)
		checkLines(t, fmt.Sprintf("rank-%d.log stderr part", r), logErr, wantErr)
	}
}

func checkLines(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d lines, want %d", what, len(got), len(want))
		return
	}
	for i := range want {
		if got[i] != want[i] {
			g := got[i]
			if len(g) > 80 {
				g = g[:80] + "..."
			}
			t.Errorf("%s: line %d = %q (len %d), want len %d", what, i, g, len(got[i]), len(want[i]))
			return
		}
	}
}

func TestRunExitStatus(t *testing.T) {
	tests := []struct {
		desc        string
		n           int
		failRank    string
		failCode    string
		wantStatus  int
		wantFirst   int
		wantHow     string
		ignoreTerm  bool
		wantKilled  bool
		grace       time.Duration
		otherStatus string
	}{
		{desc: "all ranks succeed", n: 4, wantStatus: 0, wantFirst: -1},
		{desc: "one rank, own exit code", n: 1, failRank: "0", failCode: "42", wantStatus: 42, wantFirst: 0, wantHow: "exit status 42"},
		{desc: "rank 1 of 4 exits 3, others get SIGTERM", n: 4, failRank: "1", failCode: "3", wantStatus: 3, wantFirst: 1,
			wantHow: "exit status 3", otherStatus: "killed by signal SIGTERM"},
		{desc: "rank 0 SIGKILLed is 137", n: 2, failRank: "0", failCode: "kill", wantStatus: 137, wantFirst: 0,
			wantHow: "killed by signal SIGKILL", otherStatus: "killed by signal SIGTERM"},
		{desc: "ranks ignoring SIGTERM are killed after the grace period", n: 3, failRank: "2", failCode: "5",
			wantStatus: 5, wantFirst: 2, wantHow: "exit status 5", ignoreTerm: true, wantKilled: true,
			grace: 300 * time.Millisecond, otherStatus: "killed by signal SIGKILL"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			syncDir := t.TempDir()
			env := helperEnviron("HELPER_SYNC_DIR="+syncDir, "HELPER_FAIL_RANK="+tc.failRank, "HELPER_FAIL_CODE="+tc.failCode)
			if tc.failRank == "" {
				env = append(env, "HELPER_SLEEP=0s")
			}
			if tc.ignoreTerm {
				env = append(env, "HELPER_IGNORE_TERM=1")
			}
			var rec *recordingHub
			var stdout, stderr lockedBuffer
			start := time.Now()
			res, err := Run(context.Background(), Config{
				WorldSize: tc.n,
				Command:   helperCommand("job"),
				Env:       env,
				Grace:     tc.grace,
				Stdout:    &stdout, Stderr: &stderr,
				listen: recordingListen(&rec),
			})
			elapsed := time.Since(start)
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitStatus != tc.wantStatus || res.FirstFailed != tc.wantFirst {
				t.Fatalf("status %d first %d, want %d %d\n%s", res.ExitStatus, res.FirstFailed, tc.wantStatus, tc.wantFirst, stderr.String())
			}
			grace := tc.grace
			if grace == 0 {
				grace = DefaultGrace
			}
			if limit := 2*time.Second + grace; elapsed > limit {
				t.Errorf("Run took %s, want under %s", elapsed, limit)
			}
			if tc.wantFirst < 0 {
				if len(rec.Aborts()) != 0 || stderr.String() != "" {
					t.Errorf("clean run: aborts %q, stderr %q", rec.Aborts(), stderr.String())
				}
				return
			}
			wantAbort := fmt.Sprintf("%d: %s", tc.wantFirst, tc.wantHow)
			if a := rec.Aborts(); len(a) == 0 || a[0] != wantAbort {
				t.Errorf("hub aborts %q, want first %q", a, wantAbort)
			}
			report := stderr.String()
			for _, want := range []string{
				fmt.Sprintf("tprun: rank %d failed first: %s", tc.wantFirst, tc.wantHow),
				"tprun:   | failing line 24\n",
				"tprun:   | failing line 5\n", // the 20th line from the end
				fmt.Sprintf("tprun: exit status %d\n", tc.wantStatus),
			} {
				if !strings.Contains(report, want) {
					t.Errorf("report lacks %q:\n%s", want, report)
				}
			}
			if strings.Contains(report, "tprun:   | failing line 4\n") {
				t.Errorf("report keeps more than %d lines:\n%s", TailLines, report)
			}
			var others []string
			for r, rr := range res.Ranks {
				if r == tc.wantFirst {
					if rr.Status.String() != tc.wantHow {
						t.Errorf("failing rank %d: status %s", r, rr.Status)
					}
					continue
				}
				others = append(others, strconv.Itoa(r))
				if !rr.Stopped || rr.Killed != tc.wantKilled || rr.Status.String() != tc.otherStatus {
					t.Errorf("rank %d: stopped %v killed %v status %s, want true %v %s", r, rr.Stopped, rr.Killed, rr.Status, tc.wantKilled, tc.otherStatus)
				}
			}
			// Every other rank, in one entry: "ranks 0, 2-3 (killed by signal SIGTERM)".
			if len(others) > 0 && !regexp.MustCompile(`tprun: stopped by tprun: ranks? [0-9, -]+ \(`+regexp.QuoteMeta(tc.otherStatus)+`\)\n`).MatchString(report) {
				t.Errorf("report lacks one stopped entry for ranks %v (%s):\n%s", others, tc.otherStatus, report)
			}
		})
	}
}

func TestRunStops(t *testing.T) {
	tests := []struct {
		desc       string
		signals    []os.Signal
		timeout    time.Duration
		cancel     bool
		ignoreTerm bool
		grace      time.Duration
		wantStatus int
		wantReason string
		wantKilled bool
	}{
		{desc: "SIGTERM stops the ranks gracefully", signals: []os.Signal{syscall.SIGTERM},
			wantStatus: 128 + 15, wantReason: "tprun got SIGTERM"},
		{desc: "a second SIGINT kills at once", signals: []os.Signal{syscall.SIGINT, syscall.SIGINT},
			ignoreTerm: true, grace: time.Minute, wantStatus: 128 + 2, wantReason: "tprun got SIGINT", wantKilled: true},
		{desc: "--timeout", timeout: 300 * time.Millisecond, wantStatus: ExitTimeout, wantReason: "timed out after 300ms"},
		{desc: "ctx cancelled", cancel: true, wantStatus: ExitInternal, wantReason: "cancelled: context canceled"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			syncDir := t.TempDir()
			env := helperEnviron("HELPER_SYNC_DIR=" + syncDir)
			if tc.ignoreTerm {
				env = append(env, "HELPER_IGNORE_TERM=1")
			}
			const n = 3
			sigs := make(chan os.Signal, 2)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var stderr lockedBuffer
			type ran struct {
				res *Result
				err error
			}
			done := make(chan ran, 1)
			start := time.Now()
			go func() {
				res, err := Run(ctx, Config{
					WorldSize: n, Command: helperCommand("job"), Env: env,
					Grace: tc.grace, Timeout: tc.timeout, Signals: sigs,
					Stdout: io.Discard, Stderr: &stderr,
				})
				done <- ran{res, err}
			}()
			if tc.timeout == 0 {
				waitReady(t, syncDir, n)
			}
			for _, s := range tc.signals {
				sigs <- s
			}
			if tc.cancel {
				cancel()
			}
			r := <-done
			elapsed := time.Since(start)
			if r.err != nil {
				t.Fatal(r.err)
			}
			if r.res.ExitStatus != tc.wantStatus || r.res.StopReason != tc.wantReason || r.res.FirstFailed != -1 {
				t.Fatalf("status %d reason %q first %d, want %d %q -1\n%s", r.res.ExitStatus, r.res.StopReason, r.res.FirstFailed, tc.wantStatus, tc.wantReason, stderr.String())
			}
			if elapsed > 10*time.Second {
				t.Errorf("took %s", elapsed)
			}
			for _, rr := range r.res.Ranks {
				if !rr.Stopped || rr.Killed != tc.wantKilled || !rr.Status.Failed() {
					t.Errorf("rank %d: stopped %v killed %v status %s", rr.Rank, rr.Stopped, rr.Killed, rr.Status)
				}
			}
			if !strings.Contains(stderr.String(), "tprun: job stopped: "+tc.wantReason) {
				t.Errorf("report lacks the reason:\n%s", stderr.String())
			}
		})
	}
}

// TestRunPausedRank: a rank stopped by SIGSTOP when another fails ends by
// tprun's SIGTERM at once (tprun sends SIGCONT with it), not by SIGKILL
// after the grace period, and the report names it as paused.
func TestRunPausedRank(t *testing.T) {
	const n, paused, failing = 3, 1, 2
	syncDir := t.TempDir()
	var stderr lockedBuffer
	start := time.Now()
	res, err := Run(context.Background(), Config{
		WorldSize: n, Command: helperCommand("job"),
		Env: helperEnviron("HELPER_SYNC_DIR="+syncDir, "HELPER_PAUSE_RANK="+strconv.Itoa(paused),
			"HELPER_FAIL_RANK="+strconv.Itoa(failing), "HELPER_FAIL_CODE=3"),
		// Far longer than the test may take: only SIGCONT ends it in time.
		Grace:  time.Minute,
		Stdout: io.Discard, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("Run took %s: the paused rank waited out the grace period", d)
	}
	if res.FirstFailed != failing || res.ExitStatus != 3 {
		t.Fatalf("first %d status %d, want %d 3\n%s", res.FirstFailed, res.ExitStatus, failing, stderr.String())
	}
	p := res.Ranks[paused]
	if !p.Stopped || p.Killed || p.Status.String() != "killed by signal SIGTERM" {
		t.Errorf("paused rank: %s stopped %v killed %v; want killed by SIGTERM, stopped, not killed", p.Status, p.Stopped, p.Killed)
	}
	const how = suspendedBySignal
	if p.Suspended != how {
		t.Errorf("paused rank's Suspended %q, want %q", p.Suspended, how)
	}
	for _, rr := range res.Ranks {
		if rr.Rank != paused && rr.Suspended != "" {
			t.Errorf("rank %d: Suspended %q, but it ran", rr.Rank, rr.Suspended)
		}
	}
	want := fmt.Sprintf("tprun: suspended when tprun stopped the job (a suspended rank sends nothing; its peers wait for it): rank %d (%s)\n", paused, how)
	if !strings.Contains(res.Report(), want) {
		t.Errorf("report lacks %q:\n%s", want, res.Report())
	}
}

// TestRunPausedGroupMember: a rank whose command is a wrapper (a shell)
// around the suspended process is reported too, naming that process.
func TestRunPausedGroupMember(t *testing.T) {
	dir := t.TempDir()
	script := `case "$TPRUN_RANK" in
1) sleep 30 & kill -STOP $!; echo $! > "$D/pid"; wait ;;
2) until [ -s "$D/pid" ] && grep -q ') T ' "/proc/$(cat "$D/pid")/stat"; do sleep 0.01; done; exit 3 ;;
*) exec sleep 30 ;;
esac`
	var stderr lockedBuffer
	start := time.Now()
	res, err := Run(context.Background(), Config{
		WorldSize: 3, Command: []string{"sh", "-c", script}, Env: append(os.Environ(), "D="+dir),
		Grace: time.Minute, Stdout: io.Discard, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("Run took %s", d)
	}
	b, err := os.ReadFile(filepath.Join(dir, "pid"))
	if err != nil {
		t.Fatal(err)
	}
	// Its name is sh or sleep: the stop may come before the fork's exec.
	pre, post := fmt.Sprintf("pid %s (", strings.TrimSpace(string(b))), ") of its process group: "+suspendedBySignal
	p := res.Ranks[1].Suspended
	if res.FirstFailed != 2 || !strings.HasPrefix(p, pre) || !strings.HasSuffix(p, post) || res.Ranks[0].Suspended != "" || res.Ranks[1].Killed {
		t.Errorf("first %d; rank 1 Suspended %q killed %v, rank 0 Suspended %q; want first 2, %q...%q, not killed, \"\"\n%s",
			res.FirstFailed, p, res.Ranks[1].Killed, res.Ranks[0].Suspended, pre, post, stderr.String())
	}
}

// TestParseStat: /proc/PID/stat lines, the command name holding spaces
// and parentheses.
func TestParseStat(t *testing.T) {
	for _, tc := range []struct {
		stat string
		want procStat
		ok   bool
	}{
		{"12 (rank) S 1 12 12 0 -1 4194560 0", procStat{pid: 12, pgrp: 12, comm: "rank"}, true},
		{"13 (rank) R 12 12 12 0", procStat{pid: 13, pgrp: 12, comm: "rank"}, true},
		{"12 (rank) T 1 12 12 0 -1", procStat{pid: 12, pgrp: 12, comm: "rank", suspended: suspendedBySignal}, true},
		{"14 (py) t 12 7 7 0 -1", procStat{pid: 14, pgrp: 7, comm: "py", suspended: suspendedByTracer}, true},
		{"12 (a) T (b) S 1 9 9 0", procStat{pid: 12, pgrp: 9, comm: "a) T (b"}, true},
		{"12 (a) S (b) T 1 9 9 0", procStat{pid: 12, pgrp: 9, comm: "a) S (b", suspended: suspendedBySignal}, true},
		{"12 (rank) T 1", procStat{}, false},
		{"x (rank) T 1 2 3", procStat{}, false},
		{"garbage", procStat{}, false},
	} {
		got, ok := parseStat([]byte(tc.stat))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseStat(%q) = %+v, %v; want %+v, %v", tc.stat, got, ok, tc.want, tc.ok)
		}
	}
}

// TestRunClosedSignals: a Signals channel the caller closes is no signal;
// the ranks run to their end.
func TestRunClosedSignals(t *testing.T) {
	sigs := make(chan os.Signal)
	close(sigs)
	var stderr lockedBuffer
	res, err := Run(context.Background(), Config{
		WorldSize: 2, Command: helperCommand("job"), Env: helperEnviron("HELPER_SLEEP=300ms"),
		Signals: sigs, Stdout: io.Discard, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 0 || res.StopReason != "" || res.FirstFailed != -1 {
		t.Fatalf("status %d reason %q first %d, want 0 \"\" -1\n%s", res.ExitStatus, res.StopReason, res.FirstFailed, stderr.String())
	}
	for _, rr := range res.Ranks {
		if rr.Stopped || rr.Killed || rr.Status.Failed() {
			t.Errorf("rank %d: stopped %v killed %v status %s", rr.Rank, rr.Stopped, rr.Killed, rr.Status)
		}
	}
}

func TestRunBadConfig(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		desc  string
		cfg   Config
		field string
	}{
		{desc: "--tp 0", cfg: Config{WorldSize: 0}, field: "--tp"},
		{desc: "--tp -3", cfg: Config{WorldSize: -3}, field: "--tp"},
		{desc: "--tp above what the hub takes", cfg: Config{WorldSize: hub.MaxWorldSize + 1}, field: "--tp"},
		{desc: "--tp above the number of devices", cfg: Config{WorldSize: 3, Devices: []string{"0", "1"}}, field: "--tp"},
		{desc: "device not an index", cfg: Config{WorldSize: 2, Devices: []string{"0", "gpu1"}}, field: "--devices"},
		{desc: "negative device", cfg: Config{WorldSize: 1, Devices: []string{"-1"}}, field: "--devices"},
		{desc: "no command", cfg: Config{WorldSize: 1, Command: []string{}}, field: "command"},
		{desc: "command not in PATH", cfg: Config{WorldSize: 1, Command: []string{"tprun-no-such-program"}}, field: "command"},
		{desc: "command path missing", cfg: Config{WorldSize: 1, Command: []string{"/nonexistent/prog"}}, field: "command"},
		{desc: "command not executable", cfg: Config{WorldSize: 1, Command: []string{notDir}}, field: "command"},
		{desc: "negative grace", cfg: Config{WorldSize: 1, Grace: -time.Second}, field: "--grace"},
		{desc: "negative timeout", cfg: Config{WorldSize: 1, Timeout: -time.Second}, field: "--timeout"},
		{desc: "negative rendezvous timeout", cfg: Config{WorldSize: 1, RendezvousTimeout: -1}, field: "--rendezvous-timeout"},
		{desc: "log dir under a regular file", cfg: Config{WorldSize: 1, LogDir: filepath.Join(notDir, "logs")}, field: "--log-dir"},
		{desc: "log dir is a regular file", cfg: Config{WorldSize: 1, LogDir: notDir}, field: "--log-dir"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			syncDir := t.TempDir()
			cfg := tc.cfg
			if cfg.Command == nil {
				cfg.Command = helperCommand("job")
			}
			cfg.Env = helperEnviron("HELPER_SYNC_DIR="+syncDir, "HELPER_SLEEP=0s")
			var out lockedBuffer
			cfg.Stdout, cfg.Stderr = &out, &out
			res, err := Run(context.Background(), cfg)
			var ce *ConfigError
			if !errors.Is(err, ErrConfig) || !errors.As(err, &ce) || ce.Field != tc.field || res != nil {
				t.Fatalf("Run = %v, %v; want a *ConfigError for %s", res, err, tc.field)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error is not one line: %q", err)
			}
			if entries, _ := os.ReadDir(syncDir); len(entries) != 0 || out.String() != "" {
				t.Errorf("something ran: %v, output %q", entries, out.String())
			}
			if cfg.Validate() == nil && tc.field != "--log-dir" {
				t.Errorf("Validate accepted what Run refused")
			}
		})
	}
}

func TestRunPreflight(t *testing.T) {
	refusal := errors.New("no NVLink between GPU 0 and 1")
	tests := []struct {
		desc       string
		skip       bool
		err        error
		wantErr    error
		wantRanks  bool
		wantNotice bool
	}{
		{desc: "notice printed, ranks start", wantRanks: true, wantNotice: true},
		{desc: "refusal stops the launch", err: refusal, wantErr: ErrPreflight, wantNotice: true},
		{desc: "--skip-topology-check skips the hook", skip: true, err: refusal, wantRanks: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			syncDir := t.TempDir()
			var stderr lockedBuffer
			called := false
			res, err := Run(context.Background(), Config{
				WorldSize: 2, Command: helperCommand("job"),
				Env:               helperEnviron("HELPER_SYNC_DIR="+syncDir, "HELPER_SLEEP=0s"),
				Strict:            true,
				SkipTopologyCheck: tc.skip,
				Preflight: func(ctx context.Context, cfg Config) (string, error) {
					called = true
					if !cfg.Strict || cfg.WorldSize != 2 {
						t.Errorf("preflight got %+v", cfg)
					}
					return "mailbox: host (test)", tc.err
				},
				Stdout: io.Discard, Stderr: &stderr,
			})
			if !errors.Is(err, tc.wantErr) || (tc.wantErr != nil && !errors.Is(err, refusal)) {
				t.Fatalf("err = %v, want %v", err, tc.wantErr)
			}
			if called == tc.skip {
				t.Errorf("called = %v with skip %v", called, tc.skip)
			}
			if got := strings.Contains(stderr.String(), "tprun: mailbox: host (test)\n"); got != tc.wantNotice {
				t.Errorf("notice printed %v, want %v: %q", got, tc.wantNotice, stderr.String())
			}
			entries, _ := os.ReadDir(syncDir)
			if (len(entries) == 2) != tc.wantRanks || (res != nil && res.ExitStatus != 0) {
				t.Errorf("ranks ran: %d, result %+v", len(entries), res)
			}
		})
	}
}

// launcherProcess starts helperLaunch (a launcher of n sleeping ranks) as a
// real process with TMPDIR pointing at a fresh directory, and returns it
// once every rank printed its pid.
func launcherProcess(t *testing.T, n int, extraEnv ...string) (cmd *exec.Cmd, pids []int, tmp string, rest *bufio.Scanner) {
	t.Helper()
	tmp = shortTempDir(t)
	syncDir := t.TempDir()
	cmd = exec.Command(os.Args[0], "launch", strconv.Itoa(n))
	cmd.Env = helperEnviron(append([]string{"TMPDIR=" + tmp, "HELPER_SYNC_DIR=" + syncDir}, extraEnv...)...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &lockedBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("launcher stderr:\n%s", stderr)
		}
	})
	sc := bufio.NewScanner(stdout)
	for len(pids) < n && sc.Scan() {
		var r, pid int
		if _, err := fmt.Sscanf(sc.Text(), "[rank %d] pid %d", &r, &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) != n {
		t.Fatalf("got pids %v: %v", pids, sc.Err())
	}
	waitReady(t, syncDir, n)
	return cmd, pids, tmp, sc
}

func TestLauncherSignalled(t *testing.T) {
	tests := []struct {
		desc       string
		sig        syscall.Signal
		wantStatus int
		hubGone    bool
	}{
		{desc: "SIGTERM: ranks stopped, hub directory removed", sig: syscall.SIGTERM, wantStatus: 143, hubGone: true},
		{desc: "SIGINT: the same", sig: syscall.SIGINT, wantStatus: 130, hubGone: true},
		// SIGKILL cannot be caught: the parent-death signal must still take
		// the ranks down (the hub directory stays; nothing can remove it).
		{desc: "SIGKILL: ranks die with the launcher", sig: syscall.SIGKILL, wantStatus: -1},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			cmd, pids, tmp, sc := launcherProcess(t, 3)
			go func() {
				for sc.Scan() { // keep the pipe drained
				}
			}()
			if err := cmd.Process.Signal(tc.sig); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			err := cmd.Wait()
			if got := cmd.ProcessState.ExitCode(); got != tc.wantStatus {
				t.Errorf("launcher exit status %d, want %d (%v)", got, tc.wantStatus, err)
			}
			if tc.sig != syscall.SIGKILL && time.Since(start) > 3*time.Second {
				t.Errorf("launcher took %s to stop", time.Since(start))
			}
			// After a caught signal Run reaped every rank before exiting;
			// after SIGKILL the kernel delivers the parent-death signal.
			proctest.WaitGone(t, "rank", pids, 2*time.Second)
			entries, err := os.ReadDir(tmp)
			if err != nil {
				t.Fatal(err)
			}
			if tc.hubGone && len(entries) != 0 {
				t.Errorf("left behind in TMPDIR: %v", entries)
			}
		})
	}
}

// TestRunHub: ranks find each other through the hub the launcher hosts.
func TestRunHub(t *testing.T) {
	for _, n := range []int{1, 2, 8} {
		t.Run(fmt.Sprintf("%d ranks", n), func(t *testing.T) {
			var stdout, stderr lockedBuffer
			res, err := Run(context.Background(), Config{
				WorldSize: n, Command: helperCommand("hub"), Env: helperEnviron(),
				Stdout: &stdout, Stderr: &stderr,
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.ExitStatus != 0 {
				t.Fatalf("status %d\n%s", res.ExitStatus, stderr.String())
			}
			lines := splitRankLines(t, stdout.String())
			for r := 0; r < n; r++ {
				if want := fmt.Sprintf("gathered %d pids", n); len(lines[r]) != 1 || lines[r][0] != want {
					t.Errorf("rank %d printed %q, want %q", r, lines[r], want)
				}
			}
		})
	}
}

// TestRankKilledInBarrier: a rank SIGKILLed while its peers wait in a
// barrier makes every peer's call fail, naming it, within 2 s, and the job
// ends within grace + 2 s with 137.
func TestRankKilledInBarrier(t *testing.T) {
	const n, victim, grace = 4, 2, 3 * time.Second
	var stdout, stderr lockedBuffer
	res, err := Run(context.Background(), Config{
		WorldSize: n, Command: helperCommand("hub"),
		Env:   helperEnviron("HELPER_VICTIM="+strconv.Itoa(victim), "HELPER_IGNORE_TERM=1"),
		Grace: grace, Stdout: &stdout, Stderr: &stderr,
	})
	end := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 137 || res.FirstFailed != victim {
		t.Fatalf("status %d first %d, want 137 %d\n%s", res.ExitStatus, res.FirstFailed, victim, stderr.String())
	}
	lines := splitRankLines(t, stdout.String())
	var killedAt int64
	for _, l := range lines[victim] {
		fmt.Sscanf(l, "killed-at %d", &killedAt)
	}
	if killedAt == 0 {
		t.Fatalf("victim printed %q", lines[victim])
	}
	kill := time.Unix(0, killedAt)
	for r := 0; r < n; r++ {
		if r == victim {
			continue
		}
		var at int64
		named := -1
		for _, l := range lines[r] {
			fmt.Sscanf(l, "barrier-failed %d rank %d", &at, &named)
		}
		if at == 0 || named != victim {
			t.Errorf("rank %d printed %q; want its barrier to fail naming rank %d", r, lines[r], victim)
			continue
		}
		if d := time.Unix(0, at).Sub(kill); d > 2*time.Second {
			t.Errorf("rank %d's barrier failed %s after the kill", r, d)
		}
		if st := res.Ranks[r].Status; st.Code != 3 || res.Ranks[r].Killed {
			t.Errorf("rank %d ended %s (killed %v); want its own exit 3 after the hub's error", r, st, res.Ranks[r].Killed)
		}
	}
	if d := end.Sub(kill); d > grace+2*time.Second {
		t.Errorf("Run returned %s after the kill", d)
	}
}

// TestFailedFirst: the rank named as failing first is the first whose own
// end was a failure. A rank that closed its hub connection cleanly is not
// it, though the hub names it when a peer then waits for it, and neither is
// a rank whose only failure is tprun's own SIGTERM; a rank that ended on
// its own is, with its real status, even when the launcher reaps it after
// the peers that failed because of it.
func TestFailedFirst(t *testing.T) {
	const n, victim = 3, 1
	tests := []struct {
		desc       string
		end        string // HELPER_VICTIM_END
		hold       bool   // the victim is reaped after its peers
		peerDelay  bool   // its peers end only after it did
		wantVictim bool   // the victim is named; else a peer, with exit 3
		wantStatus int
		victimEnd  string // how the victim ended
		victimStop bool   // tprun stopped the victim
	}{
		{desc: "closed cleanly and lived on: tprun's SIGTERM is not its failure", end: "leave",
			wantStatus: 3, victimEnd: "killed by signal SIGTERM", victimStop: true},
		{desc: "closed cleanly and exited 0", end: "leave-exit0", peerDelay: true, wantStatus: 3, victimEnd: "exit status 0"},
		{desc: "closed cleanly, then exited 7, reaped after its peers", end: "leave-exit7", hold: true, peerDelay: true,
			wantVictim: true, wantStatus: 7, victimEnd: "exit status 7"},
		{desc: "exited 5 without a goodbye, reaped after its peers", end: "exit5", hold: true,
			wantVictim: true, wantStatus: 5, victimEnd: "exit status 5"},
		{desc: "SIGTERM not from tprun, reaped after its peers", end: "term", hold: true,
			wantVictim: true, wantStatus: 143, victimEnd: "killed by signal SIGTERM"},
		{desc: "SIGKILLed, reaped after its peers", end: "kill", hold: true,
			wantVictim: true, wantStatus: 137, victimEnd: "killed by signal SIGKILL"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			env := []string{"HELPER_VICTIM=" + strconv.Itoa(victim), "HELPER_VICTIM_END=" + tc.end,
				// Under -race a helper would linger a second at exit, and
				// the order of the ends is what each case is about.
				"GORACE=atexit_sleep_ms=0"}
			if tc.peerDelay {
				env = append(env, "HELPER_PEER_DELAY=700ms")
			}
			cfg := Config{
				WorldSize: n, Command: helperCommand("hub"), Env: helperEnviron(env...),
				Grace: 5 * time.Second,
			}
			var held *holdingHub
			if tc.hold {
				cfg.listen, cfg.exitHold = holdExit(&held, victim)
			}
			var stdout, stderr lockedBuffer
			cfg.Stdout, cfg.Stderr = &stdout, &stderr
			start := time.Now()
			res, err := Run(context.Background(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if held != nil {
				// The hold worked: a peer's failure reached the hub first.
				if a := held.Aborts(); len(a) == 0 || strings.HasPrefix(a[0], strconv.Itoa(victim)+": ") {
					t.Errorf("hub aborts %q; want a peer of rank %d first", a, victim)
				}
			}
			if d := time.Since(start); d > 10*time.Second {
				t.Errorf("Run took %s", d)
			}
			first := res.FirstFailed
			if tc.wantVictim != (first == victim) || first < 0 || res.ExitStatus != tc.wantStatus {
				t.Fatalf("first %d status %d; want the victim (rank %d) named: %v, status %d\n%s",
					first, res.ExitStatus, victim, tc.wantVictim, tc.wantStatus, stderr.String())
			}
			v := res.Ranks[victim]
			if v.Status.String() != tc.victimEnd || v.Stopped != tc.victimStop || v.Killed {
				t.Errorf("victim: %s stopped %v killed %v; want %s stopped %v\n%s", v.Status, v.Stopped, v.Killed, tc.victimEnd, tc.victimStop, stderr.String())
			}
			f := res.Ranks[first]
			if f.Stopped || f.Killed || f.Status.ExitStatus() != tc.wantStatus {
				t.Errorf("named rank %d: %s stopped %v killed %v", first, f.Status, f.Stopped, f.Killed)
			}
			report := res.Report()
			for _, want := range []string{
				fmt.Sprintf("tprun: rank %d failed first: %s after ", first, f.Status),
				fmt.Sprintf("tprun: exit status %d\n", tc.wantStatus),
			} {
				if !strings.Contains(report, want) {
					t.Errorf("report lacks %q:\n%s", want, report)
				}
			}
			if tc.victimStop && !reportLists(report, "stopped by tprun", victim, tc.victimEnd) {
				t.Errorf("report does not list rank %d (%s) as stopped:\n%s", victim, tc.victimEnd, report)
			}
			if !strings.Contains(stderr.String(), report) {
				t.Errorf("stderr lacks the report:\n%s", stderr.String())
			}
		})
	}
}

// holdingHub is the real hub (its verdict and hellos included) that
// records Abort calls and closes first at the first one.
type holdingHub struct {
	*hub.Server
	first chan struct{}
	once  sync.Once
	mu    sync.Mutex
	abort []string
}

func (h *holdingHub) release() { h.once.Do(func() { close(h.first) }) }

func (h *holdingHub) Abort(rank int, reason string) {
	h.mu.Lock()
	h.abort = append(h.abort, fmt.Sprintf("%d: %s", rank, reason))
	h.mu.Unlock()
	h.Server.Abort(rank, reason)
	h.release()
}

func (h *holdingHub) Aborts() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.abort...)
}

// holdExit returns a listen and an exitHold for Config that make the
// supervisor learn of rank victim's exit only once the hub was told of
// another failure (or after 5 s, so that a test cannot hang on it), as
// when a process takes long to finish exiting after its connection
// closed: its peers are reaped first.
func holdExit(h **holdingHub, victim int) (listenFunc, func(int) <-chan struct{}) {
	first := make(chan struct{})
	listen := func(c hubConfig) (hubServer, error) {
		s, err := listenHub(c)
		if err != nil {
			return nil, err
		}
		*h = &holdingHub{Server: s.(*hub.Server), first: first}
		time.AfterFunc(5*time.Second, (*h).release)
		return *h, nil
	}
	hold := func(rank int) <-chan struct{} {
		if rank == victim {
			return first
		}
		return nil
	}
	return listen, hold
}

// blamingHub is the real hub whose verdict names a fixed rank.
type blamingHub struct {
	hubServer
	rank int
	left bool
}

func (h *blamingHub) Err() error {
	if h.left {
		return &hub.RankError{Rank: h.rank, Reason: "closed its connection", Left: true}
	}
	return &hub.RankError{Rank: h.rank, Reason: "connection lost"}
}

// TestHubBlame: a rank the hub blames for leaving is not reported as
// failing first when its own end was no failure of its own (it ran on until
// tprun's SIGTERM, or exited 0); a rank the hub blames for a lost
// connection is, even when tprun's SIGTERM ended it (it may be a dying
// rank still tearing down), but not when it exited 0.
// (TestFailedFirst has real hubs.)
func TestHubBlame(t *testing.T) {
	tests := []struct {
		desc       string
		blamed     int
		left       bool
		env        []string
		wantFirst  int
		wantStatus int
	}{
		{desc: "hub blames a rank for leaving that runs until tprun stops it", blamed: 2, left: true, wantFirst: 1, wantStatus: 3},
		{desc: "hub blames a rank for leaving that exits 0", blamed: 0, left: true, env: []string{"HELPER_IGNORE_TERM=1", "HELPER_SLEEP=200ms"},
			wantFirst: 1, wantStatus: 3},
		{desc: "hub blames a lost rank that tprun's SIGTERM ends", blamed: 2, wantFirst: 2, wantStatus: 143},
		{desc: "hub blames a lost rank that exits 0", blamed: 0, env: []string{"HELPER_IGNORE_TERM=1", "HELPER_SLEEP=200ms"},
			wantFirst: 1, wantStatus: 3},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			syncDir := t.TempDir()
			var stderr lockedBuffer
			res, err := Run(context.Background(), Config{
				WorldSize: 3, Command: helperCommand("job"),
				Env:    helperEnviron(append([]string{"HELPER_SYNC_DIR=" + syncDir, "HELPER_FAIL_RANK=1", "HELPER_FAIL_CODE=3"}, tc.env...)...),
				Stdout: io.Discard, Stderr: &stderr,
				listen: func(c hubConfig) (hubServer, error) {
					s, err := listenHub(c)
					if err != nil {
						return nil, err
					}
					return &blamingHub{hubServer: s, rank: tc.blamed, left: tc.left}, nil
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			if res.FirstFailed != tc.wantFirst || res.ExitStatus != tc.wantStatus {
				t.Fatalf("first %d status %d, want %d %d\n%s", res.FirstFailed, res.ExitStatus, tc.wantFirst, tc.wantStatus, stderr.String())
			}
			report := res.Report()
			if want := fmt.Sprintf("tprun: rank %d failed first: ", tc.wantFirst); !strings.Contains(report, want) ||
				strings.Contains(report, fmt.Sprintf("rank %d (", tc.wantFirst)) {
				t.Errorf("report:\n%s", report)
			}
		})
	}
}

// TestFailedOnItsOwn: which ends count as a rank's own failure, given
// what tprun sent it while it ran.
func TestFailedOnItsOwn(t *testing.T) {
	term := Status{Code: -1, Signal: syscall.SIGTERM}
	kill := Status{Code: -1, Signal: syscall.SIGKILL}
	segv := Status{Code: -1, Signal: syscall.SIGSEGV, CoreDumped: true}
	tests := []struct {
		desc            string
		st              Status
		stopped, killed bool
		want            bool
	}{
		{desc: "exit 0", st: Status{}, want: false},
		{desc: "exit 0 after tprun's SIGTERM", st: Status{}, stopped: true, want: false},
		{desc: "exit 7, not signalled", st: Status{Code: 7}, want: true},
		{desc: "exit 7 after tprun's SIGTERM (caught it)", st: Status{Code: 7}, stopped: true, want: false},
		{desc: "SIGTERM, not from tprun", st: term, want: true},
		{desc: "SIGTERM from tprun", st: term, stopped: true, want: false},
		{desc: "SIGKILL, not from tprun", st: kill, want: true},
		{desc: "SIGKILL when tprun sent only SIGTERM", st: kill, stopped: true, want: true},
		{desc: "SIGKILL from tprun", st: kill, stopped: true, killed: true, want: false},
		{desc: "SIGTERM from tprun, then its SIGKILL too late", st: term, stopped: true, killed: true, want: false},
		{desc: "crash while tprun stopped it", st: segv, stopped: true, killed: true, want: true},
	}
	for _, tc := range tests {
		c := &child{status: tc.st, stopped: tc.stopped, killed: tc.killed}
		if got := c.failedOnItsOwn(); got != tc.want {
			t.Errorf("%s: failedOnItsOwn = %v, want %v", tc.desc, got, tc.want)
		}
	}
}

func TestStatus(t *testing.T) {
	tests := []struct {
		desc   string
		st     Status
		failed bool
		exit   int
		text   string
	}{
		{desc: "success", st: Status{}, exit: 0, text: "exit status 0"},
		{desc: "exit code", st: Status{Code: 7}, failed: true, exit: 7, text: "exit status 7"},
		{desc: "SIGKILL", st: Status{Code: -1, Signal: syscall.SIGKILL}, failed: true, exit: 137, text: "killed by signal SIGKILL"},
		{desc: "SIGSEGV with core", st: Status{Code: -1, Signal: syscall.SIGSEGV, CoreDumped: true}, failed: true, exit: 139,
			text: "killed by signal SIGSEGV (core dumped)"},
	}
	for _, tc := range tests {
		if tc.st.Failed() != tc.failed || tc.st.ExitStatus() != tc.exit || tc.st.String() != tc.text {
			t.Errorf("%s: got %v %d %q", tc.desc, tc.st.Failed(), tc.st.ExitStatus(), tc.st.String())
		}
	}
}

// reportLists reports whether the report's line that starts "tprun: what:"
// lists rank with the ending how, alone ("rank 1 (how)") or in a group
// ("ranks 0, 1-3 (how)").
func reportLists(report, what string, rank int, how string) bool {
	entry := regexp.MustCompile(`ranks? ([0-9, -]+?) \(([^()]*(?:\([^()]*\))?[^()]*)\)`)
	for _, line := range strings.Split(report, "\n") {
		rest, ok := strings.CutPrefix(line, "tprun: "+what+": ")
		if !ok {
			continue
		}
		for _, m := range entry.FindAllStringSubmatch(rest, -1) {
			if m[2] != how {
				continue
			}
			for _, part := range strings.Split(m[1], ", ") {
				lo, hi, isRange := strings.Cut(part, "-")
				a, _ := strconv.Atoi(lo)
				b := a
				if isRange {
					b, _ = strconv.Atoi(hi)
				}
				if a <= rank && rank <= b {
					return true
				}
			}
		}
	}
	return false
}

// fullWriter fails every write as a full disk (or /dev/full) does; err, when
// set, is the error instead.
type fullWriter struct {
	path   string
	err    error
	writes atomic.Int64
}

func (w *fullWriter) Write([]byte) (int, error) {
	w.writes.Add(1)
	if w.err != nil {
		return 0, w.err
	}
	return 0, &os.PathError{Op: "write", Path: w.path, Err: syscall.ENOSPC}
}

// noticeRanks lists the ranks named by tprun's "output lost" notices about
// log files in lines, in order, with repeats.
func noticeRanks(t *testing.T, lines []string) []int {
	t.Helper()
	var ranks []int
	re := regexp.MustCompile(`the log files? of ranks? ([0-9, -]+) \(`)
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		if !strings.HasPrefix(l, "tprun: output lost: ") || m == nil {
			continue
		}
		for _, part := range strings.Split(m[1], ", ") {
			var a, b int
			if n, _ := fmt.Sscanf(part, "%d-%d", &a, &b); n == 2 {
				for r := a; r <= b; r++ {
					ranks = append(ranks, r)
				}
			} else if _, err := fmt.Sscanf(part, "%d", &a); err == nil {
				ranks = append(ranks, a)
			} else {
				t.Fatalf("notice %q: cannot read ranks %q", l, part)
			}
		}
	}
	return ranks
}

// runLosing runs n ranks of the output helper, every rank succeeding, and
// checks that the result lists only lost (one entry) and exits
// ExitOutputLost.
func runLosing(t *testing.T, n int, stdout, stderr io.Writer, lost string) *Result {
	t.Helper()
	res, err := Run(context.Background(), Config{
		WorldSize: n,
		Command:   helperCommand("output", "10"),
		Env:       helperEnviron(),
		Stdout:    stdout, Stderr: stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != ExitOutputLost || !slices.Equal(res.OutputLost, []string{lost}) {
		t.Errorf("exit status %d, output lost %q; want %d and [%q]", res.ExitStatus, res.OutputLost, ExitOutputLost, lost)
	}
	return res
}

// TestOutputLost: a stdout every write to which fails (a full disk,
// /dev/full) does not stop the job or the ranks' stderr. tprun says so
// once, on stderr, writes nothing more there, and at the end the report
// lists it and the exit status is ExitOutputLost although every rank
// succeeded. Before, the lines were dropped without a word and tprun
// exited 0.
func TestOutputLost(t *testing.T) {
	const n = 2
	var stderr lockedBuffer
	stdout := &fullWriter{path: "/dev/stdout"}
	want := "stdout (write /dev/stdout: no space left on device)"
	res := runLosing(t, n, stdout, &stderr, want)
	if w := stdout.writes.Load(); w != 1 {
		t.Errorf("%d writes reached stdout, want 1: nothing more is written after a failure (a later write could land after half a line)", w)
	}
	errs := splitRankLines(t, stderr.String())
	for r := range n {
		if len(errs[r]) != 201 {
			t.Errorf("rank %d: %d stderr lines arrived, want 201", r, len(errs[r]))
		}
	}
	warn := "tprun: output lost: " + want + "; nothing more is written there, the job goes on"
	if c := slices.Index(errs[-1], warn); c < 0 || slices.Contains(errs[-1][c+1:], warn) {
		t.Errorf("tprun's own lines %q: want the notice %q exactly once", errs[-1], warn)
	}
	rep := res.Report()
	for _, s := range []string{"tprun: output lost (writes failed, the job went on): " + want, "tprun: exit status 1"} {
		if !strings.Contains(rep, s) {
			t.Errorf("report %q lacks %q", rep, s)
		}
	}
}

// TestOutputLostStderr: when stderr fails, tprun's notice does not go to
// stdout (the job's data), every stdout line still arrives, and the exit
// status is ExitOutputLost.
func TestOutputLostStderr(t *testing.T) {
	const n = 2
	var stdout lockedBuffer
	runLosing(t, n, &stdout, &fullWriter{path: "/dev/stderr"}, "stderr (write /dev/stderr: no space left on device)")
	outs := splitRankLines(t, stdout.String())
	if len(outs[-1]) != 0 {
		t.Errorf("unprefixed lines on stdout (tprun's notice belongs on stderr): %q", outs[-1])
	}
	for r := range n {
		if len(outs[r]) != 202 {
			t.Errorf("rank %d: %d stdout lines arrived, want 202", r, len(outs[r]))
		}
	}
}

// TestOutputLostLogFiles: log files that cannot be written (each a link to
// /dev/full) are all named, grouped by error into one entry, each in one
// notice; and a rank that fails keeps its own exit status.
func TestOutputLostLogFiles(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skipf("no /dev/full to fill the log files: %v", err)
	}
	const n = 20
	dir := t.TempDir()
	for r := range n {
		if err := os.Symlink("/dev/full", filepath.Join(dir, fmt.Sprintf("rank-%d.log", r))); err != nil {
			t.Fatal(err)
		}
	}
	var stdout, stderr lockedBuffer
	res, err := Run(context.Background(), Config{
		WorldSize: n,
		Command:   helperCommand("job"),
		Env:       helperEnviron("HELPER_FAIL_RANK=3", "HELPER_FAIL_CODE=7", "HELPER_SLEEP=30s", "HELPER_SYNC_DIR="+t.TempDir()),
		LogDir:    dir,
		Stdout:    &stdout, Stderr: &stderr,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.ExitStatus != 7 || res.FirstFailed != 3 {
		t.Errorf("exit status %d, first failed %d; want rank 3's 7: a rank's failure wins over lost output", res.ExitStatus, res.FirstFailed)
	}
	want := []string{"the log files of ranks 0-19 (write: no space left on device)"}
	if !slices.Equal(res.OutputLost, want) {
		t.Errorf("output lost %q, want %q", res.OutputLost, want)
	}
	// The live notices name each rank at most once. A log file that failed
	// just before the last rank ended may not be announced while the job
	// runs: the report at the end names it (checked below) either way.
	got := noticeRanks(t, splitRankLines(t, stderr.String())[-1])
	slices.Sort(got)
	if len(slices.Compact(slices.Clone(got))) != len(got) || len(got) > 0 && (got[0] < 0 || got[len(got)-1] >= n) {
		t.Errorf("the notices named ranks %v, want each of 0..%d at most once; stderr:\n%s", got, n-1, stderr.String())
	}
	if !strings.Contains(res.Report(), "tprun: output lost (writes failed, the job went on): "+want[0]) {
		t.Errorf("report lacks the log files:\n%s", res.Report())
	}
}

// TestOutputWriteRules: EPIPE on tprun's stdout is a broken pipe, not lost
// output; a destination that failed is not written again; a log file's
// failure is its rank's.
func TestOutputWriteRules(t *testing.T) {
	var stderr lockedBuffer
	stdout := &fullWriter{err: &os.PathError{Op: "write", Path: "/dev/stdout", Err: syscall.EPIPE}}
	o := newOutput(stdout, &stderr)
	log := &fullWriter{path: "/logs/rank-3.log"}
	for i := range 5 {
		o.writeLine("stdout", rankPrefix(3), []byte(fmt.Sprintf("line %d", i)), log, 3)
	}
	if name := <-o.broken; name != "stdout" {
		t.Errorf("broken pipe on %q, want stdout", name)
	}
	if got, want := o.lostOutputs(), []string{"the log file of rank 3 (write: no space left on device)"}; !slices.Equal(got, want) {
		t.Errorf("lost outputs %q, want %q (EPIPE on stdout is not lost output)", got, want)
	}
	if stdout.writes.Load() != 5 || log.writes.Load() != 1 {
		t.Errorf("stdout got %d writes (want 5: a broken pipe is the run loop's to act on), the log %d (want 1)", stdout.writes.Load(), log.writes.Load())
	}
	if got := o.announce(); len(got) != 1 || len(o.announce()) != 0 {
		t.Errorf("announce gave %q, then more: want the one failure once", got)
	}
}

// TestPreflightInterrupted: a signal while the topology check hangs (an
// NVML init on a GPU in a bad state cannot be cancelled) ends Run at once
// with an *InterruptedError and 128+signal, starting nothing; before, tprun
// caught the signal and waited for the check.
func TestPreflightInterrupted(t *testing.T) {
	// Released after 3 s, so that a Run that waits for the check fails
	// this test instead of hanging it.
	release := make(chan struct{})
	go func() {
		time.Sleep(3 * time.Second)
		close(release)
	}()
	sigs := make(chan os.Signal, 1)
	started := filepath.Join(t.TempDir(), "started")
	var stdout, stderr lockedBuffer
	cfg := Config{
		WorldSize: 2,
		Command:   []string{"/bin/sh", "-c", "touch " + started},
		Stdout:    &stdout, Stderr: &stderr,
		Signals: sigs,
		Preflight: func(context.Context, Config) (string, error) {
			<-release // ignores its ctx, as a blocked C call does
			return "", nil
		},
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		sigs <- syscall.SIGINT
	}()
	t0 := time.Now()
	res, err := Run(context.Background(), cfg)
	var ie *InterruptedError
	switch {
	case !errors.As(err, &ie) || !errors.Is(err, ErrInterrupted) || res != nil:
		t.Fatalf("Run = %v, %v; want an *InterruptedError", res, err)
	case ie.ExitStatus() != 130:
		t.Errorf("exit status %d, want 130", ie.ExitStatus())
	case err.Error() != "got SIGINT during the topology check; nothing was started":
		t.Errorf("message %q", err)
	case time.Since(t0) > 2*time.Second:
		t.Errorf("Run took %v to give up", time.Since(t0))
	}
	if _, err := os.Stat(started); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a rank started: %v", err)
	}
}

// TestPreflightSignalsClosed: a closed Signals channel is no signal; the
// check's own result stands.
func TestPreflightSignalsClosed(t *testing.T) {
	sigs := make(chan os.Signal)
	close(sigs)
	var stdout, stderr lockedBuffer
	_, err := Run(context.Background(), Config{
		WorldSize: 1,
		Command:   []string{"/bin/true"},
		Stdout:    &stdout, Stderr: &stderr,
		Signals: sigs,
		Preflight: func(context.Context, Config) (string, error) {
			time.Sleep(20 * time.Millisecond)
			return "", errors.New("no NVLink between GPU 0 and GPU 1")
		},
	})
	if !errors.Is(err, ErrPreflight) || !strings.Contains(err.Error(), "no NVLink") {
		t.Errorf("Run: %v, want the check's refusal", err)
	}
}

// writerFunc is a writer of a type that == cannot compare.
type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(b []byte) (int, error) { return f(b) }

// TestOutputUncomparableWriters: Config.Stdout and Stderr may be of any
// writer type; telling the destinations apart must not compare them (a
// func-typed writer made that panic).
func TestOutputUncomparableWriters(t *testing.T) {
	var mu sync.Mutex
	var lines []string
	w := writerFunc(func(b []byte) (int, error) {
		mu.Lock()
		defer mu.Unlock()
		lines = append(lines, string(b))
		return len(b), nil
	})
	res, err := Run(context.Background(), Config{
		WorldSize: 2,
		Command:   helperCommand("output", "10"),
		Env:       helperEnviron(),
		Stdout:    w, Stderr: w,
	})
	if err != nil || res.ExitStatus != 0 || len(res.OutputLost) != 0 {
		t.Fatalf("Run: %v, %+v", err, res)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(lines) != 2*(202+201) {
		t.Errorf("%d lines written, want %d", len(lines), 2*(202+201))
	}
}
