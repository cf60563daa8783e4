package main

import (
	"math/rand/v2"
	"os/exec"
	"slices"
	"strconv"
	"testing"
	"time"
)

// TestPythonCollectivesRoute runs rank programs whose tprun group goes
// through their own all-gather and barrier (a Unix socket among the rank
// processes, standing in for a framework's process group) instead of
// tprun's rendezvous: tprun_group_from_collectives through
// tprun.join_collectives, the callbacks on the caller's thread, the host
// backend on one node (steps checked against the reference), bad ranks and
// a failing callback; and with TPRUN_FORCE_NODE, as if across nodes, the
// host backend refused naming the route.
func TestPythonCollectivesRoute(t *testing.T) {
	py, env := python(t)
	for _, tc := range []struct {
		n      int
		across bool
	}{{1, false}, {2, false}, {3, false}, {2, true}} {
		seed := rand.Uint32()
		env, host := env, "host backend: 3 steps checked"
		if tc.across {
			env, host = append(slices.Clone(env), "TPRUN_FORCE_NODE=node-b"), "host backend refused across nodes"
		}
		j := launch(t, tc.n, env, time.Minute, py, "python/tests/collectives_rank.py", t.TempDir(), strconv.FormatUint(uint64(seed), 10))
		if j.code != 0 {
			t.Errorf("tp %d (across nodes %v), seed %d: exit status %d:\n%s", tc.n, tc.across, seed, j.code, j.out)
			continue
		}
		everyRankSays(t, j, tc.n, `(?m)^\[rank %d\] rank %[1]d: ok: group on the caller's collectives, 5 all-gathers checked, `+host+`, bad ranks refused, callback failure raised with its cause$`)
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
	everyRankSays(t, j, 2, `(?m)^\[rank %d\] rank %[1]d: ok: group on torch.distributed \(gloo\), \d+ all-gathers checked, host backend: 3 steps checked$`)
}
