package main

import (
	"math/rand/v2"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

// TestPythonCollectivesRoute runs rank programs whose tprun group goes
// through their own all-gather and barrier (a Unix socket among the rank
// processes, standing in for a framework's process group) instead of
// tprun's rendezvous: tprun_group_from_collectives through
// tprun.join_collectives, the callbacks on the caller's thread, the host
// backend refused naming the route, bad ranks and a failing callback.
func TestPythonCollectivesRoute(t *testing.T) {
	py, env := python(t)
	for _, n := range []int{1, 2, 3} {
		seed := rand.Uint32()
		j := launch(t, n, env, time.Minute, py, "python/tests/collectives_rank.py", t.TempDir(), strconv.FormatUint(uint64(seed), 10))
		if j.code != 0 {
			t.Errorf("tp %d, seed %d: exit status %d:\n%s", n, seed, j.code, j.out)
			continue
		}
		everyRankSays(t, j, n, `(?m)^\[rank %d\] rank %[1]d: ok: group on the caller's collectives, 5 all-gathers checked, host backend refused, bad ranks refused, callback failure raised with its cause$`)
	}
}

// TestPythonTorchCollectivesRoute is tprun.join_torch on a gloo process
// group (a file store), where the Python has PyTorch.
func TestPythonTorchCollectivesRoute(t *testing.T) {
	py, env := python(t)
	if out, err := exec.Command(py, "-c", "import torch.distributed").CombinedOutput(); err != nil {
		t.Skipf("%s cannot import torch.distributed (%v; %s names a Python that can): %s", py, err, pythonEnv, lastLine(out))
	}
	seed := rand.Uint32()
	j := launch(t, 2, env, 2*time.Minute, py, "python/tests/torch_collectives_rank.py", t.TempDir(), strconv.FormatUint(uint64(seed), 10))
	if j.code != 0 {
		t.Fatalf("seed %d: exit status %d:\n%s", seed, j.code, j.out)
	}
	everyRankSays(t, j, 2, `(?m)^\[rank %d\] rank %[1]d: ok: group on torch.distributed \(gloo\), \d+ all-gathers checked, host backend refused$`)
}
