package mailbox

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestNewLayout(t *testing.T) {
	cases := []struct {
		desc    string
		cfg     Config
		size    int
		want    Layout
		wantErr string // substring; "" means success
	}{
		{desc: "defaults fill slots", cfg: Config{Hidden: 64, Capacity: 1}, size: 4,
			want: Layout{Hidden: 64, Capacity: 1, Slots: 3, Size: 4, Shard: 16, SlotBytes: 128, Bytes: 384}},
		{desc: "slot padded to 64 bytes", cfg: Config{Hidden: 6, Capacity: 3, Slots: 2}, size: 3,
			want: Layout{Hidden: 6, Capacity: 3, Slots: 2, Size: 3, Shard: 2, SlotBytes: 128, Bytes: 256}},
		{desc: "Kimi shape tp 8", cfg: Config{Hidden: 7168, Capacity: 8}, size: 8,
			want: Layout{Hidden: 7168, Capacity: 8, Slots: 3, Size: 8, Shard: 896, SlotBytes: 516096, Bytes: 1548288}},
		{desc: "odd tp with even shard", cfg: Config{Hidden: 30, Capacity: 1, Slots: 4}, size: 3,
			want: Layout{Hidden: 30, Capacity: 1, Slots: 4, Size: 3, Shard: 10, SlotBytes: 64, Bytes: 256}},
		{desc: "one slot refused", cfg: Config{Hidden: 64, Capacity: 1, Slots: 1}, size: 4, wantErr: "slots = 1, need at least 2"},
		{desc: "negative slots refused", cfg: Config{Hidden: 64, Capacity: 1, Slots: -3}, size: 4, wantErr: "slots = -3"},
		{desc: "negative deadline", cfg: Config{Hidden: 64, Capacity: 1, Deadline: -time.Second}, size: 4, wantErr: "deadline = -1s"},
		{desc: "zero hidden", cfg: Config{Capacity: 1}, size: 4, wantErr: "hidden = 0"},
		{desc: "zero capacity", cfg: Config{Hidden: 64}, size: 4, wantErr: "capacity = 0"},
		{desc: "zero size", cfg: Config{Hidden: 64, Capacity: 1}, size: 0, wantErr: "group size = 0"},
		{desc: "hidden not divisible", cfg: Config{Hidden: 64, Capacity: 1}, size: 3, wantErr: "hidden = 64 is not divisible by the group size 3"},
		{desc: "odd shard", cfg: Config{Hidden: 36, Capacity: 1}, size: 4, wantErr: "shard = hidden/size = 36/4 = 9 is odd"},
		{desc: "too big", cfg: Config{Hidden: 1 << 20, Capacity: 1 << 10}, size: 2, wantErr: "exceeds"},
		// One region per M up to 8 (36 rows) and a shared region of 128
		// rows: 164 rows of 7168 bf16 per slot.
		{desc: "Kimi shape tp 8 at capacity 128", cfg: Config{Hidden: 7168, Capacity: 128}, size: 8,
			want: Layout{Hidden: 7168, Capacity: 128, Slots: 3, Size: 8, Shard: 896, SlotBytes: 164 * 7168 * 2, Bytes: 3 * 164 * 7168 * 2}},
		{desc: "capacity 9 adds a shared region of 9 rows: 45 rows of 96 bytes, padded", cfg: Config{Hidden: 48, Capacity: 9, Slots: 2}, size: 3,
			want: Layout{Hidden: 48, Capacity: 9, Slots: 2, Size: 3, Shard: 16, SlotBytes: 4352, Bytes: 8704}},
		{desc: "regions too big", cfg: Config{Hidden: 1 << 14, Capacity: 1 << 14, Slots: 2}, size: 2, wantErr: "a slot holds 16420 rows for capacity 16384"},
		{desc: "huge values do not overflow", cfg: Config{Hidden: 1 << 40, Capacity: 1 << 40, Slots: 1 << 40}, size: 2, wantErr: "exceeds"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			got, err := NewLayout(tc.cfg, tc.size)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want ErrConfig mentioning %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
			for s := range uint64(2 * got.Slots) {
				if off := got.SlotOffset(s); off%64 != 0 || off+SlotRows(got.Capacity)*got.Hidden*2 > got.Bytes {
					t.Errorf("slot of step %d at %d: misaligned or past the end", s, off)
				}
				// The own regions of 1..min(Capacity, 8) rows tile the
				// slot, in order, without overlap; every larger M uses the
				// shared region of Capacity rows right after them.
				end := got.SlotOffset(s)
				for m := 1; m <= min(got.Capacity, OwnRegionRows); m++ {
					if off := got.StepOffset(s, m); off != end || got.RegionRows(m) != m {
						t.Errorf("step %d, M = %d: region at %d of %d rows, want %d (right after the region of M-1) of M rows", s, m, off, got.RegionRows(m), end)
					}
					end = got.StepOffset(s, m) + m*got.Hidden*2
				}
				if got.Capacity > OwnRegionRows {
					shared := end
					for m := OwnRegionRows + 1; m <= got.Capacity; m++ {
						if off := got.StepOffset(s, m); off != shared || got.RegionRows(m) != got.Capacity {
							t.Errorf("step %d, M = %d: region at %d of %d rows, want the shared one at %d of %d rows", s, m, off, got.RegionRows(m), shared, got.Capacity)
						}
					}
					end = shared + got.Capacity*got.Hidden*2
				}
				if end > got.SlotOffset(s)+got.SlotBytes {
					t.Errorf("step %d: the regions end at %d, past the slot's end %d", s, end, got.SlotOffset(s)+got.SlotBytes)
				}
			}
		})
	}
}

func TestSanitizeWord(t *testing.T) {
	cases := []struct {
		desc   string
		in, ok uint32
	}{
		{"sentinel becomes +0 +0", 0x80000000, 0x00000000},
		{"low -0", 0x3f808000, 0x3f800000},
		{"high -0", 0x80003f80, 0x00003f80},
		{"both -0", 0x80008000, 0},
		{"-1.0 halves untouched", 0xbf80bf80, 0xbf80bf80},
		{"smallest negative subnormal untouched", 0x80018001, 0x80018001},
		{"NaN untouched", 0x7fc0ffc0, 0x7fc0ffc0},
	}
	for _, tc := range cases {
		if got := sanitizeWord(tc.in); got != tc.ok {
			t.Errorf("%s: sanitizeWord(%#08x) = %#08x, want %#08x", tc.desc, tc.in, got, tc.ok)
		}
	}
	// Exhaustively over one half: no output equals the sentinel.
	for v := range uint32(1 << 16) {
		// Low halves 0x0000, 0x8000 and 0x1234.
		for _, w := range []uint32{v << 16, v<<16 | 0x8000, v<<16 | 0x1234} {
			if sanitizeWord(w) == Sentinel {
				t.Fatalf("sanitizeWord(%#08x) is the sentinel", w)
			}
		}
	}
}

func TestNewHostFreshWordsAreSentinel(t *testing.T) {
	hosts := newHosts(t, 2, Config{Hidden: 12, Capacity: 3, Slots: 2})
	for r, h := range hosts {
		for peer, ws := range h.words {
			if len(ws)*4 != h.layout.Bytes {
				t.Fatalf("rank %d's view of rank %d: %d words, want %d bytes", r, peer, len(ws), h.layout.Bytes)
			}
			for i := range ws {
				if w := atomic.LoadUint32(&ws[i]); w != Sentinel {
					t.Fatalf("rank %d's view of rank %d: word %d = %#x", r, peer, i, w)
				}
			}
		}
	}
	// Both ranks see the same memory: a store through one view shows in the other.
	atomic.StoreUint32(&hosts[0].words[1][5], 0x12345678)
	if got := atomic.LoadUint32(&hosts[1].words[1][5]); got != 0x12345678 {
		t.Fatalf("rank 1's own view reads %#x after rank 0 stored 0x12345678", got)
	}
}

func TestReceiveDeadlineNamesMissingRanks(t *testing.T) {
	cases := []struct {
		desc    string
		size    int
		silent  []int // ranks that never write step 3
		wantMsg string
	}{
		{"one silent rank", 4, []int{2}, "no slice from rank 2 after"},
		{"two silent ranks", 4, []int{1, 3}, "no slice from ranks 1, 3 after"},
		{"the only peer", 2, []int{0}, "no slice from rank 0 after"},
	}
	const deadline = 300 * time.Millisecond
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			hosts := newHosts(t, tc.size, Config{Hidden: 4 * tc.size, Capacity: 2, Deadline: deadline})
			l := hosts[0].Layout()
			ctx := context.Background()
			errs := onRanks(tc.size, func(r int, _ Exchanger) error {
				h := hosts[r]
				slice := make([]uint16, l.Capacity*l.Shard)
				out := make([]uint16, l.Capacity*l.Hidden)
				for s := range uint64(4) {
					if s == 3 && slices.Contains(tc.silent, r) {
						return nil
					}
					fillSlice(slice, 1, s, r, 2, l.Shard)
					if err := h.Write(ctx, s, 2, slice); err != nil {
						return err
					}
					start := time.Now()
					err := h.Receive(ctx, s, 2, out)
					if err != nil {
						if waited := time.Since(start); waited < deadline || waited > deadline+2*time.Second {
							t.Errorf("rank %d gave up after %v, deadline %v", r, waited, deadline)
						}
						return err
					}
				}
				return nil
			})
			for r, err := range errs {
				if slices.Contains(tc.silent, r) {
					if err != nil {
						t.Errorf("silent rank %d: %v", r, err)
					}
					continue
				}
				var te *TimeoutError
				if !errors.As(err, &te) || !errors.Is(err, ErrTimeout) {
					t.Fatalf("rank %d: err = %v, want a *TimeoutError", r, err)
				}
				if te.Rank != r || te.Step != 3 || te.Slot != 0 || !slices.Equal(te.Missing, tc.silent) || te.Waited < deadline {
					t.Errorf("rank %d: %+v, want step 3 slot 0 missing %v", r, te, tc.silent)
				}
				if !strings.Contains(err.Error(), tc.wantMsg) {
					t.Errorf("rank %d: message %q does not contain %q", r, err, tc.wantMsg)
				}
				// The slot is half-filled now: further steps are refused.
				if err := hosts[r].Write(ctx, 4, 1, make([]uint16, l.Shard)); !errors.Is(err, ErrBroken) || errors.Is(err, ErrTimeout) || !strings.Contains(err.Error(), "no slice from rank") {
					t.Errorf("rank %d: Write after timeout: %v, want ErrBroken (not ErrTimeout), naming the timeout in its text", r, err)
				}
			}
		})
	}
}

// A rank whose slice arrived only in part (one of two rows) is missing.
func TestReceivePartialSliceIsMissing(t *testing.T) {
	hosts := newHosts(t, 2, Config{Hidden: 8, Capacity: 2, Deadline: 100 * time.Millisecond})
	l := hosts[0].Layout()
	ctx := context.Background()
	if err := hosts[0].Write(ctx, 0, 2, make([]uint16, 2*l.Shard)); err != nil {
		t.Fatal(err)
	}
	// Rank 1 stores only its first row into rank 0's slot.
	l.storeSlice(l.slotWords(hosts[0].words[0], 0, 1), 1, 1, make([]uint16, l.Shard))
	err := hosts[0].Receive(ctx, 0, 2, make([]uint16, 2*l.Hidden))
	var te *TimeoutError
	if !errors.As(err, &te) || !slices.Equal(te.Missing, []int{1}) {
		t.Fatalf("err = %v, want a timeout missing rank 1", err)
	}
}

func TestReceiveStopsPromptly(t *testing.T) {
	cases := []struct {
		desc string
		stop func(h *Host, cancel context.CancelFunc)
		want error
	}{
		{"context cancelled", func(_ *Host, cancel context.CancelFunc) { cancel() }, context.Canceled},
		{"host closed", func(h *Host, _ context.CancelFunc) {
			if err := h.Close(); err != nil {
				t.Error(err)
			}
		}, ErrClosed},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			hosts := newHosts(t, 2, Config{Hidden: 8, Capacity: 1, Deadline: time.Minute})
			h := hosts[0]
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if err := h.Write(ctx, 0, 1, make([]uint16, 4)); err != nil {
				t.Fatal(err)
			}
			done := make(chan error, 1)
			go func() { done <- h.Receive(ctx, 0, 1, make([]uint16, 8)) }()
			time.Sleep(20 * time.Millisecond) // well into the sleeping phase
			stopped := time.Now()
			tc.stop(h, cancel)
			var err error
			select {
			case err = <-done:
			case <-time.After(5 * time.Second):
				t.Fatal("Receive did not return within 5 s")
			}
			if d := time.Since(stopped); d > time.Second {
				t.Errorf("Receive returned %v after the stop", d)
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), "rank 0") {
				t.Fatalf("err = %v, want %v naming rank 0", err, tc.want)
			}
		})
	}
}

func TestCloseIdempotent(t *testing.T) {
	h := newHosts(t, 1, Config{Hidden: 8, Capacity: 1})[0]
	for i := range 3 {
		if err := h.Close(); err != nil {
			t.Fatalf("Close #%d: %v", i+1, err)
		}
	}
	ctx := context.Background()
	if err := h.Write(ctx, 0, 1, make([]uint16, 8)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if err := h.Receive(ctx, 0, 1, make([]uint16, 8)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Receive after Close: %v", err)
	}
}

func TestNewHostRejectsDisagreement(t *testing.T) {
	cases := []struct {
		desc string
		odd  Config // rank 1's config; the others use Config{Hidden: 48, Capacity: 2}
		want string
	}{
		{"hidden", Config{Hidden: 96, Capacity: 2}, "rank 1 has hidden=96"},
		{"capacity", Config{Hidden: 48, Capacity: 4}, "rank 1 has hidden=48 capacity=4"},
		{"slots", Config{Hidden: 48, Capacity: 2, Slots: 2}, "slots=2"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			errs := onRanks(3, func(r int, ex Exchanger) error {
				cfg := Config{Hidden: 48, Capacity: 2}
				if r == 1 {
					cfg = tc.odd
				}
				h, err := NewHost(ctx, ex, cfg)
				if err == nil {
					_ = h.Close()
				}
				return err
			})
			for r, err := range errs {
				if !errors.Is(err, ErrConfig) {
					t.Fatalf("rank %d: err = %v, want ErrConfig", r, err)
				}
			}
			for _, r := range []int{0, 2} {
				if !strings.Contains(errs[r].Error(), tc.want) {
					t.Errorf("rank %d: %q does not contain %q", r, errs[r], tc.want)
				}
			}
		})
	}
}

// badPeer wraps a fake rank and replaces what it contributes.
type badPeer struct {
	*fakeRank
	hello func([]byte) []byte
	fd    func(t *testing.T, good int) int
	t     *testing.T
}

func (b *badPeer) AllGather(ctx context.Context, p []byte) ([][]byte, error) {
	if b.hello != nil && len(p) >= 4 && string(p[:4]) == "TPMB" {
		p = b.hello(p)
	}
	return b.fakeRank.AllGather(ctx, p)
}

func (b *badPeer) AllGatherFDs(ctx context.Context, fd int) ([]int, error) {
	if b.fd != nil {
		bad := b.fd(b.t, fd)
		defer unix.Close(bad)
		fd = bad
	}
	return b.fakeRank.AllGatherFDs(ctx, fd)
}

func memfd(t *testing.T, size int, seal bool) int {
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if seal {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
			t.Fatal(err)
		}
	}
	return fd
}

func TestNewHostRejectsBadPeer(t *testing.T) {
	const bytes = 3 * 64 // Config{Hidden: 24, Capacity: 1} at size 3
	cases := []struct {
		desc  string
		hello func([]byte) []byte
		fd    func(t *testing.T, good int) int
		want  string
		errIs error
	}{
		{desc: "a pipe instead of a memfd", fd: func(t *testing.T, _ int) int {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			_ = unix.Close(p[1])
			return p[0]
		}, want: "rank 1's mailbox is 0 bytes", errIs: ErrPeer},
		{desc: "unsealed memfd", fd: func(t *testing.T, _ int) int { return memfd(t, bytes, false) }, want: "rank 1's mailbox memfd is not sealed", errIs: ErrPeer},
		{desc: "sealed memfd of the wrong size", fd: func(t *testing.T, _ int) int { return memfd(t, 2*bytes, true) }, want: "rank 1's mailbox is 384 bytes, the layout needs 192", errIs: ErrPeer},
		{desc: "truncated description", hello: func(p []byte) []byte { return p[:10] }, want: "rank 1: description is 10 bytes", errIs: ErrPeer},
		{desc: "wrong magic", hello: func(p []byte) []byte { q := slices.Clone(p); q[0] = 'X'; return q }, want: "rank 1: description has magic", errIs: ErrPeer},
		{desc: "peer's local failure", hello: func(p []byte) []byte { return append(slices.Clone(p), "memfd_create: no memory"...) }, want: "rank 1: memfd_create: no memory", errIs: ErrPeer},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			hub := newFakeHub(3)
			errs := make([]error, 3)
			var wg sync.WaitGroup
			for r := range 3 {
				var ex Exchanger = hub.rank(r)
				if r == 1 {
					ex = &badPeer{fakeRank: hub.rank(r), hello: tc.hello, fd: tc.fd, t: t}
				}
				wg.Go(func() {
					h, err := NewHost(ctx, ex, Config{Hidden: 24, Capacity: 1})
					if err == nil {
						_ = h.Close()
					}
					errs[r] = err
				})
			}
			wg.Wait()
			for r, err := range errs {
				if !errors.Is(err, tc.errIs) {
					t.Errorf("rank %d: err = %v, want %v", r, err, tc.errIs)
				}
			}
			for _, r := range []int{0, 2} {
				if errs[r] != nil && !strings.Contains(errs[r].Error(), tc.want) {
					t.Errorf("rank %d: %q does not contain %q", r, errs[r], tc.want)
				}
			}
			// The bad rank learns that its peers could not map its memory.
			if tc.fd != nil && (errs[1] == nil || !strings.Contains(errs[1].Error(), "mapping mailboxes failed on rank 0")) {
				t.Errorf("rank 1: %v, want it to name rank 0's failure", errs[1])
			}
		})
	}
}

// countFDs and countMappings look at this process only.
func countFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func countMappings(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if strings.Contains(sc.Text(), "memfd:tprun-mailbox") {
			n++
		}
	}
	return n
}

func TestNoLeakAfterManyCycles(t *testing.T) {
	fds, maps := countFDs(t), countMappings(t)
	ctx := context.Background()
	for cycle := range 60 {
		size := 1 + cycle%4
		errs := onRanks(size, func(r int, ex Exchanger) error {
			h, err := NewHost(ctx, ex, Config{Hidden: 16 * size, Capacity: 2})
			if err != nil {
				return err
			}
			// Use it once so that the mappings are really touched.
			if err := h.Write(ctx, 0, 1, make([]uint16, 16)); err != nil {
				return err
			}
			if err := h.Receive(ctx, 0, 1, make([]uint16, 16*size)); err != nil {
				return err
			}
			if got := countMappings(t); got < size {
				t.Errorf("cycle %d: %d mailbox mappings while open, want at least %d", cycle, got, size)
			}
			return errors.Join(h.Close(), h.Close())
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("cycle %d: %v", cycle, err)
		}
	}
	if got := countFDs(t); got > fds {
		t.Errorf("%d descriptors open after 60 cycles, %d before", got, fds)
	}
	if got := countMappings(t); got != maps {
		t.Errorf("%d mailbox mappings after 60 cycles, %d before", got, maps)
	}
}

func FuzzDecodeHello(f *testing.F) {
	l, err := NewLayout(Config{Hidden: 64, Capacity: 8}, 4)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(encodeHello(l, nil))
	f.Add(encodeHello(l, errors.New("boom")))
	f.Add([]byte("TPMB"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := decodeHello(b)
		if err != nil {
			return
		}
		if len(h.err) > maxErrText || h.hidden < 0 || h.bytes < 0 {
			t.Fatalf("decoded %+v from %x", h, b)
		}
	})
}

func TestHelloRoundTrip(t *testing.T) {
	for range 20 {
		l := Layout{Hidden: rand.IntN(1 << 20), Capacity: rand.IntN(64), Slots: rand.IntN(9), Size: rand.IntN(16), Bytes: rand.IntN(1 << 30)}
		h, err := decodeHello(encodeHello(l, errors.New("x")))
		if err != nil || h.hidden != l.Hidden || h.capacity != l.Capacity || h.slots != l.Slots || h.size != l.Size || h.bytes != l.Bytes || h.err != "x" {
			t.Fatalf("round trip of %+v: %+v, %v", l, h, err)
		}
	}
}

// TestMismatchedMFailsEveryRank: ranks that pass different M for a step
// must not complete it. Each M has its own region of the slot, so no rank
// finds a whole block; every rank times out, and the error names the ranks
// that stored another M. Before the regions, the rank with the smaller M
// returned a block without error and the rows its peer stored past it
// stayed unarmed for a later step.
func TestMismatchedMFailsEveryRank(t *testing.T) {
	const deadline = 200 * time.Millisecond
	for _, tc := range []struct {
		desc string
		ms   []int // the M each rank passes at step 2
	}{
		{"smaller M first", []int{2, 3}},
		{"larger M first", []int{4, 1}},
		{"one rank of three", []int{3, 3, 1}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			size := len(tc.ms)
			hosts := newHosts(t, size, Config{Hidden: 4 * size, Capacity: 4, Deadline: deadline})
			l := hosts[0].Layout()
			ctx := context.Background()
			errs := onRanks(size, func(r int, _ Exchanger) error {
				h := hosts[r]
				slice := make([]uint16, l.Capacity*l.Shard)
				out := make([]uint16, l.Capacity*l.Hidden)
				for s := range uint64(3) {
					m := 2 // steps 0 and 1 agree
					if s == 2 {
						m = tc.ms[r]
					}
					fillSlice(slice, 7, s, r, m, l.Shard)
					if err := h.Write(ctx, s, m, slice[:m*l.Shard]); err != nil {
						return err
					}
					if err := h.Receive(ctx, s, m, out); err != nil {
						return err
					}
					if err := checkBlock(out, l, 7, s, m); err != nil {
						return err
					}
				}
				return nil
			})
			for r, err := range errs {
				var te *TimeoutError
				if !errors.As(err, &te) || te.Step != 2 || te.M != tc.ms[r] {
					t.Fatalf("rank %d (M = %d): err = %v, want a timeout of step 2 with M = %d", r, tc.ms[r], err, tc.ms[r])
				}
				var want []RankRows
				for p, m := range tc.ms {
					if m != tc.ms[r] {
						want = append(want, RankRows{Rank: p, M: m})
					}
				}
				if !slices.Equal(te.OtherM, want) || !slices.Equal(te.Missing, ranksOf(want)) {
					t.Errorf("rank %d: OtherM %v, Missing %v; want %v", r, te.OtherM, te.Missing, want)
				}
				if !strings.Contains(err.Error(), "every rank must pass the same M") ||
					!strings.Contains(err.Error(), fmt.Sprintf("rank %d stored M = %d rows", want[0].Rank, want[0].M)) {
					t.Errorf("rank %d: message %q does not name the other M", r, err)
				}
			}
		})
	}
}

func ranksOf(rr []RankRows) []int {
	var ranks []int
	for _, x := range rr {
		ranks = append(ranks, x.Rank)
	}
	return ranks
}

// TestMismatchedMAtCapacity128 checks what the layout guarantees at a
// capacity past OwnRegionRows. Ranks whose M differ and are not both past
// OwnRegionRows store into different regions: every rank times out at that
// step and names the others (OtherM). Ranks whose M are both past it share
// the shared region: the ranks with the larger M time out at that step and
// name the smaller M; a rank with a smaller M may complete the step (it
// found every row it asked for), and then times out at the next one
// because the ranks that timed out never store again. No rank completes a
// step after the mismatched one, and every completed block is whole.
func TestMismatchedMAtCapacity128(t *testing.T) {
	const deadline = 200 * time.Millisecond
	for _, tc := range []struct {
		desc string
		ms   []int // the M each rank passes at step 2
	}{
		{"own regions", []int{2, 3, 2}},
		{"own region and shared region", []int{3, 100, 3}},
		{"both in the shared region", []int{9, 12}},
		{"shared region, larger M first", []int{128, 100, 100}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			size := len(tc.ms)
			hosts := newHosts(t, size, Config{Hidden: 8 * size, Capacity: 128, Deadline: deadline})
			l := hosts[0].Layout()
			ctx := context.Background()
			done := make([]int, size) // steps each rank completed
			errs := onRanks(size, func(r int, _ Exchanger) error {
				h := hosts[r]
				slice := make([]uint16, l.Capacity*l.Shard)
				out := make([]uint16, l.Capacity*l.Hidden)
				for s := range uint64(5) {
					m := []int{16, 128, -1, 50, 50}[s] // steps 0, 1, 3, 4 agree
					if s == 2 {
						m = tc.ms[r]
					}
					fillSlice(slice, 11, s, r, m, l.Shard)
					if err := h.Write(ctx, s, m, slice[:m*l.Shard]); err != nil {
						return err
					}
					if err := h.Receive(ctx, s, m, out); err != nil {
						return err
					}
					if err := checkBlock(out, l, 11, s, m); err != nil {
						return err
					}
					done[r]++
				}
				return nil
			})
			largest := slices.Max(tc.ms)
			ownRegion := slices.ContainsFunc(tc.ms, func(m int) bool { return m <= OwnRegionRows })
			for r, err := range errs {
				var te *TimeoutError
				if !errors.As(err, &te) {
					t.Fatalf("rank %d (M = %d): err = %v, want a timeout", r, tc.ms[r], err)
				}
				mustFailAtStep := ownRegion || tc.ms[r] == largest
				switch {
				case mustFailAtStep && (te.Step != 2 || done[r] != 2):
					t.Fatalf("rank %d (M = %d): timed out at step %d after %d steps, want step 2", r, tc.ms[r], te.Step, done[r])
				case !mustFailAtStep && !(te.Step == 2 && done[r] == 2 || te.Step == 3 && done[r] == 3):
					t.Fatalf("rank %d (M = %d): timed out at step %d after %d steps, want step 2 or 3", r, tc.ms[r], te.Step, done[r])
				}
				if te.Step != 2 {
					continue
				}
				var want []RankRows
				for p, m := range tc.ms {
					if m != tc.ms[r] {
						want = append(want, RankRows{Rank: p, M: m})
					}
				}
				if !slices.Equal(te.OtherM, want) {
					t.Errorf("rank %d (M = %d): OtherM %v, want %v (%v)", r, tc.ms[r], te.OtherM, want, err)
				}
			}
		})
	}
}
