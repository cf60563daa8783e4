package tp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// ErrBackendUnavailable is matched when the requested backend cannot run
// in this build or on this machine.
var ErrBackendUnavailable = errors.New("tp: backend not available")

// ErrBusy is matched when a call of an UpProjection (Step, StepDevice,
// Capture, a graph's Replay) starts while another one of the same op runs:
// two goroutines' steps would pair up with the other ranks' steps in an
// order nobody chose.
var ErrBusy = errors.New("tp: another call of this up-projection is running")

// ErrNoWeight is matched when a step leaves its weight out (a nil
// UpInputs.Weight, a zero DeviceInputs.Weight) before SetWeight gave the
// op one.
var ErrNoWeight = errors.New("tp: no weight: pass one with the step, or give the op its own with SetWeight first")

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
	stepChecks   bool // WithStepChecks, or StepChecksEnv
}

// WithBackend picks the mailbox backend (BackendKind). The
// default, BackendAuto, resolves collectively from every rank's
// device (ResolveMailbox): multicast where allowed and supported, else
// unicast, both on the CUDA engine; the host backend where some rank has
// no usable GPU. Unicast and multicast asked for by name run on the CUDA
// engine or fail with ErrBackendUnavailable.
func WithBackend(k BackendKind) UpOption { return func(c *upConfig) { c.backend = k } }

// WithSlots sets the number of mailbox slots (at least 2; 0 means the
// default, 3).
func WithSlots(n int) UpOption { return func(c *upConfig) { c.slots = n } }

// WithDeadline bounds how long a step waits for the peers' slices (0 means
// the default, 10 s). Past it the step fails naming the missing ranks.
func WithDeadline(d time.Duration) UpOption { return func(c *upConfig) { c.deadline = d } }

// UpInputs are one step's operands in host memory, raw bf16, row-major
// (the operation is written out in package kernel's documentation). Shard
// is hidden_dim / group size.
type UpInputs struct {
	M int // rows this step, 1..the maxM given to NewUpProjection
	// Latent is [M, latent_dim], the same on every rank.
	Latent []BF16
	// Weight is [shard, latent_dim]: this rank's rows of the full
	// [hidden_dim, latent_dim] weight, row-major. Nil uses the op's own
	// copy (SetWeight), the usual way: a weight passed here is packed on
	// the host (the kernels' layout) and copied to the device at every
	// step of the CUDA engine.
	Weight []BF16
	// Shared is [M, shard] with row stride SharedStride: this rank's
	// columns of an [M, hidden_dim] tensor. Pass shared[rank*shard:] of the
	// full tensor with SharedStride hidden_dim, or a packed [M, shard]
	// slice with SharedStride shard.
	Shared       []BF16
	SharedStride int
}

// UpProjection is the fused up-projection of one rank of a group: every
// step multiplies the latent block by this rank's weight shard, adds its
// shared slice, writes the result into every other rank's mailbox slot (and
// its own, or with the CUDA engine's unicast mailbox straight into the
// output) and completes once the whole [M, hidden_dim] block, every rank's
// slice, has arrived. Every rank of the group must run the same steps, in
// the same order, with the same M: Step (host operands), StepDevice
// (device operands, waited for), Enqueue (queued on a stream), Capture's
// graphs; the kinds may differ between ranks. Ranks that pass different M
// for a step do not get a block: every rank's step fails at the deadline
// with a *TimeoutError that names the ranks which passed another M.
//
// The calls of an op must not overlap: a second call while one runs fails
// with ErrBusy. Err and Close may be called from any goroutine; a step
// waiting when Close is called fails.
//
// An op made from a Group (Group.NewUpProjection), or from an ExternalGroup
// whose ranks share this node, also watches the job: when the job fails (a
// peer died or left, a rank aborted), a step waiting for the peers ends at
// once with that failure (errors.Is ErrAborted, a *RankError naming the
// rank) instead of waiting out its deadline, and a step started after it
// fails at once, before it writes anything. A step whose own ctx ended
// before the job failed returns ctx's error.
type UpProjection struct {
	rank   int
	shape  kernel.Shape // M is the capacity (maxM)
	eng    upEngine
	reason string // why this backend
	// job ends, with the job's failure as its cause, when the group's job
	// fails; nil when the exchanger cannot tell (tests' in-process ranks).
	job context.Context
	// checks is the exchanger the step checks all-gather through
	// (WithStepChecks); nil when they are off. checkWait bounds how long a
	// check waits for the other ranks: the step's deadline.
	checks    mailbox.Exchanger
	checkWait time.Duration
	opID      int // this op's number among the checked ops of its exchanger

	busy atomic.Bool // a call that must not overlap another is running (ErrBusy)
	mu   sync.Mutex  // guards next, weightSet and the engine's scratch
	next uint64      // the step the next Step call runs
	// weightSet: SetWeight gave the op its own weight.
	weightSet bool

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
	// out) and leaves the whole block in out[:s.M*s.Hidden]. A nil
	// in.Weight is the engine's own (setWeight).
	hostStep(ctx context.Context, t uint64, s kernel.Shape, in UpInputs, out []kernel.BF16) error
	// setWeight keeps w, the row-major [shard, latent] weight (its length
	// checked), as the engine's own.
	setWeight(w []kernel.BF16) error
	// close releases the engine; it may run while hostStep waits.
	close() error
}

// NewUpProjection sets the op up for hidden_dim hidden, latent_dim latent
// and up to maxM rows per step on ex's group (each rank owns hidden/size
// rows of the weight). It is a collective: every rank must call it with the
// same arguments. *Group.NewUpProjection is the usual way in; ex is an
// interface so that tests can run ranks as goroutines.
func NewUpProjection(ctx context.Context, ex Exchanger, hidden, latent, maxM int, opts ...UpOption) (*UpProjection, error) {
	var cfg upConfig
	for _, o := range opts {
		o(&cfg)
	}
	cfg.stepChecks = cfg.stepChecks || stepChecksFromEnv()
	rank := ex.Rank()
	s := kernel.Shape{M: maxM, Hidden: hidden, Latent: latent, TP: ex.Size()}
	var bad []error
	if err := s.Validate(); err != nil {
		bad = append(bad, renameShapeField(err, "M", "maxM"))
	}
	if cfg.slots < 0 {
		bad = append(bad, fmt.Errorf("%w: WithSlots(%d): want at least 2, or 0 for the default", mailbox.ErrConfig, cfg.slots))
	}
	if cfg.deadline < 0 {
		bad = append(bad, fmt.Errorf("%w: WithDeadline(%v): want a positive duration, or 0 for the default", mailbox.ErrConfig, cfg.deadline))
	}
	// Every rank checks its own arguments and then every rank's: a rank
	// whose arguments are bad fails, and so do the others, instead of
	// waiting for it in the mailbox's setup; ranks that disagree about the
	// shape fail together before anything is allocated.
	if err := agreeShape(ctx, ex, s, cfg.stepChecks, errors.Join(bad...)); err != nil {
		return nil, fmt.Errorf("tp: rank %d: up-projection with maxM=%d hidden=%d latent=%d tp=%d: %w",
			rank, maxM, hidden, latent, ex.Size(), err)
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
	u := &UpProjection{rank: rank, shape: s, eng: eng, reason: reason}
	if cfg.stepChecks {
		u.checks, u.checkWait, u.opID = ex, cmp.Or(cfg.deadline, mailbox.DefaultDeadline), nextOpID(ex)
	}
	if w, ok := ex.(jobWatcher); ok {
		u.job = w.jobContext()
	}
	return u, nil
}

// renameShapeField renames the field of every *ShapeError in err (a
// joined error included) named from: a shape checked for the op's maxM
// names maxM, the argument the caller gave, not a step's M.
func renameShapeField(err error, from, to string) error {
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			renameShapeField(e, from, to)
		}
		return err
	}
	var se *kernel.ShapeError
	if errors.As(err, &se) && se.Field == from {
		se.Field = to
	}
	return err
}

// jobWatcher is an exchanger that knows when its job has failed, and can
// fail it for every rank, naming this one (a Group; an ExternalGroup on
// one node). A nil jobContext is an exchanger that cannot tell after all
// (an ExternalGroup across nodes): its ops work without a job watch.
type jobWatcher interface {
	jobContext() context.Context
	abortJob(reason string) error
}

// agreeShape all-gathers every rank's shape and the outcome of its own
// argument checks: it fails on every rank when one rank's arguments are bad
// (naming it) or when the ranks' shapes differ (naming each rank's).
func agreeShape(ctx context.Context, ex mailbox.Exchanger, s kernel.Shape, checks bool, local error) error {
	desc := fmt.Sprintf("maxM=%d hidden=%d latent=%d", s.M, s.Hidden, s.Latent)
	if checks {
		desc += " with step checks (" + StepChecksEnv + " or WithStepChecks)" // every rank must take part in them
	}
	if err := agree(ctx, ex, "checking the arguments", local); err != nil {
		return err
	}
	all, err := ex.AllGather(ctx, []byte(desc))
	if err != nil {
		return fmt.Errorf("all-gather of the shape: %w", err)
	}
	var differ []string
	for r, b := range all {
		if string(b) != desc {
			differ = append(differ, fmt.Sprintf("rank %d has %s", r, b))
		}
	}
	if len(differ) > 0 {
		return fmt.Errorf("%w: ranks disagree about the up-projection: rank %d has %s, %s",
			mailbox.ErrConfig, ex.Rank(), desc, strings.Join(differ, ", "))
	}
	return nil
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
	// The process's driver, unless a test brings its own; none at all
	// where multicast was asked for under its safety rule (the refusal
	// below names the variable).
	drv, noDrv := cfg.drv, error(nil)
	if drv == nil && (cfg.backend != mailbox.KindMulticast || mailbox.CheckMulticastAllowed(os.Getenv) == nil) {
		drv, noDrv = processGPU()
	}
	kind, reason, devices, err := resolveMailbox(ctx, ex, cfg.backend, probeGPU(drv, noDrv, cfg.device), os.Getenv)
	if err != nil {
		return nil, "", err
	}
	if kind == mailbox.KindHost {
		eng, err := newHostEngine(ctx, ex, s, cfg)
		return eng, reason, err
	}
	// Ranks that share this device (other processes under MPS, or
	// goroutines of this one) run concurrently with ours on its SMs.
	for r, d := range devices {
		if r != ex.Rank() && d == cfg.device {
			cfg.sharedDevice = true
		}
	}
	eng, err := newCUDAEngine(ctx, ex, s, cfg, gpuDriver{drv}, nil, cfg.device, kind, deps)
	if err != nil {
		return nil, "", err
	}
	return eng, reason, nil
}

// Rank is this rank.
func (u *UpProjection) Rank() int { return u.rank }

// Shape is the op's shape with M set to the largest M a step may use.
func (u *UpProjection) Shape() Shape { return u.shape }

// Backend names the mailbox backend: "host", "unicast" or "multicast".
func (u *UpProjection) Backend() string { return u.eng.name() }

// BackendReason says why this backend was picked, for a person to read.
func (u *UpProjection) BackendReason() string { return u.reason }

// Steps is the host's count of the op's steps: those run, those Enqueue
// queued, and the replays of Capture's graphs (the caller's own graphs
// replay unseen). It names steps in errors. It waits while a call of the
// op (a step, a capture, a batch of replays) runs.
func (u *UpProjection) Steps() uint64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.next
}

// Step runs one step: it validates in and out (errors wrap ErrShape
// and name the value and the rule; nothing is sent then, and the group can
// go on), computes this rank's slice, writes it to every rank and waits
// until every rank's slice has arrived, leaving the whole [M, hidden_dim]
// block, row-major, in out[:M*hidden_dim].
//
// When a peer's slice does not arrive within the deadline the error is a
// *TimeoutError naming the missing ranks (errors.Is
// ErrTimeout), and the ranks that ran this step with another M
// (TimeoutError.OtherM). After a failed wait the op is unusable: later steps
// fail with ErrBroken (only; the cause is in the text), or, for an
// op made from a Group whose job has failed, with the job's failure.
func (u *UpProjection) Step(ctx context.Context, in UpInputs, out []BF16) error {
	leave, err := u.enter("step")
	if err != nil {
		return err
	}
	defer leave()
	s := u.shape
	s.M = in.M
	if err := u.checkCall(ctx, "step", []int{in.M}, u.validate(s, in, out)); err != nil {
		return fmt.Errorf("tp: rank %d: up-projection step %d (%v): %w", u.rank, u.next, s, err)
	}
	wctx, done, err := u.watchJob(ctx)
	if err == nil {
		err = u.jobFailure(ctx, u.eng.hostStep(wctx, u.next, s, in, out))
		done()
	}
	if err != nil {
		return fmt.Errorf("tp: rank %d: up-projection step %d (%v): %w", u.rank, u.next, s, err)
	}
	u.next++
	return nil
}

// SetWeight gives the op this rank's weight shard once: w is
// [shard, latent_dim], row-major as frameworks hold it (rows
// rank*shard.. of the full [hidden_dim, latent_dim] weight). The op keeps
// its own copy, on the CUDA engine in device memory and in the layout
// the kernels run fastest on (PreferPacked), and a step whose inputs leave
// the weight out (nil UpInputs.Weight, zero DeviceInputs.Weight) uses it.
// The caller may reuse w afterwards.
//
// It is local to the rank (no collective) and may be called again to
// replace the weight: the copy is overwritten in place, so graphs captured
// before compute with the new weight. No step of the op may be running
// meanwhile: synchronize the streams of enqueued steps first. A w of
// another length is refused with a *ShapeError (ErrShape).
func (u *UpProjection) SetWeight(ctx context.Context, w []BF16) error {
	return u.setWeight(ctx, "set weight", func() error {
		if want := u.shape.Shard() * u.shape.Latent; len(w) != want {
			return &kernel.ShapeError{Field: "len(weight shard)", Value: len(w),
				Rule: fmt.Sprintf("must be shard_dim*latent_dim = %d*%d = %d", u.shape.Shard(), u.shape.Latent, want)}
		}
		return u.eng.setWeight(w)
	})
}

// SetWeightDevice is SetWeight from device memory: w is the row-major
// [shard, latent_dim] weight in the primary context of Device() (a
// tensor's data_ptr(), say), whose writes have finished. The op copies it
// into its own buffer (packing it on the way where the kernels prefer
// that), and the caller may free w afterwards. The host backend refuses it
// with ErrBackendUnavailable.
func (u *UpProjection) SetWeightDevice(ctx context.Context, w DevicePtr) error {
	return u.setWeight(ctx, "set weight from device memory", func() error {
		e, err := u.cudaEngine("set weight from device memory")
		if err != nil {
			return err
		}
		if w == 0 {
			return &kernel.ShapeError{Field: "weight", Value: 0, Rule: "device address must be non-zero"}
		}
		return e.setWeightDevice(cuda.DevicePtr(w))
	})
}

func (u *UpProjection) setWeight(ctx context.Context, what string, set func() error) error {
	leave, err := u.enter(what)
	if err != nil {
		return err
	}
	defer leave()
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("tp: rank %d: up-projection %s: %w", u.rank, what, err)
	}
	if err := set(); err != nil {
		return fmt.Errorf("tp: rank %d: up-projection %s (%v): %w", u.rank, what, u.shape, err)
	}
	u.weightSet = true
	return nil
}

// enter starts a call that must not overlap another call of the op; leave
// ends it.
func (u *UpProjection) enter(op string) (leave func(), err error) {
	if !u.busy.CompareAndSwap(false, true) {
		return nil, fmt.Errorf("tp: rank %d: up-projection %s: %w", u.rank, op, ErrBusy)
	}
	u.mu.Lock()
	return func() {
		u.mu.Unlock()
		u.busy.Store(false)
	}, nil
}

// watchJob returns ctx, ended as well, with the job's failure as its cause,
// when the job fails (an op made from a Group), and the function that stops
// watching; or the job's failure when the job has failed already: a step
// must not write into a job that is over.
func (u *UpProjection) watchJob(ctx context.Context) (context.Context, func(), error) {
	if u.job == nil {
		return ctx, func() {}, nil
	}
	if u.job.Err() != nil {
		return ctx, func() {}, fmt.Errorf("the job has failed: %w", context.Cause(u.job))
	}
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(u.job, func() { cancel(context.Cause(u.job)) })
	return ctx, func() {
		stop()
		cancel(nil)
	}, nil
}

// jobFailure names the job's failure as the error of a step that it ended
// where the engine's error does not already (an engine that saw only a
// cancelled context). When the caller's own ctx ended too, err stays as it
// is: a caller stopping the rank (tprun's SIGTERM) must see its own
// cancellation, not the failure the other ranks' ends caused in the hub.
func (u *UpProjection) jobFailure(caller context.Context, err error) error {
	if err == nil || u.job == nil || u.job.Err() == nil || caller.Err() != nil ||
		errors.Is(err, ErrAborted) || !errors.Is(err, context.Canceled) {
		return err
	}
	return fmt.Errorf("the job failed while the step waited for the other ranks: %w", context.Cause(u.job))
}

// validate checks the step's shape and every buffer against it.
func (u *UpProjection) validate(s kernel.Shape, in UpInputs, out []kernel.BF16) error {
	if err := u.validateM(s.M); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	var errs []error
	l := kernel.Layout{LatentLen: len(in.Latent), WeightLen: len(in.Weight), SharedLen: len(in.Shared),
		SharedStride: in.SharedStride, OutLen: -1}
	if in.Weight == nil {
		l.WeightLen = s.Shard() * s.Latent // the op's own
		if !u.weightSet {
			errs = append(errs, ErrNoWeight)
		}
	}
	if err := s.ValidateLayout(l); err != nil {
		errs = append(errs, err)
	}
	if need := s.M * s.Hidden; len(out) < need {
		errs = append(errs, &kernel.ShapeError{Field: "len(out)", Value: len(out),
			Rule: fmt.Sprintf("must be at least M*hidden_dim = %d (the whole block)", need)})
	}
	return errors.Join(errs...)
}

// validateM checks a step's M against the maxM the op was made for.
func (u *UpProjection) validateM(m int) error {
	if m < 1 || m > u.shape.M {
		return &kernel.ShapeError{Field: "M", Value: m,
			Rule: fmt.Sprintf("must be in 1..%d (the maxM given to NewUpProjection)", u.shape.M)}
	}
	return nil
}

// Close releases the mailbox and the engine. It is idempotent and safe to
// call while Step waits; that Step then fails. Steps still queued by
// Enqueue (or in the caller's graphs) are ended first, their blocks
// garbage: synchronize before Close to have them finish normally, and
// replay no graph holding the op's steps after it.
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
	mb     hostMailbox
	cpu    kernel.CPU
	slice  []kernel.BF16 // this rank's [maxM, shard] result, before it is sent
	weight []kernel.BF16 // the op's own weight (setWeight), row-major as the CPU kernel reads it
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
	w := in.Weight
	if w == nil {
		w = e.weight
	}
	// The slice is computed packed and then stored by the mailbox, word by
	// word with atomics, into every rank's slot (its own included).
	if err := e.cpu.UpProject(s, in.Latent, w, in.Shared, in.SharedStride, slice, s.Shard()); err != nil {
		return err
	}
	if err := e.mb.Write(ctx, t, s.M, bits(slice)); err != nil {
		return err
	}
	return e.mb.Receive(ctx, t, s.M, bits(out[:s.M*s.Hidden]))
}

func (e *hostEngine) setWeight(w []kernel.BF16) error {
	e.weight = append(e.weight[:0], w...)
	return nil
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
