package mailbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// Host is the "host" backend: every rank's mailbox is a sealed memfd that
// its rank creates, and every rank process maps all of them, so a rank's
// Write is plain CPU stores into every peer's memory.
//
// Each rank creates its own mailbox (rather than rank 0 creating all of
// them) so that setup is symmetric: one all-gather of descriptors, no rank
// with extra duties, and the same ownership as the unicast GPU backend
// where each rank allocates its memory on its own device.
//
// Write and Receive must be called by one goroutine at a time, in protocol
// order (see the package documentation). Close may be called from any
// goroutine at any time; a Receive waiting at that moment returns ErrClosed.
type Host struct {
	layout   Layout
	rank     int
	deadline time.Duration

	// life is held shared by Write and Receive and exclusively by Close, so
	// nothing touches a region after it is unmapped.
	life    sync.RWMutex
	regions [][]byte   // index = rank; nil once closed
	words   [][]uint32 // atomic views of regions
	closing atomic.Bool

	mu      sync.Mutex // guards the protocol state below
	next    uint64     // the step the next Write or Receive is for
	written bool       // Write(next) done, Receive(next) pending
	busy    bool       // a Write or Receive is running
	broken  error      // why the mailbox refuses further steps
}

var (
	_ Backend = (*Host)(nil)
	_ Stepper = (*Host)(nil)
)

// NewHost creates this rank's mailbox, agrees on the layout with every
// rank, exchanges the memfds through ex and maps every rank's mailbox. It
// is a collective: every rank of ex must call it with the same Hidden,
// Capacity and Slots. When any rank fails, every rank returns an error
// naming the ranks that failed (as long as ex itself keeps working).
func NewHost(ctx context.Context, ex Exchanger, cfg Config) (*Host, error) {
	rank, size := ex.Rank(), ex.Size()
	if size < 1 || rank < 0 || rank >= size {
		return nil, fmt.Errorf("mailbox: %w: rank %d of a group of %d", ErrConfig, rank, size)
	}
	cfg = cfg.WithDefaults()
	layout, err := newLayout(cfg, size)
	if err != nil {
		return nil, fmt.Errorf("mailbox: rank %d: %w", rank, err)
	}
	h := &Host{
		layout:   layout,
		rank:     rank,
		deadline: cfg.Deadline,
		regions:  make([][]byte, size),
		words:    make([][]uint32, size),
	}
	fd, prepErr := h.createOwn()
	if fd >= 0 {
		// The exchanger hands out new descriptors; ours is only lent to it.
		defer unix.Close(fd)
	}
	if err := h.setup(ctx, ex, fd, prepErr); err != nil {
		_ = h.Close()
		return nil, fmt.Errorf("mailbox: rank %d: host backend setup: %w", rank, err)
	}
	return h, nil
}

// createOwn makes this rank's mailbox: a memfd of layout.Bytes, every word
// the Sentinel, sealed against resizing so that no peer can shrink it under
// our mappings (which would turn our loads into SIGBUS).
func (h *Host) createOwn() (int, error) {
	fd, err := unix.MemfdCreate(fmt.Sprintf("tprun-mailbox-%d", h.rank), unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return -1, fmt.Errorf("memfd_create: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(h.layout.Bytes)); err != nil {
		return fd, fmt.Errorf("ftruncate memfd to %d bytes: %w", h.layout.Bytes, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW|unix.F_SEAL_SEAL); err != nil {
		return fd, fmt.Errorf("seal memfd: %w", err)
	}
	region, err := unix.Mmap(fd, 0, h.layout.Bytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fd, fmt.Errorf("mmap own mailbox (%d bytes): %w", h.layout.Bytes, err)
	}
	h.regions[h.rank] = region
	h.words[h.rank] = wordsOf(region)
	fillSentinel(h.words[h.rank])
	return fd, nil
}

// setup runs the collective part of NewHost. Every rank makes the same
// sequence of exchanger calls whatever fails locally, so that a local
// failure becomes an error on every rank instead of a hang.
func (h *Host) setup(ctx context.Context, ex Exchanger, fd int, prepErr error) error {
	hellos, err := ex.AllGather(ctx, encodeHello(h.layout, prepErr))
	if err != nil {
		return fmt.Errorf("all-gather of mailbox layouts: %w", err)
	}
	if err := h.checkHellos(hellos); err != nil {
		return err
	}
	if prepErr != nil {
		return prepErr // checkHellos reported it too; this is the unreachable belt
	}
	fds, err := ex.AllGatherFDs(ctx, fd)
	if err != nil {
		return fmt.Errorf("all-gather of mailbox descriptors: %w", err)
	}
	mapErr := h.mapPeers(fds)
	for _, f := range fds {
		if f >= 0 {
			_ = unix.Close(f)
		}
	}
	msg := ""
	if mapErr != nil {
		msg = mapErr.Error()
	}
	statuses, err := ex.AllGather(ctx, []byte(msg))
	if err != nil {
		return fmt.Errorf("all-gather of mapping status: %w", err)
	}
	if len(statuses) != h.layout.Size {
		return fmt.Errorf("%w: all-gather of mapping status returned %d entries for %d ranks", ErrPeer, len(statuses), h.layout.Size)
	}
	var failed []string
	for r, s := range statuses {
		if len(s) > 0 && r != h.rank {
			failed = append(failed, fmt.Sprintf("rank %d: %s", r, truncate(s)))
		}
	}
	if mapErr != nil {
		return mapErr
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: mapping mailboxes failed on %s", ErrPeer, strings.Join(failed, "; "))
	}
	return nil
}

// mapPeers maps every other rank's mailbox after checking that it is a
// memfd of the agreed size, sealed against shrinking.
func (h *Host) mapPeers(fds []int) error {
	if len(fds) != h.layout.Size {
		return fmt.Errorf("%w: descriptor all-gather returned %d descriptors for %d ranks", ErrPeer, len(fds), h.layout.Size)
	}
	for r, fd := range fds {
		if r == h.rank {
			continue
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("%w: rank %d's mailbox descriptor %d: fstat: %w", ErrPeer, r, fd, err)
		}
		if st.Size != int64(h.layout.Bytes) {
			return fmt.Errorf("%w: rank %d's mailbox is %d bytes, the layout needs %d", ErrPeer, r, st.Size, h.layout.Bytes)
		}
		seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
		if err != nil {
			return fmt.Errorf("%w: rank %d's mailbox descriptor is not a sealable memfd: %w", ErrPeer, r, err)
		}
		if seals&unix.F_SEAL_SHRINK == 0 {
			return fmt.Errorf("%w: rank %d's mailbox memfd is not sealed against shrinking", ErrPeer, r)
		}
		region, err := unix.Mmap(fd, 0, h.layout.Bytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			return fmt.Errorf("mmap rank %d's mailbox (%d bytes): %w", r, h.layout.Bytes, err)
		}
		h.regions[r] = region
		h.words[r] = wordsOf(region)
	}
	return nil
}

// The hello each rank all-gathers: magic, version, its layout, and its
// local setup error ("" when fine).
var helloMagic = [4]byte{'T', 'P', 'M', 'B'}

const (
	helloVersion = 1
	helloFixed   = 4 + 1 + 5*8
	maxErrText   = 512
)

func encodeHello(l Layout, err error) []byte {
	b := make([]byte, 0, helloFixed+64)
	b = append(b, helloMagic[:]...)
	b = append(b, helloVersion)
	for _, v := range []int{l.Hidden, l.Capacity, l.Slots, l.Size, l.Bytes} {
		b = binary.LittleEndian.AppendUint64(b, uint64(v))
	}
	if err != nil {
		b = append(b, truncate([]byte(err.Error()))...)
	}
	return b
}

// hello is a decoded peer description.
type hello struct {
	hidden, capacity, slots, size, bytes int
	err                                  string
}

func (h hello) String() string {
	return fmt.Sprintf("hidden=%d capacity=%d slots=%d size=%d bytes=%d", h.hidden, h.capacity, h.slots, h.size, h.bytes)
}

// decodeHello parses a peer's bytes; anything malformed is an error, never
// a panic.
func decodeHello(b []byte) (hello, error) {
	if len(b) < helloFixed {
		return hello{}, fmt.Errorf("description is %d bytes, want at least %d", len(b), helloFixed)
	}
	if !bytes.Equal(b[:4], helloMagic[:]) {
		return hello{}, fmt.Errorf("description has magic %q, want %q", b[:4], helloMagic[:])
	}
	if b[4] != helloVersion {
		return hello{}, fmt.Errorf("description version %d, want %d", b[4], helloVersion)
	}
	var v [5]int
	for i := range v {
		u := binary.LittleEndian.Uint64(b[5+8*i:])
		if u > math.MaxInt32 {
			return hello{}, fmt.Errorf("description field %d = %d is out of range", i, u)
		}
		v[i] = int(u)
	}
	return hello{hidden: v[0], capacity: v[1], slots: v[2], size: v[3], bytes: v[4], err: string(truncate(b[helloFixed:]))}, nil
}

func truncate(b []byte) []byte {
	if len(b) > maxErrText {
		return b[:maxErrText]
	}
	return b
}

// checkHellos reports peers that failed locally, sent garbage, or disagree
// with this rank about the layout, naming each one.
func (h *Host) checkHellos(hellos [][]byte) error {
	if len(hellos) != h.layout.Size {
		return fmt.Errorf("%w: layout all-gather returned %d entries for %d ranks", ErrPeer, len(hellos), h.layout.Size)
	}
	own := hello{hidden: h.layout.Hidden, capacity: h.layout.Capacity, slots: h.layout.Slots, size: h.layout.Size, bytes: h.layout.Bytes}
	var failed, differ []string
	for r, b := range hellos {
		p, err := decodeHello(b)
		switch {
		case err != nil:
			failed = append(failed, fmt.Sprintf("rank %d: %v", r, err))
		case p.err != "":
			failed = append(failed, fmt.Sprintf("rank %d: %s", r, p.err))
		case p.hidden != own.hidden || p.capacity != own.capacity || p.slots != own.slots || p.size != own.size || p.bytes != own.bytes:
			differ = append(differ, fmt.Sprintf("rank %d has %v", r, p))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: mailbox creation failed on %s", ErrPeer, strings.Join(failed, "; "))
	}
	if len(differ) > 0 {
		return fmt.Errorf("%w: ranks disagree about the mailbox: rank %d has %v, %s", ErrConfig, h.rank, own, strings.Join(differ, ", "))
	}
	return nil
}

// Name is "host".
func (h *Host) Name() string { return "host" }

// Layout is the agreed geometry.
func (h *Host) Layout() Layout { return h.layout }

// Rank is this rank.
func (h *Host) Rank() int { return h.rank }

// begin checks that op for step may run now and marks the Host busy.
func (h *Host) begin(op string, step uint64, m, bufLen, wantPerRow int) error {
	if m < 1 || m > h.layout.Capacity {
		return fmt.Errorf("mailbox: rank %d: %s step %d: %w: m = %d, must be 1..%d (the capacity)", h.rank, op, step, ErrArgument, m, h.layout.Capacity)
	}
	if bufLen < m*wantPerRow {
		return fmt.Errorf("mailbox: rank %d: %s step %d: %w: buffer has %d elements, m × %d = %d needed", h.rank, op, step, ErrArgument, bufLen, wantPerRow, m*wantPerRow)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.broken != nil:
		// The cause is in the text only: a later step matches ErrBroken and
		// not the earlier failure's sentinel (ErrTimeout, ctx's error), so
		// a caller that retries on a timeout does not spin on a broken Host.
		return fmt.Errorf("mailbox: rank %d: %s step %d: %w (%v)", h.rank, op, step, ErrBroken, h.broken)
	case h.busy:
		return fmt.Errorf("mailbox: rank %d: %s step %d: %w: another Write or Receive is running", h.rank, op, step, ErrStepOrder)
	case op == "write" && (h.written || step != h.next):
		return fmt.Errorf("mailbox: rank %d: write step %d: %w: %s", h.rank, step, ErrStepOrder, h.expect())
	case op == "receive" && (!h.written || step != h.next):
		return fmt.Errorf("mailbox: rank %d: receive step %d: %w: %s", h.rank, step, ErrStepOrder, h.expect())
	}
	h.busy = true
	return nil
}

func (h *Host) expect() string {
	if h.written {
		return fmt.Sprintf("expected Receive of step %d", h.next)
	}
	return fmt.Sprintf("expected Write of step %d", h.next)
}

// Write stores this rank's slice of step (m rows of Shard elements,
// row-major, raw bf16 bits) into the step's slot of every rank's mailbox,
// -0 halves sanitized to +0.
func (h *Host) Write(ctx context.Context, step uint64, m int, slice []uint16) error {
	h.life.RLock()
	defer h.life.RUnlock()
	if h.regions == nil {
		return fmt.Errorf("mailbox: rank %d: write step %d: %w", h.rank, step, ErrClosed)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("mailbox: rank %d: write step %d: %w", h.rank, step, context.Cause(ctx))
	}
	if err := h.begin("write", step, m, len(slice), h.layout.Shard); err != nil {
		return err
	}
	// Start with the next rank so that ranks do not all store into rank 0
	// first.
	for i := 1; i <= h.layout.Size; i++ {
		dst := (h.rank + i) % h.layout.Size
		h.layout.storeSlice(h.layout.slotWords(h.words[dst], step, m), h.rank, m, slice)
	}
	h.mu.Lock()
	h.busy, h.written = false, true
	h.mu.Unlock()
	return nil
}

// Receive waits until every rank's slice of step has arrived in the local
// slot, copies the first m*Hidden elements into out[:m*Hidden] and re-arms
// them. It gives up with a *TimeoutError after the deadline, with ctx's
// cause (context.Cause: ctx's error, or why it was cancelled) when ctx
// ends, and with ErrClosed when the Host is closed; after any of those the
// Host is broken.
func (h *Host) Receive(ctx context.Context, step uint64, m int, out []uint16) error {
	h.life.RLock()
	defer h.life.RUnlock()
	if h.regions == nil {
		return fmt.Errorf("mailbox: rank %d: receive step %d: %w", h.rank, step, ErrClosed)
	}
	if err := h.begin("receive", step, m, len(out), h.layout.Hidden); err != nil {
		return err
	}
	slot := h.layout.slotWords(h.words[h.rank], step, m)
	start := time.Now()
	var err error
	for {
		err = receiveSlot(ctx, slot, out, start, h.deadline, &h.closing)
		var de deadlineError
		if !errors.As(err, &de) {
			break
		}
		missing := h.layout.missingRanks(slot, m)
		if len(missing) == 0 {
			continue // the last words landed between the poll and the clock check
		}
		whole := h.words[h.rank][h.layout.SlotOffset(step)/4:][:h.layout.SlotBytes/4]
		snap := make([]uint32, len(whole))
		for i := range whole {
			snap[i] = atomic.LoadUint32(&whole[i])
		}
		err = &TimeoutError{Rank: h.rank, Step: step, Slot: h.layout.Slot(step), Missing: missing, Waited: de.waited,
			M: m, OtherM: h.layout.OtherRows(snap, m)}
		break
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.busy = false
	if err != nil {
		var te *TimeoutError
		if !errors.As(err, &te) {
			err = fmt.Errorf("mailbox: rank %d: receive step %d (slot %d): %w", h.rank, step, h.layout.Slot(step), err)
		}
		h.broken = err
		return err
	}
	h.next++
	h.written = false
	return nil
}

// Close unmaps every mailbox. It is idempotent and safe to call while
// another goroutine is in Receive, which then returns ErrClosed.
func (h *Host) Close() error {
	h.closing.Store(true)
	h.life.Lock()
	defer h.life.Unlock()
	if h.regions == nil {
		return nil
	}
	var errs []error
	for r, region := range h.regions {
		if region == nil {
			continue
		}
		if err := unix.Munmap(region); err != nil {
			errs = append(errs, fmt.Errorf("mailbox: rank %d: unmap rank %d's mailbox: %w", h.rank, r, err))
		}
	}
	h.regions, h.words = nil, nil
	return errors.Join(errs...)
}
