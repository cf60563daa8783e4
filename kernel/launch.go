package kernel

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/tprun/tprun/internal/cuda"
)

// This file launches the compiled kernels (skinny.h is the ABI): it loads
// the embedded fatbin, encodes the by-value parameter blocks byte for byte
// and validates every argument first, because a wrong pointer or size
// here is a silent memory corruption on the GPU, not an error.

// KernelDriver is the part of the CUDA driver that Kernels uses.
type KernelDriver interface {
	ModuleLoadData(image []byte) (cuda.Module, error)
	ModuleUnload(m cuda.Module) error
	ModuleGetFunction(m cuda.Module, name string) (cuda.Function, error)
	// FuncSetAttribute raises the larger-M entry points' max dynamic
	// shared memory (cuda.FuncAttrMaxDynamicSharedSizeBytes) at Load.
	FuncSetAttribute(f cuda.Function, attr cuda.FuncAttribute, v int) error
	LaunchKernelEx(cfg cuda.LaunchConfig, f cuda.Function, params ...[]byte) error
}

var _ KernelDriver = (*cuda.Driver)(nil)

// Sizes of the kernel ABI (skinny.h).
const (
	// MaxDst is the most destinations one skinny launch writes
	// (TPRUN_MAX_DST).
	MaxDst = 16
	// SkinnyParamsSize and ReceiveParamsSize are sizeof the parameter
	// structs tprun_skinny_params and tprun_receive_params.
	SkinnyParamsSize  = 248
	ReceiveParamsSize = 72
)

// rotSuffix names the entry point with slot rotation of a kernel
// (skinny.cu, receive.cu): a launch with SlotRotation takes it, every other
// launch the plain one, which runs exactly the code it ran before rotation
// existed.
const rotSuffix = "_rot"

// RotationSuffix is what a launch with slot rotation appends to
// LaunchConfig.Function and ReceiveConfig.Function to name its entry point.
const RotationSuffix = rotSuffix

// entryPoint is an entry point that takes tprun_skinny_params and the
// dynamic shared memory Load allows it: bigmMaxShared of its family for a
// larger-M one, 0 (DefaultSharedLimit, the driver's default) for a skinny
// one.
type entryPoint struct {
	name   string
	shared int
}

// skinnyEntryPoints lists every entry point that takes
// tprun_skinny_params: M 1..MaxSkinnyM of every skinny family of
// families.tsv, then every code size of every larger-M family
// (BigmCodes), each plain and with rotSuffix.
func skinnyEntryPoints() ([]entryPoint, error) {
	fams, err := families()
	if err != nil {
		return nil, err
	}
	var eps []entryPoint
	for m := 1; m <= MaxSkinnyM; m++ {
		for _, f := range fams {
			if f.smem {
				continue
			}
			name := fmt.Sprintf("tprun_skinny_m%d_%s", m, f.name)
			eps = append(eps, entryPoint{name: name}, entryPoint{name: name + rotSuffix})
		}
	}
	for _, f := range fams {
		if !f.smem {
			continue
		}
		shared := bigmMaxShared(f)
		for _, mt := range BigmCodes {
			name := fmt.Sprintf("tprun_bigm_mt%d_%s", mt, f.name)
			eps = append(eps, entryPoint{name, shared}, entryPoint{name + rotSuffix, shared})
		}
	}
	return eps, nil
}

var (
	// ErrArgs is wrapped by every *ArgError.
	ErrArgs = errors.New("kernel: invalid launch argument")
	// ErrClosed is returned by launches after Close.
	ErrClosed = errors.New("kernel: kernels closed")
)

// ArgError names one launch argument that breaks one rule of skinny.h.
type ArgError struct {
	Field string // e.g. "Dst[2]", "SharedStride", "Timeout"
	Value string // as given, pointers in hex
	Rule  string
}

func (e *ArgError) Error() string {
	return fmt.Sprintf("%v: %s = %s: %s", ErrArgs, e.Field, e.Value, e.Rule)
}

// Unwrap makes errors.Is(err, ErrArgs) hold.
func (e *ArgError) Unwrap() error { return ErrArgs }

// Kernels is the loaded module of tprun's kernels in one context. It is
// read-only after Load, so launches may come from several goroutines, each
// with the module's context current on its thread.
type Kernels struct {
	drv        KernelDriver
	mod        cuda.Module
	skinny     map[string]cuda.Function // by LaunchConfig.Function, and that with rotSuffix
	receive    cuda.Function
	receiveRot cuda.Function // with slot rotation
	closed     bool
}

// Load loads the embedded fatbin into the current context and looks up
// every entry point ConfigFor and ReceiveConfigFor can name. The caller
// closes the result before it releases the context.
func Load(drv KernelDriver) (*Kernels, error) {
	image, err := image()
	if err != nil {
		return nil, err
	}
	eps, err := skinnyEntryPoints()
	if err != nil {
		return nil, fmt.Errorf("kernel: load kernels: the family spec: %w", err)
	}
	if _, err := measured(); err != nil {
		return nil, fmt.Errorf("kernel: load kernels: the launch table: %w", err)
	}
	if _, err := stepMeasured(); err != nil {
		return nil, fmt.Errorf("kernel: load kernels: the step table: %w", err)
	}
	if _, err := bigmMeasured(); err != nil {
		return nil, fmt.Errorf("kernel: load kernels: the larger-M table: %w", err)
	}
	mod, err := drv.ModuleLoadData(image)
	if err != nil {
		return nil, fmt.Errorf("kernel: load kernels (%d-byte fatbin): %w", len(image), err)
	}
	k := &Kernels{drv: drv, mod: mod, skinny: map[string]cuda.Function{}}
	fail := func(err error) (*Kernels, error) {
		if uerr := drv.ModuleUnload(mod); uerr != nil {
			return nil, errors.Join(err, fmt.Errorf("kernel: unload after failed load: %w", uerr))
		}
		return nil, err
	}
	for _, ep := range eps {
		f, err := drv.ModuleGetFunction(mod, ep.name)
		if err != nil {
			return fail(fmt.Errorf("kernel: load kernels: entry point %s: %w", ep.name, err))
		}
		if ep.shared > DefaultSharedLimit {
			if err := drv.FuncSetAttribute(f, cuda.FuncAttrMaxDynamicSharedSizeBytes, ep.shared); err != nil {
				return fail(fmt.Errorf("kernel: load kernels: entry point %s: allowing %d bytes of dynamic shared memory: %w", ep.name, ep.shared, err))
			}
		}
		k.skinny[ep.name] = f
	}
	if k.receive, err = drv.ModuleGetFunction(mod, receiveName); err != nil {
		return fail(fmt.Errorf("kernel: load kernels: entry point %s: %w", receiveName, err))
	}
	if k.receiveRot, err = drv.ModuleGetFunction(mod, receiveName+rotSuffix); err != nil {
		return fail(fmt.Errorf("kernel: load kernels: entry point %s: %w", receiveName+rotSuffix, err))
	}
	return k, nil
}

// Close unloads the module; launching afterwards fails with ErrClosed.
// Close is idempotent.
func (k *Kernels) Close() error {
	if k == nil || k.closed {
		return nil
	}
	k.closed = true
	if err := k.drv.ModuleUnload(k.mod); err != nil {
		return fmt.Errorf("kernel: unload kernels: %w", err)
	}
	return nil
}

// SkinnyArgs are the operands of one rank's fused up-projection on the
// device. All pointers are device addresses of bf16 data, 16-byte aligned.
type SkinnyArgs struct {
	// Shape is the step's shape; Rank (0 <= Rank < Shape.TP) selects the
	// output columns Rank*shard .. of every destination.
	Shape Shape
	Rank  int
	// Latent is [M, latent_dim] (row stride latent_dim); Weight is the
	// rank's [shard, latent_dim] rows of the full weight in the packed
	// layout (PackWeight, PackedWeightLen elements), the only one the
	// kernels read: a row-major weight is packed once where it is uploaded.
	// WeightPacked must be true, to say so.
	Latent, Weight cuda.DevicePtr
	WeightPacked   bool
	// Shared points at element (0, 0) of the rank's own columns: element
	// (m, n) is at Shared + 2*(m*SharedStride + n). For a [M, hidden]
	// tensor that is its base plus 2*Rank*shard bytes, with stride hidden.
	Shared       cuda.DevicePtr
	SharedStride int
	// Dst are 1..MaxDst [M, hidden] blocks (mailbox slots: the local or
	// multicast one, or every peer's), each written at the rank's columns.
	Dst []cuda.DevicePtr
	// Receive, when not nil, fuses this step's Lamport receive into the
	// launch (skinny.h, recv_slot): ReceiveCTAs more CTAs poll
	// Receive.Slot, copy the block to Receive.Out and re-arm the slot, with
	// LaunchReceive's rules, so no receive kernel is launched. Its M, Hidden
	// and Shard must be the shape's. Receive.Slot may be one of Dst (the
	// local slot); Receive.Out must not overlap any Dst or input, except
	// that with Receive.SkipSlice (SkipRank = Rank) Out may be one of Dst:
	// the tiles then store this rank's columns of Out, the receive the
	// others'.
	Receive *ReceiveArgs
	// Rotation, with a nonzero Counter, makes the mailbox slot a choice of
	// the device (SlotRotation): every Dst not marked in Rotation.Fixed,
	// and Receive.Slot, is then the address of slot 0. With Receive set the
	// launch ends the step and advances the counter (Receive.Rotation must
	// then be zero or the same); without it, it only reads the counter and
	// the LaunchReceive that follows it with the same Rotation advances it.
	Rotation SlotRotation
}

// SlotRotation makes the mailbox slot a device-side choice, so that a
// graph holding one step can be replayed: step t uses slot t mod Slots,
// and the index lives on the device and advances there (skinny.h, "Slot
// rotation").
type SlotRotation struct {
	// Counter is the device address of two uint32 words, 8-byte aligned,
	// both zero when the op is set up: word 0 is the slot index of the
	// next step (0..Slots-1), word 1 an arrival count the kernels use.
	// Zero Counter: no rotation (the addresses are used as given, and
	// Slots and Stride are not looked at).
	Counter cuda.DevicePtr
	Slots   int    // >= 2
	Stride  uint64 // bytes from one slot to the next, for every Dst and Receive.Slot
	// Fixed: bit d set means Dst[d] is not a mailbox slot (it is the step's
	// output block) and is used as given, never offset by s*Stride. A
	// fused receive's Out among the Dst (SkipSlice) must be marked.
	Fixed uint32
}

// rotationParams validates r and returns its parameter fields (all zero
// without rotation).
func rotationParams(r SlotRotation) (counter, stride uint64, slots int32, err error) {
	if r.Counter == 0 {
		return 0, 0, 0, nil
	}
	var errs []error
	bad := func(field, value, rule string) {
		errs = append(errs, &ArgError{Field: "Rotation." + field, Value: value, Rule: rule})
	}
	if r.Counter%8 != 0 {
		bad("Counter", fmt.Sprintf("%#x", uint64(r.Counter)), "must be 8-byte aligned (two uint32 words read as one)")
	}
	if r.Slots < 2 || r.Slots > math.MaxInt32 {
		bad("Slots", fmt.Sprint(r.Slots), "must be at least 2 (and fit the kernel's 32-bit int)")
	}
	if r.Stride == 0 || r.Stride%16 != 0 {
		bad("Stride", fmt.Sprint(r.Stride), "must be a positive multiple of 16 bytes (every slot 16-byte aligned)")
	} else if r.Slots >= 2 && r.Stride > math.MaxUint64/uint64(r.Slots) {
		bad("Stride", fmt.Sprint(r.Stride), fmt.Sprintf("times %d slots overflows a 64-bit address", r.Slots))
	}
	if err := errors.Join(errs...); err != nil {
		return 0, 0, 0, err
	}
	return uint64(r.Counter), r.Stride, int32(r.Slots), nil
}

// LaunchSkinny queues the fused up-projection for a's shape and rank on
// stream, with the launch configuration ConfigFor picks for the shape
// (StepConfigFor's when a.Receive is set).
// With pdl the launch carries programmatic stream serialization: it may
// start while the previous kernel on stream runs, streaming its weights,
// and reads latent and shared only after that kernel completed (and, with
// a.Rotation, the counter). The arguments are validated first; nothing is
// launched on error.
func (k *Kernels) LaunchSkinny(stream cuda.Stream, a SkinnyArgs, pdl bool) error {
	if k.closed {
		return ErrClosed
	}
	p, err := skinnyParams(a)
	if err != nil {
		return fmt.Errorf("kernel: LaunchSkinny (%v rank %d): %w", a.Shape, a.Rank, err)
	}
	s := a.Shape
	if s.M > MaxSkinnyM && a.Receive != nil {
		err := &ArgError{Field: "Receive", Value: "set", Rule: fmt.Sprintf("the kernel for M above %d has no fused receive: launch LaunchReceive after it", MaxSkinnyM)}
		return fmt.Errorf("kernel: LaunchSkinny (%v rank %d): %w", s, a.Rank, err)
	}
	sc := skinnyConfig(a.Receive != nil, s.M, s.Shard(), s.Latent)
	if sc.err != nil {
		return fmt.Errorf("kernel: LaunchSkinny (%v rank %d): %w", s, a.Rank, sc.err)
	}
	c, name := sc.c, sc.c.Function
	if p.RotCounter != 0 {
		name = sc.rotName
	}
	f, ok := k.skinny[name]
	if !ok {
		return fmt.Errorf("kernel: LaunchSkinny (%v rank %d): launch config %+v names a function (%s) Load did not look up", s, a.Rank, c, name)
	}
	p.TileRows = int32(c.TileRows)
	p.L2Prefetch = int32(c.L2Prefetch)
	if c.CodeM > 0 {
		p.Flags |= int32(s.M) << SkinnyRowsShift
	}
	grid := c.GridX
	if a.Receive != nil {
		grid += ReceiveCTAs(s.M, a.Receive.polledColumns(), c.BlockX, c.Cluster)
	}
	b := encodeSkinnyParams(&p)
	cfg := cuda.LaunchConfig{
		Grid:                      [3]uint32{uint32(grid), 1, 1},
		Block:                     [3]uint32{uint32(c.BlockX), 1, 1},
		SharedMem:                 uint32(c.SharedBytes),
		Stream:                    stream,
		ProgrammaticSerialization: pdl,
		ClusterDim:                [3]uint32{uint32(c.Cluster), 1, 1},
		ClusterPolicy:             cuda.ClusterSchedulingPolicy(c.ClusterPolicy),
	}
	if c.Carveout > 0 {
		cfg.SharedCarveout = cuda.Carveout(c.Carveout)
	}
	if err := k.drv.LaunchKernelEx(cfg, f, b[:]); err != nil {
		return fmt.Errorf("kernel: LaunchSkinny (%v rank %d, %s, %d warps, cluster %d): %w", s, a.Rank, c.Function, c.Warps, c.Cluster, err)
	}
	return nil
}

// skinnyConfigs holds what LaunchSkinny launches by, per skinnyKey: the
// lookup scans a launch table (with logarithms) and names the entry point,
// host work that an eager caller would otherwise pay at every step. The
// tables never change once read, so neither does an entry; a process sees
// few shapes, so the map stays small.
var skinnyConfigs sync.Map // skinnyKey -> skinnyLaunch

type skinnyKey struct {
	fused            bool // with the fused receive: StepConfigFor, else ConfigFor
	m, shard, latent int
}

type skinnyLaunch struct {
	c       LaunchConfig
	rotName string // c.Function with rotSuffix
	err     error  // c.Validate's
}

// skinnyConfig is the launch config of a skinny kernel of m rows at this
// shard and latent (StepConfigFor with the fused receive, else
// ConfigFor), validated.
func skinnyConfig(fused bool, m, shard, latent int) skinnyLaunch {
	key := skinnyKey{fused, m, shard, latent}
	if v, ok := skinnyConfigs.Load(key); ok {
		return v.(skinnyLaunch)
	}
	configFor := ConfigFor
	if fused {
		configFor = StepConfigFor
	}
	c := configFor(m, shard, latent)
	l := skinnyLaunch{c: c, rotName: c.Function + rotSuffix, err: c.Validate(m, shard, latent)}
	skinnyConfigs.Store(key, l)
	return l
}

// skinnyParams validates a and fills the parameter block (TileRows is
// left for the launch configuration).
func skinnyParams(a SkinnyArgs) (SkinnyParams, error) {
	s := a.Shape
	if err := s.Validate(); err != nil {
		return SkinnyParams{}, err
	}
	var errs []error
	bad := func(field, value, rule string) {
		errs = append(errs, &ArgError{Field: field, Value: value, Rule: rule})
	}
	shard := s.Shard()
	if a.Rank < 0 || a.Rank >= s.TP {
		bad("Rank", fmt.Sprint(a.Rank), fmt.Sprintf("must be in 0..%d (tp %d)", s.TP-1, s.TP))
	}
	if s.Hidden > math.MaxInt32 {
		bad("Shape.Hidden", fmt.Sprint(s.Hidden), "must fit the kernel's 32-bit int")
	}
	switch {
	case a.SharedStride < shard:
		bad("SharedStride", fmt.Sprint(a.SharedStride), fmt.Sprintf("must be at least shard_dim (%d)", shard))
	case a.SharedStride%8 != 0:
		bad("SharedStride", fmt.Sprint(a.SharedStride), "must be a multiple of 8 (16-byte aligned shared rows)")
	case a.SharedStride > math.MaxInt32:
		bad("SharedStride", fmt.Sprint(a.SharedStride), "must fit the kernel's 32-bit int")
	}
	ptr := func(field string, v cuda.DevicePtr) {
		if v == 0 || v%16 != 0 {
			bad(field, fmt.Sprintf("%#x", uint64(v)), "must be a non-null 16-byte aligned device address")
		}
	}
	ptr("Latent", a.Latent)
	ptr("Weight", a.Weight)
	if !a.WeightPacked {
		bad("WeightPacked", "false", "the kernels read only the packed layout (PackWeight): pack the weight where it is uploaded")
	}
	ptr("Shared", a.Shared)
	if n := len(a.Dst); n < 1 || n > MaxDst {
		bad("len(Dst)", fmt.Sprint(n), fmt.Sprintf("must be in 1..%d", MaxDst))
	} else {
		for i, d := range a.Dst {
			ptr(fmt.Sprintf("Dst[%d]", i), d)
		}
	}
	var rp ReceiveParams
	if a.Receive != nil {
		r := *a.Receive
		if r.M != s.M || r.Hidden != s.Hidden || r.Shard != shard {
			bad("Receive", fmt.Sprintf("M=%d Hidden=%d Shard=%d", r.M, r.Hidden, r.Shard),
				fmt.Sprintf("must match the shape (M=%d Hidden=%d Shard=%d)", s.M, s.Hidden, shard))
		}
		if r.SkipSlice && r.SkipRank != a.Rank {
			bad("Receive.SkipRank", fmt.Sprint(r.SkipRank), fmt.Sprintf("must be the launch's own rank (%d): its tiles store that slice", a.Rank))
		}
		if r.SkipSlice && !slices.Contains(a.Dst, r.Out) {
			bad("Receive.Out", fmt.Sprintf("%#x", uint64(r.Out)), "must be one of Dst with SkipSlice: the receive leaves this rank's columns to the tiles")
		}
		if r.Rotation != (SlotRotation{}) && r.Rotation != a.Rotation {
			bad("Receive.Rotation", fmt.Sprintf("%+v", r.Rotation), fmt.Sprintf("must be zero or the launch's Rotation (%+v): a fused receive reads the launch's slot", a.Rotation))
		}
		r.Rotation = SlotRotation{} // the launch's, below
		var err error
		if rp, err = receiveParams(r); err != nil {
			errs = append(errs, fmt.Errorf("fused receive: %w", err))
		}
	}
	counter, stride, slots, err := rotationParams(a.Rotation)
	if err != nil {
		errs = append(errs, err)
	}
	if counter != 0 {
		if extra := a.Rotation.Fixed >> min(len(a.Dst), 32); extra != 0 {
			bad("Rotation.Fixed", fmt.Sprintf("%#x", a.Rotation.Fixed), fmt.Sprintf("marks destinations past the %d of Dst", len(a.Dst)))
		}
		for i, d := range a.Dst {
			if a.Receive != nil && d == a.Receive.Out && a.Rotation.Fixed&(1<<i) == 0 {
				bad("Rotation.Fixed", fmt.Sprintf("%#x", a.Rotation.Fixed), fmt.Sprintf("must mark Dst[%d]: it is Receive.Out, no slot", i))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return SkinnyParams{}, err
	}
	p := SkinnyParams{
		RecvSlot: rp.Slot, RecvOut: rp.Out, RecvStatus: rp.Status, RecvTimeoutNs: rp.TimeoutNs, RecvFlags: rp.Flags,
		Latent: uint64(a.Latent), Weight: uint64(a.Weight), Shared: uint64(a.Shared),
		LatentDim: int32(s.Latent), Shard: int32(shard), Hidden: int32(s.Hidden), Rank: int32(a.Rank),
		SharedStride: int32(a.SharedStride), NDst: int32(len(a.Dst)), Flags: SkinnyPacked,
		RotCounter: counter, RotStride: stride, RotSlots: slots,
	}
	for i, d := range a.Dst {
		p.Dst[i] = uint64(d)
		if counter != 0 && a.Rotation.Fixed&(1<<i) == 0 {
			p.RotDstMask |= 1 << i
		}
	}
	return p, nil
}

// ReceiveCTAs is how many receive CTAs a skinny launch with a fused
// receive (SkinnyArgs.Receive) adds after the tiles' CTAs: one thread per
// 16-byte vector of the m×hidden block, rounded up to whole clusters, at
// least one cluster, at most 132 CTAs (rounded the same way). With
// ReceiveArgs.SkipSlice, hidden is the polled columns (Hidden - Shard).
func ReceiveCTAs(m, hidden, blockX, cluster int) int {
	blockX, cluster = max(blockX, 32), max(cluster, 1)
	n := (max(m, 1)*max(hidden, 8)/8 + blockX - 1) / blockX
	n = min(max(n, 1), 132)
	return (n + cluster - 1) / cluster * cluster
}

// encodeSkinnyParams lays p out as tprun_skinny_params (skinny.h:
// little-endian, the offsets of its comments), explicitly rather than by
// reinterpreting Go memory.
func encodeSkinnyParams(p *SkinnyParams) [SkinnyParamsSize]byte {
	var b [SkinnyParamsSize]byte
	le := binary.LittleEndian
	le.PutUint64(b[0:], p.Latent)
	le.PutUint64(b[8:], p.Weight)
	le.PutUint64(b[16:], p.Shared)
	for i, d := range p.Dst {
		le.PutUint64(b[24+8*i:], d)
	}
	for i, v := range [...]int32{p.LatentDim, p.Shard, p.Hidden, p.Rank, p.SharedStride, p.NDst, p.TileRows, p.L2Prefetch} {
		le.PutUint32(b[152+4*i:], uint32(v))
	}
	le.PutUint64(b[184:], p.RecvSlot)
	le.PutUint64(b[192:], p.RecvOut)
	le.PutUint64(b[200:], p.RecvStatus)
	le.PutUint64(b[208:], p.RecvTimeoutNs)
	le.PutUint32(b[216:], uint32(p.RecvFlags))
	le.PutUint32(b[220:], uint32(p.Flags))
	le.PutUint64(b[224:], p.RotCounter)
	le.PutUint64(b[232:], p.RotStride)
	le.PutUint32(b[240:], uint32(p.RotSlots))
	le.PutUint32(b[244:], uint32(p.RotDstMask))
	return b
}

// ReceiveArgs are the operands of one rank's Lamport receive.
type ReceiveArgs struct {
	// M rows of Hidden bf16 elements are received; Shard is the columns
	// per rank, so a missing word is reported as rank column/Shard.
	M, Hidden, Shard int
	// Slot is the local mailbox slot and Out the [M, Hidden] destination,
	// both 16-byte aligned. Status is ReceiveStatusWords uint32 words
	// (device or host-mapped memory) that must be zero before the launch;
	// the kernel only ever sets words to 1, on a timeout, so zeroing once
	// at setup (and again after reading a failure) is enough.
	Slot, Out, Status cuda.DevicePtr
	// Timeout is how long the receive waits for a missing word before it
	// gives up and reports (at least 1 ns).
	Timeout time.Duration
	// Abortable makes word ReceiveAbortWord of Status the abort word: the
	// host sets it (to any nonzero value) to end the receive as if its
	// deadline had passed; a waiting thread looks at it every 200 µs after
	// its first 200 µs. Status must then hold ReceiveAbortWord+1 words in
	// host-mapped memory, and that word must be zero before the launch.
	Abortable bool
	// SkipSlice leaves rank SkipRank's columns of Slot and Out alone: the
	// receive neither polls, copies nor re-arms them and never reports that
	// rank missing. A rank whose skinny kernel stores its own slice straight
	// into Out (in place of its local slot) receives only the others'.
	SkipSlice bool
	SkipRank  int
	// Rotation, with a nonzero Counter, makes Slot the address of slot 0:
	// the kernel receives the slot the counter names and advances it,
	// ending the step (SkinnyArgs.Rotation).
	Rotation SlotRotation
}

// polledColumns is how many columns of each row the receive polls.
func (a ReceiveArgs) polledColumns() int {
	if a.SkipSlice {
		return a.Hidden - a.Shard
	}
	return a.Hidden
}

// LaunchReceive queues the Lamport receive of a on stream: wait until the
// first M*Hidden elements of the slot (less rank SkipRank's columns with
// SkipSlice) hold no sentinel word, copy them to Out and re-arm the slot.
// With pdl it may be scheduled before the previous kernel on stream ends
// (it waits for it before touching memory). With a.Rotation it receives
// the slot the counter names and advances the counter: it ends the step.
// Read the outcome from Status with DecodeReceiveStatus after the stream
// has synchronized.
func (k *Kernels) LaunchReceive(stream cuda.Stream, a ReceiveArgs, pdl bool) error {
	if k.closed {
		return ErrClosed
	}
	p, err := receiveParams(a)
	if err != nil {
		return fmt.Errorf("kernel: LaunchReceive (M=%d hidden=%d shard=%d): %w", a.M, a.Hidden, a.Shard, err)
	}
	c := ReceiveConfigFor(a.M, a.polledColumns())
	f := k.receive
	if p.RotCounter != 0 {
		f = k.receiveRot
	}
	b := encodeReceiveParams(&p)
	cfg := cuda.LaunchConfig{
		Grid:                      [3]uint32{uint32(c.GridX), 1, 1},
		Block:                     [3]uint32{uint32(c.BlockX), 1, 1},
		Stream:                    stream,
		ProgrammaticSerialization: pdl,
	}
	if err := k.drv.LaunchKernelEx(cfg, f, b[:]); err != nil {
		return fmt.Errorf("kernel: LaunchReceive (M=%d hidden=%d shard=%d): %w", a.M, a.Hidden, a.Shard, err)
	}
	return nil
}

// receiveParams validates a and fills the parameter block.
func receiveParams(a ReceiveArgs) (ReceiveParams, error) {
	var errs []error
	bad := func(field string, value any, rule string) {
		errs = append(errs, &ArgError{Field: field, Value: fmt.Sprint(value), Rule: rule})
	}
	if a.M < 1 || a.M > MaxM {
		bad("M", a.M, fmt.Sprintf("must be in 1..%d", MaxM))
	}
	hiddenOK := a.Hidden > 0 && a.Hidden%8 == 0 && a.Hidden <= math.MaxInt32/MaxM
	if !hiddenOK {
		bad("Hidden", a.Hidden, fmt.Sprintf("must be a positive multiple of 8, at most %d", math.MaxInt32/MaxM))
	}
	if a.Shard <= 0 || a.Shard%8 != 0 {
		bad("Shard", a.Shard, "must be a positive multiple of 8")
	} else if hiddenOK {
		if a.Hidden%a.Shard != 0 {
			bad("Shard", a.Shard, fmt.Sprintf("must divide Hidden (%d)", a.Hidden))
		} else if tp := a.Hidden / a.Shard; tp > MaxTP {
			bad("Shard", a.Shard, fmt.Sprintf("must be at least Hidden/%d (%d ranks, status words for %d)", MaxTP, tp, MaxTP))
		}
	}
	if a.Timeout <= 0 {
		bad("Timeout", a.Timeout, "must be positive")
	}
	if a.SkipSlice && hiddenOK && a.Shard > 0 && a.Hidden%a.Shard == 0 && (a.SkipRank < 0 || a.SkipRank >= a.Hidden/a.Shard) {
		bad("SkipRank", a.SkipRank, fmt.Sprintf("must be in 0..%d (Hidden/Shard ranks)", a.Hidden/a.Shard-1))
	}
	for _, f := range []struct {
		name  string
		v     cuda.DevicePtr
		align uint64
	}{{"Slot", a.Slot, 16}, {"Out", a.Out, 16}, {"Status", a.Status, 4}} {
		if f.v == 0 || uint64(f.v)%f.align != 0 {
			bad(f.name, fmt.Sprintf("%#x", uint64(f.v)), fmt.Sprintf("must be a non-null %d-byte aligned device address", f.align))
		}
	}
	counter, stride, slots, err := rotationParams(a.Rotation)
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return ReceiveParams{}, err
	}
	var flags int32
	if a.Abortable {
		flags = ReceiveAbortable
	}
	if a.SkipSlice {
		flags |= ReceiveSkip | int32(a.SkipRank)<<ReceiveSkipRankShift
	}
	return ReceiveParams{Slot: uint64(a.Slot), Out: uint64(a.Out), Status: uint64(a.Status),
		TimeoutNs: uint64(a.Timeout.Nanoseconds()), M: int32(a.M), Hidden: int32(a.Hidden), Shard: int32(a.Shard),
		Flags: flags, RotCounter: counter, RotStride: stride, RotSlots: slots}, nil
}

// encodeReceiveParams lays p out as tprun_receive_params (skinny.h).
func encodeReceiveParams(p *ReceiveParams) [ReceiveParamsSize]byte {
	var b [ReceiveParamsSize]byte
	le := binary.LittleEndian
	le.PutUint64(b[0:], p.Slot)
	le.PutUint64(b[8:], p.Out)
	le.PutUint64(b[16:], p.Status)
	le.PutUint64(b[24:], p.TimeoutNs)
	for i, v := range [...]int32{p.M, p.Hidden, p.Shard, p.Flags} {
		le.PutUint32(b[32+4*i:], uint32(v))
	}
	le.PutUint64(b[48:], p.RotCounter)
	le.PutUint64(b[56:], p.RotStride)
	le.PutUint32(b[64:], uint32(p.RotSlots))
	return b
}

// SkinnyParams mirrors tprun_skinny_params (kernel/skinny.h) byte for byte;
// encodeSkinnyParams lays it out. Device addresses are CUdeviceptr values.
type SkinnyParams struct {
	Latent       uint64     // bf16 [M][LatentDim]
	Weight       uint64     // bf16, packed (PackWeight)
	Shared       uint64     // bf16, element (m,n) at Shared[m*SharedStride+n]
	Dst          [16]uint64 // bf16 [M][Hidden] each; first NDst used
	LatentDim    int32
	Shard        int32
	Hidden       int32
	Rank         int32
	SharedStride int32 // elements
	NDst         int32 // 1..16
	TileRows     int32 // LaunchConfig.TileRows
	L2Prefetch   int32 // LaunchConfig.L2Prefetch
	// The fused receive (SkinnyArgs.Receive; RecvSlot 0: none).
	RecvSlot, RecvOut, RecvStatus, RecvTimeoutNs uint64
	RecvFlags                                    int32 // as ReceiveParams.Flags
	Flags                                        int32 // SkinnyPacked
	// Slot rotation (SkinnyArgs.Rotation; RotCounter 0: none).
	RotCounter, RotStride uint64
	RotSlots              int32
	RotDstMask            int32 // bit d: Dst[d] is a slot
}

// SkinnyPacked is the tprun_skinny_params.flags bit of a packed weight
// (TPRUN_SKINNY_PACKED); every launch sets it.
const SkinnyPacked = 1

// SkinnyRowsShift is where a larger-M launch puts its row count M in
// tprun_skinny_params.flags (TPRUN_SKINNY_ROWS: bits 8-15; 0 in a skinny
// launch, whose M is its entry point's).
const SkinnyRowsShift = 8

// ReceiveParams mirrors tprun_receive_params (kernel/skinny.h).
type ReceiveParams struct {
	Slot      uint64 // bf16 [M][Hidden], the local mailbox slot
	Out       uint64 // bf16 [M][Hidden]
	Status    uint64 // uint32 [ReceiveStatusWords], zeroed by the caller before the launch
	TimeoutNs uint64
	M         int32
	Hidden    int32
	Shard     int32
	Flags     int32 // ReceiveAbortable, ReceiveSkip with the rank at ReceiveSkipRankShift, or 0
	// Slot rotation (ReceiveArgs.Rotation; RotCounter 0: none).
	RotCounter, RotStride uint64
	RotSlots              int32
}

// Receive flags and the abort word (skinny.h, TPRUN_RECEIVE_ABORTABLE,
// TPRUN_RECEIVE_SKIP): with ReceiveSkip the receive leaves the columns of
// the rank in bits ReceiveSkipRankShift.. (8 bits) alone.
const (
	ReceiveAbortable     = 1
	ReceiveSkip          = 2
	ReceiveSkipRankShift = 8
	ReceiveAbortWord     = 32
)

// ReceiveStatusWords is the length of the receive kernel's status array:
// word 0 is 1 after a timeout, word 1+r is 1 when rank r's slice (r < 16)
// was incomplete at the deadline.
const ReceiveStatusWords = 1 + MaxTP

// DecodeReceiveStatus reads the receive kernel's status words: whether it
// timed out, and the ranks (ascending) some word of whose slice never
// arrived.
func DecodeReceiveStatus(w [ReceiveStatusWords]uint32) (timedOut bool, missing []int) {
	for r := range MaxTP {
		if w[1+r] != 0 {
			missing = append(missing, r)
		}
	}
	return w[0] != 0, missing
}
