package tp

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// The CUDA engine: the op's operands live in device memory, the skinny
// kernel computes this rank's slice and stores it into the mailbox slot of
// every other rank and straight into this step's output block (unicast:
// one store per peer mapping), or through the multicast address into every
// rank's slot, this one's included; the receive (CTAs in the same grid, or
// a kernel chained after it with programmatic dependent launch) polls the
// local slot, copies the others' slices out and re-arms the slot (the
// Lamport protocol of package mailbox).
//
// Ordering across steps is the GPU's own: the next step's skinny kernel
// waits (griddepcontrol.wait, after issuing its weight loads) until the
// previous receive has finished, which is the rule the Lamport protocol
// needs; a host-side step additionally synchronizes the stream.
//
// The slot a step uses is the device's choice (kernel.SlotRotation): the
// kernels get the addresses of slot 0 and read the slot index from a
// counter word in device memory, and the step's last CTA advances it. So a
// graph holding one step (the caller's own capture of Enqueue, or Capture)
// replays any number of times, and the host's step count is only a
// diagnostic: the engine reads the counter back when it names a slot.

// engineDriver is the part of the CUDA driver the engine calls; the
// methods have *cuda.Driver's signatures.
type engineDriver interface {
	mailbox.MulticastVMM
	kernel.KernelDriver
	streamGraphDriver // streams, events, capture and graphs
	DeviceGet(ordinal int) (cuda.Device, error)
	DevicePrimaryCtxRetain(dev cuda.Device) (cuda.Context, error)
	DevicePrimaryCtxRelease(dev cuda.Device) error
	BindContext(ctx cuda.Context) (unbind func(), err error)
	MemAlloc(size uint64) (cuda.DevicePtr, error)
	MemFree(ptr cuda.DevicePtr) error
	MemHostAlloc(size int, flags cuda.HostAllocFlags) ([]byte, error)
	MemFreeHost(b []byte) error
	MemHostGetDevicePointer(b []byte) (cuda.DevicePtr, error)
	MemcpyHtoD(dst cuda.DevicePtr, src []byte) error
	MemcpyDtoH(dst []byte, src cuda.DevicePtr) error
	MemcpyDtoD(dst, src cuda.DevicePtr, n uint64) error
}

var _ engineDriver = (*cuda.Driver)(nil)

// skinnyLaunch is one launch of the skinny kernel.
type skinnyLaunch struct {
	shape                  kernel.Shape // M is this step's
	rank                   int
	latent, weight, shared cuda.DevicePtr
	weightPacked           bool             // weight in the packed layout (kernel.SkinnyArgs.WeightPacked)
	sharedStride           int              // elements
	dst                    []cuda.DevicePtr // slot-0 regions; the kernel adds m*hidden + rank*shard
	receive                *receiveLaunch   // the fused receive, or nil (kernel.SkinnyArgs.Receive)
	rotation               kernel.SlotRotation
}

// receiveLaunch is one launch of the receive kernel.
type receiveLaunch struct {
	slot, out, status cuda.DevicePtr
	timeout           time.Duration
	m, hidden, shard  int
	abortable         bool // status holds the abort word (kernel.ReceiveArgs.Abortable)
	// skip: rank skipRank's columns are left alone (kernel.ReceiveArgs.SkipSlice):
	// that rank's skinny kernel stored them straight into out.
	skip     bool
	skipRank int
	rotation kernel.SlotRotation // slot is slot 0's region
}

// stepKernels is what the engine needs from the loaded kernels.
type stepKernels interface {
	launchSkinny(s cuda.Stream, a skinnyLaunch, pdl bool) error
	launchReceive(s cuda.Stream, a receiveLaunch) error
	unload() error
}

// gpuMailbox is what the engine needs from mailbox.Unicast or
// mailbox.Multicast.
type gpuMailbox interface {
	Name() string
	Layout() mailbox.Layout
	Local() cuda.DevicePtr
	Close() error
}

var (
	_ gpuMailbox = (*mailbox.Unicast)(nil)
	_ gpuMailbox = (*mailbox.Multicast)(nil)
)

// engineDeps are the constructors the engine uses; tests replace them.
type engineDeps struct {
	loadKernels  func(drv engineDriver) (stepKernels, error)
	newUnicast   func(ctx context.Context, ex mailbox.Exchanger, drv engineDriver, dev cuda.Device, cfg mailbox.Config) (gpuMailbox, []cuda.DevicePtr, error)
	newMulticast func(ctx context.Context, ex mailbox.Exchanger, drv engineDriver, dev cuda.Device, cfg mailbox.Config) (gpuMailbox, []cuda.DevicePtr, error)
}

func realEngineDeps() engineDeps {
	return engineDeps{
		loadKernels: loadStepKernels,
		newUnicast: func(ctx context.Context, ex mailbox.Exchanger, drv engineDriver, dev cuda.Device, cfg mailbox.Config) (gpuMailbox, []cuda.DevicePtr, error) {
			u, err := mailbox.NewUnicast(ctx, ex, drv, dev, cfg)
			if err != nil {
				return nil, nil, err
			}
			return u, u.Peers(), nil
		},
		newMulticast: func(ctx context.Context, ex mailbox.Exchanger, drv engineDriver, dev cuda.Device, cfg mailbox.Config) (gpuMailbox, []cuda.DevicePtr, error) {
			m, err := mailbox.NewMulticast(ctx, ex, drv, dev, cfg)
			if err != nil {
				return nil, nil, err
			}
			return m, []cuda.DevicePtr{m.MulticastPtr()}, nil
		},
	}
}

// Status words of the receive kernel (kernel/skinny.h): word 0 is 1 after
// a timeout, word 1+r is 1 when rank r's slice never arrived; word
// kernel.ReceiveAbortWord is the host's abort word (see keepAborting).
const (
	statusWords = kernel.ReceiveStatusWords
	statusBytes = 4096 // one page of host-mapped memory
)

// ReceiveModeEnv selects how a GPU step receives, for measurements that
// compare the two (scripts/bench-step): "fused" (the default: receive CTAs
// appended to the skinny kernel's grid do the Lamport receive, one kernel
// per step; used only when no other rank shares the GPU) or "kernel" (a
// receive kernel after the skinny kernel, as ranks sharing a GPU always
// do). On two H200s, tp 2, the fused step was 0.44 µs faster at M = 1 and
// 0–0.1 µs at M = 2..8 (docs/kernel-notes.md, "What ships").
const ReceiveModeEnv = "TPRUN_DEV_RECEIVE"

func fusedReceive() (bool, error) {
	switch v := os.Getenv(ReceiveModeEnv); v {
	case "kernel":
		return false, nil
	case "", "fused":
		return true, nil
	default:
		return false, fmt.Errorf("tp: %s=%q: want kernel or fused", ReceiveModeEnv, v)
	}
}

// enqueueWatchEvery is how often the watch of enqueued steps
// (watchEnqueued) looks at the status page. A receive waits out its
// deadline (seconds) before it reports, so a coarse look costs nothing in
// how soon a stall is known.
const enqueueWatchEvery = 20 * time.Millisecond

// abortWord is the receive's abort word in the host-mapped status page.
func (e *cudaEngine) abortWord() *atomic.Uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&e.status[4*kernel.ReceiveAbortWord]))
}

// replayChunk bounds how many graph replays are queued before the engine
// waits and reads the status: a missing peer then costs at most a chunk's
// worth of deadlines before the error comes back (one deadline when the op
// can fail its job: see startWatch).
const replayChunk = 32

// cudaEngine runs steps on one device. Its mutex serializes the GPU work
// and Close; a step holds it until its work has finished.
type cudaEngine struct {
	drv      engineDriver
	closeDrv func() error // nil when the caller owns the driver
	rank     int
	ordinal  int
	dev      cuda.Device
	cuctx    cuda.Context
	retained bool
	stream   cuda.Stream // the steps; non-blocking, which the abort needs
	kern     stepKernels
	mb       gpuMailbox
	layout   mailbox.Layout
	// bases: the mailboxes the skinny kernel stores into; a step's
	// destinations are these plus layout.StepOffset(t, M).
	bases []cuda.DevicePtr
	// own: the index of this rank's local mailbox in bases (unicast),
	// or -1 (multicast). A step replaces that destination by its output
	// block, so the kernel stores this rank's slice straight into it, and
	// its receive skips that slice: half the receive's work at tp 2, and
	// 0.05-0.27 µs per step on two H200s (docs/kernel-notes.md, "What ships").
	own      int
	local    cuda.DevicePtr
	deadline time.Duration
	shape    kernel.Shape // M = capacity
	// fused: receive CTAs in the skinny kernel's grid do the receive
	// (ReceiveModeEnv); only with chain, so that no other rank's kernel
	// waits for SMs behind our polling CTAs.
	fused bool
	// chain: a captured step's skinny kernel may start (PDL) while the
	// previous step's receive still polls. Off when another rank shares
	// the device: that early kernel's blocks, parked at
	// griddepcontrol.wait, could then fill the SMs that the other rank's
	// skinny kernel needs before our receive can end.
	chain bool

	status    []byte // host-mapped, statusBytes
	statusDev cuda.DevicePtr
	// counter: the two words of the device-side slot rotation
	// (kernel.SlotRotation), zero at setup.
	counter cuda.DevicePtr
	// weight: the op's own copy of the weight shard (SetWeight), in the
	// packed layout when weightPacked; 0 until SetWeight. preferPacked:
	// the layout SetWeight makes (kernel.PreferPacked for the shape).
	weight                     cuda.DevicePtr
	weightPacked, preferPacked bool
	// fill is page-locked host memory without a sentinel word (zeros),
	// SlotRows(capacity)*hidden*2 bytes: what keepAborting copies over
	// every region of every local slot. Made at setup: a page-locked
	// allocation during an abort could itself be ordered behind the
	// receive it must end.
	fill []byte

	// Staging for hostStep, allocated on first use: latent, shared
	// (packed) and out, each 256-byte aligned in one allocation; the
	// weight, when a step passes one, in one of its own, in the packed
	// layout (the kernels read no other): packed on the host into
	// weightScratch, then uploaded.
	stage                     cuda.DevicePtr
	stLatent, stShared, stOut cuda.DevicePtr
	stWeight                  cuda.DevicePtr
	sharedScratch             []kernel.BF16
	weightScratch             []kernel.BF16
	mu                        sync.Mutex
	closed                    bool
	graphs                    map[*StepGraph]struct{}
	closing, inflight         atomic.Bool
	// enqueued: Enqueue has queued steps on a caller's stream since the
	// last Synchronize that found them done; pendingFrom is the host's
	// count of the first of them. everEnqueued: Close must end steps the
	// caller may still have queued (its own graphs included).
	enqueued, everEnqueued atomic.Bool
	pendingFrom            atomic.Uint64
	watchStop              chan struct{} // ends watchEnqueued; nil until the first Enqueue
	watchWG                sync.WaitGroup
	// failMu guards failure and released, which Err reads without waiting
	// for mu (a step may hold it while it waits for its peers). failure is
	// the op's first failure (a timed-out or aborted wait, a failed launch,
	// the job's failure): the op refuses steps from then on. released: the
	// status page is gone.
	failMu   sync.Mutex
	failure  error
	stall    *mailbox.TimeoutError // the failure, when asyncFailure found it
	released bool
	stopJob  func() bool // ends the job watch (jobFailed)
	// failJob fails the job for every rank, and job ends once it has
	// failed (the exchanger's jobWatcher methods; both nil when it is no
	// jobWatcher): see startWatch.
	failJob func(reason string) error
	job     context.Context
}

var _ upEngine = (*cudaEngine)(nil)

// newCUDAEngine sets the engine up on device ordinal with the mailbox kind
// (unicast or multicast). closeDrv, when not nil, closes drv: the engine
// owns the driver and calls it when it is released. Local
// setup comes first and every rank learns whether every other rank's
// succeeded before the mailbox collective starts, so that one rank's
// failure is an error on all of them rather than a hang. On error
// everything made so far is released (and drv closed when own).
func newCUDAEngine(ctx context.Context, ex mailbox.Exchanger, s kernel.Shape, cfg upConfig, drv engineDriver, closeDrv func() error,
	ordinal int, kind mailbox.Kind, deps engineDeps) (_ *cudaEngine, err error) {
	e := &cudaEngine{drv: drv, closeDrv: closeDrv, rank: ex.Rank(), ordinal: ordinal, shape: s,
		deadline: cfg.deadline, graphs: map[*StepGraph]struct{}{}, chain: !cfg.sharedDevice,
		preferPacked: kernel.PreferPacked(s.Shard(), s.Latent)}
	if w, ok := ex.(jobWatcher); ok {
		if job := w.jobContext(); job != nil {
			e.failJob, e.job = w.abortJob, job
		}
	}
	if e.deadline == 0 {
		e.deadline = mailbox.DefaultDeadline
	}
	var unbind func()
	defer func() {
		if err != nil {
			err = errors.Join(err, e.release(unbind))
		} else if unbind != nil {
			unbind()
		}
	}()
	local := func() (err error) {
		if e.fused, err = fusedReceive(); err != nil {
			return err
		}
		e.fused = e.fused && e.chain
		dev, err := drv.DeviceGet(ordinal)
		if err != nil {
			return err
		}
		e.dev = dev
		if e.cuctx, err = drv.DevicePrimaryCtxRetain(dev); err != nil {
			return err
		}
		e.retained = true
		if unbind, err = drv.BindContext(e.cuctx); err != nil {
			return err
		}
		// Non-blocking: the abort's copies run on the legacy stream, which
		// must not wait for the step stream's receive.
		if e.stream, err = drv.StreamCreate(cuda.StreamNonBlocking); err != nil {
			return fmt.Errorf("step stream: %w", err)
		}
		if e.kern, err = sharedKernels.get(kernelKey{drv, e.cuctx}, func() (stepKernels, error) { return deps.loadKernels(drv) }); err != nil {
			return fmt.Errorf("loading the kernels: %w", err)
		}
		if e.status, err = drv.MemHostAlloc(statusBytes, cuda.HostAllocDeviceMap|cuda.HostAllocPortable); err != nil {
			return fmt.Errorf("receive status buffer: %w", err)
		}
		if e.statusDev, err = drv.MemHostGetDevicePointer(e.status); err != nil {
			return fmt.Errorf("receive status buffer: %w", err)
		}
		// The kernels only ever set status words (on a timeout or an
		// abort), and the op refuses steps once one is set: zeroed once.
		clear(e.status)
		if e.counter, err = counters.get(counterKey{drv, e.cuctx}); err != nil {
			return fmt.Errorf("slot counter: %w", err)
		}
		// Every region of a slot: a waiting receive may be polling any.
		fillBytes := mailbox.SlotRows(s.M) * s.Hidden * 2
		if e.fill, err = drv.MemHostAlloc(fillBytes, cuda.HostAllocPortable); err != nil {
			return fmt.Errorf("abort fill buffer (%d bytes): %w", fillBytes, err)
		}
		clear(e.fill)
		return nil
	}
	if err := agree(ctx, ex, "CUDA engine setup", local()); err != nil {
		return nil, fmt.Errorf("device %d: %w", ordinal, err)
	}
	mcfg := mailbox.Config{Hidden: s.Hidden, Capacity: s.M, Slots: cfg.slots, Deadline: e.deadline}
	var bases []cuda.DevicePtr
	switch kind {
	case mailbox.KindUnicast:
		e.mb, bases, err = deps.newUnicast(ctx, ex, drv, e.dev, mcfg)
	case mailbox.KindMulticast:
		e.mb, bases, err = deps.newMulticast(ctx, ex, drv, e.dev, mcfg)
	default:
		err = fmt.Errorf("%w: the CUDA engine runs the unicast or multicast mailbox, not %v", mailbox.ErrConfig, kind)
	}
	if err != nil {
		return nil, whySeparateNodes(ex, err)
	}
	e.layout = e.mb.Layout()
	e.local = e.mb.Local()
	if len(bases) == 0 || len(bases) > kernel.MaxTP || e.local == 0 {
		return nil, fmt.Errorf("%s mailbox gave %d destinations and local slot %#x", e.mb.Name(), len(bases), uint64(e.local))
	}
	e.bases = bases
	e.own = slices.Index(bases, e.local)
	if e.job != nil {
		e.stopJob = context.AfterFunc(e.job, e.jobFailed)
	}
	return e, nil
}

// jobFailed records the job's failure and sets the abort word, so that
// every receive queued or waiting ends within about 200 µs instead of at
// its deadline: steps enqueued on a caller's stream have no wait of the
// host's to end them (a step of the host's own, which does, ends as well).
func (e *cudaEngine) jobFailed() {
	e.failMu.Lock()
	defer e.failMu.Unlock()
	if e.released {
		return
	}
	if e.failure == nil {
		e.failure = fmt.Errorf("the job has failed: %w", context.Cause(e.job))
	}
	e.abortWord().Store(1)
}

// setFailure records err as the op's failure unless one is recorded.
func (e *cudaEngine) setFailure(err error) {
	e.failMu.Lock()
	defer e.failMu.Unlock()
	if e.failure == nil {
		e.failure = err
	}
}

// failed is the op's recorded failure, or nil.
func (e *cudaEngine) failed() error {
	e.failMu.Lock()
	defer e.failMu.Unlock()
	return e.failure
}

// agree all-gathers every rank's local result: it fails on every rank,
// naming the failed ranks, when any rank failed.
func agree(ctx context.Context, ex mailbox.Exchanger, what string, local error) error {
	msg := []byte{0}
	if local != nil {
		msg = append([]byte{1}, local.Error()...)
		if len(msg) > 1024 {
			msg = msg[:1024]
		}
	}
	all, err := ex.AllGather(ctx, msg)
	if err != nil {
		return errors.Join(local, fmt.Errorf("%s: all-gather of the outcome: %w", what, err))
	}
	if local != nil {
		return fmt.Errorf("%s: %w", what, local)
	}
	var failed []string
	for r, b := range all {
		switch {
		case len(b) == 0:
			failed = append(failed, fmt.Sprintf("rank %d sent nothing", r))
		case b[0] != 0:
			failed = append(failed, fmt.Sprintf("rank %d: %s", r, b[1:]))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%w: %s failed on %s", mailbox.ErrPeer, what, strings.Join(failed, "; "))
	}
	return nil
}

// release frees whatever the engine holds, in the reverse order of setup,
// and closes the driver when the engine owns it. unbind, when not nil, is
// the caller's binding of the context; otherwise release binds it itself.
func (e *cudaEngine) release(unbind func()) error {
	var errs []error
	note := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	if unbind == nil && e.retained {
		var err error
		unbind, err = e.drv.BindContext(e.cuctx)
		note("binding the context", err)
	}
	if e.stopJob != nil {
		e.stopJob()
	}
	if e.stream != 0 {
		// Nothing may be running when memory goes away.
		note("synchronizing the step stream", e.drv.StreamSynchronize(e.stream))
	}
	for g := range e.graphs {
		note("destroying a step graph", g.destroy())
	}
	if e.mb != nil {
		note("closing the mailbox", e.mb.Close())
		e.mb = nil
	}
	if e.stage != 0 {
		note("freeing the staging buffers", e.drv.MemFree(e.stage))
		e.stage = 0
	}
	if e.stWeight != 0 {
		note("freeing the weight staging buffer", e.drv.MemFree(e.stWeight))
		e.stWeight = 0
	}
	if e.weight != 0 {
		note("freeing the weight", e.drv.MemFree(e.weight))
		e.weight = 0
	}
	if e.counter != 0 {
		note("freeing the slot counter", counters.put(counterKey{e.drv, e.cuctx}, e.counter))
		e.counter = 0
	}
	if e.status != nil {
		// The job watch and Err read the page: not from now on.
		e.failMu.Lock()
		e.released = true
		e.failMu.Unlock()
		note("freeing the status buffer", e.drv.MemFreeHost(e.status))
		e.status = nil
	}
	if e.fill != nil {
		note("freeing the abort fill buffer", e.drv.MemFreeHost(e.fill))
		e.fill = nil
	}
	if e.kern != nil {
		note("unloading the kernels", e.kern.unload())
		e.kern = nil
	}
	if e.stream != 0 {
		note("destroying the step stream", e.drv.StreamDestroy(e.stream))
		e.stream = 0
	}
	if unbind != nil {
		unbind()
	}
	if e.retained {
		note("releasing the primary context", e.drv.DevicePrimaryCtxRelease(e.dev))
		e.retained = false
	}
	if e.closeDrv != nil {
		note("closing the driver", e.closeDrv())
		e.closeDrv = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("releasing the CUDA engine on device %d: %w", e.ordinal, err)
	}
	return nil
}

func (e *cudaEngine) name() string { return e.mb.Name() }

// close aborts the GPU work in flight (see keepAborting), waits for it,
// and releases everything.
func (e *cudaEngine) close() error {
	e.closing.Store(true)
	var (
		wg       sync.WaitGroup
		abortErr error
	)
	stop := make(chan struct{})
	// Steps the caller enqueued may still be queued or waiting on its
	// streams (its own graphs included): they are ended too, before
	// release frees what they use.
	if e.inflight.Load() || e.everEnqueued.Load() {
		wg.Go(func() { abortErr = e.keepAborting(stop) })
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	close(stop)
	wg.Wait()
	if e.closed {
		return nil
	}
	e.closed = true
	if e.watchStop != nil {
		close(e.watchStop)
		e.watchWG.Wait()
	}
	return errors.Join(abortErr, e.release(nil))
}

// abortEvery is the pause between two fills of keepAborting.
const abortEvery = 200 * time.Microsecond

// keepAborting overwrites every region of every slot of the local mailbox
// with e.fill (no sentinel word), now and then again every abortEvery
// until stop is closed: a receive polling a slot then finds every word
// there and finishes, so that work waiting for a peer ends now instead of
// at its deadline. A receive re-arms what it copied, so the fill is
// repeated for the receives of the steps queued after it (a graph replay
// holds up to replayChunk of them). The blocks copied out are garbage;
// the caller marks the engine broken or closed.
//
// The fill must overtake a kernel that spins until it lands, and CUDA
// orders work behind a running kernel more readily than one would guess:
// a memset is one of the operations after which the driver may hold back
// every later command of the context until the earlier ones finish (the
// Programming Guide's "Implicit Synchronization"), which a memset fill on
// a stream of its own leaves to chance. So the fill is a synchronous copy
// from page-locked memory: it runs on the legacy stream, which the
// non-blocking step stream neither waits for nor holds back, on a copy
// engine, so it needs no SM the receive or a parked kernel occupies; and
// as it returns once landed, no more than one fill is ever queued.
//
// What it cannot overtake: a call that synchronizes the context
// (cuMemFree, cuMemFreeHost, cuMemUnmap, cuModuleUnload, a memset, ...)
// issued by another thread of this process, in the same context, after
// the receive started. That call waits for the receive, and the driver may
// hold the later work and calls of the context behind it, this copy
// included (another UpProjection on the same device closing in the
// meantime is one such thread). The receive then ends at its deadline.
// So before any of that, and again before every fill, it sets the abort
// word of the host-mapped status page: the receive (launched Abortable)
// reads it every 200 µs once it has waited that long, and ends as at its
// deadline. The store is a plain store to host memory, with no driver call
// to be held back, so the receive ends within about 200 µs whatever else
// the process does.
func (e *cudaEngine) keepAborting(stop <-chan struct{}) error {
	e.abortWord().Store(1)
	unbind, err := e.drv.BindContext(e.cuctx)
	if err != nil {
		return fmt.Errorf("abort: %w", err)
	}
	defer unbind()
	tick := time.NewTicker(abortEvery)
	defer tick.Stop()
	for {
		e.abortWord().Store(1)
		for slot := range e.layout.Slots {
			dst := e.local + cuda.DevicePtr(e.layout.SlotOffset(uint64(slot)))
			if err := e.drv.MemcpyHtoD(dst, e.fill); err != nil {
				return fmt.Errorf("abort: filling local slot %d: %w", slot, err)
			}
		}
		select {
		case <-stop:
			return nil
		case <-tick.C:
		}
	}
}

// usable reports why no step may start, or nil. Call with e.mu held.
func (e *cudaEngine) usable() error {
	if e.closed || e.closing.Load() {
		return mailbox.ErrClosed
	}
	if f := e.failed(); f != nil {
		return fmt.Errorf("%w (%v)", mailbox.ErrBroken, f)
	}
	return nil
}

// bound checks the engine (usable) and binds its context to the calling
// thread; the caller holds e.mu and calls unbind when done.
func (e *cudaEngine) bound() (unbind func(), err error) {
	if err := e.usable(); err != nil {
		return nil, err
	}
	return e.drv.BindContext(e.cuctx)
}

// begin starts GPU work: it checks the engine, binds the context and marks
// the work in flight; the returned end undoes that. Call with e.mu held.
func (e *cudaEngine) begin() (end func(), err error) {
	unbind, err := e.bound()
	if err != nil {
		return nil, err
	}
	e.inflight.Store(true)
	end = func() {
		e.inflight.Store(false)
		unbind()
	}
	// Close sets closing before it looks at inflight, and we set inflight
	// before we look at closing: one of the two sees the other.
	if e.closing.Load() {
		end()
		return nil, mailbox.ErrClosed
	}
	return end, nil
}

// launch queues a step (skinny into every destination, then the receive of
// the local slot: in the skinny kernel's receive CTAs when fused, else a
// receive kernel) on stream. A step of M above kernel.MaxSkinnyM runs the
// larger-M kernel, which has no fused receive: its receive is always the
// receive kernel, which advances the slot rotation. The addresses are slot
// 0's: the kernels add the slot the counter names (kernel.SlotRotation). A
// zero in.Weight is the op's own weight. Call with e.mu held and the
// context bound.
func (e *cudaEngine) launch(stream cuda.Stream, s kernel.Shape, in DeviceInputs, out cuda.DevicePtr, pdl bool) error {
	off := cuda.DevicePtr(e.layout.RegionOffset(s.M))
	rot := kernel.SlotRotation{Counter: e.counter, Slots: e.layout.Slots, Stride: uint64(e.layout.SlotBytes)}
	weight, packed := cuda.DevicePtr(in.Weight), in.WeightPacked
	if weight == 0 {
		weight, packed = e.weight, e.weightPacked
	}
	sk := skinnyLaunch{shape: s, rank: e.rank, latent: cuda.DevicePtr(in.Latent), weight: weight, weightPacked: packed,
		shared: cuda.DevicePtr(in.Shared), sharedStride: in.SharedStride, dst: make([]cuda.DevicePtr, len(e.bases))}
	for i, b := range e.bases {
		sk.dst[i] = b + off
	}
	recv := receiveLaunch{slot: e.local + off, out: out,
		status: e.statusDev, timeout: e.deadline, m: s.M, hidden: s.Hidden, shard: s.Shard(), abortable: true}
	if e.own >= 0 {
		// This rank's slice goes straight into the block, which is no
		// slot: the kernels use that address as given.
		sk.dst[e.own] = out
		rot.Fixed = 1 << e.own
		recv.skip, recv.skipRank = true, e.rank
	}
	sk.rotation, recv.rotation = rot, rot
	fused := e.fused && s.M <= kernel.MaxSkinnyM
	if fused {
		sk.receive = &recv
	}
	if err := e.kern.launchSkinny(stream, sk, pdl); err != nil {
		what := "skinny"
		if s.M > kernel.MaxSkinnyM {
			what = "larger-M"
		}
		return fmt.Errorf("launching the %s kernel: %w", what, err)
	}
	if fused {
		return nil
	}
	if err := e.kern.launchReceive(stream, recv); err != nil {
		return fmt.Errorf("launching the receive kernel: %w", err)
	}
	return nil
}

// wait synchronizes the step stream. When ctx ends first it aborts the
// receive (see keepAborting). Afterwards it reads the receive status: a timeout
// becomes a *mailbox.TimeoutError for step t (the first step of a batch).
// steps is how many steps were queued from t; m is step t's rows when it
// was a single step (a timeout then also reads the slot back to name the
// ranks that ran the step with another M), or 0 for a batch of replays. w
// is the watch started before the work was queued (startWatch), or nil to
// start one now. Any failure leaves the engine broken. Call with e.mu held
// and the context bound.
func (e *cudaEngine) wait(ctx context.Context, w *waitWatch, t uint64, steps, m int, started time.Time) error {
	if w == nil {
		w = e.startWatch(ctx, t, false)
	}
	err := e.drv.StreamSynchronize(e.stream)
	w.end()
	switch {
	case err != nil:
		e.setFailure(fmt.Errorf("step %d: %w", t, err))
		return fmt.Errorf("waiting for the step: %w", err)
	case e.closing.Load():
		return mailbox.ErrClosed
	case w.stalled != nil:
		// The watch saw a receive of the batch time out and failed the
		// job; its snapshot names the missing ranks (the receives it
		// then ended early would name the healthy ones too).
		te := &mailbox.TimeoutError{Rank: e.rank, Step: t, Slot: e.slotBefore(steps, t), Missing: w.stalled, Waited: time.Since(started)}
		e.setFailure(te)
		return errors.Join(te, w.abortErr)
	case w.canceled.Load() || (w.batch && ctx.Err() != nil):
		// The cause: tprun's stop (ctx's own error) or, under an op's job
		// watch, the job's failure. A batch that drained just as ctx ended
		// is not reported as done either: when the job failed, the peers'
		// queued steps may have stored into this rank's slots (startWatch).
		// Only a batch: every rank makes the same calls, and single steps
		// queue nothing that could run ahead.
		e.setFailure(fmt.Errorf("step %d canceled: %w", t, context.Cause(ctx)))
		return errors.Join(fmt.Errorf("step %d: %w", t, context.Cause(ctx)), w.abortErr)
	}
	timedOut, missing := e.readStatus()
	if !timedOut {
		return nil
	}
	if e.job != nil && e.job.Err() != nil && e.abortWord().Load() != 0 {
		// The job watch ended the receive (jobFailed), not a missing
		// slice: every rank but the one to blame would be named.
		err := fmt.Errorf("step %d: the job failed while the step waited for the other ranks: %w", t, context.Cause(e.job))
		e.setFailure(err)
		return err
	}
	te := &mailbox.TimeoutError{Rank: e.rank, Step: t, Slot: e.slotBefore(steps, t), Missing: missing, Waited: time.Since(started)}
	e.setFailure(te)
	if m > 0 {
		te.M, te.OtherM = m, e.otherRows(te.Slot, m)
	}
	return errors.Join(te, w.jobErr)
}

// readStatus reads the receive status words: whether a receive timed out
// (or was aborted), and the ranks some word of whose slice never arrived.
func (e *cudaEngine) readStatus() (timedOut bool, missing []int) {
	var words [kernel.ReceiveStatusWords]uint32
	for i := range words {
		words[i] = e.statusWord(i)
	}
	return kernel.DecodeReceiveStatus(words)
}

// slotBefore is the slot of the step that came back steps before the next
// one, read from the device's slot counter (nothing may be running), or
// the slot the host's count t would give where the counter cannot be
// read. Call with the context bound.
func (e *cudaEngine) slotBefore(back int, t uint64) int {
	var w [2]uint32
	n := e.layout.Slots
	if err := e.drv.MemcpyDtoH(cuda.AsBytes(w[:]), e.counter); err != nil || int(w[0]) >= n {
		return e.layout.Slot(t)
	}
	return ((int(w[0])-back)%n + n) % n
}

// How a batch of replays watches its receives (startWatch): the status
// word is looked at every stallPoll; once it says a receive timed out,
// the missing ranks are read stallSettle later (the timed-out threads
// write them after word 0).
const (
	stallPoll   = time.Millisecond
	stallSettle = 5 * time.Millisecond
)

// waitWatch is what a wait's watcher goroutine found; read its fields
// after end.
type waitWatch struct {
	stop     chan struct{}
	wg       sync.WaitGroup
	canceled atomic.Bool // ctx ended first; the receives were aborted
	// stalled: the ranks a timed-out receive of a batch named, once the
	// watcher has failed the job for them; jobErr: why failing it failed,
	// when the job's failure never came back (the receives then waited).
	stalled  []int
	jobErr   error
	abortErr error
	batch    bool
}

// end stops the watcher (the stream has drained) and waits for it.
func (w *waitWatch) end() {
	close(w.stop)
	w.wg.Wait()
}

// startWatch starts the watcher of the work about to be queued for step t
// (a batch of graph replays when batch is set). It aborts the receives
// (keepAborting) when ctx ends first.
//
// A batch queues up to replayChunk × Steps() receives, and each waits out
// its own deadline when a peer stalls without dying (the job watch sees
// nothing then): up to 32 × Steps() deadlines. So when the op can fail its
// job (failJob: its exchanger is a Group), the watcher of a batch also
// polls the status word. Once a receive has timed out (and not because
// this rank aborted it), it fails the job, naming the missing ranks; when
// that failure has come back to this rank (e.job), it aborts the queued
// receives, so the batch ends about one deadline after the stall. If the
// failure never comes back, the receives wait as before; if ctx ends
// first, the caller gets its cancellation, as without the watch.
//
// The order narrows a hazard, it does not close it: the steps queued
// behind a receive that ends early still run, and their kernels store
// this rank's later slices into the peers' slots at once, where a peer
// that is late but alive could take them for earlier steps' slices. The
// job's failure is on its way to every peer before that, and a peer's
// batch that ends after the failure reached its op's job watch (the
// hub's frame, then two goroutine hops) returns the failure instead of
// its block (wait). A peer whose process did not run in the meantime
// (stopped, or starved of CPU) can still take them. (Without this watch
// the same stores were made, a deadline per step later, and nobody was
// told.)
func (e *cudaEngine) startWatch(ctx context.Context, t uint64, batch bool) *waitWatch {
	w := &waitWatch{stop: make(chan struct{}), batch: batch}
	done := ctx.Done()
	poll := batch && e.failJob != nil
	if done == nil && !poll {
		return w
	}
	w.wg.Go(func() {
		cancel := func() {
			w.canceled.Store(true)
			w.abortErr = e.keepAborting(w.stop)
		}
		// selfAborted: the receive ended because this rank aborted it
		// (Close, whose abort word also ends it "as the deadline would"),
		// not because a peer stalled.
		selfAborted := func() bool { return e.closing.Load() || e.abortWord().Load() != 0 }
		var tick <-chan time.Time
		if poll {
			tk := time.NewTicker(stallPoll)
			defer tk.Stop()
			tick = tk.C
		}
		for {
			select {
			case <-done:
				cancel()
				return
			case <-w.stop:
				return
			case <-tick:
			}
			if e.statusWord(0) == 0 {
				continue
			}
			if selfAborted() {
				return // Close's abort runs; wait reports ErrClosed
			}
			settle := time.NewTimer(stallSettle)
			select {
			case <-done:
				settle.Stop()
				cancel()
				return
			case <-w.stop:
				settle.Stop()
				return // the batch ended; wait reads the status
			case <-settle.C:
			}
			if selfAborted() {
				return
			}
			var words [kernel.ReceiveStatusWords]uint32
			for i := range words {
				words[i] = e.statusWord(i)
			}
			_, stalled := kernel.DecodeReceiveStatus(words)
			// The abort goes out on its own goroutine: a hub that does not
			// read would otherwise hold the wait. It ends when the write
			// does, or when the group closes the connection.
			sent := make(chan error, 1)
			go func() {
				sent <- e.failJob(stallReason(fmt.Sprintf("in the graph replays from step %d", t), stalled, e.deadline))
			}()
			// failed: the job's failure came back, so the peers have been
			// sent it; the queued receives may end now.
			failed := func() {
				w.stalled = stalled
				if w.stalled == nil {
					w.stalled = []int{}
				}
				w.abortErr = e.keepAborting(w.stop)
			}
			select {
			case <-e.job.Done():
				failed()
			case <-done:
				// ctx also ends when the job fails, and this case may win
				// that race: the job decides. Otherwise the caller gave up
				// first, and gets its own cancellation.
				if e.job.Err() != nil {
					failed()
				} else {
					cancel()
				}
			case <-w.stop:
				// The receives waited out their deadlines after all.
				select {
				case err := <-sent:
					if err != nil {
						w.jobErr = fmt.Errorf("failing the job after the timeout: %w", err)
					}
				default:
				}
			}
			return
		}
	})
	return w
}

// stallReason is the job's failure when a receive of queued steps (where:
// which) timed out: what the peers and the launcher read.
func stallReason(where string, missing []int, deadline time.Duration) string {
	who := "some rank"
	switch len(missing) {
	case 0:
	case 1:
		who = fmt.Sprintf("rank %d", missing[0])
	default:
		rs := make([]string, len(missing))
		for i, r := range missing {
			rs[i] = strconv.Itoa(r)
		}
		who = "ranks " + strings.Join(rs, ", ")
	}
	return fmt.Sprintf("no slice from %s within the %v deadline, %s; the job ends rather than each queued step waiting out the deadline too",
		who, deadline, where)
}

// statusWord reads word i of the host-mapped status page, which kernels
// may be writing.
func (e *cudaEngine) statusWord(i int) uint32 {
	return (*atomic.Uint32)(unsafe.Pointer(&e.status[4*i])).Load()
}

// otherRows reads local slot back and lists the ranks that stored into a
// region other than m's (see mailbox.Layout.OtherRows). A failed copy
// lists none: the timeout is reported all the same.
func (e *cudaEngine) otherRows(slot, m int) []mailbox.RankRows {
	words := make([]uint32, e.layout.SlotBytes/4)
	if err := e.drv.MemcpyDtoH(cuda.AsBytes(words), e.local+cuda.DevicePtr(slot*e.layout.SlotBytes)); err != nil {
		return nil
	}
	return e.layout.OtherRows(words, m)
}

// deviceStep runs step t with operands in device memory and waits for it.
func (e *cudaEngine) deviceStep(ctx context.Context, t uint64, s kernel.Shape, in DeviceInputs, out cuda.DevicePtr) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.deviceStepLocked(ctx, t, s, in, out)
}

func (e *cudaEngine) deviceStepLocked(ctx context.Context, t uint64, s kernel.Shape, in DeviceInputs, out cuda.DevicePtr) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	end, err := e.begin()
	if err != nil {
		return err
	}
	defer end()
	started := time.Now()
	if err := e.launch(e.stream, s, in, out, true); err != nil {
		// Whatever was queued must finish before the op goes on; the
		// slots may now be half-written, so the op is broken.
		e.setFailure(err)
		return errors.Join(err, e.drv.StreamSynchronize(e.stream))
	}
	return e.wait(ctx, nil, t, 1, s.M, started)
}

// hostStep stages the host operands in device memory, runs the step and
// copies the block back.
func (e *cudaEngine) hostStep(ctx context.Context, t uint64, s kernel.Shape, in UpInputs, out []kernel.BF16) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.usable(); err != nil {
		return err
	}
	if err := e.stageInputs(s, in); err != nil {
		return err
	}
	din := DeviceInputs{M: s.M, Latent: DevicePtr(e.stLatent), Shared: DevicePtr(e.stShared), SharedStride: s.Shard()}
	if in.Weight != nil {
		din.Weight, din.WeightPacked = DevicePtr(e.stWeight), true // packed by stageInputs
	}
	if err := e.deviceStepLocked(ctx, t, s, din, e.stOut); err != nil {
		return err
	}
	unbind, err := e.drv.BindContext(e.cuctx)
	if err != nil {
		return err
	}
	defer unbind()
	if err := e.drv.MemcpyDtoH(cuda.AsBytes(out[:s.M*s.Hidden]), e.stOut); err != nil {
		return fmt.Errorf("copying the block to the host: %w", err)
	}
	return nil
}

// setWeight keeps w (row-major) as the engine's own weight.
func (e *cudaEngine) setWeight(w []kernel.BF16) error { return e.loadWeight(w, 0) }

// setWeightDevice is setWeight from device memory.
func (e *cudaEngine) setWeightDevice(w cuda.DevicePtr) error { return e.loadWeight(nil, w) }

// loadWeight copies the row-major weight, from host (when not nil) or
// from device memory at dev, into the engine's weight buffer (allocated on
// first use), packed where the kernels prefer that: packing goes through
// the host; a row-major weight from device memory is copied on the
// device. The copies have landed when it returns.
func (e *cudaEngine) loadWeight(host []kernel.BF16, dev cuda.DevicePtr) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	unbind, err := e.bound()
	if err != nil {
		return err
	}
	defer unbind()
	shard, latent := e.shape.Shard(), e.shape.Latent
	packed := e.preferPacked
	n := shard * latent
	if packed {
		n = kernel.PackedWeightLen(shard, latent)
	}
	if e.weight == 0 {
		if e.weight, err = e.drv.MemAlloc(uint64(2 * n)); err != nil {
			return fmt.Errorf("the weight buffer (%d bytes): %w", 2*n, err)
		}
	}
	if host == nil && !packed {
		if err := e.drv.MemcpyDtoD(e.weight, dev, uint64(2*n)); err != nil {
			return fmt.Errorf("copying the weight from %#x: %w", uint64(dev), err)
		}
	} else {
		if host == nil {
			host = make([]kernel.BF16, shard*latent)
			if err := e.drv.MemcpyDtoH(cuda.AsBytes(host), dev); err != nil {
				return fmt.Errorf("copying the weight from %#x to the host: %w", uint64(dev), err)
			}
		}
		if packed {
			p := make([]kernel.BF16, n)
			if err := kernel.PackWeight(p, host, shard, latent); err != nil {
				return fmt.Errorf("packing the weight: %w", err)
			}
			host = p
		}
		if err := e.drv.MemcpyHtoD(e.weight, cuda.AsBytes(host)); err != nil {
			return fmt.Errorf("copying the weight to the device: %w", err)
		}
	}
	// A copy from pageable memory, or between device buffers, may return
	// before it has landed; it runs on the legacy stream.
	if err := e.drv.StreamSynchronize(0); err != nil {
		return fmt.Errorf("waiting for the weight copy: %w", err)
	}
	e.weightPacked = packed
	return nil
}

// stageInputs copies in to the staging buffers (allocating them on first
// use), the weight only when in has one. Call with e.mu held.
func (e *cudaEngine) stageInputs(s kernel.Shape, in UpInputs) error {
	unbind, err := e.drv.BindContext(e.cuctx)
	if err != nil {
		return err
	}
	defer unbind()
	c, shard := e.shape, e.shape.Shard()
	if e.stage == 0 {
		sizes := []int{c.M * c.Latent * 2, c.M * shard * 2, c.M * c.Hidden * 2}
		offs := make([]int, len(sizes))
		total := 0
		for i, n := range sizes {
			offs[i] = total
			total += (n + 255) &^ 255
		}
		p, err := e.drv.MemAlloc(uint64(total))
		if err != nil {
			return fmt.Errorf("staging buffers (%d bytes): %w", total, err)
		}
		e.stage = p
		e.stLatent, e.stShared, e.stOut = p+cuda.DevicePtr(offs[0]), p+cuda.DevicePtr(offs[1]), p+cuda.DevicePtr(offs[2])
		e.sharedScratch = make([]kernel.BF16, c.M*shard)
	}
	if in.Weight != nil && e.stWeight == 0 {
		n := kernel.PackedWeightLen(shard, c.Latent)
		if e.stWeight, err = e.drv.MemAlloc(uint64(2 * n)); err != nil {
			return fmt.Errorf("weight staging buffer (%d bytes): %w", 2*n, err)
		}
		e.weightScratch = make([]kernel.BF16, n)
	}
	n := s.Shard()
	shared := e.sharedScratch[:s.M*n]
	for m := range s.M {
		copy(shared[m*n:(m+1)*n], in.Shared[m*in.SharedStride:])
	}
	copies := []struct {
		what string
		dst  cuda.DevicePtr
		src  []kernel.BF16
	}{
		{"latent", e.stLatent, in.Latent[:s.M*s.Latent]},
		{"shared", e.stShared, shared},
	}
	if in.Weight != nil {
		// The step's weight is row-major; the kernels read only the
		// packed layout.
		if err := kernel.PackWeight(e.weightScratch, in.Weight[:n*s.Latent], n, s.Latent); err != nil {
			return fmt.Errorf("packing the weight: %w", err)
		}
		copies = append(copies, struct {
			what string
			dst  cuda.DevicePtr
			src  []kernel.BF16
		}{"weight", e.stWeight, e.weightScratch})
	}
	for _, c := range copies {
		if err := e.drv.MemcpyHtoD(c.dst, cuda.AsBytes(c.src)); err != nil {
			return fmt.Errorf("copying the %s to the device: %w", c.what, err)
		}
	}
	// A copy from pageable memory may return before its DMA has landed;
	// it runs on the legacy stream, which the step stream does not wait
	// for (it is non-blocking), so wait here.
	if err := e.drv.StreamSynchronize(0); err != nil {
		return fmt.Errorf("waiting for the copies to the device: %w", err)
	}
	return nil
}

// StepGraph is a captured sequence of steps of one UpProjection, replayed
// as a CUDA graph. Each replay runs every captured step once, in order,
// and advances the op's step count by Steps().
//
// The lockstep rule: every rank of the group must capture the same number
// of steps with the same M values, and replay its graph the same number of
// times, interleaved with the same other steps, in the same order. The
// mailbox slot of each step is chosen on the device, so a graph of any
// number of steps (one is enough) replays at any point of the op's step
// sequence.
type StepGraph struct {
	u      *UpProjection
	e      *cudaEngine
	exec   cuda.GraphExec
	steps  int
	ms     []int // each captured step's M, for the step checks
	closed bool
	events []cuda.Event // for TimeReplays, made on first use
}

// cudaEngine returns the op's CUDA engine, or an error wrapping
// ErrBackendUnavailable naming op when the op runs on the host engine.
func (u *UpProjection) cudaEngine(op string) (*cudaEngine, error) {
	e, ok := u.eng.(*cudaEngine)
	if !ok {
		return nil, fmt.Errorf("tp: rank %d: %s: %w: the %s backend runs on the host; device operands need the unicast or multicast backend",
			u.rank, op, ErrBackendUnavailable, u.eng.name())
	}
	return e, nil
}

// Device is the CUDA device ordinal the op runs on, or -1 for the host
// backend.
func (u *UpProjection) Device() int {
	if e, ok := u.eng.(*cudaEngine); ok {
		return e.ordinal
	}
	return -1
}

// StepDevice runs one step with operands already in device memory (in the
// primary context of Device()) and waits for it, leaving the whole
// [M, hidden_dim] block, row-major, at out, which must not overlap the
// operands (this rank's kernel writes its slice there while it reads
// them). Errors are those of Step; the host backend refuses it with
// ErrBackendUnavailable.
//
// The step runs on the op's own stream, which does not wait for any other:
// whatever writes the operands (a copy, a kernel on another stream) must
// have finished before the call, e.g. by synchronizing that stream. When
// the call returns, out holds the block.
//
// Cancelling ctx while the step waits for peers ends the wait within about
// 200 µs (the receive reads a host-set abort word) and leaves the op broken
// (later steps fail with ErrBroken); so does Close, with
// ErrClosed.
func (u *UpProjection) StepDevice(ctx context.Context, in DeviceInputs, out DevicePtr) error {
	leave, err := u.enter("device step")
	if err != nil {
		return err
	}
	defer leave()
	s := u.shape
	s.M = in.M
	e, err := u.cudaEngine("device step")
	if err == nil {
		err = u.checkCall(ctx, "step", []int{in.M}, u.validateDevice(s, in, out))
	}
	if err == nil {
		var wctx context.Context
		var done func()
		if wctx, done, err = u.watchJob(ctx); err == nil {
			err = u.jobFailure(ctx, e.deviceStep(wctx, u.next, s, in, cuda.DevicePtr(out)))
			done()
		}
	}
	if err != nil {
		return fmt.Errorf("tp: rank %d: up-projection step %d (%v): %w", u.rank, u.next, s, err)
	}
	u.next++
	return nil
}

// rowMajorDeviceWeight says what to do instead of passing a row-major
// weight in device memory with a step.
const rowMajorDeviceWeight = "a row-major device weight per step is not supported: give the weight once with SetWeightDevice (the op packs it), " +
	"or pass it packed (tp.PackWeight, PackedWeightLen elements) with WeightPacked"

// validateDevice checks a step's shape and device operands.
func (u *UpProjection) validateDevice(s kernel.Shape, in DeviceInputs, out DevicePtr) error {
	if err := u.validateM(s.M); err != nil {
		return err
	}
	if err := s.Validate(); err != nil {
		return err
	}
	var errs []error
	ptrs := []struct {
		name string
		v    DevicePtr
	}{{"Latent", in.Latent}, {"Weight", in.Weight}, {"Shared", in.Shared}, {"out", out}}
	if in.Weight == 0 {
		ptrs = slices.Delete(ptrs, 1, 2) // the op's own weight
		if !u.weightSet {
			errs = append(errs, ErrNoWeight)
		}
	} else if !in.WeightPacked {
		// The kernels read only the packed layout, and there is no
		// packing kernel: refused here, before anything is sent.
		errs = append(errs, fmt.Errorf("%w: DeviceInputs.Weight at %#x is row-major (WeightPacked false): %s",
			ErrArgument, uint64(in.Weight), rowMajorDeviceWeight))
	}
	for _, p := range ptrs {
		if p.v == 0 || p.v%16 != 0 {
			errs = append(errs, &kernel.ShapeError{Field: p.name, Value: int(p.v % 16), Rule: fmt.Sprintf("device address %#x must be non-zero and 16-byte aligned (value: address mod 16)", uint64(p.v))})
		}
	}
	if in.SharedStride < s.Shard() || in.SharedStride%8 != 0 {
		errs = append(errs, &kernel.ShapeError{Field: "SharedStride", Value: in.SharedStride,
			Rule: fmt.Sprintf("must be a multiple of 8 and at least shard = %d", s.Shard())})
	} else {
		// The step writes out (this rank's columns from its own kernel)
		// while that kernel still reads its operands.
		wlen := s.Shard() * s.Latent
		if in.WeightPacked {
			wlen = kernel.PackedWeightLen(s.Shard(), s.Latent)
		}
		outEnd := out + DevicePtr(2*s.M*s.Hidden)
		for _, p := range []struct {
			name     string
			from, to DevicePtr
		}{{"Latent", in.Latent, in.Latent + DevicePtr(2*s.M*s.Latent)},
			{"Weight", in.Weight, in.Weight + DevicePtr(2*wlen)},
			{"Shared", in.Shared, in.Shared + DevicePtr(2*((s.M-1)*in.SharedStride+s.Shard()))}} {
			if p.from == 0 {
				continue // the op's own weight
			}
			if out < p.to && p.from < outEnd {
				errs = append(errs, &kernel.ShapeError{Field: "out", Value: int(out - p.from),
					Rule: fmt.Sprintf("the block [%#x, %#x) must not overlap %s [%#x, %#x) (value: out - %s)",
						uint64(out), uint64(outEnd), p.name, uint64(p.from), uint64(p.to), p.name)})
			}
		}
	}
	return errors.Join(errs...)
}

// Capture records steps as one CUDA graph without running them (see
// StepGraph for the lockstep rule). Any positive number of steps will do:
// a graph of one step replays any number of times. A step's zero Weight is
// the op's own weight (SetWeight), read at replay time: a later SetWeight
// changes what the graph computes. The operands are baked into the graph: they must stay allocated,
// and their contents at replay time are what is computed; as for
// StepDevice, their writes must have finished before each Replay. A step's
// weight is read before that step waits for the one before it, so no
// step's Out may be a later step's Weight (Latent and Shared may be). Close
// the graph (or the op) to free it.
func (u *UpProjection) Capture(ctx context.Context, steps []DeviceStep) (*StepGraph, error) {
	leave, err := u.enter("capture")
	if err != nil {
		return nil, err
	}
	defer leave()
	e, err := u.cudaEngine("capture")
	if err != nil {
		return nil, err
	}
	fail := func(err error) (*StepGraph, error) {
		return nil, fmt.Errorf("tp: rank %d: capturing %d steps from step %d: %w", u.rank, len(steps), u.next, err)
	}
	shapes := make([]kernel.Shape, len(steps))
	ms := make([]int, len(steps))
	local := func() error {
		if len(steps) == 0 {
			return fmt.Errorf("%w: a graph of no steps", mailbox.ErrArgument)
		}
		for i, st := range steps {
			s := u.shape
			s.M = st.In.M
			if err := u.validateDevice(s, st.In, st.Out); err != nil {
				return fmt.Errorf("step %d of the graph: %w", i, err)
			}
			shapes[i], ms[i] = s, s.M
		}
		return nil
	}
	if err := u.checkCall(ctx, "capture", ms, local()); err != nil {
		return fail(err)
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	g, err := e.capture(shapes, steps)
	if err != nil {
		return fail(err)
	}
	g.u, g.ms = u, ms
	return g, nil
}

func (e *cudaEngine) capture(shapes []kernel.Shape, steps []DeviceStep) (_ *StepGraph, err error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	end, err := e.begin()
	if err != nil {
		return nil, err
	}
	defer end()
	// Thread-local mode: other goroutines (other ranks in tests, the
	// caller's own copies) may use the driver meanwhile.
	if err := e.drv.StreamBeginCapture(e.stream, cuda.CaptureModeThreadLocal); err != nil {
		return nil, fmt.Errorf("begin capture: %w", err)
	}
	var lerr error
	for i, st := range steps {
		// The first kernel of a graph has no kernel before it to overlap.
		if lerr = e.launch(e.stream, shapes[i], st.In, cuda.DevicePtr(st.Out), i > 0 && e.chain); lerr != nil {
			lerr = fmt.Errorf("step %d of the graph: %w", i, lerr)
			break
		}
	}
	graph, cerr := e.drv.StreamEndCapture(e.stream)
	if lerr != nil || cerr != nil {
		if cerr == nil && graph != 0 {
			cerr = e.drv.GraphDestroy(graph)
		}
		return nil, errors.Join(lerr, cerr)
	}
	exec, err := e.drv.GraphInstantiate(graph, 0)
	if derr := e.drv.GraphDestroy(graph); derr != nil {
		err = errors.Join(err, derr)
		if exec != 0 {
			err = errors.Join(err, e.drv.GraphExecDestroy(exec))
		}
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	if err := e.drv.GraphUpload(exec, e.stream); err != nil {
		return nil, errors.Join(fmt.Errorf("upload: %w", err), e.drv.GraphExecDestroy(exec))
	}
	if err := e.drv.StreamSynchronize(e.stream); err != nil {
		e.setFailure(err)
		return nil, errors.Join(fmt.Errorf("upload: %w", err), e.drv.GraphExecDestroy(exec))
	}
	g := &StepGraph{e: e, exec: exec, steps: len(steps)}
	e.graphs[g] = struct{}{}
	return g, nil
}

// Steps is the number of steps one replay runs.
func (g *StepGraph) Steps() int { return g.steps }

// Replay runs the graph n times and waits for them; the op's step count
// advances by n*Steps(). A peer's missing slice gives a
// *TimeoutError whose Step is the first step of the batch of
// replays it happened in (replays are queued in batches of up to 32).
//
// A peer that stalls without dying (the job watch sees nothing) would
// make each queued step's receive wait out its own deadline: up to
// 32 × Steps() deadlines. On an op made from a Group, once a receive of
// the batch has timed out, the rank fails the job (naming the missing
// ranks), and when that failure has come back to it, ends the receives
// queued behind: the batch ends about one deadline after the stall, with
// the *TimeoutError on this rank and the job's failure
// (ErrAborted, naming this rank and the missing ones) on the others, the
// stalled rank's next call included. A single timeout thus ends the job,
// as NCCL's watchdog does; WithDeadline sets how long a receive waits.
// The job fails first because the steps behind a receive that ends early
// still run, and their kernels store this rank's later slices into the
// peers' slots at once, where a peer that is late but alive could take
// them for earlier steps' slices; a peer whose batch ends after the
// failure reached its process returns the failure, not its block, but a
// peer process that did not run in between (stopped, starved of CPU) is
// not protected. An op made from another Exchanger keeps waiting
// out every deadline.
//
// Cancelling ctx aborts the wait (within about 200 µs) and breaks the op,
// as with StepDevice; so does Close. The steps already queued then run on
// without waiting for the peers, with the hazard above: after aborting a
// replay, end the job on every rank (return an error from the rank
// program, or Group.Abort), rather than let the other ranks step on.
func (g *StepGraph) Replay(ctx context.Context, n int) error {
	_, err := g.run(ctx, n, false)
	return err
}

// TimeReplays is Replay with a pair of CUDA events around every replay; it
// returns each replay's GPU time (divide by Steps() for the time per step).
// Replays are queued back to back in batches of up to 32, so the first of
// each batch also contains the wait for the slowest rank.
func (g *StepGraph) TimeReplays(ctx context.Context, n int) ([]time.Duration, error) {
	return g.run(ctx, n, true)
}

func (g *StepGraph) run(ctx context.Context, n int, timed bool) ([]time.Duration, error) {
	u := g.u
	leave, err := u.enter("graph replay")
	if err != nil {
		return nil, err
	}
	defer leave()
	wctx, done, err := u.watchJob(ctx)
	defer done()
	var times []time.Duration
	if err == nil {
		err = func() error {
			var local error
			switch {
			case n < 0:
				local = fmt.Errorf("%w: %d replays", mailbox.ErrArgument, n)
			case g.isClosed():
				local = errGraphClosed
			}
			if err := u.checkCall(ctx, fmt.Sprintf("%d replays of a graph", n), g.ms, local); err != nil {
				return err
			}
			for done := 0; done < n; {
				k := min(replayChunk, n-done)
				ts, err := g.e.replay(wctx, g, u.next, k, timed)
				if err != nil {
					return u.jobFailure(ctx, err)
				}
				times = append(times, ts...)
				u.next += uint64(k * g.steps)
				done += k
			}
			return nil
		}()
	}
	if err != nil {
		return nil, fmt.Errorf("tp: rank %d: replaying a %d-step graph at step %d: %w", u.rank, g.steps, u.next, err)
	}
	return times, nil
}

// replay queues k replays of g (step t first) and waits for them.
func (e *cudaEngine) replay(ctx context.Context, g *StepGraph, t uint64, k int, timed bool) ([]time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	// Checked under e.mu, which StepGraph.Close holds while it destroys
	// the graph: a check before taking it could launch a freed graph.
	if g.closed {
		return nil, errGraphClosed
	}
	end, err := e.begin()
	if err != nil {
		return nil, err
	}
	defer end()
	if timed && len(g.events) < k+1 {
		for len(g.events) < replayChunk+1 {
			ev, err := e.drv.EventCreate(cuda.EventDefault)
			if err != nil {
				return nil, fmt.Errorf("timing events: %w", err)
			}
			g.events = append(g.events, ev)
		}
	}
	started := time.Now()
	w := e.startWatch(ctx, t, true)
	// failed drains what was queued before a failed call, with the
	// watcher still aborting the receives if ctx ends meanwhile.
	failed := func(err error) ([]time.Duration, error) {
		e.setFailure(err)
		err = errors.Join(err, e.drv.StreamSynchronize(e.stream))
		w.end()
		return nil, errors.Join(err, w.jobErr, w.abortErr)
	}
	for i := range k {
		if timed {
			if err := e.drv.EventRecord(g.events[i], e.stream); err != nil {
				return failed(err)
			}
		}
		if err := e.drv.GraphLaunch(g.exec, e.stream); err != nil {
			return failed(err)
		}
	}
	if timed {
		if err := e.drv.EventRecord(g.events[k], e.stream); err != nil {
			return failed(err)
		}
	}
	if err := e.wait(ctx, w, t, k*g.steps, 0, started); err != nil {
		return nil, err
	}
	if !timed {
		return nil, nil
	}
	times := make([]time.Duration, k)
	for i := range k {
		d, err := e.drv.EventElapsedTime(g.events[i], g.events[i+1])
		if err != nil {
			return nil, fmt.Errorf("replay %d's time: %w", i, err)
		}
		times[i] = d
	}
	return times, nil
}

var errGraphClosed = fmt.Errorf("%w: the step graph is closed", mailbox.ErrClosed)

// isClosed reads g.closed under e.mu, which Close holds while it sets it.
func (g *StepGraph) isClosed() bool {
	g.e.mu.Lock()
	defer g.e.mu.Unlock()
	return g.closed
}

// Close frees the graph; it is idempotent. Called while another goroutine
// replays the graph, it waits until the batch of replays in flight has
// ended (a batch is up to 32 replays), and the next replay fails with
// ErrClosed. Closing the op frees its graphs too.
func (g *StepGraph) Close() error {
	e := g.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if g.closed {
		return nil
	}
	if e.closed {
		g.closed = true
		return nil
	}
	unbind, err := e.drv.BindContext(e.cuctx)
	if err != nil {
		return err
	}
	defer unbind()
	return g.destroy()
}

// destroy frees the graph's executable and events; e.mu is held and the
// context bound.
func (g *StepGraph) destroy() error {
	if g.closed {
		return nil
	}
	g.closed = true
	delete(g.e.graphs, g)
	var errs []error
	for _, ev := range g.events {
		errs = append(errs, g.e.drv.EventDestroy(ev))
	}
	g.events = nil
	errs = append(errs, g.e.drv.GraphExecDestroy(g.exec))
	return errors.Join(errs...)
}

// whySeparateNodes adds to a refusal of fabric handles why ex's ranks
// count as separate nodes, where ex knows (an ExternalGroup whose ranks
// share no node identity: containers with their own namespaces,
// TPRUN_FORCE_NODE). Such a user is often on one machine, and wants the
// node-local route rather than the fabric the refusal speaks of.
func whySeparateNodes(ex mailbox.Exchanger, err error) error {
	g, ok := ex.(interface{ splitReason() string })
	if !ok || !errors.Is(err, mailbox.ErrFabric) {
		return err
	}
	if why := g.splitReason(); why != "" {
		return fmt.Errorf("%w (this group counts its ranks as separate nodes: %s)", err, why)
	}
	return err
}
