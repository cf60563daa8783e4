package mailbox

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/internal/cuda"
)

// badFD is a descriptor number that can never be open (the kernel caps
// descriptors below 2^30), so closing it fails with EBADF without the risk
// that another goroutine reused the number, as a closed one could be.
const badFD = math.MaxInt32

// TestCloseFDs: every owned descriptor is closed even when some closes
// fail, negative ones are skipped, and each failure comes back naming its
// descriptor with the cause intact for errors.Is.
func TestCloseFDs(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		pattern string // o: an open memfd, n: -1, b: badFD
	}{
		{"nothing to close", ""},
		{"only negatives", "nn"},
		{"all open, all close", "ooo"},
		{"one bad in the middle: the rest still close", "obo"},
		{"bad first and last, negatives between", "bonob"},
		{"only bad", "bb"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			before := countFDs(t)
			var fds []int
			bad := 0
			for _, c := range tc.pattern {
				switch c {
				case 'o':
					fd, err := unix.MemfdCreate("closefds-test", unix.MFD_CLOEXEC)
					if err != nil {
						t.Fatal(err)
					}
					fds = append(fds, fd)
				case 'n':
					fds = append(fds, -1)
				case 'b':
					fds = append(fds, badFD)
					bad++
				}
			}
			var b gpuBase // closeFD nil: unix.Close
			err := b.closeFDs(fds...)
			if got := countFDs(t); got != before {
				t.Errorf("%d descriptors open after closeFDs(%v), %d before", got, fds, before)
			}
			if bad == 0 {
				if err != nil {
					t.Errorf("closeFDs(%v): %v", fds, err)
				}
				return
			}
			if !errors.Is(err, unix.EBADF) {
				t.Fatalf("closeFDs(%v) = %v, want EBADF", fds, err)
			}
			if n := strings.Count(err.Error(), fmt.Sprintf("close descriptor %d:", badFD)); n != bad {
				t.Errorf("closeFDs(%v) = %q: names the bad descriptor %d times, want %d", fds, err, n, bad)
			}
		})
	}
}

var errInjectedClose = errors.New("injected close failure")

// closeSpy closes for real (so nothing leaks) and fails the failAt-th
// close (1-based; 0: none), counting all of them.
type closeSpy struct {
	failAt int64
	n      atomic.Int64
}

func (s *closeSpy) close(fd int) error {
	err := unix.Close(fd)
	if s.n.Add(1) == s.failAt && err == nil {
		err = fmt.Errorf("%w (fd %d)", errInjectedClose, fd)
	}
	return err
}

// TestCloseFailureSurfaces makes each descriptor close of a GPU backend's
// setup fail in turn, on every rank: the rank whose close failed must
// report it (wrapped, errors.Is intact), every rank must fail (a close in
// setup is part of the collective; one in the constructor's cleanup fails
// at least that rank), and the cleanup must still have run to the end:
// nothing left in the fake driver, no descriptor left open, no driver rule
// broken.
func TestCloseFailureSurfaces(t *testing.T) {
	rng := newRng(t)
	for _, tc := range []struct {
		desc string
		c    gpuCase
		// failCall: a driver call (prefix) to fail on rank failRank as
		// well, so that the closes happen on the way out; "" for none.
		failCall string
		failRank int
		// peersKnow: the other ranks' errors name the rank whose close
		// failed (false where it fails only in its own cleanup).
		peersKnow bool
	}{
		{desc: "unicast POSIX FD: own export, imported and own dup descriptors", c: gpuCase{size: 3}, peersKnow: true},
		{desc: "unicast fabric fallback", c: gpuCase{size: 2, cfg: fakeCfg{attr: fabricAttr, fabricExportErr: cuda.ErrNotPermitted}}, peersKnow: true},
		{desc: "unicast POSIX FD, rank 1's map fails: closes on the error path", c: gpuCase{size: 3}, failCall: "MemMap", failRank: 1},
		{desc: "multicast POSIX FD: broadcast descriptors and the dropped export", c: gpuCase{size: 3, multicast: true}, peersKnow: true},
		{desc: "multicast fabric fallback", c: gpuCase{size: 2, multicast: true, cfg: fakeCfg{attr: fabricAttr, fabricCreateErr: cuda.ErrNotPermitted}}, peersKnow: true},
		{desc: "multicast POSIX FD, rank 1's bind fails: the export is dropped by Close", c: gpuCase{size: 3, multicast: true}, failCall: "MulticastBindMem", failRank: 1},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			c := tc.c
			c.mbox = c.config(rng)
			spies := make([]*closeSpy, c.size)
			c.perRank = func(r int) []GPUOption { return []GPUOption{withCloseFD(spies[r].close)} }
			newSpies := func(failRank int, failAt int64) {
				for r := range spies {
					spies[r] = &closeSpy{}
				}
				spies[failRank].failAt = failAt
			}
			// failAt: the driver call to fail on failRank, found in a clean run.
			failAt := 0
			prep := func(drvs []*fakeDrv) {
				if failAt > 0 {
					drvs[tc.failRank].setFailAt(failAt)
				}
			}

			newSpies(0, 0)
			clean := c.run(t, rng, nil)
			clean.mustSucceed(t)
			if tc.failCall != "" {
				failAt = 1 + slices.IndexFunc(clean.drvs[tc.failRank].callList(), func(s string) bool { return strings.HasPrefix(s, tc.failCall) })
				if failAt == 0 {
					t.Fatalf("rank %d never called %s", tc.failRank, tc.failCall)
				}
			}
			for r, err := range clean.closeAll(t) {
				if err != nil {
					t.Fatalf("rank %d: Close of a clean run: %v", r, err)
				}
			}
			if failAt > 0 {
				// The closes on the error path may differ from a clean run's.
				newSpies(0, 0)
				run := c.run(t, rng, prep)
				for r, err := range run.errs {
					if err == nil {
						t.Fatalf("rank %d: %s on rank %d did not fail setup", r, tc.failCall, tc.failRank)
					}
				}
			}
			counts := make([]int64, c.size)
			for r, s := range spies {
				counts[r] = s.n.Load()
			}
			if slices.Max(counts) == 0 {
				t.Fatalf("no rank closed a descriptor: nothing to inject")
			}

			runs := 0
			for fr := range c.size {
				for k := int64(1); k <= counts[fr]; k++ {
					runs++
					what := fmt.Sprintf("close %d of %d on rank %d failed", k, counts[fr], fr)
					fds := countFDs(t)
					newSpies(fr, k)
					run := c.run(t, rng, prep)
					if got := spies[fr].n.Load(); got < k {
						t.Fatalf("%s: rank %d closed only %d descriptors this time", what, fr, got)
					}
					for r, err := range run.errs {
						switch {
						case err == nil:
							t.Errorf("%s: rank %d succeeded", what, r)
						case r == fr && (!errors.Is(err, errInjectedClose) || !strings.Contains(err.Error(), "close descriptor")):
							t.Errorf("%s: its error lost the close failure or its context: %v", what, err)
						case r != fr && tc.peersKnow && !strings.Contains(err.Error(), fmt.Sprintf("rank %d", fr)):
							t.Errorf("%s: rank %d's error does not name rank %d: %v", what, r, fr, err)
						}
					}
					if v := run.sys.violationList(); len(v) > 0 {
						t.Errorf("%s: broke driver rules: %v", what, v)
					}
					run.closeAll(t)
					expectNothingLeft(t, run.sys, fds, what)
				}
			}
			t.Logf("%d injected close failures (closes per rank %v)", runs, counts)
		})
	}
}
