package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tprun/tprun/cmd/tprun/internal/job"
	"github.com/tprun/tprun/internal/proctest"
)

// tprunBin is the real binary, built once by TestMain.
var tprunBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tprun-cmd-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	tprunBin = filepath.Join(dir, "tprun")
	build := exec.Command("go", "build", "-o", tprunBin, ".")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building tprun:", err)
		os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type result struct {
	stdout, stderr string
	status         int
	elapsed        time.Duration
}

// tprun runs the binary with TMPDIR pointing at tmp (where the hub directory
// goes) and returns what it printed and its exit status.
func tprun(t *testing.T, tmp string, args ...string) result {
	t.Helper()
	cmd := exec.Command(tprunBin, args...)
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("running tprun %q: %v", args, err)
	}
	return result{stdout.String(), stderr.String(), cmd.ProcessState.ExitCode(), time.Since(start)}
}

// shortTempDir is a TMPDIR for tprun: t.TempDir's long names would push
// the hub's socket path past sun_path's 107 bytes.
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tpc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

func assertEmptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("left behind in %s: %v", dir, entries)
	}
}

func TestBadInput(t *testing.T) {
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	marker := filepath.Join(t.TempDir(), "ran")
	touch := []string{"--", "sh", "-c", "touch " + marker}
	tests := []struct {
		desc string
		args []string
		want string
	}{
		{"--tp 0", append([]string{"--tp", "0"}, touch...), `--tp "0": must be in 1..`},
		{"--tp not a number", []string{"--tp", "two"}, `--tp "two": not an integer`},
		{"--tp above --devices", append([]string{"--tp", "3", "--devices", "0,1"}, touch...), "more than the 2 GPUs"},
		{"--tp above --devices, default job", []string{"--tp", "3", "--devices", "0,1"}, "more than the 2 GPUs"},
		{"bad --devices entry", append([]string{"--tp", "1", "--devices", "0,a"}, touch...), `entry "a"`},
		{"unknown flag", append([]string{"--bogus"}, touch...), "unknown flag --bogus"},
		{"command not found", []string{"--tp", "2", "--", "tprun-no-such-command"}, "not found"},
		{"unwritable log dir", append([]string{"--log-dir", filepath.Join(notDir, "logs")}, touch...), "--log-dir"},
		{"negative grace", append([]string{"--grace", "-1s"}, touch...), "--grace"},
		{"bad job flag value", []string{"--backend", "tpu"}, `--backend "tpu": want one of auto, cpu, cuda`},
		{"M out of range", []string{"--m", "1,129"}, "M 129 is outside 1..128"},
		{"one slot", []string{"--slots", "1"}, "must be at least 2"},
		{"mailbox over its size limit", []string{"--tp", "2", "--slots", "100000"}, `--slots "100000": `},
		{"tp not dividing hidden", []string{"--tp", "3"}, "must be divisible by --tp 3"},
		{"latent not aligned", []string{"--tp", "2", "--latent", "3583"}, "must be a multiple of 8"},
		{"inject-fault rank outside the job", []string{"--tp", "2", "--inject-fault", "2:5"}, "rank must be below --tp 2"},
		{"job flag with a command", append([]string{"--iters", "5"}, touch...), "job flags apply only to the default job"},
		{"command without --", []string{"--tp", "2", "sh", "-c", "true"}, `unexpected argument "sh"`},
		{"-- without command", []string{"--tp", "2", "--"}, "missing command after --"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			tmp := shortTempDir(t)
			r := tprun(t, tmp, tc.args...)
			if r.status != 2 {
				t.Errorf("exit status %d, want 2", r.status)
			}
			lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
			if len(lines) != 1 || !strings.HasPrefix(lines[0], "tprun: ") || !strings.Contains(lines[0], tc.want) || !strings.HasSuffix(lines[0], " (see tprun --help)") {
				t.Errorf("stderr %q, want one line with %q", r.stderr, tc.want)
			}
			if r.stdout != "" {
				t.Errorf("stdout %q", r.stdout)
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("a rank ran")
			}
			assertEmptyDir(t, tmp)
		})
	}
}

// TestNotEnoughMemory: a shape whose ranks would need more host memory
// than the machine has (here 4 TiB) is refused before any rank starts,
// with exit status 3 and the sizes named, instead of ranks dying of an
// out-of-memory crash.
func TestNotEnoughMemory(t *testing.T) {
	if _, ok := availableMemory(); !ok {
		t.Skip("no MemAvailable in /proc/meminfo here: the launcher does not check memory")
	}
	tmp := shortTempDir(t)
	r := tprun(t, tmp, "--tp", "2", "--hidden", "1048576", "--latent", "1048576", "--iters", "1")
	if r.status != exitRefused {
		t.Errorf("exit status %d, want %d", r.status, exitRefused)
	}
	lines := strings.Split(strings.TrimSuffix(r.stderr, "\n"), "\n")
	want := "tprun: not enough host memory for --tp 2 --hidden 1048576 --latent 1048576: each rank needs about 2 TiB (its weight shard alone is 1 TiB), 4 TiB in all"
	if len(lines) != 1 || !strings.HasPrefix(lines[0], want) || strings.Contains(lines[0], "--help") {
		t.Errorf("stderr %q, want one line starting %q, no usage hint", r.stderr, want)
	}
	if r.stdout != "" {
		t.Errorf("stdout %q: a rank ran", r.stdout)
	}
	assertEmptyDir(t, tmp)
}

func TestCommandRanks(t *testing.T) {
	for _, n := range []int{1, 2, 8} {
		t.Run(fmt.Sprintf("tp %d", n), func(t *testing.T) {
			tmp := shortTempDir(t)
			logs := filepath.Join(t.TempDir(), "logs")
			r := tprun(t, tmp, "--tp", strconv.Itoa(n), "--log-dir", logs, "--",
				"sh", "-c", `echo "rank=$TPRUN_RANK of $WORLD_SIZE local=$LOCAL_RANK/$LOCAL_WORLD_SIZE"; echo "to stderr $RANK" >&2`)
			if r.status != 0 || r.stderr == "" {
				t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
			}
			for k := 0; k < n; k++ {
				want := fmt.Sprintf("[rank %d] rank=%d of %d local=%d/%d\n", k, k, n, k, n)
				if !strings.Contains(r.stdout, want) {
					t.Errorf("stdout lacks %q:\n%s", want, r.stdout)
				}
				if want := fmt.Sprintf("[rank %d] to stderr %d\n", k, k); !strings.Contains(r.stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
				}
				b, err := os.ReadFile(filepath.Join(logs, fmt.Sprintf("rank-%d.log", k)))
				if err != nil || !strings.Contains(string(b), fmt.Sprintf("rank=%d of %d", k, n)) || strings.Contains(string(b), "[rank") {
					t.Errorf("rank-%d.log = %q, %v", k, b, err)
				}
			}
			if got := strings.Count(r.stdout, "\n"); got != n {
				t.Errorf("%d stdout lines, want %d", got, n)
			}
			assertEmptyDir(t, tmp)
		})
	}
}

func TestExitStatus(t *testing.T) {
	tests := []struct {
		desc   string
		script string
		want   int
		report string
	}{
		{"rank 1 exits 7, the others are stopped", `if [ "$RANK" = 1 ]; then echo bad thing >&2; exit 7; fi; exec sleep 30`, 7,
			"tprun: rank 1 failed first: exit status 7"},
		{"rank 2 SIGKILLed", `if [ "$RANK" = 2 ]; then kill -9 $$; fi; exec sleep 30`, 137,
			"tprun: rank 2 failed first: killed by signal SIGKILL"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			tmp := shortTempDir(t)
			r := tprun(t, tmp, "--tp", "4", "--grace", "2s", "--", "sh", "-c", tc.script)
			if r.status != tc.want || !strings.Contains(r.stderr, tc.report) || !regexp.MustCompile(`stopped by tprun: (rank 0 \(|ranks 0[,-])`).MatchString(r.stderr) {
				t.Errorf("status %d, want %d; stderr:\n%s", r.status, tc.want, r.stderr)
			}
			if r.elapsed > 4*time.Second {
				t.Errorf("took %s", r.elapsed)
			}
			assertEmptyDir(t, tmp)
		})
	}
}

func TestTimeout(t *testing.T) {
	tmp := shortTempDir(t)
	r := tprun(t, tmp, "--tp", "2", "--timeout", "300ms", "--", "sleep", "30")
	if r.status != 124 || !strings.Contains(r.stderr, "job stopped: timed out after 300ms") {
		t.Errorf("status %d stderr:\n%s", r.status, r.stderr)
	}
	assertEmptyDir(t, tmp)
}

// TestSignalled: SIGTERM or SIGINT to tprun stops every rank and removes the
// hub directory; after SIGKILL the ranks still die (parent-death signal).
func TestSignalled(t *testing.T) {
	tests := []struct {
		sig    syscall.Signal
		want   int
		hubDir bool // the hub directory is left only after SIGKILL (until the next job)
	}{
		{syscall.SIGTERM, 143, false},
		{syscall.SIGINT, 130, false},
		{syscall.SIGHUP, 129, false},
		{syscall.SIGQUIT, 131, false},
		{syscall.SIGKILL, -1, true},
	}
	for _, tc := range tests {
		t.Run(tc.sig.String(), func(t *testing.T) {
			skipIgnoredHangup(t, tc.sig)
			const n = 3
			tmp := shortTempDir(t)
			cmd, sc, stderr := startTprun(t, tmp, "--tp", strconv.Itoa(n), "--", "sh", "-c", `echo "pid $$"; exec sleep 30`)
			var pids []int
			for len(pids) < n && sc.Scan() {
				var k, pid int
				if _, err := fmt.Sscanf(sc.Text(), "[rank %d] pid %d", &k, &pid); err == nil {
					pids = append(pids, pid)
				}
			}
			if len(pids) != n {
				t.Fatalf("pids %v", pids)
			}
			// The pid is the rank's whether or not sh has exec'd sleep yet.
			cmd.Process.Signal(tc.sig)
			go func() {
				for sc.Scan() {
				}
			}()
			cmd.Wait()
			if got := cmd.ProcessState.ExitCode(); got != tc.want {
				t.Errorf("exit status %d, want %d; stderr:\n%s", got, tc.want, stderr.String())
			}
			proctest.WaitGone(t, "rank", pids, 2*time.Second)
			if tc.hubDir {
				// The next job removes the directory its dead owner left.
				if r := tprun(t, tmp, "--tp", "1", "--", "true"); r.status != 0 {
					t.Errorf("next job: status %d, stderr %q", r.status, r.stderr)
				}
			}
			assertEmptyDir(t, tmp)
		})
	}
}

// TestStopTakesRanksChildren: what a rank started in the background goes
// too when tprun gets SIGHUP (a closed terminal or ssh session) or its
// stdout is closed (`tprun ... | head -1`). Left to their defaults, both
// signals ended tprun alone: the ranks died of their parent-death signal,
// and their children ran on.
func TestStopTakesRanksChildren(t *testing.T) {
	for _, tc := range []struct {
		name   string
		want   int
		stderr string
	}{
		{"SIGHUP", 129, "job stopped: tprun got SIGHUP"},
		{"closed stdout", 141, "tprun: stdout closed (broken pipe), stopping all ranks"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.name == "SIGHUP" {
				skipIgnoredHangup(t, syscall.SIGHUP)
			}
			const n = 2
			tmp := shortTempDir(t)
			cmd := exec.Command(tprunBin, "--tp", strconv.Itoa(n), "--", "sh", "-c",
				`sleep 30 & echo "pid $$ child $!"; while :; do echo tick; sleep 0.05; done`)
			out, stderr := startCmd(t, tmp, cmd)
			sc := bufio.NewScanner(out)
			var pids []int
			for len(pids) < 2*n && sc.Scan() {
				var k, pid, child int
				if _, err := fmt.Sscanf(sc.Text(), "[rank %d] pid %d child %d", &k, &pid, &child); err == nil {
					pids = append(pids, pid, child)
				}
			}
			if len(pids) != 2*n {
				t.Fatalf("pids %v", pids)
			}
			if tc.name == "SIGHUP" {
				cmd.Process.Signal(syscall.SIGHUP)
				go func() {
					for sc.Scan() {
					}
				}()
			} else {
				// The read end of tprun's stdout goes away; its next write
				// of a rank's "tick" fails.
				out.Close()
			}
			done := make(chan struct{})
			go func() { cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				t.Fatalf("tprun still running 20 s after the %s; stderr:\n%s", tc.name, stderr.String())
			}
			if got := cmd.ProcessState.ExitCode(); got != tc.want || !strings.Contains(stderr.String(), tc.stderr) {
				t.Errorf("exit status %d, want %d, and stderr with %q; stderr:\n%s", got, tc.want, tc.stderr, stderr.String())
			}
			proctest.WaitGone(t, "rank or its child", pids, 2*time.Second)
			assertEmptyDir(t, tmp)
		})
	}
}

// startTprun starts tprun with TMPDIR=tmp in the background and returns
// it, a scanner of its stdout and its stderr so far; the process is killed
// when the test ends, if it still runs.
func startTprun(t *testing.T, tmp string, args ...string) (*exec.Cmd, *bufio.Scanner, *bytes.Buffer) {
	t.Helper()
	cmd := exec.Command(tprunBin, args...)
	out, stderr := startCmd(t, tmp, cmd)
	return cmd, bufio.NewScanner(out), stderr
}

// startCmd starts cmd (tprun, or a wrapper that execs it) with TMPDIR=tmp
// and returns its stdout pipe and its stderr so far; the process is killed
// when the test ends, if it still runs.
func startCmd(t *testing.T, tmp string, cmd *exec.Cmd) (io.ReadCloser, *bytes.Buffer) {
	t.Helper()
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
	stderr := &bytes.Buffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	return out, stderr
}

// TestDefaultJobStopped: SIGTERM to tprun during the default job's steps
// stops each rank with one line saying where it was, the ranks exit with
// the status of the signal, and the report says tprun stopped them; the
// hub does not log the ranks' ends as an abort.
func TestDefaultJobStopped(t *testing.T) {
	tmp := shortTempDir(t)
	cmd, sc, stderr := startTprun(t, tmp, "--tp", "2", "--hidden", "1024", "--latent", "512", "--iters", "100000000", "--m", "1")
	for sc.Scan() && !strings.Contains(sc.Text(), job.StepsStarted) {
	}
	time.Sleep(200 * time.Millisecond) // some steps
	cmd.Process.Signal(syscall.SIGTERM)
	go func() {
		for sc.Scan() {
		}
	}()
	cmd.Wait()
	if got := cmd.ProcessState.ExitCode(); got != 143 {
		t.Errorf("exit status %d, want 143; stderr:\n%s", got, stderr.String())
	}
	msg := stderr.String()
	for _, want := range []string{
		"[rank 0] stopped by SIGTERM at M=1, step ", "[rank 1] stopped by SIGTERM at M=1, step ",
		"tprun: job stopped: tprun got SIGTERM\n",
		"tprun: stopped by tprun: ranks 0-1 (exit status 143 after tprun's SIGTERM)\n",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr lacks %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "job aborted") || strings.Contains(msg, "context canceled") {
		t.Errorf("stderr has an abort or a cancelled context's error chain:\n%s", msg)
	}
	assertEmptyDir(t, tmp)
}

// TestDefaultJobPausedRank: a rank process stopped by SIGSTOP during the
// default job's steps makes its peers' receives time out naming it; tprun
// then ends the job at once (SIGCONT with its SIGTERM, so the paused rank
// ends gracefully, long before the grace period), names it as paused, and
// leaves no process behind.
func TestDefaultJobPausedRank(t *testing.T) {
	const paused = 2
	tmp := shortTempDir(t)
	cmd, sc, stderr := startTprun(t, tmp, "--tp", "4", "--hidden", "1024", "--latent", "512", "--iters", "100000000",
		"--m", "1", "--deadline", "1s", "--grace", "1m")
	for sc.Scan() && !strings.Contains(sc.Text(), job.StepsStarted) {
	}
	ranks := rankPIDs(t, cmd.Process.Pid, 4)
	time.Sleep(100 * time.Millisecond) // some steps
	start := time.Now()
	if err := syscall.Kill(ranks[paused], syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	go func() {
		for sc.Scan() {
		}
	}()
	cmd.Wait()
	elapsed := time.Since(start)
	if got := cmd.ProcessState.ExitCode(); got != 1 {
		t.Errorf("exit status %d, want 1; stderr:\n%s", got, stderr.String())
	}
	// The deadline, then the stop: well under the minute of grace.
	if elapsed > 15*time.Second {
		t.Errorf("the job ended %s after the SIGSTOP", elapsed)
	}
	msg := stderr.String()
	for _, want := range []string{
		fmt.Sprintf("no slice from rank %d after 1", paused),
		fmt.Sprintf("tprun: suspended when tprun stopped the job (a suspended rank sends nothing; its peers wait for it): rank %d (state T: stopped by SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU)\n", paused),
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("stderr lacks %q:\n%s", want, msg)
		}
	}
	// Once resumed, the paused rank finds tprun's SIGTERM, the job's
	// failure and its own expired deadline at once, so its last line may
	// be any of them. That it ended without waiting out the minute of
	// grace is the elapsed time above; nothing was SIGKILLed.
	if strings.Contains(msg, "SIGKILL") {
		t.Errorf("a rank was killed:\n%s", msg)
	}
	proctest.WaitGone(t, "rank", ranks, 2*time.Second)
	assertEmptyDir(t, tmp)
}

// rankPIDs returns the pids of tprun's n rank processes, by rank: the
// processes whose parent is tprun (/proc/PID/stat), by their TPRUN_RANK.
func rankPIDs(t *testing.T, tprunPID, n int) []int {
	t.Helper()
	stats, err := filepath.Glob("/proc/[0-9]*/stat")
	if err != nil {
		t.Fatal(err)
	}
	pids := make([]int, n)
	found := 0
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue // gone
		}
		// The parent is the second field after the command's last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(string(b[i+1:])); len(f) < 2 || f[1] != strconv.Itoa(tprunPID) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil {
			continue
		}
		for _, kv := range strings.Split(string(env), "\x00") {
			var r int
			if _, err := fmt.Sscanf(kv, "TPRUN_RANK=%d", &r); err == nil && r >= 0 && r < n && pids[r] == 0 {
				pids[r] = pid
				found++
			}
		}
	}
	if found != n {
		t.Fatalf("found rank pids %v, want %d ranks", pids, n)
	}
	return pids
}

// TestLeftoversKilled: what a rank's command leaves running in the
// background is killed when the rank ends, after a success too, and tprun
// says so without changing the exit status.
func TestLeftoversKilled(t *testing.T) {
	tmp := shortTempDir(t)
	r := tprun(t, tmp, "--tp", "2", "--", "sh", "-c", `sleep 30 & echo "bg $!"`)
	if r.status != 0 {
		t.Errorf("exit status %d, want 0; stderr:\n%s", r.status, r.stderr)
	}
	var pids []int
	for _, l := range strings.Split(r.stdout, "\n") {
		var k, pid int
		if _, err := fmt.Sscanf(l, "[rank %d] bg %d", &k, &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	if len(pids) != 2 {
		t.Fatalf("background pids %v from stdout %q", pids, r.stdout)
	}
	proctest.WaitGone(t, "background", pids, 2*time.Second)
	for _, want := range []string{"tprun: rank 0 left processes running in its process group when it ended; killed them\n", "tprun: rank 1 left processes running in its process group when it ended; killed them\n"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
	assertEmptyDir(t, tmp)
}

// TestDefaultJob: without -- CMD, tprun runs its own rank worker (a small
// shape, so the test stays quick whatever the job computes).
func TestDefaultJob(t *testing.T) {
	tmp := shortTempDir(t)
	r := tprun(t, tmp, "--tp", "2", "--hidden", "1024", "--latent", "512", "--iters", "5", "--m", "1,2")
	if r.status != 0 {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "[rank 0] ") {
		t.Errorf("no output from rank 0:\n%s", r.stdout)
	}
	assertEmptyDir(t, tmp)
}

// TestMulticastSafetyRule: --mailbox multicast is refused before any rank
// starts, naming the variable, while any multicast safety variable is set
// (DESIGN.md, "Safety rule"), whether or not the machine has a GPU.
func TestMulticastSafetyRule(t *testing.T) {
	safety := []string{"NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1", "NVSHMEM_DISABLE_NVLS=1", "TPRUN_MULTICAST=0"}
	var base []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(safety, func(s string) bool { return strings.HasPrefix(s, name+"=") }) {
			base = append(base, kv)
		}
	}
	for _, kv := range safety {
		t.Run(kv, func(t *testing.T) {
			tmp := shortTempDir(t)
			cmd := exec.Command(tprunBin, "--tp", "2", "--mailbox", "multicast", "--iters", "1")
			cmd.Env = append(slices.Clone(base), "TMPDIR="+tmp, kv)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitRefused {
				t.Fatalf("tprun gave %v, want exit status %d (refused); stderr %q", err, exitRefused, stderr.String())
			}
			lines := strings.Split(strings.TrimSuffix(stderr.String(), "\n"), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], kv) || !strings.Contains(lines[0], "multicast") ||
				strings.Contains(lines[0], "--help") {
				t.Errorf("stderr %q, want one line naming %s and no usage hint", stderr.String(), kv)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q: a rank ran", stdout.String())
			}
			assertEmptyDir(t, tmp)
		})
	}
}

// TestPreflightRefusalExitStatus: a job that needs a GPU (--backend cuda,
// or a GPU mailbox) on a machine without an NVIDIA driver is refused before
// any rank starts, with exit status 3, the flag named and no usage hint
// (the input was valid).
func TestPreflightRefusalExitStatus(t *testing.T) {
	if err := exec.Command(tprunBin, "topo").Run(); err == nil {
		t.Skip("this machine has an NVIDIA driver: the preflight would not refuse")
	} else if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) || ee.ExitCode() != 3 {
		t.Skipf("tprun topo gave %v, not the no-driver status 3: the preflight may not refuse here", err)
	}
	for _, flags := range [][]string{{"--backend", "cuda"}, {"--mailbox", "unicast"}} {
		name := strings.Join(flags, " ")
		t.Run(name, func(t *testing.T) {
			tmp := shortTempDir(t)
			cmd := exec.Command(tprunBin, append([]string{"--tp", "2", "--iters", "1"}, flags...)...)
			cmd.Env = append(os.Environ(), "TMPDIR="+tmp)
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitRefused {
				t.Fatalf("tprun gave %v, want exit status %d; stderr %q", err, exitRefused, stderr.String())
			}
			if msg := stderr.String(); !strings.Contains(msg, "preflight") || !strings.Contains(msg, name+" needs a GPU") ||
				strings.Contains(msg, "tprun -h") {
				t.Errorf("stderr %q: want the preflight's reason naming %s, without a usage hint", msg, name)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q: a rank ran", stdout.String())
			}
			assertEmptyDir(t, tmp)
		})
	}
}

// TestOwnFailuresWithoutHub: ranks that never join the hub and all die on
// their own are never reported as failing "once the hub had ended the job"
// (tprun's own abort of the first failure made the hub blame it, and the
// later ones were counted as its victims).
func TestOwnFailuresWithoutHub(t *testing.T) {
	tmp := shortTempDir(t)
	for i := range 5 {
		r := tprun(t, tmp, "--tp", "3", "--", "sh", "-c", "kill -SEGV $$")
		if r.status != 139 || !strings.Contains(r.stderr, "killed by signal SIGSEGV") || strings.Contains(r.stderr, "hub had ended the job") {
			t.Fatalf("run %d: status %d, stderr:\n%s", i, r.status, r.stderr)
		}
	}
}

// skipIgnoredHangup skips a test that sends tprun SIGHUP when the tests
// themselves run under nohup: tprun inherits the ignored signal and, as
// TestIgnoredHangup wants, keeps it ignored.
func skipIgnoredHangup(t *testing.T, sig syscall.Signal) {
	t.Helper()
	if sig == syscall.SIGHUP && signal.Ignored(syscall.SIGHUP) {
		t.Skip("SIGHUP is ignored in this process (nohup), so tprun ignores it too")
	}
}

// TestIgnoredHangup: under nohup (SIGHUP ignored when tprun starts) a
// SIGHUP neither stops the job nor reaches the ranks, which keep the
// ignore.
func TestIgnoredHangup(t *testing.T) {
	tmp := shortTempDir(t)
	cmd := exec.Command("sh", "-c", `trap "" HUP; exec "$0" "$@"`, tprunBin, "--tp", "2", "--", "sh", "-c",
		`echo started; sleep 0.5; grep SigIgn /proc/self/status`)
	out, stderr := startCmd(t, tmp, cmd)
	sc := bufio.NewScanner(out)
	for started := 0; started < 2 && sc.Scan(); {
		if strings.HasSuffix(sc.Text(), "] started") {
			started++
		}
	}
	cmd.Process.Signal(syscall.SIGHUP)
	var ign []string
	for sc.Scan() {
		ign = append(ign, sc.Text())
	}
	cmd.Wait()
	if got := cmd.ProcessState.ExitCode(); got != 0 {
		t.Fatalf("exit status %d after an ignored SIGHUP, want 0; stderr:\n%s", got, stderr.String())
	}
	if len(ign) != 2 {
		t.Fatalf("ranks printed %q, want two SigIgn lines", ign)
	}
	for _, l := range ign {
		// SIGHUP is signal 1: bit 0 of the mask.
		f := strings.Fields(l)
		mask, err := strconv.ParseUint(f[len(f)-1], 16, 64)
		if err != nil || mask&1 == 0 {
			t.Errorf("rank line %q: SIGHUP not ignored in the rank", l)
		}
	}
	assertEmptyDir(t, tmp)
}
