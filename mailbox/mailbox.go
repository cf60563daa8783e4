package mailbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Exchanger is what the mailbox needs from the rank group: who we are, and
// collectives to agree on the layout and to pass memory handles around.
// *tp.Group satisfies it.
type Exchanger interface {
	Rank() int
	Size() int
	Barrier(ctx context.Context) error
	AllGather(ctx context.Context, b []byte) ([][]byte, error)
	// AllGatherFDs: every rank contributes one descriptor; the result holds
	// one new descriptor per rank (own included), owned by the caller.
	AllGatherFDs(ctx context.Context, fd int) ([]int, error)
	BroadcastFDs(ctx context.Context, root int, fds []int) ([]int, error)
}

// Backend is one way of giving every rank a view of every rank's mailbox.
// The host backend implements it together with Stepper; the GPU backends
// implement it and hand their slot addresses to the kernels instead.
type Backend interface {
	// Name is "host", "unicast" or "multicast".
	Name() string
	// Layout is the geometry every rank agreed on.
	Layout() Layout
	// Close releases the memory and descriptors; idempotent.
	Close() error
}

// Stepper is the protocol driven from the CPU: the host backend's writer
// and receiver. See the package documentation for the order of calls.
type Stepper interface {
	// Write stores this rank's slice (m rows of Shard bf16, row-major) into
	// slot step%Slots of every rank's mailbox, sanitized.
	Write(ctx context.Context, step uint64, m int, slice []uint16) error
	// Receive waits until every rank's slice of the step arrived in the
	// local slot, copies the first m*Hidden elements into out and re-arms
	// the slot. Past the deadline it returns a *TimeoutError.
	Receive(ctx context.Context, step uint64, m int, out []uint16) error
}

// Defaults for the zero values of Config.
const (
	DefaultSlots    = 3
	DefaultDeadline = 10 * time.Second
)

// slotAlign is the byte alignment of every slot: one cache line, so two
// slots never share one.
const slotAlign = 64

// maxRegionBytes bounds one rank's mailbox. The real shapes need a few
// megabytes; the bound turns an absurd Config into an error instead of an
// overflowing size or an allocation that takes the machine down.
const maxRegionBytes = 1 << 30

// Config describes a mailbox. Rank and group size come from the Exchanger.
type Config struct {
	Hidden   int           // elements per row (hidden_dim); Hidden/Size must be even
	Capacity int           // the largest M a step may use (sizes the slot's regions: SlotRows)
	Slots    int           // 0 means DefaultSlots; fewer than 2 is rejected
	Deadline time.Duration // how long a Receive waits; 0 means DefaultDeadline
}

// WithDefaults returns c with zero fields replaced by their defaults.
func (c Config) WithDefaults() Config {
	if c.Slots == 0 {
		c.Slots = DefaultSlots
	}
	if c.Deadline == 0 {
		c.Deadline = DefaultDeadline
	}
	return c
}

// Layout is the agreed geometry of every rank's mailbox.
type Layout struct {
	Hidden    int // elements per row
	Capacity  int // the largest M; a slot holds SlotRows(Capacity) rows
	Slots     int // slots per mailbox, at least 2
	Size      int // ranks in the group
	Shard     int // Hidden / Size, even
	SlotBytes int // bytes per slot, SlotRows*Hidden*2 rounded up to 64
	Bytes     int // bytes per mailbox, Slots*SlotBytes
}

// OwnRegionRows is the largest row count with a region of its own in every
// slot; every larger row count shares one region (see the package
// documentation). It is the GPU skinny kernels' limit, so the regions
// those kernels store into keep their offsets whatever the capacity.
const OwnRegionRows = 8

// SlotRows is the rows of one slot: one region of m rows for every m in
// 1..min(capacity, OwnRegionRows), 1+2+...+min(capacity, OwnRegionRows)
// rows, and, when capacity is larger, one shared region of capacity rows
// (see the package documentation).
func SlotRows(capacity int) int {
	own := min(max(capacity, 0), OwnRegionRows)
	rows := own * (own + 1) / 2
	if capacity > OwnRegionRows {
		rows += capacity
	}
	return rows
}

// NewLayout validates cfg for a group of size ranks. Zero Slots means
// DefaultSlots. Errors wrap ErrConfig and name the value and the rule.
func NewLayout(cfg Config, size int) (Layout, error) {
	l, err := newLayout(cfg, size)
	if err != nil {
		return Layout{}, fmt.Errorf("mailbox: %w", err)
	}
	return l, nil
}

func newLayout(cfg Config, size int) (Layout, error) {
	cfg = cfg.WithDefaults()
	bad := func(format string, args ...any) (Layout, error) {
		return Layout{}, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	switch {
	case cfg.Slots < 2:
		return bad("slots = %d, need at least 2: step t+1 reuses a slot only after every rank has re-armed it at step t-1, which needs a second slot", cfg.Slots)
	case cfg.Deadline < 0:
		return bad("deadline = %v, must not be negative", cfg.Deadline)
	case size < 1:
		return bad("group size = %d, must be at least 1", size)
	case cfg.Hidden < 1:
		return bad("hidden = %d, must be positive", cfg.Hidden)
	case cfg.Capacity < 1:
		return bad("capacity = %d, must be at least 1 (the largest M)", cfg.Capacity)
	case cfg.Hidden%size != 0:
		return bad("hidden = %d is not divisible by the group size %d", cfg.Hidden, size)
	case (cfg.Hidden/size)%2 != 0:
		return bad("shard = hidden/size = %d/%d = %d is odd; it must be even so that no 32-bit word holds elements of two ranks", cfg.Hidden, size, cfg.Hidden/size)
	}
	// Check the size before multiplying so that nothing overflows.
	if cfg.Capacity > maxRegionBytes/2/cfg.Hidden || cfg.Capacity > 1<<15 {
		return bad("capacity × hidden = %d × %d bf16 exceeds the %d-byte limit", cfg.Capacity, cfg.Hidden, maxRegionBytes)
	}
	if cfg.Slots > maxRegionBytes/(2*cfg.Hidden*SlotRows(cfg.Capacity)+slotAlign) {
		return bad("slots × rows per slot × hidden = %d × %d × %d bf16 exceeds the %d-byte limit (a slot holds %d rows for capacity %d: SlotRows)",
			cfg.Slots, SlotRows(cfg.Capacity), cfg.Hidden, maxRegionBytes, SlotRows(cfg.Capacity), cfg.Capacity)
	}
	slotBytes := (SlotRows(cfg.Capacity)*cfg.Hidden*2 + slotAlign - 1) / slotAlign * slotAlign
	return Layout{
		Hidden:    cfg.Hidden,
		Capacity:  cfg.Capacity,
		Slots:     cfg.Slots,
		Size:      size,
		Shard:     cfg.Hidden / size,
		SlotBytes: slotBytes,
		Bytes:     cfg.Slots * slotBytes,
	}, nil
}

// Slot is the slot that step uses.
func (l Layout) Slot(step uint64) int { return int(step % uint64(l.Slots)) }

// SlotOffset is the byte offset of step's slot in a mailbox.
func (l Layout) SlotOffset(step uint64) int { return l.Slot(step) * l.SlotBytes }

// RegionOffset is the byte offset, within a slot, of the region that a
// step of m rows uses: for m up to OwnRegionRows its own region, after
// those of 1..m-1 rows; for a larger m the shared region, after every own
// region.
func (l Layout) RegionOffset(m int) int {
	if m > OwnRegionRows {
		return SlotRows(OwnRegionRows) * l.Hidden * 2
	}
	return SlotRows(m-1) * l.Hidden * 2
}

// RegionRows is the rows of the region that a step of m rows uses: m for
// an own region, Capacity for the shared one.
func (l Layout) RegionRows(m int) int {
	if m > OwnRegionRows {
		return l.Capacity
	}
	return m
}

// StepOffset is the byte offset in a mailbox of the rows that step uses
// when it has m rows: its slot's region for m.
func (l Layout) StepOffset(step uint64, m int) int { return l.SlotOffset(step) + l.RegionOffset(m) }

// Element is the index, within a region, of rank's element n of row m.
func (l Layout) Element(m, rank, n int) int { return m*l.Hidden + rank*l.Shard + n }

// Errors for errors.Is.
var (
	// ErrConfig: an invalid Config, or ranks that disagree about it.
	ErrConfig = errors.New("invalid configuration")
	// ErrTimeout: a Receive ran past its deadline (see *TimeoutError).
	ErrTimeout = errors.New("receive deadline exceeded")
	// ErrClosed: the mailbox was closed.
	ErrClosed = errors.New("mailbox closed")
	// ErrBroken: an earlier Receive failed, so the slots no longer follow
	// the protocol and the mailbox refuses further steps. The error names
	// that failure in its text but does not wrap it: a later step matches
	// ErrBroken, not ErrTimeout or the context's error.
	ErrBroken = errors.New("mailbox unusable after a failed receive")
	// ErrStepOrder: Write and Receive were not called in protocol order.
	ErrStepOrder = errors.New("steps out of order")
	// ErrArgument: a bad m or buffer length.
	ErrArgument = errors.New("invalid argument")
	// ErrPeer: a peer failed during setup or sent a bad description.
	ErrPeer = errors.New("peer failed")
)

// TimeoutError reports a Receive that ran past its deadline.
type TimeoutError struct {
	Rank    int           // the receiving rank
	Step    uint64        // the step being received
	Slot    int           // step % slots
	Missing []int         // ranks with at least one word still the sentinel, ascending
	Waited  time.Duration // how long the Receive waited
	// M is the rows this rank asked for, and OtherM the ranks that stored
	// their slice of this slot into the region of another row count: they
	// passed a different M for the step. Only filled when the slot could
	// be read back (always on the host backend; on the GPU for a single
	// step, not a batch of graph replays). M is 0 when not known.
	M      int
	OtherM []RankRows
}

// RankRows is a rank and the row count it used.
type RankRows struct{ Rank, M int }

func (e *TimeoutError) Error() string {
	ranks := make([]string, len(e.Missing))
	for i, r := range e.Missing {
		ranks[i] = fmt.Sprint(r)
	}
	who := "rank"
	if len(ranks) != 1 {
		who = "ranks"
	}
	// Milliseconds, unless the wait was shorter (a tiny --deadline): "0s"
	// would say it never waited.
	waited := e.Waited.Round(time.Millisecond)
	if e.Waited < time.Millisecond {
		waited = e.Waited.Round(time.Microsecond)
	}
	if waited == 0 {
		waited = e.Waited
	}
	msg := fmt.Sprintf("mailbox: rank %d, step %d (slot %d): no slice from %s %s after %v",
		e.Rank, e.Step, e.Slot, who, strings.Join(ranks, ", "), waited)
	if len(e.OtherM) > 0 {
		other := make([]string, len(e.OtherM))
		for i, o := range e.OtherM {
			other[i] = fmt.Sprintf("rank %d stored M = %d rows", o.Rank, o.M)
		}
		msg += fmt.Sprintf("; %s for this step where rank %d passed M = %d: every rank must pass the same M",
			strings.Join(other, ", "), e.Rank, e.M)
	}
	return msg
}

// Is makes errors.Is(err, ErrTimeout) true.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }
