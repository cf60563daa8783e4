package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/devtest"
)

// tprunBin is the real tprun binary, built once by TestMain: the end-to-end
// tests run the default job exactly as a user would, launcher, hub, rank
// processes and shared memory included.
var tprunBin string

func TestMain(m *testing.M) {
	os.Exit(testMain(m))
}

func testMain(m *testing.M) int {
	// On a GPU machine there is no Go toolchain: scripts/gpu-test names the
	// prebuilt binary instead.
	if bin := os.Getenv("TPRUN_BIN"); bin != "" {
		tprunBin = bin
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "tprun-job-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	tprunBin = filepath.Join(dir, "tprun")
	build := exec.Command("go", "build", "-o", tprunBin, "github.com/tprun/tprun/cmd/tprun")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building tprun: %v\n%s", err, out)
		return 1
	}
	return m.Run()
}

type tprunResult struct {
	status         int
	stdout, stderr string
	took           time.Duration
}

// tprun runs the binary with args and a hard limit.
func tprun(t *testing.T, limit time.Duration, args ...string) tprunResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, tprunBin, args...)
	// A GPU machine's auto choice must not change what these tests see.
	cmd.Env = append(os.Environ(), "TPRUN_MULTICAST=0")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	r := tprunResult{stdout: stdout.String(), stderr: stderr.String(), took: time.Since(start)}
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("tprun %s still running after %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), limit, r.stdout, r.stderr)
	case errors.As(err, &ee):
		r.status = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	t.Logf("tprun %s: status %d in %v", strings.Join(args, " "), r.status, r.took.Round(time.Millisecond))
	return r
}

// rowPattern matches a row of the results table of the CPU backend (the
// host mailbox) with 0 wrong values and identical blocks, whatever prefix
// the launcher puts before rank 0's line.
func rowPattern(m, hidden, latent, shard, tp, iters int) *regexp.Regexp {
	return backendRowPattern(`cpu\s+host`, m, hidden, latent, shard, tp, iters)
}

// backendRowPattern is rowPattern for the backend and mailbox columns
// that backend, a regular expression, matches.
func backendRowPattern(backend string, m, hidden, latent, shard, tp, iters int) *regexp.Regexp {
	return regexp.MustCompile(fmt.Sprintf(`(?m)\s%d\s+%d\s+%d\s+%d\s+%d\s+%s\s+%d\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+0\s+yes$`,
		m, hidden, latent, shard, tp, backend, iters))
}

// cpuPath is the flags that keep a test about the CPU path on it where a
// GPU is usable (where none is, the defaults take it already, and the
// test runs as a user without a GPU would).
func cpuPath(t *testing.T) []string {
	t.Helper()
	if _, gpu := devtest.SharedDevices(t, 1); gpu {
		return []string{"--backend", "cpu", "--mailbox", "host"}
	}
	return nil
}

func TestE2EDefaultJob(t *testing.T) {
	tests := []struct {
		desc                      string
		tp, hidden, latent, iters int
		args                      []string
	}{
		{"tp 4", 4, 1024, 512, 50, nil},
		{"odd tp 3", 3, 768, 512, 20, []string{"--backend", "cpu", "--mailbox", "host"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			args := append([]string{"--tp", fmt.Sprint(tc.tp), "--hidden", fmt.Sprint(tc.hidden),
				"--latent", fmt.Sprint(tc.latent), "--iters", fmt.Sprint(tc.iters)}, tc.args...)
			// The backend left to the default (auto): the CPU backend with
			// its notice where no GPU is usable, else the GPUs, shared by
			// the ranks where there are fewer than tp.
			backend, gpu := `cpu\s+host`, false
			if tc.args == nil {
				var devices []string
				if devices, gpu = devtest.SharedDevices(t, tc.tp); gpu {
					backend = `cuda\s+(unicast|multicast)`
					args = append(args, devices...)
				}
			}
			r := tprun(t, 50*time.Second, args...)
			if r.status != 0 {
				t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
			}
			for _, m := range []int{1, 2, 4, 8} {
				if re := backendRowPattern(backend, m, tc.hidden, tc.latent, tc.hidden/tc.tp, tc.tp, tc.iters); !re.MatchString(r.stdout) {
					t.Errorf("no table row for M=%d with 0 wrong and identical blocks (%v) in:\n%s", m, re, r.stdout)
				}
			}
			for _, w := range []string{fmt.Sprintf("every block within tolerance, identical on all %d ranks (", tc.tp), "|out - ref| <="} {
				if !strings.Contains(r.stdout, w) {
					t.Errorf("stdout lacks %q:\n%s", w, r.stdout)
				}
			}
			switch notice := strings.Contains(r.stdout, CPUNotice); {
			case tc.args == nil && !gpu && !notice:
				t.Errorf("stdout lacks the CPU notice:\n%s", r.stdout)
			case gpu && notice:
				t.Errorf("the CPU notice on a machine with a usable GPU:\n%s", r.stdout)
			}
		})
	}
}

// TestE2EFault: a rank that dies mid-run fails the job, and the report
// names it. On the CPU path, which needs no GPU per rank.
func TestE2EFault(t *testing.T) {
	const dead, step = 2, 60
	r := tprun(t, 50*time.Second, append([]string{"--tp", "4", "--hidden", "1024", "--latent", "512", "--iters", "50",
		"--deadline", "5s", "--inject-fault", fmt.Sprintf("%d:%d", dead, step)}, cpuPath(t)...)...)
	if r.status == 0 {
		t.Fatalf("status 0 with a dead rank\nstdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, fmt.Sprintf("injected fault at step %d", step)) {
		t.Errorf("stdout does not show the injected fault:\n%s", r.stdout)
	}
	if want := fmt.Sprintf("rank %d failed first", dead); !strings.Contains(r.stderr, want) {
		t.Errorf("the report does not say %q:\n%s", want, r.stderr)
	}
	if r.took > 20*time.Second {
		t.Errorf("the job took %v to fail", r.took)
	}
}

// TestE2EBadShape: shapes the kernel cannot run are refused with an error
// naming the value, not run.
func TestE2EBadShape(t *testing.T) {
	tests := []struct {
		desc   string
		args   []string
		status int // 0: any non-zero status
		want   string
	}{
		{"tp does not divide hidden", []string{"--tp", "3", "--hidden", "1000"}, 2, "divisible by --tp 3"},
		{"shard not a multiple of 8", []string{"--tp", "4", "--hidden", "1000"}, 0, "shard_dim = 250"},
		{"latent not a multiple of 8", []string{"--tp", "2", "--hidden", "1024", "--latent", "500"}, 0, "latent_dim = 500"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			r := tprun(t, 30*time.Second, tc.args...)
			switch {
			case tc.status != 0 && r.status != tc.status:
				t.Errorf("status %d, want %d", r.status, tc.status)
			case r.status == 0:
				t.Errorf("status 0")
			}
			if !strings.Contains(r.stderr, tc.want) {
				t.Errorf("stderr does not mention %q:\n%s", tc.want, r.stderr)
			}
			if strings.Contains(r.stdout, "p50") {
				t.Errorf("the job ran:\n%s", r.stdout)
			}
		})
	}
}

// TestE2EDefaultShape: `tprun --tp 4` with every default finishes within
// a minute on the 2-core CI machine (issue 3, "Speed"): the CPU path,
// kept on it where a GPU is usable.
func TestE2EDefaultShape(t *testing.T) {
	if testing.Short() {
		t.Skip("the default shape takes several seconds")
	}
	r := tprun(t, 90*time.Second, append([]string{"--tp", "4"}, cpuPath(t)...)...)
	if r.status != 0 {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
	}
	for _, m := range []int{1, 2, 4, 8} {
		if re := rowPattern(m, 7168, 3584, 1792, 4, 100); !re.MatchString(r.stdout) {
			t.Errorf("no table row for M=%d with 0 wrong and identical blocks in:\n%s", m, r.stdout)
		}
	}
	if r.took > 60*time.Second {
		t.Errorf("tprun --tp 4 took %v, the issue allows 60s", r.took)
	}
}

// TestE2ELargeM: the default job at M above 8 (the GPU's tensor-core path,
// then the receive kernel), `tprun --tp 4 --m 16,64,128` on the GPUs there
// are at the default shape; on a machine without a GPU the CPU path at a
// smaller shape. Every row has 0 wrong values and identical blocks.
func TestE2ELargeM(t *testing.T) {
	tp, hidden, latent, iters := 4, 7168, 3584, 200
	args := []string{"--tp", "4", "--m", "16,64,128"}
	backend := `cuda\s+(unicast|multicast)`
	devices, gpu := devtest.SharedDevices(t, tp)
	if gpu {
		args = append(args, devices...)
	} else {
		if testing.Short() {
			t.Skip("M up to 128 on the CPU path takes several seconds")
		}
		hidden, latent, iters, backend = 512, 256, 5, `cpu\s+host`
		args = append(args, "--backend", "cpu", "--mailbox", "host")
	}
	args = append(args, "--hidden", fmt.Sprint(hidden), "--latent", fmt.Sprint(latent), "--iters", fmt.Sprint(iters))
	r := tprun(t, 120*time.Second, args...)
	if r.status != 0 {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
	}
	for _, m := range []int{16, 64, 128} {
		if re := backendRowPattern(backend, m, hidden, latent, hidden/tp, tp, iters); !re.MatchString(r.stdout) {
			t.Errorf("no table row for M=%d with 0 wrong and identical blocks (%v) in:\n%s", m, re, r.stdout)
		}
	}
}

// TestE2EBenchLargeM: `tprun bench --tp 1 --m 16,32,64,128` times the
// tensor-core path on a GPU: a row per M, every block within tolerance.
// The benchmark runs only on a GPU.
func TestE2EBenchLargeM(t *testing.T) {
	devices, gpu := devtest.SharedDevices(t, 1)
	if !gpu {
		t.Skip("tprun bench runs only on a GPU")
	}
	out := filepath.Join(t.TempDir(), "bench.json")
	args := append([]string{"bench", "--tp", "1", "--m", "16,32,64,128", "--replays", "20", "--json-out", out}, devices...)
	r := tprun(t, 300*time.Second, args...)
	if r.status != 0 {
		t.Fatalf("status %d\nstdout:\n%s\nstderr:\n%s", r.status, r.stdout, r.stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep BenchReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	var ms []int
	for _, row := range rep.Rows {
		ms = append(ms, row.M)
		if row.Wrong != 0 || !row.Identical || row.MedianUS <= 0 {
			t.Errorf("M %d: %+v", row.M, row)
		}
	}
	if !slices.Equal(ms, []int{16, 32, 64, 128}) || !rep.OK {
		t.Errorf("rows for M %v, ok %v, want 16, 32, 64, 128 and ok:\n%s", ms, rep.OK, r.stdout)
	}
	t.Logf("\n%s", r.stdout)
}
