package tp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"
	"unsafe"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// ErrBackendUnavailable is matched when the requested backend cannot run
// in this build or on this machine.
var ErrBackendUnavailable = errors.New("tp: backend not available")

// UpOption changes how NewUpProjection sets the op up.
type UpOption func(*upConfig)

type upConfig struct {
	backend   mailbox.Kind
	slots     int
	deadline  time.Duration
	device    int          // CUDA device ordinal (WithDevice)
	deviceSet bool         // WithDevice was given
	drv       *cuda.Driver // WithCUDADriver; nil: the op opens its own
	// sharedDevice: another rank uses this rank's device (set by newEngine).
	sharedDevice bool
}

// WithBackend picks the mailbox backend (DESIGN.md "The mailbox"). The
// default, mailbox.KindAuto, resolves collectively from every rank's
// device (ResolveMailbox): multicast where allowed and supported, else
// unicast, both on the CUDA engine; the host backend where some rank has
// no usable GPU. Unicast and multicast asked for by name run on the CUDA
// engine or fail with ErrBackendUnavailable.
func WithBackend(k mailbox.Kind) UpOption { return func(c *upConfig) { c.backend = k } }

// WithSlots sets the number of mailbox slots (at least 2; 0 means
// mailbox.DefaultSlots).
func WithSlots(n int) UpOption { return func(c *upConfig) { c.slots = n } }

// WithDeadline bounds how long a step waits for the peers' slices (0 means
// mailbox.DefaultDeadline). Past it the step fails naming the missing ranks.
func WithDeadline(d time.Duration) UpOption { return func(c *upConfig) { c.deadline = d } }

// UpInputs are one step's operands in host memory, raw bf16, row-major
// (DESIGN.md "The operation"). Shard is hidden_dim / group size.
type UpInputs struct {
	M int // rows this step, 1..the maxM given to NewUpProjection
	// Latent is [M, latent_dim], the same on every rank.
	Latent []kernel.BF16
	// Weight is [shard, latent_dim]: this rank's rows of the full
	// [hidden_dim, latent_dim] weight.
	Weight []kernel.BF16
	// Shared is [M, shard] with row stride SharedStride: this rank's
	// columns of an [M, hidden_dim] tensor. Pass shared[rank*shard:] of the
	// full tensor with SharedStride hidden_dim, or a packed [M, shard]
	// slice with SharedStride shard.
	Shared       []kernel.BF16
	SharedStride int
}

// UpProjection is the fused up-projection of one rank of a group: every
// Step multiplies the latent block by this rank's weight shard, adds its
// shared slice, writes the result into every other rank's mailbox slot (and
// its own, or with the CUDA engine's unicast mailbox straight into the
// output) and returns once the whole [M, hidden_dim] block, every rank's
// slice, has arrived. Every rank of the group must call Step the same number of times
// with the same M.
//
// Step must not be called concurrently with itself; Close may be called
// from any goroutine, and a Step waiting at that moment fails.
type UpProjection struct {
	rank   int
	shape  kernel.Shape // M is the capacity (maxM)
	eng    upEngine
	reason string // why this backend

	mu   sync.Mutex // serializes Step: the engine's scratch and the step count
	next uint64     // the step the next Step call runs

	closeOnce sync.Once
	closeErr  error
}

// upEngine is one way of running a step. The host engine computes on the
// CPU and stores through the host mailbox. The CUDA engine
// (tp/upproj_cuda.go) holds its operands in device memory and launches
// kernels that store into the GPU mailbox; it serves hostStep by staging
// host operands, and adds StepDevice and Capture beside Step.
type upEngine interface {
	// name is the mailbox backend's name ("host", "unicast", "multicast").
	name() string
	// hostStep runs step t for shape s (already validated against in and
	// out) and leaves the whole block in out[:s.M*s.Hidden].
	hostStep(ctx context.Context, t uint64, s kernel.Shape, in UpInputs, out []kernel.BF16) error
	// close releases the engine; it may run while hostStep waits.
	close() error
}

// NewUpProjection sets the op up for hidden_dim hidden, latent_dim latent
// and up to maxM rows per step on ex's group (each rank owns hidden/size
// rows of the weight). It is a collective: every rank must call it with the
// same arguments. *Group.NewUpProjection is the usual way in; ex is an
// interface so that tests can run ranks as goroutines.
func NewUpProjection(ctx context.Context, ex mailbox.Exchanger, hidden, latent, maxM int, opts ...UpOption) (*UpProjection, error) {
	var cfg upConfig
	for _, o := range opts {
		o(&cfg)
	}
	rank := ex.Rank()
	s := kernel.Shape{M: maxM, Hidden: hidden, Latent: latent, TP: ex.Size()}
	if err := s.Validate(); err != nil {
		return nil, fmt.Errorf("tp: rank %d: up-projection with maxM=%d hidden=%d latent=%d tp=%d: %w",
			rank, maxM, hidden, latent, ex.Size(), err)
	}
	if cfg.slots < 0 || cfg.deadline < 0 {
		return nil, fmt.Errorf("tp: rank %d: up-projection: %w: slots %d, deadline %v (want slots >= 2 or 0 for the default, deadline >= 0)",
			rank, mailbox.ErrConfig, cfg.slots, cfg.deadline)
	}
	if !cfg.deviceSet {
		if d, ok := ex.(interface{ Device() int }); ok {
			cfg.device = d.Device()
		}
	}
	eng, reason, err := newEngine(ctx, ex, s, cfg, realEngineDeps())
	if err != nil {
		return nil, fmt.Errorf("tp: rank %d: up-projection (%v): %w", rank, s, err)
	}
	return &UpProjection{rank: rank, shape: s, eng: eng, reason: reason}, nil
}

// NewUpProjection is NewUpProjection on this group, on the group's device.
func (g *Group) NewUpProjection(ctx context.Context, hidden, latent, maxM int, opts ...UpOption) (*UpProjection, error) {
	return NewUpProjection(ctx, g, hidden, latent, maxM, opts...)
}

// newEngine picks the engine for cfg.backend: the host engine for the
// host mailbox, else the CUDA engine once ResolveMailbox (a collective)
// has agreed on the GPU mailbox.
func newEngine(ctx context.Context, ex mailbox.Exchanger, s kernel.Shape, cfg upConfig, deps engineDeps) (upEngine, string, error) {
	if cfg.backend == mailbox.KindHost {
		eng, err := newHostEngine(ctx, ex, s, cfg)
		return eng, "host asked for", err
	}
	drv, closeDrv, noDrv := cfg.drv, func() error { return nil }, error(nil)
	if drv == nil && (cfg.backend != mailbox.KindMulticast || mailbox.CheckMulticastAllowed(os.Getenv) == nil) {
		if drv, noDrv = OpenGPU(); drv != nil {
			closeDrv = drv.Close
		}
	}
	kind, reason, devices, err := resolveMailbox(ctx, ex, cfg.backend, probeGPU(drv, noDrv, cfg.device), os.Getenv)
	if err == nil && kind == mailbox.KindHost {
		err = closeDrv()
		var eng upEngine
		if err == nil {
			eng, err = newHostEngine(ctx, ex, s, cfg)
		}
		return eng, reason, err
	}
	if err != nil {
		return nil, "", errors.Join(err, closeDrv())
	}
	own := closeDrv
	if cfg.drv != nil {
		own = nil
	}
	// Ranks that share this device (other processes under MPS, or
	// goroutines of this one) run concurrently with ours on its SMs.
	for r, d := range devices {
		if r != ex.Rank() && d == cfg.device {
			cfg.sharedDevice = true
		}
	}
	eng, err := newCUDAEngine(ctx, ex, s, cfg, drv, own, cfg.device, kind, deps)
	if err != nil {
		return nil, "", err
	}
	return eng, reason, nil
}

// Rank is this rank.
func (u *UpProjection) Rank() int { return u.rank }

// Shape is the op's shape with M set to the largest M a step may use.
func (u *UpProjection) Shape() kernel.Shape { return u.shape }

// Backend names the mailbox backend: "host", "unicast" or "multicast".
func (u *UpProjection) Backend() string { return u.eng.name() }

// BackendReason says why this backend was picked, for a person to read.
func (u *UpProjection) BackendReason() string { return u.reason }

// Steps is the number of steps that have completed.
func (u *UpProjection) Steps() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.next
}

// Step runs one step: it validates in and out (errors wrap kernel.ErrShape
// and name the value and the rule; nothing is sent then, and the group can
// go on), computes this rank's slice, writes it to every rank and waits
// until every rank's slice has arrived, leaving the whole [M, hidden_dim]
// block, row-major, in out[:M*hidden_dim].
//
// When a peer's slice does not arrive within the deadline the error is a
// *mailbox.TimeoutError naming the missing ranks (errors.Is
// mailbox.ErrTimeout). After a failed wait the op is unusable: later steps
// fail with mailbox.ErrBroken.
func (u *UpProjection) Step(ctx context.Context, in UpInputs, out []kernel.BF16) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	s := u.shape
	s.M = in.M
	if err := u.validate(s, in, out); err != nil {
		return fmt.Errorf("tp: rank %d: up-projection step %d (%v): %w", u.rank, u.next, s, err)
	}
	if err := u.eng.hostStep(ctx, u.next, s, in, out); err != nil {
		return fmt.Errorf("tp: rank %d: up-projection step %d (%v): %w", u.rank, u.next, s, err)
	}
	u.next++
	return nil
}

// validate checks the step's shape and every buffer against it.
func (u *UpProjection) validate(s kernel.Shape, in UpInputs, out []kernel.BF16) error {
	if err := s.Validate(); err != nil {
		return err
	}
	if err := s.ValidateCapacity(u.shape.M); err != nil {
		return err
	}
	var errs []error
	l := kernel.Layout{LatentLen: len(in.Latent), WeightLen: len(in.Weight), SharedLen: len(in.Shared),
		SharedStride: in.SharedStride, OutLen: -1}
	if err := s.ValidateLayout(l); err != nil {
		errs = append(errs, err)
	}
	if need := s.M * s.Hidden; len(out) < need {
		errs = append(errs, &kernel.ShapeError{Field: "len(out)", Value: len(out),
			Rule: fmt.Sprintf("must be at least M*hidden_dim = %d (the whole block)", need)})
	}
	return errors.Join(errs...)
}

// Close releases the mailbox and the engine. It is idempotent and safe to
// call while Step waits; that Step then fails.
func (u *UpProjection) Close() error {
	u.closeOnce.Do(func() {
		if err := u.eng.close(); err != nil {
			u.closeErr = fmt.Errorf("tp: rank %d: closing the up-projection: %w", u.rank, err)
		}
	})
	return u.closeErr
}

// hostMailbox is what the host engine needs from the mailbox.
type hostMailbox interface {
	mailbox.Stepper
	Name() string
	Close() error
}

var _ hostMailbox = (*mailbox.Host)(nil)

// hostEngine computes with kernel.CPU and exchanges through the host
// mailbox (a memfd per rank, mapped by every rank process).
type hostEngine struct {
	mb    hostMailbox
	cpu   kernel.CPU
	slice []kernel.BF16 // this rank's [maxM, shard] result, before it is sent
}

var _ upEngine = (*hostEngine)(nil)

func newHostEngine(ctx context.Context, ex mailbox.Exchanger, s kernel.Shape, cfg upConfig) (*hostEngine, error) {
	mb, err := mailbox.NewHost(ctx, ex, mailbox.Config{Hidden: s.Hidden, Capacity: s.M, Slots: cfg.slots, Deadline: cfg.deadline})
	if err != nil {
		return nil, err
	}
	return &hostEngine{mb: mb, slice: make([]kernel.BF16, s.M*s.Shard())}, nil
}

func (e *hostEngine) name() string { return e.mb.Name() }

func (e *hostEngine) hostStep(ctx context.Context, t uint64, s kernel.Shape, in UpInputs, out []kernel.BF16) error {
	slice := e.slice[:s.M*s.Shard()]
	// The slice is computed packed and then stored by the mailbox, word by
	// word with atomics, into every rank's slot (its own included).
	if err := e.cpu.UpProject(s, in.Latent, in.Weight, in.Shared, in.SharedStride, slice, s.Shard()); err != nil {
		return err
	}
	if err := e.mb.Write(ctx, t, s.M, bits(slice)); err != nil {
		return err
	}
	return e.mb.Receive(ctx, t, s.M, bits(out[:s.M*s.Hidden]))
}

func (e *hostEngine) close() error { return e.mb.Close() }

// bits views bf16 values as the raw uint16 bits the mailbox takes. BF16's
// underlying type is uint16, so the memory layout is the same; the view
// avoids copying a block per step.
func bits(b []kernel.BF16) []uint16 {
	if len(b) == 0 {
		return nil
	}
	return unsafe.Slice((*uint16)(unsafe.Pointer(unsafe.SliceData(b))), len(b))
}
