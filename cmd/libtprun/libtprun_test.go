package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests below build libtprun.so and the tprun launcher once, then run
// rank programs against them under `tprun --tp N`: the C test program
// (testdata/tprun_test.c, compiled with the C compiler against
// include/tprun.h), the Python package's test ranks (python/tests) and the
// stdlib example (examples/python), all on the host backend.

var (
	buildOnce sync.Once
	buildDir  string
	buildErr  error
)

// repoRoot is the repository, two levels above this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// built returns the folder holding libtprun.so and tprun, building them on
// first use.
func built(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			buildErr = fmt.Errorf("the go command is not on PATH: %w", err)
			return
		}
		if buildDir, buildErr = os.MkdirTemp("", "libtprun-test-"); buildErr != nil {
			return
		}
		root := repoRoot(t)
		for _, args := range [][]string{
			// -trimpath as the Python package's build backend builds it,
			// which then finds the compiled packages in the build cache.
			{"build", "-buildmode=c-shared", "-trimpath", "-o", filepath.Join(buildDir, "libtprun.so"), "./cmd/libtprun"},
			{"build", "-o", filepath.Join(buildDir, "tprun"), "./cmd/tprun"},
		} {
			cmd := exec.Command(goTool, args...)
			cmd.Dir = root
			if out, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, out)
				return
			}
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return buildDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// job is one run of the launcher.
type job struct {
	out  string // stdout and stderr
	code int    // exit status
	took time.Duration
}

// launch runs `tprun --tp n -- argv...` with env added, within limit.
func launch(t *testing.T, n int, env []string, limit time.Duration, argv ...string) job {
	t.Helper()
	dir := built(t)
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	args := append([]string{"--tp", strconv.Itoa(n), "--skip-topology-check", "--"}, argv...)
	cmd := exec.CommandContext(ctx, filepath.Join(dir, "tprun"), args...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(cleanEnv(), env...)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	j := job{out: string(out), took: time.Since(start), code: cmd.ProcessState.ExitCode()}
	if ctx.Err() != nil {
		t.Fatalf("tprun --tp %d -- %s did not end within %v:\n%s", n, strings.Join(argv, " "), limit, out)
	}
	if err != nil && j.code < 0 {
		t.Fatalf("tprun --tp %d -- %s: %v\n%s", n, strings.Join(argv, " "), err, out)
	}
	return j
}

// cleanEnv is this process's environment without the variables a launcher
// sets, so that a test run under one does not leak them into the jobs.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "TPRUN_"), k == "RANK", k == "WORLD_SIZE", k == "LOCAL_RANK",
			k == "LOCAL_WORLD_SIZE", k == "PYTHONPATH", strings.HasPrefix(k, "TORCHELASTIC_"),
			k == "MASTER_ADDR", k == "MASTER_PORT":
			continue
		}
		env = append(env, kv)
	}
	return env
}

// everyRankSays checks that every rank printed a line matching re (with
// %d for the rank).
func everyRankSays(t *testing.T, j job, n int, format string) {
	t.Helper()
	for r := range n {
		re := regexp.MustCompile(fmt.Sprintf(format, r))
		if !re.MatchString(j.out) {
			t.Errorf("rank %d did not print a line matching %q; the job's output:\n%s", r, re, j.out)
		}
	}
}

func TestCRankProgram(t *testing.T) {
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the C test program: %v", cc, err)
	}
	dir := built(t)
	root := repoRoot(t)
	bin := filepath.Join(t.TempDir(), "tprun_test")
	cmd := exec.Command(cc, "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra", "-Werror", "-O2",
		"-I", filepath.Join(root, "include"), "-o", bin, filepath.Join("testdata", "tprun_test.c"),
		"-L", dir, "-ltprun", "-Wl,-rpath,"+dir, "-lm", "-lpthread")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
	}
	for _, n := range []int{1, 2, 3} {
		seed := rand.Uint64()
		j := launch(t, n, nil, 2*time.Minute, bin, strconv.FormatUint(seed, 10))
		if j.code != 0 {
			t.Errorf("tp %d, seed %d: exit status %d:\n%s", n, seed, j.code, j.out)
			continue
		}
		everyRankSays(t, j, n, `(?m)^\[rank %d\] rank %[1]d: ok: \d+ steps, \d+ elements checked, 0 wrong, every block identical on all \d+ ranks; [1-9]\d* packed weight elements as the layout says`)
	}
}

// pythonEnv names the Python the tests run, when not python3 from PATH
// (one that has PyTorch, say).
const pythonEnv = "TPRUN_TEST_PYTHON"

// TestHeaderCompiles: tprun.h stands alone in strict C99 and in C++ (the
// library's own build checks it against the implementation).
func TestHeaderCompiles(t *testing.T) {
	inc := filepath.Join(repoRoot(t), "include", "tprun.h")
	for _, c := range []struct{ cc, lang, std string }{{"gcc", "c", "-std=c99"}, {"g++", "c++", "-std=c++11"}} {
		if _, err := exec.LookPath(c.cc); err != nil {
			t.Logf("no %s: %s not checked", c.cc, c.lang)
			continue
		}
		cmd := exec.Command(c.cc, "-x", c.lang, c.std, "-Wall", "-Wextra", "-pedantic", "-Werror", "-fsyntax-only", inc)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
		}
	}
}

// python returns the python3 to run and the environment that finds the
// package and the library built here; it skips the test without python3.
func python(t *testing.T) (string, []string) {
	t.Helper()
	name := os.Getenv(pythonEnv)
	if name == "" {
		name = "python3"
	}
	py, err := exec.LookPath(name)
	if err != nil {
		t.Skipf("%s is not found (%s names another), so the Python package is not tested: %v", name, pythonEnv, err)
	}
	return py, []string{"PYTHONPATH=" + filepath.Join(repoRoot(t), "python"),
		"TPRUN_LIB=" + filepath.Join(built(t), "libtprun.so"), "PYTHONDONTWRITEBYTECODE=1"}
}

func TestPythonHostBackend(t *testing.T) {
	py, env := python(t)
	for _, n := range []int{2, 3} {
		seed := rand.Uint32()
		j := launch(t, n, env, 2*time.Minute, py, "python/tests/host_rank.py", strconv.FormatUint(uint64(seed), 10))
		if j.code != 0 {
			t.Errorf("tp %d, seed %d: exit status %d:\n%s", n, seed, j.code, j.out)
			continue
		}
		everyRankSays(t, j, n, `(?m)^\[rank %d\] rank %[1]d: ok: \d+ steps, \d+ elements checked, 0 wrong, every block identical on all \d+ ranks; [1-9]\d* steps with a weight of their own`)
	}
}

// TestPythonTorchCPU runs the package with PyTorch CPU tensors, where the
// Python has PyTorch.
func TestPythonTorchCPU(t *testing.T) {
	py, env := python(t)
	if out, err := exec.Command(py, "-c", "import torch").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch (%v; %s names a Python that can): %s", py, err, pythonEnv, lastLine(out))
	}
	seed := rand.Uint32()
	j := launch(t, 2, env, 2*time.Minute, py, "python/tests/torch_cpu_rank.py", strconv.FormatUint(uint64(seed), 10))
	if j.code != 0 {
		t.Fatalf("seed %d: exit status %d:\n%s", seed, j.code, j.out)
	}
	everyRankSays(t, j, 2, `(?m)^\[rank %d\] rank %[1]d: ok: \d+ steps with torch .* CPU tensors \([1-9]\d* with a weight of their own\), 0 wrong, every block identical on all 2 ranks; PyTorch.s packing bit-identical to the library.s on [1-9]\d* elements`)
	// The PyTorch example's checks, on CPU tensors, M past the skinny
	// kernels' 8 and past 16 rows included (its digests cover the largest
	// block).
	j = launch(t, 2, env, 2*time.Minute, py, "examples/python/torch_rank.py", "--cpu", "--check", "--rows", "1,3,8,9,40",
		"--hidden", "128", "--latent", "256", "--iters", "2", "--seed", strconv.FormatUint(uint64(seed), 10))
	if j.code != 0 {
		t.Fatalf("torch_rank.py --cpu --check, seed %d: exit status %d:\n%s", seed, j.code, j.out)
	}
	everyRankSays(t, j, 2, `(?m)^\[rank %d\] rank %[1]d: check, M \[1, 3, 8, 9, 40\], 2 steps each: \d+ elements checked, 0 wrong$`)
	everyRankSays(t, j, 2, `(?m)^\[rank %d\] rank %[1]d: check: all 10 blocks identical on every rank$`)
	everyRankSays(t, j, 2, `(?m)^\[rank %d\] rank %[1]d: check: [1-9]\d* of the steps passed a second layer's packed weight`)
	everyRankSays(t, j, 2, `(?m)^\[rank %d\] rank %[1]d: PASS$`)
	// The same through tprun.join_torch on a gloo group, as an engine's
	// worker processes join: on one node the mailboxes travel over the
	// node's sockets.
	j = launch(t, 3, env, 2*time.Minute, py, "examples/python/torch_rank.py", "--cpu", "--check", "--rows", "2,17",
		"--hidden", "96", "--latent", "64", "--iters", "2", "--seed", strconv.FormatUint(uint64(seed), 10),
		"--join", "torch", "--store", t.TempDir())
	if j.code != 0 {
		t.Fatalf("torch_rank.py --join torch --cpu --check, seed %d: exit status %d:\n%s", seed, j.code, j.out)
	}
	everyRankSays(t, j, 3, `(?m)^\[rank %d\] rank %[1]d: check, M \[2, 17\], 2 steps each: \d+ elements checked, 0 wrong$`)
	everyRankSays(t, j, 3, `(?m)^\[rank %d\] rank %[1]d: PASS$`)
}

// TestPythonLibraryMissing: what `import tprun` says when it finds no
// library, from a copy of the package with none beside it: the way to get
// one, or, when TPRUN_LIB names no file, the variable to fix.
func TestPythonLibraryMissing(t *testing.T) {
	py, _ := python(t)
	pkg := filepath.Join(t.TempDir(), "tprun")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(repoRoot(t), "python", "tprun")
	files, err := filepath.Glob(filepath.Join(src, "*.py"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no Python files in %s: %v", src, err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	noFile := filepath.Join(t.TempDir(), "libtprun.so")
	for _, c := range []struct {
		desc string
		env  []string
		want []string
	}{
		{"nothing beside the package", nil, []string{"LibraryError: libtprun.so not found at " + filepath.Join(pkg, "libtprun.so"),
			"pip install ./python", "go build -buildmode=c-shared"}},
		{"TPRUN_LIB names no file", []string{"TPRUN_LIB=" + noFile}, []string{"LibraryError: libtprun.so not found at TPRUN_LIB=" + noFile,
			"point TPRUN_LIB at a built libtprun.so, or unset it", pkg}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			cmd := exec.Command(py, "-B", "-c", "import tprun; tprun.version()")
			cmd.Env = append(append(cleanEnv(), "PYTHONPATH="+filepath.Dir(pkg)), c.env...)
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("import tprun loaded a library:\n%s", out)
			}
			for _, w := range c.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("the error does not say %q:\n%s", w, out)
				}
			}
		})
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

func TestPythonExample(t *testing.T) {
	py, env := python(t)
	j := launch(t, 2, env, time.Minute, py, "examples/python/host_rank.py", "--check", "--steps", "6")
	if j.code != 0 {
		t.Fatalf("exit status %d:\n%s", j.code, j.out)
	}
	everyRankSays(t, j, 2, `(?m)^\[rank %d\] rank %[1]d: 6 steps on the host backend .*, 0 wrong, 0 blocks differ`)
}

// TestPythonCompiles byte-compiles every Python file, the PyTorch example
// included (PyTorch itself need not be installed: it is imported lazily).
func TestPythonCompiles(t *testing.T) {
	py, _ := python(t)
	root := repoRoot(t)
	var files []string
	for _, pat := range []string{"python/tprun/*.py", "python/tests/*.py", "python/_build/*.py", "examples/python/*.py"} {
		m, err := filepath.Glob(filepath.Join(root, pat))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, m...)
	}
	if len(files) < 8 {
		t.Fatalf("found only %v", files)
	}
	// Compile into a temporary prefix: the tree stays clean.
	cmd := exec.Command(py, append([]string{"-m", "py_compile"}, files...)...)
	cmd.Env = append(cleanEnv(), "PYTHONPYCACHEPREFIX="+t.TempDir())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("py_compile: %v\n%s", err, out)
	}
}

// TestPythonExitWithoutClose: ranks that end without closing their group
// leave the job as ranks that close it do: status 0 and no report of a
// lost rank (the package closes open groups at exit).
func TestPythonExitWithoutClose(t *testing.T) {
	py, env := python(t)
	j := launch(t, 3, env, time.Minute, py, "-c", "import tprun; g = tprun.join(); g.barrier(); print('rank', g.rank, 'done')")
	if j.code != 0 || strings.Contains(j.out, "lost") || strings.Contains(j.out, "aborted") {
		t.Fatalf("exit status %d, want 0 and no rank lost:\n%s", j.code, j.out)
	}
	everyRankSays(t, j, 3, `(?m)^\[rank %d\] rank %[1]d done$`)
}

// TestPythonForkedChildExit: a child forked from a rank that ends the
// normal way (running the interpreter's exit handlers) leaves its parent's
// group alone: the rank still holds its place in the job afterwards.
func TestPythonForkedChildExit(t *testing.T) {
	py, env := python(t)
	code := `import os, tprun
g = tprun.join()
pid = os.fork()
if pid == 0:
    raise SystemExit(0)
_, status = os.waitpid(pid, 0)
g.barrier()
print('rank', g.rank, 'child exit status', os.waitstatus_to_exitcode(status), 'then a barrier')
g.close()`
	j := launch(t, 2, env, time.Minute, py, "-c", code)
	if j.code != 0 || strings.Contains(j.out, "lost") || strings.Contains(j.out, "left") {
		t.Fatalf("exit status %d, want 0 and no rank gone:\n%s", j.code, j.out)
	}
	everyRankSays(t, j, 2, `(?m)^\[rank %d\] rank %[1]d child exit status 0 then a barrier$`)
}

// TestPythonPeerFailures: a peer that leaves, aborts, stalls or is killed
// while rank 0 waits in a step gives rank 0 an exception naming it, soon,
// and a SIGINT during the wait a KeyboardInterrupt when the step returns.
func TestPythonPeerFailures(t *testing.T) {
	py, env := python(t)
	for _, c := range []struct {
		mode     string
		name     string // the exception rank 0 catches
		rank     string
		min, max time.Duration // how long rank 0's step took
	}{
		{"exit", "PeerError", "1", 0, 5 * time.Second},
		{"abort", "PeerError", "1", 0, 5 * time.Second},
		{"stall", "PeerTimeoutError", "1", 900 * time.Millisecond, 8 * time.Second},
		{"sigint", "KeyboardInterrupt", "None", 3900 * time.Millisecond, 12 * time.Second},
	} {
		t.Run(c.mode, func(t *testing.T) {
			j := launch(t, 2, env, time.Minute, py, "python/tests/failure_rank.py", c.mode)
			checkCaught(t, j.out, c.name, c.rank, c.min, c.max)
			if j.code != 3 {
				t.Errorf("tprun exited %d, want rank 0's 3:\n%s", j.code, j.out)
			}
		})
	}
	// Under torchrun's variables (no launcher to tell the hub, nor to stop
	// rank 0 when rank 1 fails: rank 0 hosts the hub), rank 1 killed by a
	// signal (rank 0 sees the connection drop), ending on an exception it
	// does not catch (also under a sys.excepthook installed after the
	// group, which does not call the package's), or leaving a `with
	// group:` block on one (all abort the job naming the exception,
	// instead of leaving it cleanly, which rank 0 would see only at its
	// 30 s deadline).
	for _, c := range []struct{ mode, rank1, says string }{
		{"kill", "killed", ""},
		{"raise", "exit status 1", "exited on an unhandled RuntimeError: rank 1 gives up"},
		{"with", "exit status 1", "left its with block on RuntimeError: rank 1 gives up"},
		{"hooked", "exit status 1", "exited on an unhandled RuntimeError: rank 1 gives up"},
	} {
		t.Run(c.mode, func(t *testing.T) {
			out0 := runTorchrunStyle(t, py, env, c.rank1, c.mode)
			checkCaught(t, out0, "PeerError", "1", 0, 5*time.Second)
			if !strings.Contains(out0, c.says) {
				t.Errorf("rank 0's error does not say %q:\n%s", c.says, out0)
			}
		})
	}
	// The same through tprun.join_torch on a gloo group, as the workers an
	// engine spawns on one node join: the group watches its peers'
	// processes and hears their aborts, so rank 0's step (its deadline
	// 30 s) ends at once here too.
	if out, err := exec.Command(py, "-c", "import torch.distributed").CombinedOutput(); err != nil {
		t.Logf("%s cannot import torch.distributed, so join_torch's failures are not tested (%v; %s names a Python that can): %s", py, err, pythonEnv, lastLine(out))
		return
	}
	for _, c := range []struct{ mode, rank1, says string }{
		{"kill", "killed", "exited without closing its group"},
		{"raise", "exit status 1", "aborted its group: exited on an unhandled RuntimeError: rank 1 gives up"},
	} {
		t.Run("join_torch "+c.mode, func(t *testing.T) {
			out0 := runTorchrunStyle(t, py, env, c.rank1, c.mode, "torch")
			checkCaught(t, out0, "PeerError", "1", 0, 5*time.Second)
			if !strings.Contains(out0, c.says) {
				t.Errorf("rank 0's error does not say %q:\n%s", c.says, out0)
			}
		})
	}
}

// runTorchrunStyle runs python/tests/failure_rank.py with args (the mode,
// and "torch" to join through torch.distributed) as two ranks under
// torchrun's variables, checks that rank 0 exits 3 and rank 1's status
// says rank1, and returns rank 0's output.
func runTorchrunStyle(t *testing.T, py string, env []string, rank1 string, args ...string) string {
	t.Helper()
	tmp := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	runID := fmt.Sprintf("libtprun-test-%d-%d", os.Getpid(), time.Now().UnixNano())
	var outs [2]strings.Builder
	var cmds [2]*exec.Cmd
	for r := range 2 {
		cmd := exec.CommandContext(ctx, py, append([]string{"python/tests/failure_rank.py"}, args...)...)
		cmd.Dir = repoRoot(t)
		cmd.Env = append(append(cleanEnv(), env...), "RANK="+strconv.Itoa(r), "WORLD_SIZE=2",
			"LOCAL_RANK="+strconv.Itoa(r), "LOCAL_WORLD_SIZE=2", "TORCHELASTIC_RUN_ID="+runID,
			"TORCHELASTIC_RESTART_COUNT=0", "TMPDIR="+tmp)
		cmd.Stdout, cmd.Stderr = &outs[r], &outs[r]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	err0, err1 := cmds[0].Wait(), cmds[1].Wait()
	if ctx.Err() != nil {
		t.Fatalf("the ranks did not end within a minute:\nrank 0:\n%s\nrank 1:\n%s", outs[0].String(), outs[1].String())
	}
	if cmds[0].ProcessState.ExitCode() != 3 {
		t.Errorf("rank 0: %v, want exit status 3:\n%s", err0, outs[0].String())
	}
	if !strings.Contains(fmt.Sprint(err1), rank1) {
		t.Errorf("rank 1: %v, want %s:\n%s", err1, rank1, outs[1].String())
	}
	return outs[0].String()
}

// checkCaught finds rank 0's "caught NAME rank=R after T s" line and checks
// it.
func checkCaught(t *testing.T, out, name, rank string, min, max time.Duration) {
	t.Helper()
	m := regexp.MustCompile(`rank 0: caught (\w+) rank=(\w+) after ([0-9.]+) s: (.*)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("rank 0 did not report an exception:\n%s", out)
	}
	secs, _ := strconv.ParseFloat(m[3], 64)
	took := time.Duration(secs * float64(time.Second))
	if m[1] != name || m[2] != rank || took < min || took > max {
		t.Errorf("rank 0 caught %s naming rank %s after %v, want %s naming rank %s after %v..%v:\n%s",
			m[1], m[2], took, name, rank, min, max, out)
	}
	if rank != "None" && !strings.Contains(m[4], "rank "+rank) {
		t.Errorf("the message does not name rank %s: %s", rank, m[4])
	}
}
