package tp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/internal/cuda/cudatest"
	"github.com/tprun/tprun/internal/proctest"
	"github.com/tprun/tprun/mailbox"
)

// The rank processes of TestCrossNodeProcesses are this test binary run
// again with xnodeEnv set; what each does comes in these variables.
const (
	xnodeEnv      = "TPRUN_TEST_XNODE_RANK"
	xnodeLib      = "TPRUN_TEST_XNODE_LIB"      // the fake driver
	xnodeMode     = "TPRUN_TEST_XNODE_MODE"     // "", "die-setup", "die-run", "stop-run"
	xnodeVictim   = "TPRUN_TEST_XNODE_VICTIM"   // "1": this rank does what the mode says
	xnodeSteps    = "TPRUN_TEST_XNODE_STEPS"    // steps to run
	xnodeTimeout  = "TPRUN_TEST_XNODE_TIMEOUT"  // the rendezvous timeout, ms
	xnodeListener = "TPRUN_TEST_XNODE_LISTENER" // "1": descriptor 3 is rank 0's listener
	xnodeSeed     = "TPRUN_TEST_XNODE_SEED"
)

// Exit statuses of a rank process.
const (
	xnodeOK     = 0
	xnodeFailed = 3 // a named job failure, printed
	xnodeBroken = 2 // something the test did not mean to happen
)

// xnodeWhen is the step at which a victim of a "-run" mode acts.
const xnodeWhen = 40

// TestCrossNodeProcesses: rank processes on two and four "nodes" of this
// machine (TPRUN_FORCE_NODE) join over TCP on the loopback with a job
// secret, build a unicast mailbox through the fake driver's fabric handles
// (files in a shared directory stand in for the NVLink fabric), and run
// the Lamport protocol through the mapped memory, every block checked.
// Then what goes wrong across nodes: a wrong secret, a rendezvous port
// already taken, a node killed during setup and during the run, a node cut
// off (its processes stopped: connections open, silent), the hub's own
// node killed. Each ends with a named error on every surviving rank, no
// hang, and no process or fabric allocation left.
func TestCrossNodeProcesses(t *testing.T) {
	if os.Getenv(xnodeEnv) != "" {
		os.Exit(xnodeRank())
	}
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	lib := cudatest.Build(t, t.TempDir())
	type scenario struct {
		desc       string
		n, perNode int
		steps      int
		mode       string
		victims    []int
		secrets    map[int]string // ranks with another secret
		portTaken  bool
		nodeTO     string // TPRUN_NODE_TIMEOUT
		check      func(t *testing.T, res []xnodeResult)
	}
	allOK := func(steps int) func(t *testing.T, res []xnodeResult) {
		return func(t *testing.T, res []xnodeResult) {
			for r, x := range res {
				if x.code != xnodeOK || !strings.Contains(x.out, fmt.Sprintf("OK %d steps", steps)) {
					t.Errorf("rank %d: exit %d\n%s", r, x.code, x.out)
				}
			}
		}
	}
	// survivors: every rank but the victims fails with an error saying
	// each of want, within bound.
	survivors := func(victims []int, bound time.Duration, want ...string) func(t *testing.T, res []xnodeResult) {
		return func(t *testing.T, res []xnodeResult) {
			for r, x := range res {
				if isIn(victims, r) {
					continue
				}
				if x.code != xnodeFailed {
					t.Errorf("rank %d: exit %d, want %d\n%s", r, x.code, xnodeFailed, x.out)
					continue
				}
				for _, w := range want {
					// A want of alternatives (" | " between them) is met by any one.
					found := false
					for _, alt := range strings.Split(w, " | ") {
						found = found || strings.Contains(x.out, alt)
					}
					if !found {
						t.Errorf("rank %d does not say %q:\n%s", r, w, x.out)
					}
				}
				if x.took > bound {
					t.Errorf("rank %d ended after %v, want within %v", r, x.took, bound)
				}
			}
		}
	}
	scenarios := []scenario{
		{desc: "2 nodes of 2 ranks", n: 4, perNode: 2, steps: 300, check: allOK(300)},
		{desc: "4 nodes of 1 rank", n: 4, perNode: 1, steps: 300, check: allOK(300)},
		{desc: "wrong secret on node-b", n: 4, perNode: 2, steps: 10, secrets: map[int]string{2: "", 3: ""},
			check: func(t *testing.T, res []xnodeResult) {
				for r := 2; r < 4; r++ {
					if res[r].code != xnodeFailed || !strings.Contains(res[r].out, "wrong job secret") {
						t.Errorf("rank %d: exit %d\n%s", r, res[r].code, res[r].out)
					}
				}
				survivors([]int{2, 3}, 10*time.Second, "rendezvous timed out", "ranks 2,3 (torchrun node 1) never connected")(t, res)
			}},
		{desc: "rendezvous port taken", n: 4, perNode: 2, steps: 10, portTaken: true,
			check: func(t *testing.T, res []xnodeResult) {
				if res[0].code != xnodeFailed || !strings.Contains(res[0].out, "address already in use") ||
					!strings.Contains(res[0].out, "set TPRUN_RENDEZVOUS=host:port to a free port") {
					t.Errorf("rank 0: exit %d\n%s", res[0].code, res[0].out)
				}
				survivors([]int{0}, 10*time.Second, "rank 0 did not open the rendezvous within 1.5s")(t, res)
			}},
		{desc: "node-b killed during setup", n: 4, perNode: 2, steps: 10, mode: "die-setup", victims: []int{2, 3},
			check: survivors([]int{2, 3}, 10*time.Second, "on node-b: connection lost (the process exited or was killed, or its node went down)")},
		{desc: "node-b killed during the run", n: 4, perNode: 2, steps: 200, mode: "die-run", victims: []int{2, 3},
			check: survivors([]int{2, 3}, 10*time.Second, fmt.Sprintf("step %d", xnodeWhen), "on node-b: connection lost")},
		{desc: "node-b cut off during the run", n: 4, perNode: 2, steps: 200, mode: "stop-run", victims: []int{2, 3}, nodeTO: "1s",
			check: survivors([]int{2, 3}, 10*time.Second, fmt.Sprintf("step %d", xnodeWhen), "node node-b (ranks 2,3) silent for 1s: it is cut off from the network, stalled or down")},
		{desc: "the hub's node killed during the run", n: 4, perNode: 2, steps: 200, mode: "die-run", victims: []int{0, 1},
			// The hub may see its node's other rank go before it goes itself.
			check: survivors([]int{0, 1}, 10*time.Second,
				"rank 0 on node-a: it hosts the hub and went away | rank 1 on node-a: connection lost")},
	}
	for _, sc := range scenarios {
		t.Run(sc.desc, func(t *testing.T) {
			fabric := t.TempDir()
			secret := randomSecret(t)
			var ln *net.TCPListener
			var listenerFile *os.File
			var addr string
			if sc.portTaken {
				taken := loopback(t)
				addr = taken.Addr().String()
			} else {
				l := loopback(t).(*net.TCPListener)
				f, err := l.File()
				if err != nil {
					t.Fatal(err)
				}
				defer f.Close()
				ln, listenerFile, addr = l, f, l.Addr().String()
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmds := make([]*exec.Cmd, sc.n)
			outs := make([]*bytes.Buffer, sc.n)
			start := time.Now()
			for r := range sc.n {
				cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestCrossNodeProcesses$")
				env := crossEnv(addr, secret, r, sc.n, sc.perNode)
				if s, ok := sc.secrets[r]; ok {
					if s == "" {
						s = randomSecret(t)
					}
					env[EnvJobSecret] = s
				}
				env[cudatest.FabricDirEnv] = fabric
				env[xnodeEnv], env[xnodeLib], env[xnodeMode] = "1", lib, sc.mode
				env[xnodeSteps], env[xnodeTimeout] = strconv.Itoa(sc.steps), "1500"
				env[xnodeSeed] = strconv.FormatInt(start.UnixNano(), 10)
				if isIn(sc.victims, r) {
					env[xnodeVictim] = "1"
				}
				if sc.nodeTO != "" {
					env[EnvNodeTimeout] = sc.nodeTO
				}
				if r == 0 && listenerFile != nil {
					env[xnodeListener] = "1"
					cmd.ExtraFiles = []*os.File{listenerFile}
				}
				cmd.Env = os.Environ()
				for k, v := range env {
					cmd.Env = append(cmd.Env, k+"="+v)
				}
				outs[r] = &bytes.Buffer{}
				cmd.Stdout, cmd.Stderr = outs[r], outs[r]
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds[r] = cmd
			}
			if listenerFile != nil {
				// Rank 0 has its copy; ours would keep the port open.
				_ = listenerFile.Close()
				_ = ln.Close()
			}
			res := make([]xnodeResult, sc.n)
			var wg sync.WaitGroup
			for r, cmd := range cmds {
				wg.Go(func() {
					_ = cmd.Wait()
					res[r] = xnodeResult{code: cmd.ProcessState.ExitCode(), out: outs[r].String(), took: time.Since(start)}
				})
			}
			// A cut-off node's processes stay stopped: end them once the
			// others are done (or the test's deadline came).
			if sc.mode == "stop-run" {
				for {
					done := 0
					for r, cmd := range cmds {
						if !isIn(sc.victims, r) && proctest.Gone(cmd.Process.Pid) {
							done++
						}
					}
					if done == sc.n-len(sc.victims) || ctx.Err() != nil {
						break
					}
					time.Sleep(20 * time.Millisecond)
				}
				for _, r := range sc.victims {
					_ = cmds[r].Process.Signal(syscall.SIGKILL)
				}
			}
			wg.Wait()
			if ctx.Err() != nil {
				t.Fatalf("rank processes hung until the test's deadline")
			}
			sc.check(t, res)
			var pids []int
			for _, cmd := range cmds {
				pids = append(pids, cmd.Process.Pid)
			}
			proctest.WaitGone(t, "rank", pids, 5*time.Second)
			// Ranks that closed released their fabric allocations (a
			// killed one leaves its file, as a real process leaves its
			// memory to the driver).
			if sc.mode == "" && sc.secrets == nil && !sc.portTaken {
				if ents, _ := os.ReadDir(fabric); len(ents) != 0 {
					t.Errorf("fabric allocations left: %v", ents)
				}
			}
			t.Logf("rank %d: %s", sc.n-1, lastLine(res[sc.n-1].out))
			if len(sc.victims) > 0 || sc.portTaken || sc.secrets != nil {
				for r := range res {
					if !isIn(sc.victims, r) {
						t.Logf("rank %d said: %s", r, lastLine(res[r].out))
						break
					}
				}
			}
		})
	}
}

type xnodeResult struct {
	code int
	out  string
	took time.Duration
}

func isIn(xs []int, x int) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

// xnodeRank is one rank process: join, set up the unicast mailbox over
// fabric handles, run the steps, and report.
func xnodeRank() int {
	getenv := os.Getenv
	victim := getenv(xnodeVictim) == "1"
	mode := getenv(xnodeMode)
	steps, _ := strconv.Atoi(getenv(xnodeSteps))
	timeoutMS, _ := strconv.Atoi(getenv(xnodeTimeout))
	seed, _ := strconv.ParseUint(getenv(xnodeSeed), 10, 64)
	fail := func(code int, format string, args ...any) int {
		fmt.Printf(format+"\n", args...)
		return code
	}
	opts := []JoinOption{WithTimeout(time.Duration(timeoutMS) * time.Millisecond)}
	if getenv(xnodeListener) == "1" {
		ln, err := net.FileListener(os.NewFile(3, "listener"))
		if err != nil {
			return fail(xnodeBroken, "listener: %v", err)
		}
		opts = append(opts, withListener(ln))
	}
	ctx := context.Background()
	g, err := Join(ctx, opts...)
	if err != nil {
		return fail(xnodeFailed, "join: %v", err)
	}
	defer g.Close()
	drv, err := cuda.OpenLibrary(getenv(xnodeLib))
	if err != nil {
		return fail(xnodeBroken, "driver: %v", err)
	}
	defer drv.Close()
	if victim && mode == "die-setup" {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	u, err := mailbox.NewUnicast(ctx, g, drv, cuda.Device(g.LocalRank()), mailbox.Config{Hidden: 32 * g.Size(), Capacity: 4})
	if err != nil {
		return fail(xnodeFailed, "setup: %v", err)
	}
	defer u.Close()
	if u.HandleType() != cuda.HandleTypeFabric {
		return fail(xnodeBroken, "handle type %v", u.HandleType())
	}
	l, peers := u.Layout(), u.Peers()
	job := g.jobContext()
	for t := range uint64(steps) {
		if victim && t == xnodeWhen {
			switch mode {
			case "die-run":
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // however long the signal takes, nothing more is written
			case "stop-run":
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
				select {}
			}
		}
		m := 1 + int(t)%l.Capacity
		words := m * l.Hidden / 2
		off := l.StepOffset(t, m)
		// Write: this rank's words of every row into every mailbox.
		for _, p := range peers {
			w := wordsAt(p+cuda.DevicePtr(off), words)
			for i := range m {
				for j := range l.Shard / 2 {
					k := (i*l.Hidden+g.Rank()*l.Shard)/2 + j
					atomic.StoreUint32(&w[k], xnodeWord(seed, t, g.Rank(), k))
				}
			}
		}
		// Receive: wait for every word, check it, re-arm.
		own := wordsAt(peers[g.Rank()]+cuda.DevicePtr(off), words)
		deadline := time.Now().Add(10 * time.Second)
		for k := range own {
			for atomic.LoadUint32(&own[k]) == mailbox.Sentinel {
				if job.Err() != nil {
					return fail(xnodeFailed, "step %d: %v", t, context.Cause(job))
				}
				if time.Now().After(deadline) {
					return fail(xnodeFailed, "step %d: word %d still empty after 10s", t, k)
				}
				time.Sleep(20 * time.Microsecond)
			}
			q := (2 * k % l.Hidden) / l.Shard
			if got, want := atomic.LoadUint32(&own[k]), xnodeWord(seed, t, q, k); got != want {
				return fail(xnodeBroken, "step %d: word %d is %#x, want %#x from rank %d", t, k, got, want, q)
			}
		}
		for k := range own {
			atomic.StoreUint32(&own[k], mailbox.Sentinel)
		}
	}
	// Nobody may unmap before every rank has read its last block.
	if err := g.Barrier(ctx); err != nil {
		return fail(xnodeFailed, "last barrier: %v", err)
	}
	if err := errors.Join(u.Close(), g.Close()); err != nil {
		return fail(xnodeBroken, "close: %v", err)
	}
	fmt.Printf("OK %d steps\n", steps)
	return xnodeOK
}

// xnodeWord is what rank q stores at word k of step t: fresh per run,
// never the sentinel (the low bit is set).
func xnodeWord(seed, t uint64, q, k int) uint32 {
	x := seed ^ t*0x9e3779b97f4a7c15 ^ uint64(q)<<40 ^ uint64(k)
	x ^= x >> 31
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 29
	return uint32(x) | 1
}

// wordsAt views n words of "device" memory: in the fake driver a device
// pointer is a host address of a shared mapping.
func wordsAt(p cuda.DevicePtr, n int) []uint32 {
	var ptr unsafe.Pointer
	*(*uintptr)(unsafe.Pointer(&ptr)) = uintptr(p)
	return unsafe.Slice((*uint32)(ptr), n)
}
