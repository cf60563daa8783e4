package mailbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda"
)

// gpuCase is one collective construction of a GPU backend on goroutine
// ranks over the fake hub and the fake driver.
type gpuCase struct {
	size       int
	multicast  bool
	cfg        fakeCfg
	mbox       Config // zero: a random valid one
	opts       []GPUOption
	sameDevice bool                    // every rank on device 0
	perRank    func(r int) []GPUOption // extra options per rank
	crossNode  bool                    // the ranks say they span nodes (crossRank)
}

type gpuRun struct {
	sys      *fakeSys
	drvs     []*fakeDrv
	backends []Backend // nil where the constructor failed
	errs     []error
	setup    []int // calls each rank made during setup
}

func (c gpuCase) config(rng *rand.Rand) Config {
	if c.mbox.Hidden != 0 {
		return c.mbox
	}
	// A random valid shape: shard even, a few slots and rows.
	shard := 2 * (1 + rng.IntN(64))
	return Config{Hidden: shard * c.size, Capacity: 1 + rng.IntN(8), Slots: 2 + rng.IntN(3)}
}

// run constructs the backend on every rank. prep may arm failures. A
// rank that does not return within the deadline fails the test: the fake
// hub honours ctx, so a hang shows up as a deadline error.
func (c gpuCase) run(t testing.TB, rng *rand.Rand, prep func(drvs []*fakeDrv)) gpuRun {
	t.Helper()
	run := gpuRun{sys: newFakeSys(c.cfg), drvs: make([]*fakeDrv, c.size), backends: make([]Backend, c.size), setup: make([]int, c.size)}
	for r := range c.size {
		dev := cuda.Device(r)
		if c.sameDevice {
			dev = 0
		}
		run.drvs[r] = run.sys.driver(r, dev)
	}
	if prep != nil {
		prep(run.drvs)
	}
	cfg := c.config(rng)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run.errs = onRanks(c.size, func(r int, ex Exchanger) error {
		if c.crossNode {
			ex = crossRank{ex}
		}
		d := run.drvs[r]
		opts := c.opts
		if c.perRank != nil {
			opts = append(slices.Clone(opts), c.perRank(r)...)
		}
		var err error
		if c.multicast {
			// The fake driver stands in for an NVSwitch node: the
			// machine's own safety variables (set on the GPU machines
			// that run this binary too) must not decide these tests; a
			// case that wants them passes its own WithGetenv after this.
			opts = append([]GPUOption{WithGetenv(noSafetyEnv)}, opts...)
			var m *Multicast
			if m, err = NewMulticast(ctx, ex, d, d.dev, cfg, opts...); m != nil {
				run.backends[r] = m
			}
		} else {
			var u *Unicast
			if u, err = NewUnicast(ctx, ex, d, d.dev, cfg, opts...); u != nil {
				run.backends[r] = u
			}
		}
		run.setup[r] = len(d.callList())
		if err == nil {
			// No rank may return before every rank has armed its slots.
			for q, dq := range run.drvs {
				if !slices.Contains(dq.callList(), "CtxSynchronize") {
					return fmt.Errorf("rank %d returned before rank %d armed its slots", r, q)
				}
			}
		}
		return err
	})
	for r, err := range run.errs {
		if errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("rank %d hung until the test deadline: %v", r, err)
		}
		if (err == nil) != (run.backends[r] != nil) {
			t.Fatalf("rank %d: error %v with backend %v", r, err, run.backends[r])
		}
	}
	return run
}

// closeAll closes every backend twice (idempotence) and returns the first
// close's errors.
func (run gpuRun) closeAll(t testing.TB) []error {
	t.Helper()
	errs := make([]error, len(run.backends))
	for r, b := range run.backends {
		if b == nil {
			continue
		}
		errs[r] = b.Close()
		if err := b.Close(); err != nil {
			t.Errorf("rank %d: second Close: %v", r, err)
		}
	}
	return errs
}

func (run gpuRun) mustSucceed(t testing.TB) {
	t.Helper()
	if err := errors.Join(run.errs...); err != nil {
		t.Fatalf("setup: %v", err)
	}
}

func expectNothingLeft(t *testing.T, sys *fakeSys, fds int, what string) {
	t.Helper()
	if left := sys.outstanding(); len(left) > 0 {
		t.Errorf("%s: the fake driver still has:\n  %s", what, strings.Join(left, "\n  "))
	}
	if got := countFDs(t); got != fds {
		t.Errorf("%s: %d descriptors open, %d before", what, got, fds)
	}
}

func newRng(t testing.TB) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, 0x6d61696c626f78))
}

func TestUnicastSetup(t *testing.T) {
	rng := newRng(t)
	mixed := func(dev cuda.Device, a cuda.DeviceAttribute) int {
		if dev == 1 && a == cuda.AttrHandleTypeFabricSupported {
			return 0 // one device without fabric makes everyone use POSIX FD
		}
		return fabricAttr(dev, a)
	}
	for _, tc := range []struct {
		desc       string
		cfg        fakeCfg
		opts       []GPUOption
		sameDevice bool
		want       cuda.HandleType
		reason     string   // substring of HandleReason
		calls      []string // must appear in rank 0's calls, in this order
		never      []string // must not appear in any rank's calls
	}{
		{desc: "no fabric attribute: POSIX FD", cfg: fakeCfg{}, want: cuda.HandleTypePOSIXFD,
			reason: "reports no FABRIC", calls: []string{"MemCreate(POSIX_FD)", "MemExportPOSIXFD(mem)", "MemImportPOSIXFD"},
			never: []string{"MemCreate(FABRIC)"}},
		{desc: "fabric attribute but NOT_PERMITTED (no IMEX channel): fall back to POSIX FD",
			cfg: fakeCfg{attr: fabricAttr, fabricCreateErr: cuda.ErrNotPermitted}, want: cuda.HandleTypePOSIXFD,
			reason: "CUDA_ERROR_NOT_PERMITTED", calls: []string{"MemCreate(FABRIC)", "MemCreate(POSIX_FD)", "MemExportPOSIXFD(mem)"}},
		{desc: "fabric export NOT_SUPPORTED: release, fall back to POSIX FD",
			cfg: fakeCfg{attr: fabricAttr, fabricExportErr: cuda.ErrNotSupported}, want: cuda.HandleTypePOSIXFD,
			reason: "CUDA_ERROR_NOT_SUPPORTED", calls: []string{"MemCreate(FABRIC)", "MemExportFabric(mem)", "MemRelease(mem)", "MemCreate(POSIX_FD)"}},
		{desc: "fabric works everywhere: FABRIC handles, no descriptors",
			cfg: fakeCfg{attr: fabricAttr}, want: cuda.HandleTypeFabric,
			calls: []string{"MemCreate(FABRIC)", "MemExportFabric(mem)", "MemImportFabric"},
			never: []string{"MemExportPOSIXFD(mem)", "MemImportPOSIXFD", "MemCreate(POSIX_FD)"}},
		{desc: "one device without fabric: every rank uses POSIX FD",
			cfg: fakeCfg{attr: mixed}, want: cuda.HandleTypePOSIXFD, reason: "rank 1: device 1 reports no FABRIC",
			calls: []string{"MemCreate(FABRIC)", "MemExportFabric(mem)", "MemRelease(mem)", "MemCreate(POSIX_FD)", "MemImportPOSIXFD"}},
		{desc: "POSIX FD forced although fabric works",
			cfg: fakeCfg{attr: fabricAttr}, opts: []GPUOption{WithHandleType(cuda.HandleTypePOSIXFD)}, want: cuda.HandleTypePOSIXFD,
			reason: "asked for", never: []string{"MemCreate(FABRIC)", "DeviceAttribute(128)"}},
		{desc: "every rank on one device", cfg: fakeCfg{}, sameDevice: true, want: cuda.HandleTypePOSIXFD},
	} {
		for _, size := range []int{2, 4, 8} {
			t.Run(fmt.Sprintf("%s/tp%d", tc.desc, size), func(t *testing.T) {
				fds := countFDs(t)
				c := gpuCase{size: size, cfg: tc.cfg, opts: tc.opts, sameDevice: tc.sameDevice}
				run := c.run(t, rng, nil)
				run.mustSucceed(t)
				checkUnicast(t, run, c)
				for r, b := range run.backends {
					u := b.(*Unicast)
					if u.HandleType() != tc.want {
						t.Errorf("rank %d: handle type %v, want %v", r, u.HandleType(), tc.want)
					}
					if !strings.Contains(u.HandleReason(), tc.reason) {
						t.Errorf("rank %d: handle reason %q, want it to contain %q", r, u.HandleReason(), tc.reason)
					}
					if tc.want == cuda.HandleTypeFabric && u.HandleReason() != "" {
						t.Errorf("rank %d: reason %q with fabric handles", r, u.HandleReason())
					}
					calls := run.drvs[r].callList()
					for _, n := range tc.never {
						if slices.Contains(calls, n) {
							t.Errorf("rank %d called %s:\n%s", r, n, strings.Join(calls, "\n"))
						}
					}
				}
				if calls := run.drvs[0].callList(); !inOrder(calls, tc.calls) {
					t.Errorf("rank 0's calls lack %v in that order:\n%s", tc.calls, strings.Join(calls, "\n"))
				}
				if err := errors.Join(run.closeAll(t)...); err != nil {
					t.Fatalf("Close: %v", err)
				}
				for r, b := range run.backends {
					if u := b.(*Unicast); u.Peers() != nil || u.Local() != 0 {
						t.Errorf("rank %d: pointers still handed out after Close", r)
					}
				}
				expectNothingLeft(t, run.sys, fds, "after Close")
			})
		}
	}
}

// checkUnicast checks that every rank maps every rank's own allocation,
// and that each allocation is armed.
func checkUnicast(t *testing.T, run gpuRun, c gpuCase) {
	t.Helper()
	owners := make([]uint64, c.size) // object id of each rank's own mailbox
	for r, b := range run.backends {
		u := b.(*Unicast)
		local, ok := run.drvs[r].mappedObj(u.Local())
		if !ok {
			t.Fatalf("rank %d: Local %#x is not mapped", r, uint64(u.Local()))
		}
		owners[r] = local.id
		l := u.Layout()
		if local.fill != Sentinel || local.filled < uint64(l.Bytes) || local.dev != run.drvs[r].dev {
			t.Errorf("rank %d: own mailbox on device %d armed with %#x over %d bytes; want %#x over %d bytes on device %d",
				r, local.dev, local.fill, local.filled, Sentinel, l.Bytes, run.drvs[r].dev)
		}
		if l.Size != c.size || u.Name() != "unicast" || u.Rank() != r {
			t.Errorf("rank %d: name %q, rank %d, layout %+v", r, u.Name(), u.Rank(), l)
		}
	}
	for r, b := range run.backends {
		u := b.(*Unicast)
		peers := u.Peers()
		if len(peers) != c.size || peers[r] != u.Local() {
			t.Fatalf("rank %d: Peers %v, Local %#x", r, peers, uint64(u.Local()))
		}
		for q, p := range peers {
			o, ok := run.drvs[r].mappedObj(p)
			if !ok || o.id != owners[q] {
				t.Errorf("rank %d: Peers()[%d] = %#x maps object %d (mapped %v), want rank %d's mailbox, object %d", r, q, uint64(p), o.id, ok, q, owners[q])
			}
		}
	}
}

// inOrder reports whether want is a subsequence of calls.
func inOrder(calls, want []string) bool {
	i := 0
	for _, c := range calls {
		if i < len(want) && c == want[i] {
			i++
		}
	}
	return i == len(want)
}

func TestUnicastSetupErrorsReachEveryRank(t *testing.T) {
	rng := newRng(t)
	for _, tc := range []struct {
		desc     string
		c        gpuCase
		is       error  // rank 0's error
		text     string // in every rank's error
		nocalls  bool   // no driver call at all
		disagree bool   // rank 1 asks for one more row of capacity
	}{
		{desc: "fabric create fails with OUT_OF_MEMORY: an error, not a fallback",
			c:    gpuCase{size: 3, cfg: fakeCfg{attr: fabricAttr, fabricCreateErr: cuda.ErrOutOfMemory}},
			text: "CUDA_ERROR_OUT_OF_MEMORY"},
		{desc: "fabric forced but NOT_PERMITTED",
			c:    gpuCase{size: 2, cfg: fakeCfg{attr: fabricAttr, fabricCreateErr: cuda.ErrNotPermitted}, opts: []GPUOption{WithHandleType(cuda.HandleTypeFabric)}},
			text: "CUDA_ERROR_NOT_PERMITTED"},
		{desc: "fabric forced, device without it",
			c:  gpuCase{size: 2, opts: []GPUOption{WithHandleType(cuda.HandleTypeFabric)}},
			is: ErrUnavailable, text: "no FABRIC"},
		{desc: "no VMM on one device",
			c: gpuCase{size: 4, cfg: fakeCfg{attr: func(dev cuda.Device, a cuda.DeviceAttribute) int {
				if dev == 2 && a == cuda.AttrVirtualMemoryManagementSupported {
					return 0
				}
				return defaultAttr(dev, a)
			}}},
			text: "device 2 does not support virtual memory management"},
		{desc: "ranks disagree about the capacity",
			c:  gpuCase{size: 3, mbox: Config{Hidden: 48, Capacity: 4}},
			is: ErrConfig, text: "disagree", disagree: true},
		{desc: "invalid handle type option",
			c:  gpuCase{size: 2, opts: []GPUOption{WithHandleType(0x4)}},
			is: ErrConfig, text: "handle type", nocalls: true},
		{desc: "invalid layout (odd shard)",
			c:  gpuCase{size: 2, mbox: Config{Hidden: 6, Capacity: 1}},
			is: ErrConfig, text: "odd", nocalls: true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			fds := countFDs(t)
			c := tc.c
			var run gpuRun
			if tc.disagree {
				run = c.runDisagree(t)
			} else {
				run = c.run(t, rng, nil)
			}
			for r, err := range run.errs {
				if err == nil {
					t.Fatalf("rank %d: no error", r)
				}
				if tc.is != nil && r == 0 && !errors.Is(err, tc.is) {
					t.Errorf("rank %d: %v, want errors.Is %v", r, err, tc.is)
				}
				if !strings.Contains(err.Error(), tc.text) {
					t.Errorf("rank %d: %v, want it to mention %q", r, err, tc.text)
				}
				if !strings.Contains(err.Error(), fmt.Sprintf("rank %d", r)) {
					t.Errorf("rank %d: %v does not name the rank", r, err)
				}
				if tc.nocalls && len(run.drvs[r].callList()) != 0 {
					t.Errorf("rank %d called the driver: %v", r, run.drvs[r].callList())
				}
			}
			expectNothingLeft(t, run.sys, fds, "after the failed setup")
		})
	}
}

// runDisagree is run with rank 1's Capacity one larger.
func (c gpuCase) runDisagree(t testing.TB) gpuRun {
	t.Helper()
	sys := newFakeSys(c.cfg)
	run := gpuRun{sys: sys, drvs: make([]*fakeDrv, c.size), backends: make([]Backend, c.size)}
	for r := range c.size {
		run.drvs[r] = sys.driver(r, cuda.Device(r))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	run.errs = onRanks(c.size, func(r int, ex Exchanger) error {
		cfg := c.mbox
		if r == 1 {
			cfg.Capacity++
		}
		u, err := NewUnicast(ctx, ex, run.drvs[r], run.drvs[r].dev, cfg)
		if u != nil {
			run.backends[r] = u
		}
		return err
	})
	return run
}

// multicastSetup is each rank's exact call sequence, as DESIGN.md orders
// it: query, (rank 0) create and export, (others) import, add the device;
// then allocate, bind, map the multicast object, map the local memory;
// then arm.
func multicastSetup(rank int, fabric bool) []string {
	calls := []string{"DeviceAttribute(132)", "DeviceAttribute(102)", "DeviceAttribute(128)", "MulticastGetGranularity", "MemGetAllocationGranularity"}
	typ := "POSIX_FD"
	if fabric {
		typ = "FABRIC"
	}
	switch {
	case rank == 0 && fabric:
		calls = append(calls, "MulticastCreate(FABRIC)", "MemExportFabric(mc)")
	case rank == 0:
		calls = append(calls, "MulticastCreate(POSIX_FD)", "MemExportPOSIXFD(mc)")
	case fabric:
		calls = append(calls, "MemImportFabric")
	default:
		calls = append(calls, "MemImportPOSIXFD")
	}
	return append(calls, "MulticastAddDevice",
		"MemCreate("+typ+")", "MulticastBindMem",
		"MemAddressReserve", "MemMap(mc)", "MemSetAccess(mc)",
		"MemAddressReserve", "MemMap(mem)", "MemSetAccess(mem)",
		"MemsetD32(mem)", "CtxSynchronize")
}

// multicastTeardown: the multicast mapping goes before the memory it is
// bound to, the multicast object last.
var multicastTeardown = []string{
	"MemUnmap(mc)", "MemAddressFree(mc)", "MulticastUnbind",
	"MemUnmap(mem)", "MemAddressFree(mem)", "MemRelease(mem)", "MemRelease(mc)",
}

func TestMulticastCallOrder(t *testing.T) {
	rng := newRng(t)
	for _, tc := range []struct {
		desc   string
		cfg    fakeCfg
		fabric bool
		reason string
	}{
		{desc: "POSIX FD", cfg: fakeCfg{}, reason: "reports no FABRIC"},
		{desc: "FABRIC", cfg: fakeCfg{attr: fabricAttr}, fabric: true},
	} {
		for _, size := range []int{2, 4, 8} {
			t.Run(fmt.Sprintf("%s/tp%d", tc.desc, size), func(t *testing.T) {
				fds := countFDs(t)
				run := gpuCase{size: size, multicast: true, cfg: tc.cfg}.run(t, rng, nil)
				run.mustSucceed(t)
				for r, b := range run.backends {
					m := b.(*Multicast)
					if got, want := run.drvs[r].callList(), multicastSetup(r, tc.fabric); !slices.Equal(got, want) {
						t.Errorf("rank %d setup calls:\n%s\nwant:\n%s", r, joinLines(got), joinLines(want))
					}
					if m.MulticastPtr() == 0 || m.Local() == 0 || m.MulticastPtr() == m.Local() || m.Name() != "multicast" {
						t.Errorf("rank %d: multicast %#x, local %#x", r, uint64(m.MulticastPtr()), uint64(m.Local()))
					}
					if !strings.Contains(m.HandleReason(), tc.reason) || (tc.fabric != (m.HandleType() == cuda.HandleTypeFabric)) {
						t.Errorf("rank %d: handle type %v, reason %q", r, m.HandleType(), m.HandleReason())
					}
					local, ok := run.drvs[r].mappedObj(m.Local())
					if !ok || local.fill != Sentinel || local.filled < uint64(m.Layout().Bytes) || local.boundTo == 0 {
						t.Errorf("rank %d: local memory not armed or not bound: %+v", r, local)
					}
				}
				// Across ranks: every device is added before any rank binds.
				lastAdd, firstBind := 0, int(^uint(0)>>1)
				for _, e := range run.sys.events() {
					switch e.op {
					case "MulticastAddDevice":
						lastAdd = max(lastAdd, e.seq)
					case "MulticastBindMem":
						firstBind = min(firstBind, e.seq)
					}
				}
				if lastAdd > firstBind {
					t.Errorf("a device was added (call %d) after a rank bound (call %d)", lastAdd, firstBind)
				}
				setup := make([]int, size)
				for r := range size {
					setup[r] = len(run.drvs[r].callList())
				}
				if err := errors.Join(run.closeAll(t)...); err != nil {
					t.Fatalf("Close: %v", err)
				}
				for r := range size {
					if got := run.drvs[r].callList()[setup[r]:]; !slices.Equal(got, multicastTeardown) {
						t.Errorf("rank %d teardown calls:\n%s\nwant:\n%s", r, joinLines(got), joinLines(multicastTeardown))
					}
				}
				expectNothingLeft(t, run.sys, fds, "after Close")
			})
		}
	}
}

func joinLines(s []string) string { return "  " + strings.Join(s, "\n  ") }

func TestMulticastFabricFallback(t *testing.T) {
	rng := newRng(t)
	fds := countFDs(t)
	run := gpuCase{size: 4, multicast: true, cfg: fakeCfg{attr: fabricAttr, fabricCreateErr: cuda.ErrNotPermitted}}.run(t, rng, nil)
	run.mustSucceed(t)
	for r, b := range run.backends {
		m := b.(*Multicast)
		if m.HandleType() != cuda.HandleTypePOSIXFD || !strings.Contains(m.HandleReason(), "rank 0: ") || !strings.Contains(m.HandleReason(), "NOT_PERMITTED") {
			t.Errorf("rank %d: handle type %v, reason %q", r, m.HandleType(), m.HandleReason())
		}
	}
	if calls := run.drvs[0].callList(); !inOrder(calls, []string{"MulticastCreate(FABRIC)", "MulticastCreate(POSIX_FD)", "MemExportPOSIXFD(mc)"}) {
		t.Errorf("rank 0 did not fall back:\n%s", joinLines(calls))
	}
	if err := errors.Join(run.closeAll(t)...); err != nil {
		t.Fatal(err)
	}
	expectNothingLeft(t, run.sys, fds, "after Close")
}

func TestMulticastRefusedBySafetyRule(t *testing.T) {
	rng := newRng(t)
	for _, tc := range []struct {
		desc, name, value string
		onlyRank          int // -1: every rank has the variable
	}{
		{"NCCL NVLS off", "NCCL_NVLS_ENABLE", "0", -1},
		{"PyTorch symmetric memory multicast off", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "1", -1},
		{"NVSHMEM NVLS off", "NVSHMEM_DISABLE_NVLS", "1", -1},
		{"tprun multicast off", "TPRUN_MULTICAST", "0", -1},
		{"tprun multicast off, written as a word", "TPRUN_MULTICAST", "false", -1},
		{"only rank 1 has NCCL NVLS off", "NCCL_NVLS_ENABLE", "0", 1},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			fds := countFDs(t)
			env := func(string) string { return "" }
			blocked := func(key string) string {
				if key == tc.name {
					return tc.value
				}
				return ""
			}
			c := gpuCase{size: 3, multicast: true, cfg: fakeCfg{attr: fabricAttr}, perRank: func(r int) []GPUOption {
				if tc.onlyRank < 0 || r == tc.onlyRank {
					return []GPUOption{WithGetenv(blocked)}
				}
				return []GPUOption{WithGetenv(env)}
			}}
			run := c.run(t, rng, nil)
			for r, err := range run.errs {
				if err == nil {
					t.Fatalf("rank %d: multicast created under %s=%s", r, tc.name, tc.value)
				}
				if !strings.Contains(err.Error(), tc.name) {
					t.Errorf("rank %d: %v does not name %s", r, err, tc.name)
				}
				if tc.onlyRank >= 0 && r != tc.onlyRank {
					continue
				}
				var de *MulticastDisabledError
				if !errors.As(err, &de) || de.Variable != tc.name || !errors.Is(err, ErrMulticastDisabled) {
					t.Errorf("rank %d: %v, want a *MulticastDisabledError naming %s", r, err, tc.name)
				}
				if calls := run.drvs[r].callList(); len(calls) != 0 {
					t.Errorf("rank %d made driver calls although refused: %v", r, calls)
				}
			}
			// Ranks without the variable may query the device, but no
			// rank may create anything.
			for _, d := range run.drvs {
				for _, call := range d.callList() {
					if !strings.HasPrefix(call, "DeviceAttribute") && !strings.HasSuffix(call, "Granularity") {
						t.Errorf("rank %d called %s", d.rank, call)
					}
				}
			}
			expectNothingLeft(t, run.sys, fds, "after the refusal")
		})
	}
}

// TestFailureAtEveryCall injects a failure into every driver call of a
// successful run, one at a time, on every rank. A failure during setup
// must give every rank an error (naming the failed rank) and leave nothing
// behind; one during Close must make that Close fail without breaking a
// driver rule.
func TestFailureAtEveryCall(t *testing.T) {
	rng := newRng(t)
	for _, c := range []struct {
		desc string
		c    gpuCase
	}{
		{"unicast POSIX FD", gpuCase{size: 3}},
		{"unicast fabric fallback", gpuCase{size: 3, cfg: fakeCfg{attr: fabricAttr, fabricExportErr: cuda.ErrNotPermitted}}},
		{"unicast FABRIC", gpuCase{size: 2, cfg: fakeCfg{attr: fabricAttr}}},
		{"multicast POSIX FD", gpuCase{size: 3, multicast: true}},
		{"multicast fabric fallback", gpuCase{size: 3, multicast: true, cfg: fakeCfg{attr: fabricAttr, fabricCreateErr: cuda.ErrNotPermitted}}},
		{"multicast FABRIC", gpuCase{size: 2, multicast: true, cfg: fakeCfg{attr: fabricAttr}}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			c.c.mbox = c.c.config(rng)
			clean := c.c.run(t, rng, nil)
			clean.mustSucceed(t)
			clean.closeAll(t)
			total := make([]int, c.c.size)
			for r, d := range clean.drvs {
				total[r] = len(d.callList())
			}
			runs := 0
			for fr := range c.c.size {
				for k := 1; k <= total[fr]; k++ {
					runs++
					fds := countFDs(t)
					run := c.c.run(t, rng, func(drvs []*fakeDrv) { drvs[fr].setFailAt(k) })
					what := fmt.Sprintf("failure at rank %d's call %d", fr, k)
					if k <= clean.setup[fr] {
						call := run.drvs[fr].callList()[k-1]
						for r, err := range run.errs {
							if err == nil {
								t.Fatalf("%s (%s): rank %d succeeded", what, call, r)
							}
							if !strings.Contains(err.Error(), "injected") || (r != fr && !strings.Contains(err.Error(), fmt.Sprintf("rank %d", fr))) {
								t.Errorf("%s (%s): rank %d: %v", what, call, r, err)
							}
						}
						if isRelease(call) {
							// A release that fails leaves its resource
							// behind, with the real driver too; it must
							// not break a rule on the way.
							if v := run.sys.violationList(); len(v) > 0 {
								t.Errorf("%s (%s) broke driver rules: %v", what, call, v)
							}
							continue
						}
						expectNothingLeft(t, run.sys, fds, what+" ("+call+")")
						continue
					}
					run.mustSucceed(t)
					errs := run.closeAll(t)
					call := run.drvs[fr].callList()[k-1]
					for r, err := range errs {
						if (r == fr) != (err != nil) || (err != nil && !strings.Contains(err.Error(), "injected")) {
							t.Errorf("%s (%s, in Close): rank %d's Close: %v", what, call, r, err)
						}
					}
					if v := run.sys.violationList(); len(v) > 0 {
						t.Errorf("%s (%s, in Close) broke driver rules: %v", what, call, v)
					}
				}
			}
			t.Logf("%d injected failures", runs)
		})
	}
}

// isRelease: a call that gives something back.
func isRelease(call string) bool {
	for _, p := range []string{"MemRelease", "MemUnmap", "MemAddressFree", "MulticastUnbind"} {
		if strings.HasPrefix(call, p) {
			return true
		}
	}
	return false
}

// TestNoLeakAfter1000Cycles: create and close both backends 1,000 times;
// the fake ends with nothing outstanding and no descriptor is left open.
func TestNoLeakAfter1000Cycles(t *testing.T) {
	rng := newRng(t)
	for _, c := range []struct {
		desc string
		c    gpuCase
	}{
		{"unicast", gpuCase{size: 2}},
		{"multicast", gpuCase{size: 2, multicast: true}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			cycles := 1000
			if testing.Short() {
				cycles = 100
			}
			fds := countFDs(t)
			c.c.mbox = c.c.config(rng)
			sys := newFakeSys(c.c.cfg)
			drvs := []*fakeDrv{sys.driver(0, 0), sys.driver(1, 1)}
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
			defer cancel()
			for cycle := range cycles {
				errs := onRanks(2, func(r int, ex Exchanger) error {
					var b Backend
					var err error
					if c.c.multicast {
						var m *Multicast
						if m, err = NewMulticast(ctx, ex, drvs[r], drvs[r].dev, c.c.mbox, WithGetenv(noSafetyEnv)); err == nil {
							b = m
						}
					} else {
						var u *Unicast
						if u, err = NewUnicast(ctx, ex, drvs[r], drvs[r].dev, c.c.mbox); err == nil {
							b = u
						}
					}
					if err != nil {
						return err
					}
					return b.Close()
				})
				if err := errors.Join(errs...); err != nil {
					t.Fatalf("cycle %d: %v", cycle, err)
				}
			}
			expectNothingLeft(t, sys, fds, fmt.Sprintf("after %d cycles", cycles))
		})
	}
}

func TestGPUMsgRoundTrip(t *testing.T) {
	rng := newRng(t)
	for range 200 {
		m := gpuMsg{phase: phase(1 + rng.IntN(7)), vals: make([]uint64, rng.IntN(maxVals+1))}
		for i := range m.vals {
			m.vals[i] = rng.Uint64()
		}
		if rng.IntN(2) == 0 {
			m.err = strings.Repeat("e", 1+rng.IntN(maxErrText))
		}
		m.blob = make([]byte, rng.IntN(maxBlob+1))
		for i := range m.blob {
			m.blob[i] = byte(rng.Uint32())
		}
		got, err := decodeGPUMsg(m.encode())
		if err != nil {
			t.Fatalf("decode(encode(%+v)): %v", m, err)
		}
		if got.phase != m.phase || got.err != m.err || !slices.Equal(got.vals, m.vals) || string(got.blob) != string(m.blob) {
			t.Fatalf("round trip: got %+v, want %+v", got, m)
		}
	}
}

func TestDecodeGPUMsgRejects(t *testing.T) {
	good := gpuMsg{phase: phaseHello, vals: []uint64{1, 2}, err: "x", blob: []byte("yz")}.encode()
	for _, tc := range []struct {
		desc string
		b    []byte
		want string
	}{
		{"empty", nil, "at least"},
		{"wrong magic", append([]byte("XXXX"), good[4:]...), "magic"},
		{"wrong version", append(append([]byte(nil), good[:4]...), append([]byte{9}, good[5:]...)...), "version"},
		{"too many numbers", append(append([]byte(nil), good[:6]...), append([]byte{maxVals + 1}, good[7:]...)...), "numbers"},
		{"truncated numbers", good[:10], "truncated"},
		{"truncated text", good[:len(good)-5], "does not fit"},
		{"trailing bytes", append(append([]byte(nil), good...), 0), "trailing"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			_, err := decodeGPUMsg(tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an error mentioning %q", err, tc.want)
			}
		})
	}
}

func FuzzDecodeGPUMsg(f *testing.F) {
	f.Add(gpuMsg{phase: phaseHello, vals: []uint64{1, 2, 3}, err: "boom", blob: []byte{1, 2}}.encode())
	f.Add(gpuMsg{phase: phaseArm}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeGPUMsg(b)
		if err != nil {
			return
		}
		if again, err := decodeGPUMsg(m.encode()); err != nil || again.phase != m.phase || again.err != m.err ||
			!slices.Equal(again.vals, m.vals) || string(again.blob) != string(m.blob) {
			t.Fatalf("re-encoding %+v gives %+v, %v", m, again, err)
		}
	})
}

// noSafetyEnv is an environment without any multicast safety variable, for
// fake-driver tests that must behave the same on a GPU machine that sets them.
func noSafetyEnv(string) string { return "" }
