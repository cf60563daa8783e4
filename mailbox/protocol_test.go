package mailbox

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"time"
)

// Test content: every element encodes (seed, step, rank, row, position)
// through a hash, so a torn word, a stale step, a neighbour's column or
// another row all show up as a mismatch. A sixteenth of the pairs each are
// the sentinel before sanitizing, two -0s, one -0, and two +0s.

func splitmix(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// stepM is the number of rows every rank uses at step.
func stepM(seed, step uint64, capacity int) int {
	return 1 + int(splitmix(seed^splitmix(step))%uint64(capacity))
}

// pairAt is the raw (unsanitized) pair at row, pair index j of rank's slice.
func pairAt(seed, step uint64, rank, row, j int) (lo, hi uint16) {
	h := splitmix(splitmix(seed^step*0x2545f4914f6cdd1d) ^ uint64(rank)<<40 ^ uint64(row)<<24 ^ uint64(j))
	lo, hi = uint16(h), uint16(h>>16)
	switch h >> 60 {
	case 0:
		return 0x0000, 0x8000 // the sentinel word itself
	case 1:
		return 0x8000, 0x8000
	case 2:
		return 0x8000, hi
	case 3:
		return lo, 0x8000
	case 4:
		return 0, 0
	}
	return lo, hi
}

// fillSlice writes rank's raw slice for step (m rows of shard) into s.
func fillSlice(s []uint16, seed, step uint64, rank, m, shard int) {
	for row := 0; row < m; row++ {
		for j := 0; j < shard/2; j++ {
			s[row*shard+2*j], s[row*shard+2*j+1] = pairAt(seed, step, rank, row, j)
		}
	}
}

func sanitizeHalf(v uint16) uint16 {
	if v == 0x8000 {
		return 0
	}
	return v
}

var errMismatch = errors.New("received block differs")

// checkBlock compares a received block with the expected one for step and
// describes the first difference, saying whose slice it belongs to and
// whether it is a known earlier step (stale).
func checkBlock(out []uint16, l Layout, seed, step uint64, m int) error {
	for row := 0; row < m; row++ {
		for r := 0; r < l.Size; r++ {
			for j := 0; j < l.Shard/2; j++ {
				lo, hi := pairAt(seed, step, r, row, j)
				e := l.Element(row, r, 2*j)
				gotLo, gotHi := out[e], out[e+1]
				if gotLo == sanitizeHalf(lo) && gotHi == sanitizeHalf(hi) {
					continue
				}
				what := "wrong"
				for other := max(step, 3) - 3; other <= step+3; other++ {
					plo, phi := pairAt(seed, other, r, row, j)
					if other != step && gotLo == sanitizeHalf(plo) && gotHi == sanitizeHalf(phi) {
						what = fmt.Sprintf("step %d's value", other)
					}
				}
				return fmt.Errorf("%w: step %d m %d: row %d, rank %d's pair %d (element %d): got %#04x %#04x, want %#04x %#04x: %s",
					errMismatch, step, m, row, r, j, e, gotLo, gotHi, sanitizeHalf(lo), sanitizeHalf(hi), what)
			}
		}
	}
	return nil
}

// runProtocol drives steps on every host, each rank with its own random
// delays, checking every received block exactly and that out beyond the
// block is untouched.
func runProtocol(ctx context.Context, hosts []*Host, seed uint64, steps int) []error {
	l := hosts[0].Layout()
	sink := make([]uint64, len(hosts)) // keeps the busy-wait delays from being optimized away
	return onRanks(len(hosts), func(r int, _ Exchanger) error {
		h := hosts[r]
		rng := rand.New(rand.NewPCG(seed, uint64(r)))
		slice := make([]uint16, l.Capacity*l.Shard)
		out := make([]uint16, l.Capacity*l.Hidden+16)
		delay := func() {
			switch n := rng.IntN(1024); {
			case n == 0:
				time.Sleep(time.Duration(rng.IntN(300)) * time.Microsecond)
			case n < 64:
				for range rng.IntN(4) + 1 {
					runtime.Gosched()
				}
			case n < 192:
				x := rng.Uint64()
				for range rng.IntN(20000) {
					x = x*6364136223846793005 + 1
				}
				sink[r] = x
			}
		}
		for s := range steps {
			step := uint64(s)
			m := stepM(seed, step, l.Capacity)
			fillSlice(slice, seed, step, r, m, l.Shard)
			delay()
			if err := h.Write(ctx, step, m, slice[:m*l.Shard]); err != nil {
				return err
			}
			delay()
			p := rng.Uint64()
			for i := range out {
				p = p*6364136223846793005 + 1442695040888963407
				out[i] = uint16(p >> 48) // poison: a missed copy cannot pass
			}
			guard := append([]uint16(nil), out[m*l.Hidden:]...)
			if err := h.Receive(ctx, step, m, out); err != nil {
				return err
			}
			if err := checkBlock(out, l, seed, step, m); err != nil {
				return fmt.Errorf("rank %d: %w", r, err)
			}
			for i, g := range guard {
				if out[m*l.Hidden+i] != g {
					return fmt.Errorf("%w: rank %d step %d: Receive wrote element %d beyond m*hidden = %d", errMismatch, r, step, m*l.Hidden+i, m*l.Hidden)
				}
			}
		}
		return nil
	})
}

func TestProtocolProperty(t *testing.T) {
	steps := 10000
	if testing.Short() {
		steps = 1000
	}
	cases := []struct {
		desc        string
		size, shard int
		slots       int
		capacity    int
	}{
		{desc: "4 ranks, 2 slots (the minimum)", size: 4, shard: 16, slots: 2, capacity: 4},
		{desc: "4 ranks, 3 slots (the default)", size: 4, shard: 16, slots: 3, capacity: 4},
		{desc: "8 ranks, 2 slots", size: 8, shard: 8, slots: 2, capacity: 3},
		{desc: "8 ranks, 3 slots", size: 8, shard: 8, slots: 3, capacity: 3},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %#x", seed)
			hosts := newHosts(t, tc.size, Config{Hidden: tc.size * tc.shard, Capacity: tc.capacity, Slots: tc.slots, Deadline: 20 * time.Second})
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			start := time.Now()
			if err := errors.Join(runProtocol(ctx, hosts, seed, steps)...); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d steps in %v", steps, time.Since(start))
		})
	}
}

// TestOneSlotIsCaught is the negative control: forcing a single slot (which
// NewLayout refuses) must make the same check fail, either by a mixed or
// stale block or by a receive that never completes because a peer's next
// write was wiped by the re-arm. It shows the property test can fail.
func TestOneSlotIsCaught(t *testing.T) {
	for attempt := range 5 {
		seed := rand.Uint64()
		hosts := newHosts(t, 4, Config{Hidden: 64, Capacity: 4, Slots: 2, Deadline: 300 * time.Millisecond})
		for _, h := range hosts {
			h.layout.Slots = 1 // bypass validation: every step now uses slot 0
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		err := errors.Join(runProtocol(ctx, hosts, seed, 3000)...)
		cancel()
		if err != nil {
			var te *TimeoutError
			if !errors.As(err, &te) && !errors.Is(err, errMismatch) && !errors.Is(err, ErrBroken) {
				t.Fatalf("unexpected failure kind: %v", err)
			}
			t.Logf("attempt %d: one slot caught: %.200v", attempt, err)
			return
		}
	}
	t.Fatal("a single slot survived 5 × 3000 steps unnoticed: the property check cannot see protocol violations")
}

func TestStepOrder(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		desc string
		run  func(h *Host) error
		want error
	}{
		{"write step 1 first", func(h *Host) error { return h.Write(ctx, 1, 1, make([]uint16, 8)) }, ErrStepOrder},
		{"receive before write", func(h *Host) error { return h.Receive(ctx, 0, 1, make([]uint16, 8)) }, ErrStepOrder},
		{"write twice", func(h *Host) error {
			if err := h.Write(ctx, 0, 1, make([]uint16, 8)); err != nil {
				return err
			}
			return h.Write(ctx, 0, 1, make([]uint16, 8))
		}, ErrStepOrder},
		{"write next step before receive", func(h *Host) error {
			if err := h.Write(ctx, 0, 1, make([]uint16, 8)); err != nil {
				return err
			}
			return h.Write(ctx, 1, 1, make([]uint16, 8))
		}, ErrStepOrder},
		{"receive another step", func(h *Host) error {
			if err := h.Write(ctx, 0, 1, make([]uint16, 8)); err != nil {
				return err
			}
			return h.Receive(ctx, 1, 1, make([]uint16, 8))
		}, ErrStepOrder},
		{"m = 0", func(h *Host) error { return h.Write(ctx, 0, 0, make([]uint16, 8)) }, ErrArgument},
		{"m above capacity", func(h *Host) error { return h.Write(ctx, 0, 3, make([]uint16, 24)) }, ErrArgument},
		{"slice too short", func(h *Host) error { return h.Write(ctx, 0, 2, make([]uint16, 15)) }, ErrArgument},
		{"out too short", func(h *Host) error {
			if err := h.Write(ctx, 0, 2, make([]uint16, 16)); err != nil {
				return err
			}
			return h.Receive(ctx, 0, 2, make([]uint16, 15))
		}, ErrArgument},
		{"cancelled write", func(h *Host) error {
			c, cancel := context.WithCancel(ctx)
			cancel()
			return h.Write(c, 0, 1, make([]uint16, 8))
		}, context.Canceled},
		{"in order works", func(h *Host) error {
			for s := range uint64(7) {
				if err := h.Write(ctx, s, 1, make([]uint16, 8)); err != nil {
					return err
				}
				if err := h.Receive(ctx, s, 1, make([]uint16, 8)); err != nil {
					return err
				}
			}
			return nil
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			h := newHosts(t, 1, Config{Hidden: 8, Capacity: 2, Deadline: time.Second})[0]
			err := tc.run(h)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), "rank 0") {
				t.Errorf("error does not name the rank: %v", err)
			}
		})
	}
}
