package tp

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/internal/cuda/cudatest"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// The CUDA engine on the CPU: a fake GPU (one address space shared by
// goroutine ranks, as one device shared by processes would be), fake
// kernels that compute with kernel.CPU and store and poll words
// atomically like the real ones, and a fake mailbox. Stream work runs when
// it is queued (a stream is in order, and a rank's receive may block its
// goroutine while it polls); work queued during a capture is recorded and
// runs at each GraphLaunch. The real-GPU tests are at the end of the file.

// fakeGPU is the device memory and the resource counts of all ranks.
type fakeGPU struct {
	mu     sync.Mutex
	next   cuda.DevicePtr
	mem    map[cuda.DevicePtr][]byte // base -> bytes
	host   map[*byte]cuda.DevicePtr  // host-mapped allocations
	live   map[string]int            // resource kind -> count
	failAt map[int]int               // rank -> fallible call number that fails (1-based)
	calls  map[int]int               // rank -> fallible calls made
	// retired: closed mailboxes. Their memory stays, as a real imported
	// allocation stays mapped in the peers that imported it.
	retired map[cuda.DevicePtr]bool

	// sharedCtx: the ranks share one CUDA context, as the goroutine ranks
	// of the real-GPU tests do. MemFreeHost then synchronizes that context
	// and holds back every call that queues work meanwhile (ctxMu), as
	// cuMemFreeHost and cudaFree do (NVIDIA/nccl#48, pytorch/pytorch#50925).
	sharedCtx bool
	ctxMu     sync.RWMutex
	drvs      []*fakeDrv // every rank's driver: the context's streams

	// multicast: a fake multicast range (its base, as every rank sees it)
	// -> the ranks' local mailboxes bound to it; a store into the range
	// lands in every one of them (stores).
	multicast map[cuda.DevicePtr][]cuda.DevicePtr
}

func newFakeGPU() *fakeGPU {
	return &fakeGPU{next: 1 << 32, mem: map[cuda.DevicePtr][]byte{}, host: map[*byte]cuda.DevicePtr{},
		live: map[string]int{}, failAt: map[int]int{}, calls: map[int]int{}, retired: map[cuda.DevicePtr]bool{},
		multicast: map[cuda.DevicePtr][]cuda.DevicePtr{}}
}

var errInjected = errors.New("injected failure")

// syncContext waits until the work queued so far on every stream of the
// shared context has finished, holding back meanwhile every call that
// queues work.
func (g *fakeGPU) syncContext() {
	g.ctxMu.Lock()
	defer g.ctxMu.Unlock()
	g.mu.Lock()
	drvs := slices.Clone(g.drvs)
	g.mu.Unlock()
	for _, d := range drvs {
		d.mu.Lock()
		var last []chan struct{}
		for _, st := range d.streams {
			last = append(last, st.last)
		}
		d.mu.Unlock()
		for _, c := range last {
			<-c
		}
	}
}

// fail counts one fallible call of rank and fails the one asked for.
func (g *fakeGPU) fail(rank int, op string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.calls[rank]++
	if g.calls[rank] == g.failAt[rank] {
		return fmt.Errorf("%s: %w (call %d of rank %d)", op, errInjected, g.calls[rank], rank)
	}
	return nil
}

func (g *fakeGPU) add(kind string, n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.live[kind] += n
}

// leaks lists the resources still alive.
func (g *fakeGPU) leaks() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var s []string
	for k, n := range g.live {
		if n != 0 {
			s = append(s, fmt.Sprintf("%s=%d", k, n))
		}
	}
	if n := len(g.mem) - len(g.retired); n != 0 {
		s = append(s, fmt.Sprintf("memory regions=%d", n))
	}
	slices.Sort(s)
	return strings.Join(s, ", ")
}

func (g *fakeGPU) alloc(b []byte) cuda.DevicePtr {
	g.mu.Lock()
	defer g.mu.Unlock()
	p := g.next
	g.next += cuda.DevicePtr((len(b) + 4095) &^ 4095)
	g.next += 4096 // a gap, so that an overrun is not another buffer
	g.mem[p] = b
	return p
}

// bytes is the memory at p, n bytes long.
func (g *fakeGPU) bytes(p cuda.DevicePtr, n int) ([]byte, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for base, b := range g.mem {
		if p >= base && p < base+cuda.DevicePtr(len(b)) {
			off := int(p - base)
			if off+n > len(b) {
				return nil, fmt.Errorf("fake GPU: access of %d bytes at %#x overruns its %d-byte allocation", n, uint64(p), len(b))
			}
			return b[off : off+n], nil
		}
	}
	return nil, fmt.Errorf("fake GPU: %#x is not allocated (illegal address)", uint64(p))
}

// at is bytes for an address of package tp's type.
func (g *fakeGPU) at(p DevicePtr, n int) ([]byte, error) { return g.bytes(cuda.DevicePtr(p), n) }

// stores is where a store of n bytes at p lands: the memory at p, or for
// an address in a fake multicast range the same offset of every mailbox
// bound to it.
func (g *fakeGPU) stores(p cuda.DevicePtr, n int) ([][]byte, error) {
	g.mu.Lock()
	var targets []cuda.DevicePtr
	for base, members := range g.multicast {
		if b := g.mem[base]; p >= base && p < base+cuda.DevicePtr(len(b)) {
			for _, m := range members {
				targets = append(targets, m+(p-base))
			}
		}
	}
	g.mu.Unlock()
	if targets == nil {
		b, err := g.bytes(p, n)
		return [][]byte{b}, err
	}
	var out [][]byte
	for _, t := range targets {
		b, err := g.bytes(t, n)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func words(b []byte) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func bf16s(b []byte) []kernel.BF16 {
	return unsafe.Slice((*kernel.BF16)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/2)
}

// fakeDrv is one rank's driver.
type fakeDrv struct {
	mailbox.MulticastVMM // nil: the fake mailbox needs no VMM
	gpu                  *fakeGPU
	rank                 int
	mu                   sync.Mutex
	capturing            map[cuda.Stream]*[]func() error
	graphs               map[uintptr][]func() error
	streams              map[cuda.Stream]*fakeStream
	nextID               uintptr
	syncs                atomic.Int64 // StreamSynchronize calls, any stream
}

// fakeStream runs its work in order, each op on a goroutine that waits
// for the one before; the first error is kept for the next synchronize.
type fakeStream struct {
	last chan struct{}
	err  error
	// blocking: made without cuda.StreamNonBlocking, so work on the
	// legacy stream 0 waits for it (and the fake's legacy-stream copies
	// with it).
	blocking bool
}

var _ engineDriver = (*fakeDrv)(nil)

func newFakeDrv(g *fakeGPU, rank int) *fakeDrv {
	d := &fakeDrv{gpu: g, rank: rank, capturing: map[cuda.Stream]*[]func() error{},
		graphs: map[uintptr][]func() error{}, streams: map[cuda.Stream]*fakeStream{}, nextID: 16}
	g.mu.Lock()
	g.drvs = append(g.drvs, d)
	g.mu.Unlock()
	return d
}

func (d *fakeDrv) id() uintptr {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.nextID++
	return d.nextID
}

// stream is s's state, made on first use (the legacy stream 0 included);
// d.mu is held.
func (d *fakeDrv) stream(s cuda.Stream) *fakeStream {
	st := d.streams[s]
	if st == nil {
		st = &fakeStream{last: make(chan struct{})}
		close(st.last)
		d.streams[s] = st
	}
	return st
}

// enqueue queues op on s, or records it when s is capturing.
func (d *fakeDrv) enqueue(s cuda.Stream, op func() error) error {
	return d.enqueueAfter(s, op, func(*fakeStream) bool { return false })
}

// enqueueAfter is enqueue where op also waits for the work queued so far
// on every other stream that after picks. d.mu is not held.
func (d *fakeDrv) enqueueAfter(s cuda.Stream, op func() error, after func(*fakeStream) bool) error {
	d.gpu.ctxMu.RLock()
	defer d.gpu.ctxMu.RUnlock()
	d.mu.Lock()
	defer d.mu.Unlock()
	if rec := d.capturing[s]; rec != nil {
		*rec = append(*rec, op)
		return nil
	}
	st := d.stream(s)
	var before []chan struct{}
	for _, o := range d.streams {
		if o != st && after(o) {
			before = append(before, o.last)
		}
	}
	prev, done := st.last, make(chan struct{})
	st.last = done
	go func() {
		<-prev
		for _, c := range before {
			<-c
		}
		if err := op(); err != nil {
			d.mu.Lock()
			st.err = errors.Join(st.err, err)
			d.mu.Unlock()
		}
		close(done)
	}()
	return nil
}

func (d *fakeDrv) DeviceGet(int) (cuda.Device, error) { return 0, d.gpu.fail(d.rank, "DeviceGet") }
func (d *fakeDrv) DevicePrimaryCtxRetain(cuda.Device) (cuda.Context, error) {
	if err := d.gpu.fail(d.rank, "DevicePrimaryCtxRetain"); err != nil {
		return 0, err
	}
	d.gpu.add("context", 1)
	return 1, nil
}
func (d *fakeDrv) DevicePrimaryCtxRelease(cuda.Device) error { d.gpu.add("context", -1); return nil }
func (d *fakeDrv) BindContext(cuda.Context) (func(), error) {
	if err := d.gpu.fail(d.rank, "BindContext"); err != nil {
		return nil, err
	}
	return func() {}, nil
}
func (d *fakeDrv) StreamCreate(flags cuda.StreamFlags) (cuda.Stream, error) {
	if err := d.gpu.fail(d.rank, "StreamCreate"); err != nil {
		return 0, err
	}
	d.gpu.add("stream", 1)
	s := cuda.Stream(d.id())
	d.mu.Lock()
	d.stream(s).blocking = flags&cuda.StreamNonBlocking == 0
	d.mu.Unlock()
	return s, nil
}

// legacy runs op on the legacy stream 0 and waits for it, as the
// driver's synchronous copies do: after the work queued on stream 0 and
// on every blocking stream, never after a non-blocking stream's.
func (d *fakeDrv) legacy(op func() error) error {
	errc := make(chan error, 1)
	if err := d.enqueueAfter(0, func() error { errc <- op(); return nil }, func(o *fakeStream) bool { return o.blocking }); err != nil {
		return err
	}
	return <-errc
}

// storeWords copies src into dst a 32-bit word at a time, atomically, as
// the GPU's copies land beside a receive that polls those words.
func storeWords(dst, src []byte) {
	if len(src)%4 != 0 || len(dst) < len(src) {
		copy(dst, src)
		return
	}
	d, s := words(dst[:len(src)]), words(src)
	for i := range s {
		atomic.StoreUint32(&d[i], atomic.LoadUint32(&s[i]))
	}
}
func (d *fakeDrv) StreamDestroy(s cuda.Stream) error {
	if err := d.StreamSynchronize(s); err != nil {
		return err
	}
	d.gpu.add("stream", -1)
	return nil
}
func (d *fakeDrv) StreamSynchronize(s cuda.Stream) error {
	d.syncs.Add(1)
	d.mu.Lock()
	st := d.stream(s)
	last := st.last
	d.mu.Unlock()
	<-last
	d.mu.Lock()
	defer d.mu.Unlock()
	err := st.err
	st.err = nil
	return err
}
func (d *fakeDrv) MemAlloc(size uint64) (cuda.DevicePtr, error) {
	if err := d.gpu.fail(d.rank, "MemAlloc"); err != nil {
		return 0, err
	}
	return d.gpu.alloc(make([]byte, size)), nil
}
func (d *fakeDrv) MemFree(p cuda.DevicePtr) error {
	d.gpu.mu.Lock()
	defer d.gpu.mu.Unlock()
	if _, ok := d.gpu.mem[p]; !ok {
		return fmt.Errorf("fake GPU: free of %#x, not allocated", uint64(p))
	}
	delete(d.gpu.mem, p)
	return nil
}
func (d *fakeDrv) MemHostAlloc(size int, _ cuda.HostAllocFlags) ([]byte, error) {
	if err := d.gpu.fail(d.rank, "MemHostAlloc"); err != nil {
		return nil, err
	}
	b := make([]byte, size)
	p := d.gpu.alloc(b)
	d.gpu.mu.Lock()
	d.gpu.host[&b[0]] = p
	d.gpu.mu.Unlock()
	return b, nil
}
func (d *fakeDrv) MemFreeHost(b []byte) error {
	if d.gpu.sharedCtx {
		d.gpu.syncContext()
	}
	d.gpu.mu.Lock()
	p, ok := d.gpu.host[&b[0]]
	delete(d.gpu.host, &b[0])
	d.gpu.mu.Unlock()
	if !ok {
		return errors.New("fake GPU: MemFreeHost of memory it did not allocate")
	}
	return d.MemFree(p)
}
func (d *fakeDrv) MemHostGetDevicePointer(b []byte) (cuda.DevicePtr, error) {
	if err := d.gpu.fail(d.rank, "MemHostGetDevicePointer"); err != nil {
		return 0, err
	}
	d.gpu.mu.Lock()
	defer d.gpu.mu.Unlock()
	return d.gpu.host[&b[0]], nil
}
func (d *fakeDrv) MemcpyHtoD(dst cuda.DevicePtr, src []byte) error {
	return d.legacy(func() error {
		b, err := d.gpu.bytes(dst, len(src))
		if err == nil {
			storeWords(b, src)
		}
		return err
	})
}
func (d *fakeDrv) MemcpyDtoD(dst, src cuda.DevicePtr, n uint64) error {
	return d.legacy(func() error {
		to, err1 := d.gpu.bytes(dst, int(n))
		from, err2 := d.gpu.bytes(src, int(n))
		if err := errors.Join(err1, err2); err != nil {
			return err
		}
		storeWords(to, from)
		return nil
	})
}
func (d *fakeDrv) MemcpyDtoH(dst []byte, src cuda.DevicePtr) error {
	return d.legacy(func() error {
		b, err := d.gpu.bytes(src, len(dst))
		if err == nil {
			storeWords(dst, b)
		}
		return err
	})
}

// MemsetD32Async: a device memory set is one of the operations that the
// CUDA Programming Guide ("Implicit Synchronization") lets the driver
// order after all the work issued before it in the context, on any
// stream. The fake always does, so that code which needs a memset to
// overtake a spinning kernel fails here every time rather than now and
// then on a GPU.
func (d *fakeDrv) MemsetD32Async(p cuda.DevicePtr, v uint32, n uint64, s cuda.Stream) error {
	return d.enqueueAfter(s, func() error {
		b, err := d.gpu.bytes(p, int(4*n))
		if err != nil {
			return err
		}
		for i := range words(b) {
			atomic.StoreUint32(&words(b)[i], v)
		}
		return nil
	}, func(*fakeStream) bool { return true })
}
func (d *fakeDrv) EventCreate(cuda.EventFlags) (cuda.Event, error) {
	if err := d.gpu.fail(d.rank, "EventCreate"); err != nil {
		return 0, err
	}
	d.gpu.add("event", 1)
	return cuda.Event(d.id()), nil
}
func (d *fakeDrv) EventDestroy(cuda.Event) error             { d.gpu.add("event", -1); return nil }
func (d *fakeDrv) EventRecord(cuda.Event, cuda.Stream) error { return nil }
func (d *fakeDrv) EventSynchronize(cuda.Event) error         { return nil }
func (d *fakeDrv) EventElapsedTime(_, _ cuda.Event) (time.Duration, error) {
	return 7 * time.Microsecond, nil
}
func (d *fakeDrv) StreamBeginCapture(s cuda.Stream, _ cuda.CaptureMode) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.capturing[s] = &[]func() error{}
	return nil
}
func (d *fakeDrv) StreamEndCapture(s cuda.Stream) (cuda.Graph, error) {
	d.mu.Lock()
	rec := d.capturing[s]
	delete(d.capturing, s)
	d.mu.Unlock()
	if rec == nil {
		return 0, errors.New("fake: end of a capture that did not begin")
	}
	id := d.id()
	d.mu.Lock()
	d.graphs[id] = *rec
	d.mu.Unlock()
	d.gpu.add("graph", 1)
	return cuda.Graph(id), nil
}
func (d *fakeDrv) GraphInstantiate(g cuda.Graph, _ cuda.GraphInstantiateFlags) (cuda.GraphExec, error) {
	if err := d.gpu.fail(d.rank, "GraphInstantiate"); err != nil {
		return 0, err
	}
	id := d.id()
	d.mu.Lock()
	d.graphs[id] = d.graphs[uintptr(g)]
	d.mu.Unlock()
	d.gpu.add("graph exec", 1)
	return cuda.GraphExec(id), nil
}

// The module calls: the fake loads its kernels through fakeDeps instead.
func (d *fakeDrv) ModuleLoadData([]byte) (cuda.Module, error) {
	return 0, errors.New("fake: no modules")
}
func (d *fakeDrv) ModuleUnload(cuda.Module) error { return errors.New("fake: no modules") }
func (d *fakeDrv) ModuleGetFunction(cuda.Module, string) (cuda.Function, error) {
	return 0, errors.New("fake: no modules")
}
func (d *fakeDrv) FuncSetAttribute(cuda.Function, cuda.FuncAttribute, int) error {
	return errors.New("fake: no modules")
}
func (d *fakeDrv) LaunchKernelEx(cuda.LaunchConfig, cuda.Function, ...[]byte) error {
	return errors.New("fake: no modules")
}

func (d *fakeDrv) GraphUpload(cuda.GraphExec, cuda.Stream) error { return nil }
func (d *fakeDrv) GraphLaunch(e cuda.GraphExec, s cuda.Stream) error {
	d.mu.Lock()
	ops, ok := d.graphs[uintptr(e)]
	d.mu.Unlock()
	if !ok {
		return fmt.Errorf("fake: launch of graph exec %#x, which does not exist (destroyed?)", uintptr(e))
	}
	for _, op := range ops {
		if err := d.enqueue(s, op); err != nil {
			return err
		}
	}
	return nil
}
func (d *fakeDrv) GraphDestroy(cuda.Graph) error { d.gpu.add("graph", -1); return nil }
func (d *fakeDrv) GraphExecDestroy(e cuda.GraphExec) error {
	d.mu.Lock()
	delete(d.graphs, uintptr(e))
	d.mu.Unlock()
	d.gpu.add("graph exec", -1)
	return nil
}

// fakeKernels compute like the real kernels, from and into fake memory,
// with the slot rotation on the device (kernel.SlotRotation): a launch
// reads the slot from the counter when it runs, and the step's receive
// advances it.
type fakeKernels struct {
	d       *fakeDrv
	fused   atomic.Int64 // skinny launches that did a fused receive
	large   atomic.Int64 // launches of M above kernel.MaxSkinnyM
	skipped atomic.Int64 // receives that skipped this rank's slice
	mu      sync.Mutex
	streams []cuda.Stream // the stream of every skinny launch, in order
}

// launchedOn is the stream of every skinny launch so far.
func (k *fakeKernels) launchedOn() []cuda.Stream {
	k.mu.Lock()
	defer k.mu.Unlock()
	return slices.Clone(k.streams)
}

// slotWords is the rotation's counter, checked as the kernels would.
func (k *fakeKernels) slotWords(r kernel.SlotRotation) ([]uint32, error) {
	if r.Counter == 0 || r.Slots < 2 || r.Stride == 0 {
		return nil, fmt.Errorf("fake kernel: launch without a device-side slot rotation: %+v", r)
	}
	b, err := k.d.gpu.bytes(r.Counter, 8)
	if err != nil {
		return nil, err
	}
	w := words(b)
	if s := atomic.LoadUint32(&w[0]); int(s) >= r.Slots {
		return nil, fmt.Errorf("fake kernel: slot counter %d with %d slots", s, r.Slots)
	}
	return w, nil
}

// slotOffset is the byte offset of the slot the counter names.
func slotOffset(w []uint32, r kernel.SlotRotation) cuda.DevicePtr {
	return cuda.DevicePtr(uint64(atomic.LoadUint32(&w[0])) * r.Stride)
}

// advance moves the counter to the next slot, as the step's last CTA does.
func advance(w []uint32, r kernel.SlotRotation) {
	atomic.StoreUint32(&w[0], (atomic.LoadUint32(&w[0])+1)%uint32(r.Slots))
	atomic.StoreUint32(&w[1], 0)
}

func (k *fakeKernels) unload() error { k.d.gpu.add("module", -1); return nil }

func (k *fakeKernels) launchSkinny(s cuda.Stream, a skinnyLaunch, _ bool) error {
	if !a.weightPacked {
		// As kernel.LaunchSkinny: the kernels read only the packed layout.
		return &kernel.ArgError{Field: "WeightPacked", Value: "false", Rule: "the kernels read only the packed layout (PackWeight)"}
	}
	if a.receive != nil && a.shape.M > kernel.MaxSkinnyM {
		// As kernel.LaunchSkinny: the larger-M kernel has no fused receive.
		return &kernel.ArgError{Field: "Receive", Value: "set", Rule: "the kernel for M above 8 has no fused receive"}
	}
	if a.shape.M > kernel.MaxSkinnyM {
		k.large.Add(1)
	}
	k.mu.Lock()
	k.streams = append(k.streams, s)
	k.mu.Unlock()
	return k.d.enqueue(s, func() error {
		counter, err := k.slotWords(a.rotation)
		if err != nil {
			return err
		}
		off := slotOffset(counter, a.rotation)
		sh := a.shape
		n, K := sh.Shard(), sh.Latent
		lat, err1 := k.d.gpu.bytes(a.latent, 2*sh.M*K)
		w, err2 := k.d.gpu.bytes(a.weight, 2*kernel.PackedWeightLen(n, K))
		shared, err3 := k.d.gpu.bytes(a.shared, 2*((sh.M-1)*a.sharedStride+n))
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		weight := make([]kernel.BF16, n*K)
		if err := kernel.UnpackWeight(weight, bf16s(w), n, K); err != nil {
			return err
		}
		out := make([]kernel.BF16, sh.M*n)
		if err := kernel.UpProjectCPU(sh, bf16s(lat), weight, bf16s(shared), a.sharedStride, out, n); err != nil {
			return err
		}
		for d, dst := range a.dst {
			if a.rotation.Fixed&(1<<d) == 0 {
				dst += off
			}
			for m := range sh.M {
				bs, err := k.d.gpu.stores(dst+cuda.DevicePtr(2*(m*sh.Hidden+a.rank*n)), 2*n)
				if err != nil {
					return err
				}
				for _, b := range bs {
					ws := words(b)
					for i := range ws {
						atomic.StoreUint32(&ws[i], kernel.PackWord(out[m*n+2*i], out[m*n+2*i+1]))
					}
				}
			}
		}
		if a.receive != nil {
			k.fused.Add(1)
			r := *a.receive
			r.slot += off
			err := k.receive(r)
			advance(counter, a.rotation)
			return err
		}
		return nil
	})
}

func (k *fakeKernels) launchReceive(s cuda.Stream, a receiveLaunch) error {
	return k.d.enqueue(s, func() error {
		counter, err := k.slotWords(a.rotation)
		if err != nil {
			return err
		}
		r := a // a graph runs this at every replay: a stays slot 0's
		r.slot += slotOffset(counter, a.rotation)
		err = k.receive(r)
		advance(counter, a.rotation)
		return err
	})
}

// receive is the Lamport receive of a, as the kernel does it (also the tail
// of a skinny launch with a fused receive).
func (k *fakeKernels) receive(a receiveLaunch) error {
	{
		slot, err1 := k.d.gpu.bytes(a.slot, 2*a.m*a.hidden)
		out, err2 := k.d.gpu.bytes(a.out, 2*a.m*a.hidden)
		nst := statusWords
		if a.abortable {
			nst = kernel.ReceiveAbortWord + 1
		}
		st, err3 := k.d.gpu.bytes(a.status, 4*nst)
		if err := errors.Join(err1, err2, err3); err != nil {
			return err
		}
		in, o, status := words(slot), words(out), words(st)
		if a.skip {
			if a.skipRank != k.d.rank {
				return fmt.Errorf("fake receive of rank %d skips rank %d's slice", k.d.rank, a.skipRank)
			}
			k.skipped.Add(1)
		}
		start := time.Now()
		deadline := start.Add(a.timeout)
		// As the kernel: the deadline, or the host's abort word when the
		// launch is abortable, ends the wait; the kernel first looks at
		// the word 200 µs after it started.
		waiting := func() bool {
			now := time.Now()
			return now.Before(deadline) && !(a.abortable && now.Sub(start) >= 200*time.Microsecond &&
				atomic.LoadUint32(&status[kernel.ReceiveAbortWord]) != 0)
		}
		for i := range in {
			if a.skip && (2*i%a.hidden)/a.shard == a.skipRank {
				continue // that rank's kernel stored its slice straight into out
			}
			w := atomic.LoadUint32(&in[i])
			for w == kernel.Sentinel && waiting() {
				time.Sleep(20 * time.Microsecond)
				w = atomic.LoadUint32(&in[i])
			}
			if w == kernel.Sentinel {
				atomic.StoreUint32(&status[0], 1)
				atomic.StoreUint32(&status[1+(2*i%a.hidden)/a.shard], 1)
				continue
			}
			o[i] = w
			atomic.StoreUint32(&in[i], kernel.Sentinel)
		}
		return nil
	}
}

// fakeDeps loads fake kernels and makes a fake unicast mailbox: every rank
// allocates its slots, arms them, and the bases are all-gathered.
func fakeDeps() engineDeps {
	return engineDeps{
		loadKernels: func(drv engineDriver) (stepKernels, error) {
			d := drv.(*fakeDrv)
			if err := d.gpu.fail(d.rank, "loadKernels"); err != nil {
				return nil, err
			}
			d.gpu.add("module", 1)
			return &fakeKernels{d: d}, nil
		},
		newUnicast: func(ctx context.Context, ex mailbox.Exchanger, drv engineDriver, _ cuda.Device, cfg mailbox.Config) (gpuMailbox, []cuda.DevicePtr, error) {
			d := drv.(*fakeDrv)
			l, err := mailbox.NewLayout(cfg, ex.Size())
			if err != nil {
				return nil, nil, err
			}
			mb := &fakeMailbox{d: d, layout: l}
			if err = d.gpu.fail(d.rank, "mailbox"); err == nil {
				mb.local = d.gpu.alloc(make([]byte, l.Bytes))
				d.gpu.add("mailbox", 1)
			}
			if err == nil {
				err = d.MemsetD32Async(mb.local, kernel.Sentinel, uint64(l.Bytes/4), 0)
			}
			if err == nil {
				err = d.StreamSynchronize(0)
			}
			if err := agree(ctx, ex, "fake mailbox", err); err != nil {
				return nil, nil, errors.Join(err, mb.Close())
			}
			all, err := ex.AllGather(ctx, binary.LittleEndian.AppendUint64(nil, uint64(mb.local)))
			if err != nil {
				return nil, nil, errors.Join(err, mb.Close())
			}
			bases := make([]cuda.DevicePtr, len(all))
			for r, b := range all {
				bases[r] = cuda.DevicePtr(binary.LittleEndian.Uint64(b))
			}
			return mb, bases, nil
		},
	}
}

type fakeMailbox struct {
	d         *fakeDrv
	layout    mailbox.Layout
	local     cuda.DevicePtr
	once      sync.Once
	multicast bool // bound to a fake multicast range (fakeMulticastDeps)
}

func (m *fakeMailbox) Name() string {
	if m.multicast {
		return "multicast"
	}
	return "unicast"
}
func (m *fakeMailbox) Layout() mailbox.Layout { return m.layout }
func (m *fakeMailbox) Local() cuda.DevicePtr  { return m.local }
func (m *fakeMailbox) Close() error {
	var err error
	m.once.Do(func() {
		if m.local != 0 {
			m.d.gpu.mu.Lock()
			m.d.gpu.retired[m.local] = true
			m.d.gpu.mu.Unlock()
			m.d.gpu.add("mailbox", -1)
		}
	})
	return err
}

// fakeMulticastDeps is fakeDeps whose multicast mailbox is the fake
// unicast one bound to a fake multicast range: rank 0 makes the range and
// binds every rank's mailbox to it, and every rank's kernel gets that one
// address as its only destination (a store there lands in every mailbox,
// fakeGPU.stores), as with a real multicast object.
func fakeMulticastDeps() engineDeps {
	deps := fakeDeps()
	deps.newMulticast = func(ctx context.Context, ex mailbox.Exchanger, drv engineDriver, dev cuda.Device, cfg mailbox.Config) (gpuMailbox, []cuda.DevicePtr, error) {
		mb, bases, err := deps.newUnicast(ctx, ex, drv, dev, cfg)
		if err != nil {
			return nil, nil, err
		}
		fm := mb.(*fakeMailbox)
		fm.multicast = true
		var mc cuda.DevicePtr
		if ex.Rank() == 0 {
			g := fm.d.gpu
			mc = g.alloc(make([]byte, fm.layout.Bytes))
			g.mu.Lock()
			g.multicast[mc] = slices.Clone(bases)
			g.retired[mc] = true // no owner frees the range in the fake
			g.mu.Unlock()
		}
		all, err := ex.AllGather(ctx, binary.LittleEndian.AppendUint64(nil, uint64(mc)))
		if err != nil {
			return nil, nil, errors.Join(err, mb.Close())
		}
		return mb, []cuda.DevicePtr{cuda.DevicePtr(binary.LittleEndian.Uint64(all[0]))}, nil
	}
	return deps
}

// newFakeUp is NewUpProjection on the fake GPU.
func newFakeUp(ctx context.Context, ex mailbox.Exchanger, gpu *fakeGPU, hidden, latent, maxM, slots int, deadline time.Duration) (*UpProjection, error) {
	return newFakeUpKind(ctx, ex, gpu, hidden, latent, maxM, slots, deadline, mailbox.KindUnicast, fakeDeps())
}

// newFakeUpKind is newFakeUp with the given mailbox kind and deps.
func newFakeUpKind(ctx context.Context, ex mailbox.Exchanger, gpu *fakeGPU, hidden, latent, maxM, slots int, deadline time.Duration,
	kind mailbox.Kind, deps engineDeps) (*UpProjection, error) {
	s := kernel.Shape{M: maxM, Hidden: hidden, Latent: latent, TP: ex.Size()}
	if err := s.Validate(); err != nil {
		return nil, err
	}
	gpu.add("driver", 1)
	closeDrv := func() error { gpu.add("driver", -1); return nil }
	eng, err := newCUDAEngine(ctx, ex, s, upConfig{slots: slots, deadline: deadline}, newFakeDrv(gpu, ex.Rank()), closeDrv, 0, kind, deps)
	if err != nil {
		return nil, err
	}
	u := &UpProjection{rank: ex.Rank(), shape: s, eng: eng, reason: "fake"}
	if w, ok := ex.(jobWatcher); ok {
		u.job = w.jobContext() // a real Group: its ops watch the job
	}
	return u, nil
}

// devBuf allocates fake device memory holding v.
func devBuf(t testing.TB, g *fakeGPU, v []kernel.BF16) DevicePtr {
	t.Helper()
	b := make([]byte, 2*len(v)+64)
	copy(b, cuda.AsBytes(v))
	return DevicePtr(g.alloc(b))
}

func TestCUDAEngineFakeSteps(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	tests := []struct {
		desc               string
		tp, hidden, latent int
		maxM, slots        int
		ms                 []int
		device             bool // StepDevice (weight packed, as device steps take it) instead of Step (weight row-major)
	}{
		{desc: "one rank, host operands", tp: 1, hidden: 64, latent: 40, maxM: 3, ms: []int{1, 3, 2, 3}},
		{desc: "two ranks, every M, host operands", tp: 2, hidden: 256, latent: 96, maxM: 8, ms: []int{8, 1, 2, 3, 4, 5, 6, 7, 8}},
		{desc: "three ranks, two slots, device operands", tp: 3, hidden: 144, latent: 64, maxM: 4, slots: 2, ms: []int{4, 2, 4, 1, 3, 4}, device: true},
		{desc: "four ranks, device operands", tp: 4, hidden: 512, latent: 128, maxM: 8, ms: []int{1, 2, 4, 8, 8, 8, 1}, device: true},
		{desc: "three ranks, device operands, latent not a multiple of 32", tp: 3, hidden: 144, latent: 40, maxM: 4, ms: []int{4, 1, 3}, device: true},
		// M above kernel.MaxSkinnyM: the larger-M kernel, then the receive
		// kernel (no fused receive), between steps of M up to it.
		{desc: "three ranks, M up to 100, device operands", tp: 3, hidden: 144, latent: 40, maxM: 100, slots: 2, ms: []int{100, 100, 9, 3, 64, 100, 8}, device: true},
		{desc: "two ranks, M up to 128, host operands", tp: 2, hidden: 64, latent: 72, maxM: kernel.MaxM, ms: []int{kernel.MaxM, 1, 31, kernel.MaxM}},
	}
	for i, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			gpu := newFakeGPU()
			steps := newUpSteps(t, seed+uint64(i), tc.hidden, tc.latent, tc.ms)
			shard := tc.hidden / tc.tp
			got := make([][][]kernel.BF16, tc.tp)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := onUpRanks(tc.tp, func(r int, ex mailbox.Exchanger) (err error) {
				up, err := newFakeUp(ctx, ex, gpu, tc.hidden, tc.latent, tc.maxM, tc.slots, 10*time.Second)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, up.Close()) }()
				if up.Backend() != "unicast" || up.Device() != 0 {
					return fmt.Errorf("backend %q device %d", up.Backend(), up.Device())
				}
				for i, d := range steps {
					w := d.weight[r*shard*tc.latent : (r+1)*shard*tc.latent]
					out := make([]kernel.BF16, tc.maxM*tc.hidden+5)
					for j := range out {
						out[j] = poison
					}
					if tc.device {
						o := devBuf(t, gpu, out)
						in := DeviceInputs{M: d.m, Latent: devBuf(t, gpu, d.latent), Weight: devPacked(t, gpu, w, tc.latent), WeightPacked: true,
							Shared: devBuf(t, gpu, d.shared) + DevicePtr(2*r*shard), SharedStride: tc.hidden}
						if err := up.StepDevice(ctx, in, o); err != nil {
							return err
						}
						b, err := gpu.at(o, 2*len(out))
						if err != nil {
							return err
						}
						copy(out, bf16s(b))
					} else {
						in := UpInputs{M: d.m, Latent: d.latent, Weight: w, Shared: d.shared[r*shard:], SharedStride: tc.hidden}
						if err := up.Step(ctx, in, out); err != nil {
							return err
						}
					}
					if err := keepBlock(i, d.m, tc.hidden, out, &got[r]); err != nil {
						return err
					}
				}
				if n := up.Steps(); n != uint64(len(steps)) {
					return fmt.Errorf("Steps() = %d after %d steps", n, len(steps))
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			checkBlocks(t, steps, got, tc.hidden)
		})
	}
}

// packedWeight is w in the kernel's packed layout (kernel.PackWeight).
func packedWeight(t testing.TB, w []kernel.BF16, shard, latent int) []kernel.BF16 {
	t.Helper()
	p := make([]kernel.BF16, kernel.PackedWeightLen(shard, latent))
	if err := kernel.PackWeight(p, w, shard, latent); err != nil {
		t.Fatal(err)
	}
	return p
}

// devPacked is the row-major [len(w)/latent, latent] weight w in fake
// device memory, packed as a weight passed with a device step must be
// (DeviceInputs.WeightPacked).
func devPacked(t testing.TB, gpu *fakeGPU, w []kernel.BF16, latent int) DevicePtr {
	t.Helper()
	return devBuf(t, gpu, packedWeight(t, w, len(w)/latent, latent))
}

// gpuPacked is devPacked on the real GPU.
func (f gpuFixture) gpuPacked(t *testing.T, w []kernel.BF16, latent int) DevicePtr {
	t.Helper()
	return f.devAlloc(t, packedWeight(t, w, len(w)/latent, latent), 0)
}

// checkBlocks checks every rank's block of every step against the
// reference and rank 0's.
func checkBlocks(t *testing.T, steps []upStepData, got [][][]kernel.BF16, hidden int) {
	t.Helper()
	for i, d := range steps {
		res, err := d.want.Check(got[0][i], hidden)
		if err != nil {
			t.Fatal(err)
		}
		if res.Wrong > 0 || res.Checked != d.m*hidden {
			t.Errorf("step %d (M=%d): %d of %d wrong, first %v", i, d.m, res.Wrong, res.Checked, res.First)
		}
		for r := 1; r < len(got); r++ {
			if !equalBlocks(got[0][i], got[r][i]) {
				t.Errorf("step %d: rank %d's block differs from rank 0's", i, r)
			}
		}
	}
}

// graphCase runs a captured graph of steps on every rank and returns each
// rank's blocks of the last replay. fn may step or replay around it.
func TestCUDAEngineFakeGraph(t *testing.T) {
	t.Run("skinny", func(t *testing.T) { runFakeGraph(t, 2, 128, 32, 4, 3, []int{1, 4, 2, 3, 4, 1}) })
	// M above kernel.MaxSkinnyM in the same graph as M up to it: the
	// larger-M kernel and its receive kernel, the others fused.
	t.Run("larger M", func(t *testing.T) { runFakeGraph(t, 3, 144, 40, 100, 2, []int{100, 9, 4, 64, 1}) })
}

func runFakeGraph(t *testing.T, tp, hidden, latent, maxM, slots int, ms []int) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	steps := newUpSteps(t, seed, hidden, latent, ms)
	shard := hidden / tp
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make([][][]kernel.BF16, tp)
	errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := newFakeUp(ctx, ex, gpu, hidden, latent, maxM, slots, 10*time.Second)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		var ds []DeviceStep
		var outs []DevicePtr
		for _, d := range steps {
			o := devBuf(t, gpu, make([]kernel.BF16, maxM*hidden))
			outs = append(outs, o)
			ds = append(ds, DeviceStep{Out: o, In: DeviceInputs{M: d.m, Latent: devBuf(t, gpu, d.latent),
				Weight: devPacked(t, gpu, d.weight[r*shard*latent:(r+1)*shard*latent], latent), WeightPacked: true,
				Shared: devBuf(t, gpu, d.shared[r*shard:]), SharedStride: hidden}})
		}
		if _, err := up.Capture(ctx, nil); !errors.Is(err, mailbox.ErrArgument) {
			return fmt.Errorf("capture of no steps gave %v, want mailbox.ErrArgument", err)
		}
		g, err := up.Capture(ctx, ds)
		if err != nil {
			return err
		}
		if up.Steps() != 0 || g.Steps() != len(ds) {
			return fmt.Errorf("after capture: Steps() = %d, graph steps %d", up.Steps(), g.Steps())
		}
		for rep := range 3 {
			for _, o := range outs {
				b, err := gpu.at(o, 2*maxM*hidden)
				if err != nil {
					return err
				}
				for i := range bf16s(b) {
					bf16s(b)[i] = poison
				}
			}
			var times []time.Duration
			if rep == 1 {
				times, err = g.TimeReplays(ctx, 1)
			} else {
				err = g.Replay(ctx, 1)
			}
			if err != nil {
				return fmt.Errorf("replay %d: %w", rep, err)
			}
			if rep == 1 && len(times) != 1 {
				return fmt.Errorf("TimeReplays(1) gave %d times", len(times))
			}
		}
		if want := uint64(3 * len(ds)); up.Steps() != want {
			return fmt.Errorf("Steps() = %d after 3 replays, want %d", up.Steps(), want)
		}
		for i, o := range outs {
			b, err := gpu.at(o, 2*ms[i]*hidden)
			if err != nil {
				return err
			}
			got[r] = append(got[r], slices.Clone(bf16s(b)))
		}
		// One plain step moves the slot phase; the graph replays all the
		// same (the slots rotate on the device) and gives the same blocks.
		d := ds[0]
		if err := up.StepDevice(ctx, d.In, d.Out); err != nil {
			return err
		}
		for _, o := range outs {
			b, err := gpu.at(o, 2*maxM*hidden)
			if err != nil {
				return err
			}
			for i := range bf16s(b) {
				bf16s(b)[i] = poison
			}
		}
		if err := g.Replay(ctx, 1); err != nil {
			return fmt.Errorf("replay after a plain step: %w", err)
		}
		for i, o := range outs {
			b, err := gpu.at(o, 2*ms[i]*hidden)
			if err != nil {
				return err
			}
			if !slices.Equal(bf16s(b), got[r][i]) {
				return fmt.Errorf("step %d of the replay after a plain step: another block than before", i)
			}
		}
		if err := g.Close(); err != nil {
			return err
		}
		if err := g.Replay(ctx, 1); !errors.Is(err, mailbox.ErrClosed) {
			return fmt.Errorf("replay of a closed graph gave %v", err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	checkBlocks(t, steps, got, hidden)
	checkNoLeaks(t, gpu)
}

// TestCUDAEngineFakeGraphCloseDuringReplay: closing a StepGraph while
// another goroutine replays it never launches the destroyed graph; the
// replays end with mailbox.ErrClosed.
func TestCUDAEngineFakeGraphCloseDuringReplay(t *testing.T) {
	const hidden, latent, maxM, slots = 64, 32, 2, 2
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	d := newUpSteps(t, seed, hidden, latent, []int{2})[0]
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := onUpRanks(1, func(_ int, ex mailbox.Exchanger) (err error) {
		up, err := newFakeUp(ctx, ex, gpu, hidden, latent, maxM, slots, 10*time.Second)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		st := DeviceStep{Out: devBuf(t, gpu, make([]kernel.BF16, maxM*hidden)), In: DeviceInputs{M: d.m,
			Latent: devBuf(t, gpu, d.latent), Weight: devPacked(t, gpu, d.weight, latent), WeightPacked: true, Shared: devBuf(t, gpu, d.shared), SharedStride: hidden}}
		g, err := up.Capture(ctx, []DeviceStep{st, st})
		if err != nil {
			return err
		}
		var wg sync.WaitGroup
		var replayErr error
		wg.Go(func() {
			for replayErr == nil {
				replayErr = g.Replay(ctx, 1)
			}
		})
		time.Sleep(time.Millisecond)
		closeErr := g.Close()
		wg.Wait()
		if !errors.Is(replayErr, mailbox.ErrClosed) {
			return errors.Join(closeErr, fmt.Errorf("replay racing Close ended with %v, want mailbox.ErrClosed", replayErr))
		}
		return closeErr
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// checkNoLeaks fails t if the fake GPU still holds anything the engines
// made: its leaks less the memory regions the test itself made for the
// inputs.
func checkNoLeaks(t *testing.T, gpu *fakeGPU) {
	t.Helper()
	var left []string
	for _, s := range strings.Split(gpu.leaks(), ", ") {
		if s != "" && !strings.HasPrefix(s, "memory regions") {
			left = append(left, s)
		}
	}
	if len(left) > 0 {
		t.Errorf("left alive: %s", strings.Join(left, ", "))
	}
}

func TestCUDAEngineFakeDeadPeer(t *testing.T) {
	const tp, hidden, latent, dead = 3, 48, 16, 2
	const deadline = 200 * time.Millisecond
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	rng := kernel.NewRand(uint64(time.Now().UnixNano()))
	in := randomInputs(rng, 2, hidden, latent, tp, 1)
	errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := newFakeUp(ctx, ex, gpu, hidden, latent, 2, 0, deadline)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		out := make([]kernel.BF16, 2*hidden)
		if err := up.Step(ctx, in, out); err != nil {
			return err
		}
		if r == dead {
			return nil
		}
		return stepToDeadPeer(ctx, up, r, dead, deadline, in, out)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if l := gpu.leaks(); l != "" {
		t.Errorf("left alive: %s", l)
	}
}

// TestCUDAEngineFakeStalledPeerReplay: a peer that stalls without dying
// (rank 2 joined, captured, and then never replays) ends the other ranks'
// batch of 4 queued replays of a 2-step graph about one deadline after it
// began, not after the 8 deadlines of its queued receives: the rank whose
// receive timed out fails the job (real Groups, rank 0 hosting the hub)
// and its error names the stalled rank; every other rank's call, the
// stalled one's included, fails with the job's failure.
//
// In the second case rank 1 waits 20 times longer, so only rank 0 times
// out; rank 1's batch then ends with the job's failure, which rank 0 sent.
func TestCUDAEngineFakeStalledPeerReplay(t *testing.T) {
	t.Run("every rank times out", func(t *testing.T) { testStalledPeerReplay(t, false) })
	t.Run("one rank times out", func(t *testing.T) { testStalledPeerReplay(t, true) })
}

func testStalledPeerReplay(t *testing.T, patient bool) {
	const n, hidden, latent, maxM, stalled, replays = 3, 48, 16, 2, 2, 4
	const deadline = 150 * time.Millisecond
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	d := newUpSteps(t, seed, hidden, latent, []int{maxM})[0]
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tmp, job := shortTempDir(t), newJobID()
	var replayed sync.WaitGroup
	replayed.Add(n - 1)
	var timeouts atomic.Int32
	errs := runRanks(t, n, func(r int) map[string]string { return torchrunEnv(tmp, job, r, n) }, []JoinOption{WithTimeout(10 * time.Second)},
		func(r int, g *Group) (err error) {
			if r != stalled {
				defer replayed.Done()
			}
			wait := deadline
			if patient && r == 1 {
				wait = 20 * deadline
			}
			up, err := newFakeUp(ctx, g, gpu, hidden, latent, maxM, 2, wait)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, up.Close()) }()
			st := fakeRankStep(t, gpu, d, r, n, maxM)
			gr, err := up.Capture(ctx, []DeviceStep{st, st})
			if err != nil {
				return err
			}
			if err := g.Barrier(ctx); err != nil {
				return err
			}
			if r == stalled {
				replayed.Wait()
				// The others' failure reaches this rank through the hub, maybe
				// after they have returned; once it has, the replay must end
				// with it although every slice it waits for is there.
				select {
				case <-g.jobContext().Done():
				case <-ctx.Done():
				}
				return stalledRankReplay(ctx, gr, stalled)
			}
			t0 := time.Now()
			err = gr.Replay(ctx, replays)
			took := time.Since(t0)
			t.Logf("rank %d: %d replays ended after %v: %v", r, replays, took.Round(time.Millisecond), err)
			timedOut, err := checkStalledReplay(err, took, stalled, replays, deadline)
			if timedOut {
				if patient && r == 1 {
					return fmt.Errorf("the patient rank timed out itself (%v): the job's failure did not end its batch", err)
				}
				timeouts.Add(1)
			}
			return err
		})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if timeouts.Load() == 0 {
		t.Error("no rank saw the timeout itself")
	}
	checkNoLeaks(t, gpu)
}

// TestCUDAEngineFakeStalledPeerJobLate: the order of the stall handling,
// with a fake job whose failure reaches the ranks late or never. The
// queued receives are ended only once the failure has come back: with a
// delay, the batch takes at least the deadline plus the delay; with none
// coming back, every queued receive waits out its deadline, as before the
// watch; and a caller that gives up while the watch waits for the failure
// gets its own cancellation, not the timeout.
func TestCUDAEngineFakeStalledPeerJobLate(t *testing.T) {
	const n, hidden, latent, maxM, stalled, replays = 3, 48, 16, 2, 2, 4
	const deadline = 150 * time.Millisecond
	for _, tc := range []struct {
		desc     string
		delay    time.Duration // the job's failure reaches the ranks this late; < 0 never
		cancelAt time.Duration // the callers give up this long after they start (0: never)
		min, max time.Duration
	}{
		{"failure 250ms late", 250 * time.Millisecond, 0, deadline + 250*time.Millisecond, 3*deadline + 250*time.Millisecond},
		{"failure never comes", -1, 0, 2 * replays * deadline * 9 / 10, 2*replays*deadline + 2*deadline},
		{"caller gives up first", -1, 2 * deadline, 2 * deadline, 3 * deadline},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			d := newUpSteps(t, seed, hidden, latent, []int{maxM})[0]
			gpu := newFakeGPU()
			job := newFakeJob(tc.delay)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var replayed sync.WaitGroup
			replayed.Add(n - 1)
			hub := newUpHub(n)
			errs := make([]error, n)
			var wg sync.WaitGroup
			for r := range n {
				wg.Go(func() {
					errs[r] = func() (err error) {
						if r != stalled {
							defer replayed.Done()
						}
						up, err := newFakeUp(ctx, jobRank{hub.rank(r), job}, gpu, hidden, latent, maxM, 2, deadline)
						if err != nil {
							return err
						}
						defer func() { err = errors.Join(err, up.Close()) }()
						if r == stalled {
							replayed.Wait()
							return nil
						}
						st := fakeRankStep(t, gpu, d, r, n, maxM)
						gr, err := up.Capture(ctx, []DeviceStep{st, st})
						if err != nil {
							return err
						}
						// t0 before the caller's deadline is set: the replay
						// may end at that deadline, which a later t0 would put
						// under tc.min (298ms of 300, once, on CI).
						t0 := time.Now()
						rctx := ctx
						if tc.cancelAt > 0 {
							var rcancel context.CancelFunc
							rctx, rcancel = context.WithTimeout(ctx, tc.cancelAt)
							defer rcancel()
						}
						err = gr.Replay(rctx, replays)
						took := time.Since(t0)
						t.Logf("rank %d: %d replays ended after %v: %v", r, replays, took.Round(time.Millisecond), err)
						var te *mailbox.TimeoutError
						switch {
						case tc.cancelAt > 0:
							if !errors.Is(err, context.DeadlineExceeded) || errors.As(err, &te) {
								return fmt.Errorf("a caller that gave up while the job's failure was awaited got %v, want its own context's error", err)
							}
						case !errors.As(err, &te) || !slices.Equal(te.Missing, []int{stalled}):
							return fmt.Errorf("got %v, want a *mailbox.TimeoutError naming only rank %d", err, stalled)
						}
						if took < tc.min || took > tc.max {
							return fmt.Errorf("%d queued replays took %v, want %v to %v", replays, took, tc.min, tc.max)
						}
						return nil
					}()
				})
			}
			wg.Wait()
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			if rs := job.reasons(); len(rs) == 0 || !strings.Contains(rs[0], fmt.Sprintf("no slice from rank %d within", stalled)) {
				t.Errorf("the ranks aborted the job with %q, want a reason naming rank %d", rs, stalled)
			}
			checkNoLeaks(t, gpu)
		})
	}
}

// fakeRankStep is rank r's step of d on the fake GPU, for a group of n
// ranks: its slice of the weight and of `shared`, the latent, and an
// output block for up to maxM rows.
func fakeRankStep(t *testing.T, gpu *fakeGPU, d upStepData, r, n, maxM int) DeviceStep {
	latent := len(d.latent) / d.m
	hidden := len(d.weight) / latent
	shard := hidden / n
	return DeviceStep{Out: devBuf(t, gpu, make([]kernel.BF16, maxM*hidden)), In: DeviceInputs{M: d.m,
		Latent: devBuf(t, gpu, d.latent), Weight: devPacked(t, gpu, d.weight[r*shard*latent:(r+1)*shard*latent], latent), WeightPacked: true,
		Shared: devBuf(t, gpu, d.shared[r*shard:]), SharedStride: hidden}}
}

// checkStalledReplay checks what a batch of replays gave on a rank whose
// peer stalled: the rank's own timeout naming only the stalled rank, or
// the job's failure that another rank sent, naming it too; and that the
// batch ended after one deadline and well before a second. timedOut: the
// rank timed out itself.
func checkStalledReplay(err error, took time.Duration, stalled, replays int, deadline time.Duration) (timedOut bool, _ error) {
	var te *mailbox.TimeoutError
	switch {
	case errors.As(err, &te):
		timedOut = true
		if !slices.Equal(te.Missing, []int{stalled}) {
			return true, fmt.Errorf("the timeout names ranks %v missing, want only the stalled rank %d", te.Missing, stalled)
		}
	case errors.Is(err, ErrAborted):
		if !strings.Contains(err.Error(), fmt.Sprintf("no slice from rank %d within", stalled)) {
			return false, fmt.Errorf("the job's failure does not name the stalled rank: %v", err)
		}
	default:
		return false, fmt.Errorf("replays with a stalled peer gave %v, want a *mailbox.TimeoutError or the job's failure", err)
	}
	switch {
	case took > 3*deadline:
		return timedOut, fmt.Errorf("%d queued replays took %v with a deadline of %v: the receives behind the first timeout waited too", replays, took, deadline)
	case took < deadline:
		return timedOut, fmt.Errorf("%d queued replays ended after %v, before the deadline of %v", replays, took, deadline)
	}
	return timedOut, nil
}

// stalledRankReplay is the stalled rank's replay once the others gave up:
// it must fail with the job's failure, which names it.
func stalledRankReplay(ctx context.Context, gr *StepGraph, stalled int) error {
	if err := gr.Replay(ctx, 1); !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), fmt.Sprintf("no slice from rank %d within", stalled)) {
		return fmt.Errorf("the stalled rank's replay after the others gave up: %v, want the job's failure naming it", err)
	}
	return nil
}

// TestCUDAEngineFakeCloseDuringReplayKeepsJob: Close during a batch of
// replays that waits for a peer (real Groups) ends the batch with
// mailbox.ErrClosed and leaves the job alone: the receives that Close's
// abort ends report a timeout in the status words, which the batch's watch
// must not take for a stalled peer (it would fail the job, naming the
// peer).
func TestCUDAEngineFakeCloseDuringReplayKeepsJob(t *testing.T) {
	const hidden, latent = 32, 8
	const bound, deadline = 2 * time.Second, 20 * time.Second
	rng := kernel.NewRand(uint64(time.Now().UnixNano()))
	in := randomInputs(rng, 1, hidden, latent, 2, 1)
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tmp, job := shortTempDir(t), newJobID()
	errs := runRanks(t, 2, func(r int) map[string]string { return torchrunEnv(tmp, job, r, 2) }, []JoinOption{WithTimeout(10 * time.Second)},
		func(r int, g *Group) error {
			up, err := newFakeUp(ctx, g, gpu, hidden, latent, 1, 0, deadline)
			if err != nil {
				return err
			}
			if r == 1 {
				if err := up.Close(); err != nil { // never steps
					return err
				}
				return g.Barrier(ctx)
			}
			st := DeviceStep{Out: devBuf(t, gpu, make([]kernel.BF16, hidden)), In: DeviceInputs{M: 1,
				Latent: devBuf(t, gpu, in.Latent), Weight: devPacked(t, gpu, in.Weight, len(in.Latent)/in.M), WeightPacked: true, Shared: devBuf(t, gpu, in.Shared), SharedStride: hidden}}
			gr, err := up.Capture(ctx, []DeviceStep{st, st, st, st, st, st})
			if err != nil {
				return errors.Join(err, up.Close())
			}
			done := make(chan error, 1)
			go func() { done <- gr.Replay(ctx, 1000) }()
			time.Sleep(50 * time.Millisecond)
			start := time.Now()
			if err := up.Close(); err != nil {
				return fmt.Errorf("Close: %w", err)
			}
			select {
			case err := <-done:
				if !errors.Is(err, mailbox.ErrClosed) {
					return fmt.Errorf("replay during Close gave %v, want mailbox.ErrClosed", err)
				}
			case <-time.After(bound):
				return fmt.Errorf("the replay has not returned %v after Close", bound)
			}
			t.Logf("closed in %v", time.Since(start).Round(time.Millisecond))
			if err := g.Barrier(ctx); err != nil {
				return fmt.Errorf("the job after Close during a replay: %w", err)
			}
			return nil
		})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	checkNoLeaks(t, gpu)
}

// TestCUDAEngineFakeAbort: Close and cancellation end a step, or a chunk
// of queued graph replays, that waits for a peer that never comes, long
// before the deadline. The fake driver orders a memset behind all the work
// queued before it in the context, as CUDA may (see
// TestFakeDriverOrdering): an abort that needs a fill to overtake the
// spinning receive fails here if that fill is a memset.
func TestCUDAEngineFakeAbort(t *testing.T) {
	const hidden, latent = 32, 8
	// bound: how long the abort may take; deadline: far beyond it, and
	// short enough that work an abort failed to end drains soon after.
	const bound, deadline = 2 * time.Second, 20 * time.Second
	rng := kernel.NewRand(uint64(time.Now().UnixNano()))
	in := randomInputs(rng, 1, hidden, latent, 2, 1)
	for _, tc := range []struct {
		desc   string
		cancel bool // cancel the step's ctx instead of closing the op
		graph  bool // a long graph replay instead of a step
		want   error
	}{
		{"close", false, false, mailbox.ErrClosed},
		{"cancel", true, false, context.Canceled},
		{"close during a replay", false, true, mailbox.ErrClosed},
		{"cancel during a replay", true, true, context.Canceled},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			gpu := newFakeGPU()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) error {
				up, err := newFakeUp(ctx, ex, gpu, hidden, latent, 1, 0, deadline)
				if err != nil {
					return err
				}
				if r == 1 {
					return up.Close() // never steps
				}
				stepCtx, stepCancel := context.WithCancel(ctx)
				defer stepCancel()
				done := make(chan error, 1)
				if tc.graph {
					st := DeviceStep{Out: devBuf(t, gpu, make([]kernel.BF16, hidden)), In: DeviceInputs{M: 1,
						Latent: devBuf(t, gpu, in.Latent), Weight: devPacked(t, gpu, in.Weight, len(in.Latent)/in.M), WeightPacked: true, Shared: devBuf(t, gpu, in.Shared), SharedStride: hidden}}
					g, err := up.Capture(ctx, []DeviceStep{st, st, st, st, st, st})
					if err != nil {
						return err
					}
					go func() { done <- g.Replay(stepCtx, 1000) }()
				} else {
					go func() { done <- up.Step(stepCtx, in, make([]kernel.BF16, hidden)) }()
				}
				time.Sleep(50 * time.Millisecond)
				// Both the abort (Close, or the cancellation) and the step
				// must end within the bound. When they do not, the test has
				// failed and the goroutines are left to the deadline.
				start := time.Now()
				aborted := make(chan error, 1)
				go func() {
					if tc.cancel {
						stepCancel()
						aborted <- nil
					} else {
						aborted <- up.Close()
					}
				}()
				timer := time.NewTimer(bound)
				defer timer.Stop()
				var stepErr error
				for range 2 {
					select {
					case err := <-aborted:
						if err != nil {
							return fmt.Errorf("Close: %w", err)
						}
						aborted = nil
					case stepErr = <-done:
						done = nil
					case <-timer.C:
						return fmt.Errorf("the waiting step or Close has not returned %v later (deadline %v)", bound, deadline)
					}
				}
				if !errors.Is(stepErr, tc.want) {
					return fmt.Errorf("step gave %v, want %v", stepErr, tc.want)
				}
				t.Logf("aborted in %v", time.Since(start).Round(time.Millisecond))
				if tc.cancel {
					if err := up.Step(ctx, in, make([]kernel.BF16, hidden)); !errors.Is(err, mailbox.ErrBroken) {
						return fmt.Errorf("step after the cancellation gave %v, want mailbox.ErrBroken", err)
					}
				}
				if err := up.Close(); err != nil {
					return fmt.Errorf("Close: %w", err)
				}
				if err := up.Step(ctx, in, make([]kernel.BF16, hidden)); !errors.Is(err, mailbox.ErrClosed) {
					return fmt.Errorf("step after Close gave %v", err)
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			checkNoLeaks(t, gpu)
		})
	}
}

// TestCUDAEngineFakeAbortSharedContext reproduces how
// TestGPUUpProjectionCloseDuringWait failed on two H200s ("Close took
// 59.8s with a step waiting", its deadline being a minute): the goroutine
// ranks share one CUDA context, and the rank that never steps closed at
// once, freeing page-locked memory while the other rank's receive spun.
// That free waits for the receive and holds back every driver call of the
// other rank's abort (the fills of keepAborting). The abort word, a plain
// store to host memory, still ends the receive: both orders must close
// fast (with the word disabled in the fake, the first case takes the
// whole deadline).
func TestCUDAEngineFakeAbortSharedContext(t *testing.T) {
	const hidden, latent = 32, 8
	const deadline = 1500 * time.Millisecond
	rng := kernel.NewRand(uint64(time.Now().UnixNano()))
	in := randomInputs(rng, 1, hidden, latent, 2, 1)
	for _, tc := range []struct {
		desc      string
		peerFirst bool // the idle rank closes while the other's receive waits
	}{
		// The free of the idle rank holds every later driver call of the
		// shared context, the abort's fills included; the abort word, a
		// plain store to host memory, still ends the receive.
		{"idle rank closes first: its free holds the context", true},
		{"idle rank closes after the waiting one", false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			gpu := newFakeGPU()
			gpu.sharedCtx = true
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			waiting, rank0Done := make(chan struct{}), make(chan struct{})
			errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) error {
				if r == 0 {
					defer close(rank0Done)
				}
				up, err := newFakeUp(ctx, ex, gpu, hidden, latent, 1, 0, deadline)
				if err != nil {
					return err
				}
				if r == 1 {
					if tc.peerFirst {
						select {
						case <-waiting:
						case <-rank0Done:
						}
					} else {
						<-rank0Done
					}
					return up.Close()
				}
				done := make(chan error, 1)
				go func() { done <- up.Step(ctx, in, make([]kernel.BF16, hidden)) }()
				time.Sleep(50 * time.Millisecond) // the receive spins
				if tc.peerFirst {
					close(waiting)
					// Until rank 1's free holds the context.
					for gpu.ctxMu.TryRLock() {
						gpu.ctxMu.RUnlock()
						time.Sleep(time.Millisecond)
					}
				}
				start := time.Now()
				if err := up.Close(); err != nil {
					return err
				}
				took := time.Since(start)
				if err := <-done; !errors.Is(err, mailbox.ErrClosed) {
					return fmt.Errorf("step during Close gave %v, want mailbox.ErrClosed", err)
				}
				t.Logf("Close took %v (deadline %v)", took.Round(time.Millisecond), deadline)
				if took > deadline/2 {
					return fmt.Errorf("Close took %v with a step waiting (deadline %v)", took, deadline)
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			checkNoLeaks(t, gpu)
		})
	}
}

// TestStallReason: what the peers and the launcher read when a replay
// batch's receive timed out, for one missing rank, several, and none named.
func TestStallReason(t *testing.T) {
	for _, tc := range []struct {
		missing []int
		want    string
	}{
		{[]int{2}, "no slice from rank 2 within the 10s deadline, in the graph replays from step 42;"},
		{[]int{1, 3, 7}, "no slice from ranks 1, 3, 7 within the 10s deadline, in the graph replays from step 42;"},
		{nil, "no slice from some rank within the 10s deadline, in the graph replays from step 42;"},
	} {
		if got := stallReason("in the graph replays from step 42", tc.missing, 10*time.Second); !strings.HasPrefix(got, tc.want) {
			t.Errorf("stallReason(..., %v, 10s) = %q, want it to begin %q", tc.missing, got, tc.want)
		}
	}
}

// TestFakeDriverOrdering pins the fake's model of CUDA's ordering between
// streams of one context, which TestCUDAEngineFakeAbort relies on: work
// on a non-blocking stream waits for nothing queued elsewhere; a memset
// waits for everything queued before it, on any stream; a synchronous
// copy (the legacy stream) waits for blocking streams only.
func TestFakeDriverOrdering(t *testing.T) {
	for _, tc := range []struct {
		desc     string
		blocking bool // the stream the spinning op runs on
		memset   bool // the second op: a memset on another stream, else a synchronous copy
		waits    bool // the second op must wait for the spinning one
	}{
		{"memset after a kernel on a non-blocking stream", false, true, true},
		{"copy after a kernel on a non-blocking stream", false, false, false},
		{"copy after a kernel on a blocking stream", true, false, true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			gpu := newFakeGPU()
			d := newFakeDrv(gpu, 0)
			flags := cuda.StreamNonBlocking
			if tc.blocking {
				flags = cuda.StreamDefault
			}
			s1, err1 := d.StreamCreate(flags)
			s2, err2 := d.StreamCreate(cuda.StreamNonBlocking)
			if err := errors.Join(err1, err2); err != nil {
				t.Fatal(err)
			}
			mem := gpu.alloc(make([]byte, 64))
			release := make(chan struct{})
			var releaseOnce sync.Once
			free := func() { releaseOnce.Do(func() { close(release) }) }
			defer free()
			var spinning atomic.Bool
			if err := d.enqueue(s1, func() error { spinning.Store(true); <-release; spinning.Store(false); return nil }); err != nil {
				t.Fatal(err)
			}
			second := make(chan error, 1)
			go func() {
				if tc.memset {
					if err := d.MemsetD32Async(mem, 7, 16, s2); err != nil {
						second <- err
						return
					}
					second <- d.StreamSynchronize(s2)
				} else {
					second <- d.MemcpyHtoD(mem, make([]byte, 64))
				}
			}()
			var err error
			select {
			case err = <-second:
				if tc.waits {
					t.Errorf("the second op ended while the first still ran (spinning=%v)", spinning.Load())
				}
			case <-time.After(200 * time.Millisecond):
				if !tc.waits {
					t.Error("the second op waited for the first")
				}
				free()
				err = <-second
			}
			free()
			if err != nil {
				t.Fatal(err)
			}
			if err := errors.Join(d.StreamDestroy(s1), d.StreamDestroy(s2)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestCUDAEngineFakeSetupFailures fails every fallible call of the setup
// in turn, on one rank: every rank must get an error (none hangs) and
// nothing may be left allocated on any rank.
func TestCUDAEngineFakeSetupFailures(t *testing.T) {
	for _, victim := range []int{0, 1} {
		for n := 1; ; n++ {
			gpu := newFakeGPU()
			gpu.failAt[victim] = n
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			ups := make([]*UpProjection, 2)
			errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) (err error) {
				ups[r], err = newFakeUp(ctx, ex, gpu, 64, 16, 2, 0, time.Second)
				return err
			})
			cancel()
			if errs[0] == nil && errs[1] == nil {
				// n is past the last fallible call: setup succeeded.
				gpu.mu.Lock()
				clear(gpu.failAt)
				gpu.mu.Unlock()
				for _, up := range ups {
					if err := up.Close(); err != nil {
						t.Fatal(err)
					}
				}
				if l := gpu.leaks(); l != "" {
					t.Errorf("after a good setup and Close: left alive: %s", l)
				}
				if n < 8 {
					t.Errorf("setup succeeded with call %d of rank %d failing: too few fallible calls seen", n, victim)
				}
				break
			}
			for r, err := range errs {
				switch {
				case err == nil:
					t.Errorf("call %d of rank %d failing: rank %d has no error", n, victim, r)
					_ = ups[r].Close()
				case r == victim && !errors.Is(err, errInjected):
					t.Errorf("call %d failing: the rank's own error %v does not wrap it", n, err)
				case r != victim && !strings.Contains(err.Error(), fmt.Sprintf("rank %d", victim)):
					t.Errorf("call %d of rank %d failing: rank %d's error %q does not name it", n, victim, r, err)
				}
			}
			if l := gpu.leaks(); l != "" {
				t.Errorf("call %d of rank %d failing: left alive: %s", n, victim, l)
			}
		}
	}
}

func TestGPUProbeRoundTrip(t *testing.T) {
	for _, p := range []gpuProbe{
		{why: "no CUDA driver: libcuda.so.1: cannot open shared object file"},
		{usable: true, facts: mailbox.DeviceFacts{Device: 7, VMM: true, POSIXFD: true, Fabric: false, Multicast: true}, peers: 0xF0F0},
		{usable: true, facts: mailbox.DeviceFacts{Device: 0, VMM: true, Fabric: true}, peers: 1},
		{usable: true, facts: mailbox.DeviceFacts{Device: 3, VMM: true, Multicast: true}, peers: 8, mcBlockedBy: "NCCL_NVLS_ENABLE=0"},
		{why: "no CUDA driver", mcBlockedBy: "TPRUN_MULTICAST=0"},
	} {
		got, err := decodeProbe(p.encode())
		if err != nil || got != p {
			t.Errorf("round trip of %+v gave %+v, %v", p, got, err)
		}
	}
	cut := gpuProbe{mcBlockedBy: "TPRUN_MULTICAST=0"}.encode()
	for _, bad := range [][]byte{nil, []byte("TPGP"), append(gpuProbe{}.encode(), make([]byte, 600)...), cut[:len(cut)-1]} {
		if _, err := decodeProbe(bad); err == nil {
			t.Errorf("decodeProbe(%d bytes) accepted", len(bad))
		}
	}
}

// TestResolveMailboxSafetyRuleOnSomeRanks: a variable of the multicast
// safety rule set on one rank only refuses multicast, or keeps auto from
// picking it, on every rank; all ranks agree, and the variable and the rank
// are named.
func TestResolveMailboxSafetyRuleOnSomeRanks(t *testing.T) {
	const size = 3
	probe := func(r int) gpuProbe {
		return gpuProbe{usable: true, peers: 1<<size - 1,
			facts: mailbox.DeviceFacts{Device: r, VMM: true, POSIXFD: true, Fabric: true, Multicast: true}}
	}
	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	tests := []struct {
		desc     string
		kind     mailbox.Kind
		envOf    map[int]map[string]string // rank -> its environment
		want     mailbox.Kind
		wantErr  error
		mentions string // in every rank's reason or error
	}{
		{"auto, nothing set: multicast", mailbox.KindAuto, nil, mailbox.KindMulticast, nil, "multicast"},
		{"auto, NCCL_NVLS_ENABLE=0 on rank 1 only: unicast everywhere", mailbox.KindAuto,
			map[int]map[string]string{1: {"NCCL_NVLS_ENABLE": "0"}}, mailbox.KindUnicast, nil, "NCCL_NVLS_ENABLE=0"},
		{"multicast asked for, TPRUN_MULTICAST=off on rank 2 only: refused everywhere", mailbox.KindMulticast,
			map[int]map[string]string{2: {"TPRUN_MULTICAST": " off "}}, 0, mailbox.ErrMulticastDisabled, "TPRUN_MULTICAST=off"},
		{"multicast asked for, different variables on ranks 0 and 2: rank 0's is named", mailbox.KindMulticast,
			map[int]map[string]string{0: {"NVSHMEM_DISABLE_NVLS": "1"}, 2: {"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}},
			0, mailbox.ErrMulticastDisabled, "NVSHMEM_DISABLE_NVLS=1"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			kinds := make([]mailbox.Kind, size)
			texts := make([]string, size)
			errs := onUpRanks(size, func(r int, ex mailbox.Exchanger) error {
				kind, reason, devices, err := resolveMailbox(ctx, ex, tc.kind, probe(r), env(tc.envOf[r]))
				kinds[r], texts[r] = kind, reason
				if err != nil {
					texts[r] = err.Error()
					if tc.wantErr == nil || !errors.Is(err, tc.wantErr) || !errors.Is(err, ErrBackendUnavailable) {
						return err
					}
					return nil
				}
				if tc.wantErr != nil {
					return fmt.Errorf("got %v (%s), want an error wrapping %v", kind, reason, tc.wantErr)
				}
				if kind != tc.want || len(devices) != size {
					return fmt.Errorf("got %v with devices %v, want %v on %d devices", kind, devices, tc.want, size)
				}
				return nil
			})
			for r, err := range errs {
				if err != nil {
					t.Errorf("rank %d: %v", r, err)
				}
				if !strings.Contains(texts[r], tc.mentions) {
					t.Errorf("rank %d: %q does not mention %q", r, texts[r], tc.mentions)
				}
				if kinds[r] != kinds[0] {
					t.Errorf("rank %d picked %v, rank 0 %v", r, kinds[r], kinds[0])
				}
			}
		})
	}
}

// TestResolveMailboxWithoutGPU: a rank without a driver makes auto the
// host backend on every rank, and unicast an error naming why.
func TestResolveMailboxWithoutGPU(t *testing.T) {
	for _, v := range []string{"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "TPRUN_MULTICAST"} {
		t.Setenv(v, "")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := onUpRanks(3, func(r int, ex mailbox.Exchanger) error {
		noDrv := fmt.Errorf("probe: %w", cuda.ErrNoDriver)
		if r == 1 {
			noDrv = errors.New("something else")
		}
		kind, reason, _, err := resolveMailbox(ctx, ex, mailbox.KindAuto, probeGPU(nil, noDrv, 0), os.Getenv)
		if err != nil || kind != mailbox.KindHost || !strings.Contains(reason, "no GPU") ||
			!strings.Contains(reason, "ranks 0,2: probe: cuda: no CUDA driver; rank 1: something else") {
			return fmt.Errorf("auto: %v %q %v", kind, reason, err)
		}
		_, _, _, err = resolveMailbox(ctx, ex, mailbox.KindUnicast, probeGPU(nil, noDrv, 0), os.Getenv)
		if !errors.Is(err, ErrBackendUnavailable) || !errors.Is(err, mailbox.ErrUnavailable) || !strings.Contains(err.Error(), "no CUDA driver") {
			return fmt.Errorf("unicast: %v", err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// fakeCUDADriver builds the fake driver (internal/cuda's testdata, with
// the given -D defines), opens and initializes it; it is closed when t ends.
func fakeCUDADriver(t *testing.T, defines ...string) *cuda.Driver {
	t.Helper()
	drv, err := cuda.OpenLibrary(cudatest.Build(t, t.TempDir(), defines...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	if err := drv.Init(); err != nil {
		t.Fatal(err)
	}
	return drv
}

// TestResolveMailboxOldGPU: a GPU older than the kernels (compute
// capability 8.0, as the fake driver built so reports) is no GPU for the
// op: auto gives the host backend naming the GPU and the capability it
// lacks, and unicast is refused with the same words, before any setup.
func TestResolveMailboxOldGPU(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the fake driver")
	}
	for _, v := range []string{"NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "TPRUN_MULTICAST"} {
		t.Setenv(v, "")
	}
	drv := fakeCUDADriver(t, "-DFAKECUDA_CC_MAJOR=8", "-DFAKECUDA_CC_MINOR=0")
	const want = "device 0: Fake GPU 0 has compute capability 8.0, and tprun's kernels need 9.0 or newer (Hopper, Blackwell)"
	if p := probeGPU(drv, nil, 0); p.usable || p.why != want {
		t.Fatalf("probe: usable %v, why %q; want unusable, %q", p.usable, p.why, want)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) error {
		kind, reason, _, err := resolveMailbox(ctx, ex, mailbox.KindAuto, probeGPU(drv, nil, 0), os.Getenv)
		if err != nil || kind != mailbox.KindHost || !strings.Contains(reason, "every rank: "+want) {
			return fmt.Errorf("auto: %v %q %v", kind, reason, err)
		}
		_, _, _, err = resolveMailbox(ctx, ex, mailbox.KindUnicast, probeGPU(drv, nil, 0), os.Getenv)
		if !errors.Is(err, ErrBackendUnavailable) || !strings.Contains(err.Error(), "compute capability 8.0") {
			return fmt.Errorf("unicast: %v", err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// ---- The real GPU. These tests run where libcuda.so.1 and a device are
// found (build the binary here with scripts/build-gpu-tests, run it there)
// and skip elsewhere. Goroutine ranks share one device (TPRUN_TEST_DEVICE,
// default 0) and one driver, through the in-process hub; the unicast
// mailbox maps every rank's memory into the one process. Multicast is
// never created here.

// TestMain keeps one driver open for the whole run where there is one:
// tests that open and close their own would otherwise unload and reload
// libcuda between them, which the driver is not known to survive.
func TestMain(m *testing.M) {
	if drv, err := cuda.Open(); err == nil {
		defer drv.Close()
	}
	m.Run()
}

// gpuFixture is the test's driver and device, with the device's primary
// context retained and bound to the test goroutine's thread.
type gpuFixture struct {
	drv     *cuda.Driver
	ordinal int
	dev     cuda.Device
	cctx    cuda.Context
}

// bind binds the device's context to a rank goroutine's thread, for the
// test's own copies there (the op binds it itself for its calls).
func (f gpuFixture) bind() (unbind func(), err error) { return f.drv.BindContext(f.cctx) }

func openTestGPU(t *testing.T) gpuFixture {
	t.Helper()
	drv, err := openGPU()
	switch {
	case errors.Is(err, cuda.ErrNoDriver):
		t.Skipf("no CUDA driver (libcuda.so.1 not loadable): %v", err)
	case cuda.IsNoDevice(err) || errors.Is(err, ErrNoGPU):
		t.Skipf("CUDA driver present but no device: %v", err)
	case err != nil:
		t.Fatalf("opening the GPU: %v", err)
	}
	t.Cleanup(func() {
		if err := drv.Close(); err != nil {
			t.Errorf("closing the driver: %v", err)
		}
	})
	ordinal := 0
	if s := os.Getenv("TPRUN_TEST_DEVICE"); s != "" {
		if ordinal, err = strconv.Atoi(s); err != nil {
			t.Fatalf("TPRUN_TEST_DEVICE=%q: %v", s, err)
		}
	}
	dev, err := drv.DeviceGet(ordinal)
	if err != nil {
		t.Skipf("device %d: %v", ordinal, err)
	}
	cctx, err := drv.DevicePrimaryCtxRetain(dev)
	if err != nil {
		t.Fatalf("retaining device %d's primary context: %v", ordinal, err)
	}
	unbind, err := drv.BindContext(cctx)
	if err != nil {
		t.Fatalf("binding device %d's primary context: %v", ordinal, err)
	}
	t.Cleanup(func() {
		unbind()
		if err := drv.DevicePrimaryCtxRelease(dev); err != nil {
			t.Errorf("releasing the primary context: %v", err)
		}
	})
	// The safety rule, for every test here: never a multicast object.
	t.Setenv("TPRUN_MULTICAST", "0")
	return gpuFixture{drv: drv, ordinal: ordinal, dev: dev, cctx: cctx}
}

// newGPUUp is NewUpProjection on the fixture's device with the unicast
// mailbox.
func (f gpuFixture) newUp(ctx context.Context, ex mailbox.Exchanger, hidden, latent, maxM int, deadline time.Duration) (*UpProjection, error) {
	return NewUpProjection(ctx, ex, hidden, latent, maxM, WithBackend(mailbox.KindUnicast), WithDevice(f.ordinal),
		withCUDADriver(f.drv), WithDeadline(deadline))
}

// devAlloc allocates device memory holding v (nil: n poisoned elements),
// freed at the end of the test. The caller's thread has the context.
func (f gpuFixture) devAlloc(t *testing.T, v []kernel.BF16, n int) DevicePtr {
	t.Helper()
	if v == nil {
		v = make([]kernel.BF16, n)
		for i := range v {
			v[i] = poison
		}
	}
	// The calling goroutine may run on any OS thread: make the context
	// current on this one for the allocation and the copy (and again in
	// the cleanup, which runs on another goroutine).
	unbind, err := f.bind()
	if err != nil {
		t.Fatalf("binding the context: %v", err)
	}
	defer unbind()
	p, err := f.drv.MemAlloc(uint64(2 * len(v)))
	if err != nil {
		t.Fatalf("MemAlloc(%d): %v", 2*len(v), err)
	}
	t.Cleanup(func() {
		unbind, err := f.bind()
		if err != nil {
			t.Errorf("binding the context: %v", err)
			return
		}
		defer unbind()
		if err := f.drv.MemFree(p); err != nil {
			t.Errorf("MemFree: %v", err)
		}
	})
	if err := f.drv.MemcpyHtoD(p, cuda.AsBytes(v)); err != nil {
		t.Fatalf("MemcpyHtoD: %v", err)
	}
	if err := f.drv.StreamSynchronize(0); err != nil {
		t.Fatalf("StreamSynchronize(legacy): %v", err)
	}
	return DevicePtr(p)
}

func (f gpuFixture) download(p DevicePtr, n int) ([]kernel.BF16, error) {
	v := make([]kernel.BF16, n)
	err := f.drv.MemcpyDtoH(cuda.AsBytes(v), cuda.DevicePtr(p))
	return v, err
}

func TestGPUUpProjectionMatchesReference(t *testing.T) {
	f := openTestGPU(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, device %d", seed, f.ordinal)
	tests := []struct {
		desc               string
		tp, hidden, latent int
		maxM               int
		ms                 []int
		device             bool // StepDevice on device operands (weight packed, as device steps take it) instead of Step (weight row-major, packed by the op)
	}{
		{desc: "reference shape, two ranks, every M, host operands", tp: 2, hidden: 7168, latent: 3584, maxM: 8, ms: []int{1, 2, 3, 4, 5, 6, 7, 8, 8, 1}},
		{desc: "reference shape, two ranks, device operands", tp: 2, hidden: 7168, latent: 3584, maxM: 8, ms: []int{8, 4, 1, 2, 7}, device: true},
		{desc: "reference shape, two ranks, device operands, other Ms", tp: 2, hidden: 7168, latent: 3584, maxM: 8, ms: []int{1, 2, 8, 3}, device: true},
		{desc: "three ranks, small, device operands (partial 16-row group, k tail)", tp: 3, hidden: 168, latent: 72, maxM: 4, ms: []int{4, 1, 2}, device: true},
		{desc: "one rank, latent not a multiple of the K tile", tp: 1, hidden: 1024, latent: 3600, maxM: 4, ms: []int{1, 4, 3, 2}},
		{desc: "three ranks, small", tp: 3, hidden: 144, latent: 64, maxM: 4, ms: []int{4, 2, 4, 1, 3, 4}, device: true},
		{desc: "four ranks, shard 896, latent 512", tp: 4, hidden: 3584, latent: 512, maxM: 8, ms: []int{1, 8, 2, 5}},
		// M above 8: the tensor-core kernel and the receive kernel, between
		// fused steps of M up to 8, in one op.
		{desc: "reference shape, two ranks, M up to 128, device operands", tp: 2, hidden: 7168, latent: 3584, maxM: kernel.MaxM, ms: []int{kernel.MaxM, 9, 1, 64, 8, 100, kernel.MaxM}, device: true},
		{desc: "three ranks, small, M up to 40 (partial row groups, k tail)", tp: 3, hidden: 168, latent: 72, maxM: 40, ms: []int{40, 9, 3, 33}},
	}
	for i, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			steps := newUpSteps(t, seed+uint64(i), tc.hidden, tc.latent, tc.ms)
			shard := tc.hidden / tc.tp
			// Device operands are made here, on the test's thread.
			type devStep struct {
				in  []DeviceInputs // per rank
				out []DevicePtr
			}
			dev := make([]devStep, len(steps))
			if tc.device {
				for i, d := range steps {
					lat, sh := f.devAlloc(t, d.latent, 0), f.devAlloc(t, d.shared, 0)
					for r := range tc.tp {
						w := d.weight[r*shard*tc.latent : (r+1)*shard*tc.latent]
						dev[i].in = append(dev[i].in, DeviceInputs{M: d.m, Latent: lat, Weight: f.gpuPacked(t, w, tc.latent), WeightPacked: true,
							Shared: sh + DevicePtr(2*r*shard), SharedStride: tc.hidden})
						dev[i].out = append(dev[i].out, f.devAlloc(t, nil, tc.maxM*tc.hidden))
					}
				}
			}
			got := make([][][]kernel.BF16, tc.tp)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			errs := onUpRanks(tc.tp, func(r int, ex mailbox.Exchanger) (err error) {
				unbind, err := f.bind()
				if err != nil {
					return err
				}
				defer unbind()
				up, err := f.newUp(ctx, ex, tc.hidden, tc.latent, tc.maxM, 10*time.Second)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, up.Close()) }()
				if up.Backend() != "unicast" || up.Device() != f.ordinal {
					return fmt.Errorf("backend %q on device %d (%s)", up.Backend(), up.Device(), up.BackendReason())
				}
				for i, d := range steps {
					var out []kernel.BF16
					if tc.device {
						if err := up.StepDevice(ctx, dev[i].in[r], dev[i].out[r]); err != nil {
							return err
						}
						if out, err = f.download(dev[i].out[r], tc.maxM*tc.hidden); err != nil {
							return err
						}
					} else {
						out = make([]kernel.BF16, tc.maxM*tc.hidden+5)
						for j := range out {
							out[j] = poison
						}
						w := d.weight[r*shard*tc.latent : (r+1)*shard*tc.latent]
						in := UpInputs{M: d.m, Latent: d.latent, Weight: w, Shared: d.shared[r*shard:], SharedStride: tc.hidden}
						if err := up.Step(ctx, in, out); err != nil {
							return err
						}
					}
					for j, v := range out[:d.m*tc.hidden] {
						if v == kernel.NegZero {
							return fmt.Errorf("step %d: out[%d] is -0", i, j)
						}
					}
					if err := keepBlock(i, d.m, tc.hidden, out, &got[r]); err != nil {
						return err
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			checkBlocks(t, steps, got, tc.hidden)
		})
	}
}

// TestGPUUpProjectionGraph captures two rounds of slots with fresh inputs
// per step, replays the graph several times and checks the last replay.
func TestGPUUpProjectionGraph(t *testing.T) {
	const tp, hidden, latent, maxM = 2, 7168, 3584, 8
	f := openTestGPU(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	ms := []int{1, 8, 4, 2, 3, 8}
	steps := newUpSteps(t, seed, hidden, latent, ms)
	shard := hidden / tp
	ds := make([][]DeviceStep, tp)
	for _, d := range steps {
		lat, sh := f.devAlloc(t, d.latent, 0), f.devAlloc(t, d.shared, 0)
		for r := range tp {
			ds[r] = append(ds[r], DeviceStep{Out: f.devAlloc(t, nil, maxM*hidden), In: DeviceInputs{M: d.m, Latent: lat,
				Weight: f.gpuPacked(t, d.weight[r*shard*latent:(r+1)*shard*latent], latent), WeightPacked: true,
				Shared: sh + DevicePtr(2*r*shard), SharedStride: hidden}})
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	got := make([][][]kernel.BF16, tp)
	errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
		unbind, err := f.bind()
		if err != nil {
			return err
		}
		defer unbind()
		up, err := f.newUp(ctx, ex, hidden, latent, maxM, 10*time.Second)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		// A plain step first, then a round of steps so that the graph is
		// captured at slot phase 0 again.
		for range 3 {
			if err := up.StepDevice(ctx, ds[r][0].In, ds[r][0].Out); err != nil {
				return err
			}
		}
		g, err := up.Capture(ctx, ds[r])
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, g.Close()) }()
		if err := g.Replay(ctx, 4); err != nil {
			return err
		}
		times, err := g.TimeReplays(ctx, 40)
		if err != nil {
			return err
		}
		slices.Sort(times)
		if len(times) != 40 || times[0] <= 0 {
			return fmt.Errorf("TimeReplays(40) gave %v", times)
		}
		if r == 0 {
			t.Logf("median replay %v = %v per step (shared device, two ranks)", times[20], times[20]/time.Duration(len(ms)))
		}
		if want := uint64(3 + 44*len(ms)); up.Steps() != want {
			return fmt.Errorf("Steps() = %d, want %d", up.Steps(), want)
		}
		// Poison, replay once more, check.
		for _, st := range ds[r] {
			if err := f.drv.MemsetD32(cuda.DevicePtr(st.Out), 0x7FC17FC1, uint64(maxM*hidden/2)); err != nil {
				return err
			}
		}
		if err := f.drv.StreamSynchronize(0); err != nil {
			return err
		}
		// No rank replays before every rank has poisoned: the ranks share
		// one context, and a memset there while the other rank's receive
		// waits for this one's next kernel may be held behind that receive
		// until its deadline (see keepAborting).
		if err := ex.Barrier(ctx); err != nil {
			return err
		}
		if err := g.Replay(ctx, 1); err != nil {
			return err
		}
		for i, st := range ds[r] {
			out, err := f.download(st.Out, ms[i]*hidden)
			if err != nil {
				return err
			}
			got[r] = append(got[r], out)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	checkBlocks(t, steps, got, hidden)
}

// TestGPUUpProjectionDeadPeer: a rank that stops stepping makes the
// others' receive kernels give up at the deadline, naming it.
func TestGPUUpProjectionDeadPeer(t *testing.T) {
	const tp, hidden, latent, dead = 3, 384, 256, 1
	const deadline = 300 * time.Millisecond
	f := openTestGPU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	steps := newUpSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{2})
	d := steps[0]
	shard := hidden / tp
	// The dead rank stays open until the live ones are done: the goroutine
	// ranks share one CUDA context, and its Close (memory frees, module
	// unload) would wait for the live ranks' spinning receives and hold
	// back a live rank's own step behind them, so that rank would miss the
	// deadline too (see TestGPUUpProjectionCloseDuringWait). Separate rank
	// processes have separate contexts and no such coupling.
	var live sync.WaitGroup
	live.Add(tp - 1)
	errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := f.newUp(ctx, ex, hidden, latent, 2, deadline)
		if err != nil {
			if r != dead {
				live.Done()
			}
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		if r != dead {
			defer live.Done()
		}
		in := UpInputs{M: 2, Latent: d.latent, Weight: d.weight[r*shard*latent : (r+1)*shard*latent], Shared: d.shared[r*shard:], SharedStride: hidden}
		out := make([]kernel.BF16, 2*hidden)
		if err := up.Step(ctx, in, out); err != nil {
			return err
		}
		if r == dead {
			live.Wait()
			return nil
		}
		return stepToDeadPeer(ctx, up, r, dead, deadline, in, out)
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestGPUUpProjectionStalledPeerReplay is TestCUDAEngineFakeStalledPeerReplay
// on the GPU (three goroutine ranks with real Groups on one device, so the
// receive kernel rather than the fused receive): 8 queued replays of a
// graph with a peer that never replays end about one deadline after they
// began, the job fails naming that peer, and the peer's next call fails.
func TestGPUUpProjectionStalledPeerReplay(t *testing.T) {
	const n, hidden, latent, maxM, stalled, replays = 3, 384, 256, 2, 2, 8
	const deadline = 300 * time.Millisecond
	f := openTestGPU(t)
	d := newUpSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{maxM})[0]
	shard := hidden / n
	lat, sh := f.devAlloc(t, d.latent, 0), f.devAlloc(t, d.shared, 0)
	ds := make([]DeviceStep, n)
	for r := range n {
		ds[r] = DeviceStep{Out: f.devAlloc(t, nil, maxM*hidden), In: DeviceInputs{M: d.m, Latent: lat,
			Weight: f.gpuPacked(t, d.weight[r*shard*latent:(r+1)*shard*latent], latent), WeightPacked: true,
			Shared: sh + DevicePtr(2*r*shard), SharedStride: hidden}}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tmp, job := shortTempDir(t), newJobID()
	// The stalled rank stays open until the others are done (the goroutine
	// ranks share one context; see TestGPUUpProjectionDeadPeer).
	var replayed sync.WaitGroup
	replayed.Add(n - 1)
	var timeouts atomic.Int32
	errs := runRanks(t, n, func(r int) map[string]string { return torchrunEnv(tmp, job, r, n) }, []JoinOption{WithTimeout(30 * time.Second)},
		func(r int, g *Group) (err error) {
			if r != stalled {
				defer replayed.Done()
			}
			up, err := f.newUp(ctx, g, hidden, latent, maxM, deadline)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, up.Close()) }()
			// A graph of one step per slot (ranks sharing a device get more
			// slots than two).
			gr, err := up.Capture(ctx, slices.Repeat([]DeviceStep{ds[r]}, up.eng.(*cudaEngine).layout.Slots))
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, gr.Close()) }()
			if err := g.Barrier(ctx); err != nil {
				return err
			}
			if r == stalled {
				replayed.Wait()
				return stalledRankReplay(ctx, gr, stalled)
			}
			t0 := time.Now()
			err = gr.Replay(ctx, replays)
			took := time.Since(t0)
			t.Logf("rank %d: %d replays of %d steps ended after %v: %v", r, replays, gr.Steps(), took.Round(time.Millisecond), err)
			timedOut, err := checkStalledReplay(err, took, stalled, replays, deadline)
			if timedOut {
				timeouts.Add(1)
			}
			return err
		})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if timeouts.Load() == 0 {
		t.Error("no rank saw the timeout itself")
	}
}

// TestGPUUpProjectionCloseDuringWait: Close ends a step, or a chunk of
// queued graph replays, whose receive waits for a rank that never steps,
// long before the deadline.
//
// The rank that never steps stays open until the other has closed. The
// goroutine ranks share one CUDA context, and closing it earlier frees
// memory and unloads a module in that context while the other rank's
// receive spins: those calls wait for the receive and can hold the other
// rank's abort behind them, so that its Close takes the whole deadline
// (it once took 59.8s of a minute; TestCUDAEngineFakeAbortSharedContext
// models it, keepAborting says more). Rank processes, each with its own
// context, do not meet this.
func TestGPUUpProjectionCloseDuringWait(t *testing.T) {
	const hidden, latent = 256, 64
	const bound, deadline = 2 * time.Second, time.Minute
	f := openTestGPU(t)
	d := newUpSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{1})[0]
	// Device operands of rank 0's graph: six steps, two rounds of the
	// default three slots.
	st := DeviceStep{Out: f.devAlloc(t, nil, hidden), In: DeviceInputs{M: 1, Latent: f.devAlloc(t, d.latent, 0),
		Weight: f.gpuPacked(t, d.weight[:hidden/2*latent], latent), WeightPacked: true, Shared: f.devAlloc(t, d.shared, 0), SharedStride: hidden}}
	for _, tc := range []struct {
		desc  string
		graph bool // Replay(1000) of the graph instead of a Step
	}{
		{"step", false},
		{"graph replay", true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			rank0Done := make(chan struct{})
			errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) error {
				if r == 0 {
					defer close(rank0Done)
				}
				up, err := f.newUp(ctx, ex, hidden, latent, 1, deadline)
				if err != nil {
					return err
				}
				if r == 1 {
					return closeAfter(ctx, rank0Done, up)
				}
				var start func(done chan<- error)
				if tc.graph {
					g, err := up.Capture(ctx, []DeviceStep{st, st, st, st, st, st})
					if err != nil {
						return errors.Join(err, up.Close())
					}
					start = func(done chan<- error) { go func() { done <- g.Replay(ctx, 1000) }() }
				} else {
					in := UpInputs{M: 1, Latent: d.latent, Weight: d.weight[:hidden/2*latent], Shared: d.shared, SharedStride: hidden}
					start = func(done chan<- error) { go func() { done <- up.Step(ctx, in, make([]kernel.BF16, hidden)) }() }
				}
				took, err := closeDuringStep(up, start, bound)
				if err != nil {
					return fmt.Errorf("%w (deadline %v)", err, deadline)
				}
				t.Logf("Close took %v", took.Round(time.Millisecond))
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestGPUUpProjectionCycles creates and closes a two-rank op (driver
// shared, everything else made and released each time: streams, module,
// status page, the unicast mailbox with its exported and imported
// allocations) up to 1,000 times within a time budget, and checks that
// neither device memory in use nor open descriptors grew.
// closeDuringStep calls start, which begins a step (or replay) that sends
// its result on done and waits for a peer that never steps; after 200 ms it
// closes up and checks that the step ended with mailbox.ErrClosed and that
// Close took at most bound. It returns how long Close took.
func closeDuringStep(up *UpProjection, start func(done chan<- error), bound time.Duration) (time.Duration, error) {
	done := make(chan error, 1)
	start(done)
	time.Sleep(200 * time.Millisecond)
	t0 := time.Now()
	if err := up.Close(); err != nil {
		return 0, err
	}
	took := time.Since(t0)
	select {
	case err := <-done:
		if !errors.Is(err, mailbox.ErrClosed) {
			return took, fmt.Errorf("step during Close gave %v, want mailbox.ErrClosed", err)
		}
	case <-time.After(20 * time.Second):
		return took, errors.New("step still waiting 20s after Close")
	}
	if took > bound {
		return took, fmt.Errorf("Close took %v with a step waiting, more than %v", took, bound)
	}
	return took, nil
}

// openSecondGPU is a fixture for another device than f's (the next
// ordinal), on f's driver, or skips the test when there is only one.
func openSecondGPU(t *testing.T, f gpuFixture) gpuFixture {
	t.Helper()
	n, err := f.drv.DeviceCount()
	if err != nil {
		t.Fatalf("DeviceCount: %v", err)
	}
	if n < 2 {
		t.Skipf("needs two GPUs (ranks on separate devices fuse the receive into the skinny kernel); this machine has %d", n)
	}
	ordinal := (f.ordinal + 1) % n
	dev, err := f.drv.DeviceGet(ordinal)
	if err != nil {
		t.Fatalf("device %d: %v", ordinal, err)
	}
	cctx, err := f.drv.DevicePrimaryCtxRetain(dev)
	if err != nil {
		t.Fatalf("retaining device %d's primary context: %v", ordinal, err)
	}
	t.Cleanup(func() {
		if err := f.drv.DevicePrimaryCtxRelease(dev); err != nil {
			t.Errorf("releasing device %d's primary context: %v", ordinal, err)
		}
	})
	return gpuFixture{drv: f.drv, ordinal: ordinal, dev: dev, cctx: cctx}
}

// closeAfter is the idle rank of the close-during tests: it keeps its op
// open until the stepping rank is done (or ctx ends), then closes it.
func closeAfter(ctx context.Context, done <-chan struct{}, up interface{ Close() error }) error {
	select {
	case <-done:
	case <-ctx.Done():
	}
	return up.Close()
}

// Close while a step whose receive runs in the skinny kernel's grid (ranks
// on separate GPUs) waits for a peer that never steps: the receive CTAs see
// the abort word and the step returns mailbox.ErrClosed well before the
// one-minute deadline.
func TestGPUUpProjectionCloseDuringFusedStep(t *testing.T) {
	const hidden, latent = 256, 64
	const bound, deadline = 2 * time.Second, time.Minute
	fs := []gpuFixture{openTestGPU(t)}
	fs = append(fs, openSecondGPU(t, fs[0]))
	d := newUpSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{1})[0]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rank0Done := make(chan struct{})
	errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) error {
		if r == 0 {
			defer close(rank0Done)
		}
		unbind, err := fs[r].bind()
		if err != nil {
			return err
		}
		defer unbind()
		up, err := fs[r].newUp(ctx, ex, hidden, latent, 1, deadline)
		if err != nil {
			return err
		}
		if r == 1 {
			return closeAfter(ctx, rank0Done, up)
		}
		e, err := up.cudaEngine("test")
		if err != nil {
			return errors.Join(err, up.Close())
		}
		if !e.fused {
			return errors.Join(fmt.Errorf("devices %d and %d: the engine did not fuse the receive (chain %v)", fs[0].ordinal, fs[1].ordinal, e.chain), up.Close())
		}
		in := UpInputs{M: 1, Latent: d.latent, Weight: d.weight[:hidden/2*latent], Shared: d.shared, SharedStride: hidden}
		took, err := closeDuringStep(up, func(done chan<- error) {
			go func() { done <- up.Step(ctx, in, make([]kernel.BF16, hidden)) }()
		}, bound)
		if err != nil {
			return fmt.Errorf("fused receive: %w (deadline %v)", err, deadline)
		}
		t.Logf("devices %d and %d, fused receive: Close took %v", fs[0].ordinal, fs[1].ordinal, took.Round(time.Millisecond))
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// TestGPUUpProjectionCloseDuringReplayKeepsJob is
// TestCUDAEngineFakeCloseDuringReplayKeepsJob on GPUs: two goroutine ranks
// with real Groups; rank 0 replays a graph whose receives wait for rank 1,
// which never steps, and closes its op during the batch. The batch must end
// with mailbox.ErrClosed well before the one-minute deadline, and the job
// must stay healthy (a barrier of both ranks after it): the receives that
// Close's abort word ends report missing slices in the status words, which
// the batch's stall watch must not take for a stalled peer. On one device
// the receive is a kernel of its own; on two (when there are two) it runs
// in the skinny kernel's grid.
func TestGPUUpProjectionCloseDuringReplayKeepsJob(t *testing.T) {
	const hidden, latent = 256, 64
	const bound, deadline = 2 * time.Second, time.Minute
	f0 := openTestGPU(t)
	d := newUpSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{1})[0]
	for _, tc := range []struct {
		desc  string
		fused bool
	}{
		{"one device", false},
		{"two devices", true},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			fs := []gpuFixture{f0, f0}
			if tc.fused {
				fs[1] = openSecondGPU(t, f0)
			}
			st := DeviceStep{Out: fs[0].devAlloc(t, nil, hidden), In: DeviceInputs{M: 1, Latent: fs[0].devAlloc(t, d.latent, 0),
				Weight: fs[0].gpuPacked(t, d.weight[:hidden/2*latent], latent), WeightPacked: true, Shared: fs[0].devAlloc(t, d.shared, 0), SharedStride: hidden}}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			tmp, job := shortTempDir(t), newJobID()
			rank0Done := make(chan struct{})
			errs := runRanks(t, 2, func(r int) map[string]string { return torchrunEnv(tmp, job, r, 2) }, []JoinOption{WithTimeout(30 * time.Second)},
				func(r int, g *Group) error {
					unbind, err := fs[r].bind()
					if err != nil {
						return err
					}
					defer unbind()
					up, err := fs[r].newUp(ctx, g, hidden, latent, 1, deadline)
					if err != nil {
						return err
					}
					if r == 1 {
						// Open until rank 0 has closed (the goroutine ranks
						// of one device share a context: see
						// TestGPUUpProjectionCloseDuringWait).
						if err := closeAfter(ctx, rank0Done, up); err != nil {
							return err
						}
						return g.Barrier(ctx)
					}
					closed := false
					defer func() {
						if !closed {
							close(rank0Done)
						}
					}()
					e, err := up.cudaEngine("test")
					if err != nil {
						return errors.Join(err, up.Close())
					}
					if e.fused != tc.fused {
						return errors.Join(fmt.Errorf("fused receive %v, want %v (chain %v)", e.fused, tc.fused, e.chain), up.Close())
					}
					gr, err := up.Capture(ctx, slices.Repeat([]DeviceStep{st}, 2*e.layout.Slots))
					if err != nil {
						return errors.Join(err, up.Close())
					}
					took, err := closeDuringStep(up, func(done chan<- error) { go func() { done <- gr.Replay(ctx, 1000) }() }, bound)
					closed = true
					close(rank0Done)
					if err != nil {
						return fmt.Errorf("%w (deadline %v)", err, deadline)
					}
					t.Logf("Close during %d replays of %d steps took %v", 1000, gr.Steps(), took.Round(time.Millisecond))
					if err := g.Barrier(ctx); err != nil {
						return fmt.Errorf("the job after Close during a replay: %w", err)
					}
					return nil
				})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestGPUUpProjectionCycles(t *testing.T) {
	const hidden, latent, maxCycles, minCycles = 7168, 3584, 1000, 200
	budget := 90 * time.Second
	if testing.Short() {
		budget = 20 * time.Second
	}
	f := openTestGPU(t)
	d := newUpSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{2})[0]
	cycle := func(i int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) (err error) {
			up, err := f.newUp(ctx, ex, hidden, latent, 8, 10*time.Second)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, up.Close()) }()
			if i%50 != 0 {
				return nil
			}
			// Now and then a step, so that the staging buffers come and go too.
			shard := hidden / 2
			in := UpInputs{M: 2, Latent: d.latent, Weight: d.weight[r*shard*latent : (r+1)*shard*latent], Shared: d.shared[r*shard:], SharedStride: hidden}
			return up.Step(ctx, in, make([]kernel.BF16, 2*hidden))
		})
		return errors.Join(errs...)
	}
	usage := func() (used uint64, fds int) {
		free, total, err := f.drv.MemGetInfo()
		if err != nil {
			t.Fatalf("MemGetInfo: %v", err)
		}
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatalf("counting descriptors: %v", err)
		}
		return total - free, len(ents)
	}
	for i := range 3 { // warm-up: the first cycles grow the driver's own pools
		if err := cycle(i + 1); err != nil {
			t.Fatalf("warm-up cycle %d: %v", i, err)
		}
	}
	used0, fds0 := usage()
	start := time.Now()
	n := 0
	for ; n < maxCycles && time.Since(start) < budget; n++ {
		if err := cycle(n); err != nil {
			t.Fatalf("cycle %d: %v", n, err)
		}
	}
	used1, fds1 := usage()
	t.Logf("%d create/close cycles in %v (%v each); device memory in use %d -> %d MiB; descriptors %d -> %d",
		n, time.Since(start).Round(time.Millisecond), (time.Since(start) / time.Duration(n)).Round(time.Microsecond),
		used0>>20, used1>>20, fds0, fds1)
	if n < minCycles {
		t.Errorf("only %d cycles within %v, want at least %d", n, budget, minCycles)
	}
	// Other tests' work can move the numbers a little; a leak of one
	// mailbox (2 MiB granularity per rank) per cycle cannot hide in this.
	if used1 > used0+64<<20 {
		t.Errorf("device memory in use grew by %d MiB over %d cycles", (used1-used0)>>20, n)
	}
	if fds1 > fds0+4 {
		t.Errorf("open descriptors grew from %d to %d over %d cycles", fds0, fds1, n)
	}
}

// ReceiveModeEnv=fused: the skinny launch does the receive (no receive
// kernel), ranks get the same blocks as with the receive kernel; with a
// shared device the engine keeps the receive kernel; an unknown value is an
// error on every rank with nothing left allocated.
func TestCUDAEngineFakeFusedReceive(t *testing.T) {
	const hidden, latent, steps = 64, 16, 4
	rng := kernel.NewRand(uint64(time.Now().UnixNano()))
	in := randomInputs(rng, 2, hidden, latent, 2, 1)
	var skipped atomic.Int64 // receives that skipped their own slice, over both ranks
	run := func(t *testing.T, mode string) (outs [2][]kernel.BF16, fused int64, errs []error) {
		skipped.Store(0)
		t.Setenv(ReceiveModeEnv, mode)
		gpu := newFakeGPU()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var n atomic.Int64
		errs = onUpRanks(2, func(r int, ex mailbox.Exchanger) error {
			up, err := newFakeUp(ctx, ex, gpu, hidden, latent, 2, 0, 2*time.Second)
			if err != nil {
				return err
			}
			defer up.Close()
			outs[r] = make([]kernel.BF16, 2*hidden)
			for range steps {
				if err := up.Step(ctx, in, outs[r]); err != nil {
					return err
				}
			}
			n.Add(loadedFake(up.eng.(*cudaEngine).kern).fused.Load())
			skipped.Add(loadedFake(up.eng.(*cudaEngine).kern).skipped.Load())
			return nil
		})
		if l := gpu.leaks(); l != "" {
			t.Errorf("%s: left alive: %s", mode, l)
		}
		return outs, n.Load(), errs
	}
	// Unicast: each rank's kernel stores its own slice straight into the
	// output, and every receive (kernel or fused) skips that slice.
	base, nbase, errs := run(t, "kernel")
	if err := errors.Join(errs...); err != nil || nbase != 0 {
		t.Fatalf("kernel mode: %v, %d fused receives", err, nbase)
	}
	if n := skipped.Load(); n != 2*steps {
		t.Errorf("kernel mode: %d receives skipped their own slice, want %d", n, 2*steps)
	}
	got, n, errs := run(t, "fused")
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("fused mode: %v", err)
	}
	if n := skipped.Load(); n != 2*steps {
		t.Errorf("fused mode: %d receives skipped their own slice, want %d", n, 2*steps)
	}
	if n != 2*steps {
		t.Errorf("fused mode: %d skinny launches received, want %d", n, 2*steps)
	}
	for r := range 2 {
		if !slices.Equal(got[r], base[r]) || !slices.Equal(got[r], got[0]) {
			t.Errorf("rank %d: the fused receive gave another block than the receive kernel", r)
		}
	}
	if slices.Equal(base[0], make([]kernel.BF16, 2*hidden)) {
		t.Errorf("the blocks are all zeros: the test cannot tell anything apart")
	}
	_, _, errs = run(t, "sideways")
	for r, err := range errs {
		if err == nil || !strings.Contains(err.Error(), ReceiveModeEnv) {
			t.Errorf("rank %d with %s=sideways: %v, want an error naming it", r, ReceiveModeEnv, err)
		}
	}
}

// A device step's output must not overlap its operands: the rank's kernel
// writes its slice there while it still reads them.
func TestValidateDeviceRejectsOverlap(t *testing.T) {
	s := kernel.Shape{M: 4, Hidden: 64, Latent: 32, TP: 2} // shard 32
	u := &UpProjection{shape: s}
	in := DeviceInputs{M: 4, Latent: 0x10000, Weight: 0x20000, WeightPacked: true, Shared: 0x30000, SharedStride: 64}
	// Byte ends: latent 0x10000 + 2*4*32, weight 0x20000 + 2*32*32,
	// shared 0x30000 + 2*(3*64+32); the block is 2*4*64 = 0x200 bytes.
	tests := []struct {
		desc  string
		out   DevicePtr
		inMsg string // "" = accepted
	}{
		{"apart", 0x40000, ""},
		{"right after the latent", 0x10100, ""},
		{"right before the weight", 0x20000 - 0x200, ""},
		{"inside the latent", 0x10010, "overlap Latent"},
		{"ending inside the weight", 0x20000 - 0x1f0, "overlap Weight"},
		{"over the last shared row", 0x30000 + 2*(3*64+32) - 16, "overlap Shared"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			err := u.validateDevice(s, in, tc.out)
			switch {
			case tc.inMsg == "" && err != nil:
				t.Errorf("out %#x: %v, want no error", uint64(tc.out), err)
			case tc.inMsg != "" && (!errors.Is(err, kernel.ErrShape) || !strings.Contains(err.Error(), tc.inMsg)):
				t.Errorf("out %#x: %v, want kernel.ErrShape mentioning %q", uint64(tc.out), err, tc.inMsg)
			}
		})
	}
}

// With a multicast mailbox the kernel's one destination is the multicast
// address, which reaches every rank's slot, its own included: the engine
// must keep the full receive (no skipped slice) and give the same blocks
// as the unicast engine, which skips its own slice.
func TestCUDAEngineFakeMulticast(t *testing.T) {
	const tp, hidden, latent, steps = 3, 96, 16, 4
	rng := kernel.NewRand(uint64(time.Now().UnixNano()))
	ins := make([]UpInputs, tp)
	for r := range tp {
		ins[r] = randomInputs(rng, 2, hidden, latent, tp, 1)
	}
	lat, shared := ins[0].Latent, ins[0].Shared
	for r := range ins {
		ins[r].Latent, ins[r].Shared = lat, shared[r*hidden/tp:] // one latent and shared tensor for all ranks
	}
	run := func(t *testing.T, kind mailbox.Kind, deps engineDeps) (outs [tp][]kernel.BF16, skipped int64) {
		gpu := newFakeGPU()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		var n atomic.Int64
		errs := onUpRanks(tp, func(r int, ex mailbox.Exchanger) error {
			up, err := newFakeUpKind(ctx, ex, gpu, hidden, latent, 2, 0, 2*time.Second, kind, deps)
			if err != nil {
				return err
			}
			defer up.Close()
			if got := up.eng.(*cudaEngine).mb.Name(); got != kind.String() {
				return fmt.Errorf("rank %d: mailbox %q, want %q", r, got, kind)
			}
			outs[r] = make([]kernel.BF16, 2*hidden)
			for range steps {
				if err := up.Step(ctx, ins[r], outs[r]); err != nil {
					return err
				}
			}
			n.Add(loadedFake(up.eng.(*cudaEngine).kern).skipped.Load())
			return nil
		})
		if err := errors.Join(errs...); err != nil {
			t.Fatalf("%v: %v", kind, err)
		}
		if l := gpu.leaks(); l != "" {
			t.Errorf("%v: left alive: %s", kind, l)
		}
		return outs, n.Load()
	}
	uni, nu := run(t, mailbox.KindUnicast, fakeDeps())
	mc, nm := run(t, mailbox.KindMulticast, fakeMulticastDeps())
	if nu != tp*steps || nm != 0 {
		t.Errorf("receives that skipped their own slice: unicast %d (want %d), multicast %d (want 0)", nu, tp*steps, nm)
	}
	for r := range tp {
		if !slices.Equal(mc[r], uni[r]) || !slices.Equal(mc[r], mc[0]) {
			t.Errorf("rank %d: the multicast engine gave another block than the unicast one", r)
		}
	}
	if slices.Equal(uni[0], make([]kernel.BF16, 2*hidden)) {
		t.Errorf("the blocks are all zeros: the test cannot tell anything apart")
	}
}

// ---- The public op API on the real GPU: the op's own weight, stream-ordered
// steps and graphs of one step. Goroutine ranks share device
// TPRUN_TEST_DEVICE (0), so at tp > 1 the engine takes the receive kernel
// path, at tp 1 the fused receive.

// write copies v to p on the calling goroutine's thread (which it binds)
// and waits for the copy: a synchronous copy on the legacy stream, which
// no rank's non-blocking stream holds back.
func (f gpuFixture) write(p DevicePtr, v []kernel.BF16) error {
	unbind, err := f.bind()
	if err != nil {
		return err
	}
	defer unbind()
	if err := f.drv.MemcpyHtoD(cuda.DevicePtr(p), cuda.AsBytes(v)); err != nil {
		return err
	}
	return f.drv.StreamSynchronize(0)
}

// poisonBlock is n poison elements.
func poisonBlock(n int) []kernel.BF16 {
	v := make([]kernel.BF16, n)
	for i := range v {
		v[i] = poison
	}
	return v
}

// TestGPUSetWeight: the op's own weight, given row-major from the host
// (SetWeight) or from device memory (SetWeightDevice), gives blocks bit
// for bit equal to steps that pass the weight themselves in the layout
// the op keeps (packed where kernel.PreferPacked holds), within the float64
// reference's tolerance and identical on every rank.
func TestGPUSetWeight(t *testing.T) {
	f := openTestGPU(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, device %d", seed, f.ordinal)
	for i, tc := range []struct {
		desc               string
		tp, hidden, latent int
		ms                 []int
	}{
		{desc: "reference shape, two ranks, every M", tp: 2, hidden: 7168, latent: 3584, ms: []int{1, 2, 3, 4, 5, 6, 7, 8}},
		{desc: "one rank, shard 896", tp: 1, hidden: 896, latent: 3584, ms: []int{1, 8, 3}},
		{desc: "three ranks, small (partial 16-row group, k tail)", tp: 3, hidden: 168, latent: 72, ms: []int{4, 1, 2}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			maxM := slices.Max(tc.ms)
			shard := tc.hidden / tc.tp
			ws := newWeightSteps(t, seed+uint64(i), tc.hidden, tc.latent, tc.ms)
			packed := kernel.PreferPacked(shard, tc.latent)
			type rankBufs struct {
				wRow, wKept DevicePtr   // the shard row-major, and in the layout the op keeps
				outs        []DevicePtr // [mode][step]
			}
			bufs := make([]rankBufs, tc.tp)
			var lats, shs []DevicePtr
			for _, d := range ws.steps {
				lats, shs = append(lats, f.devAlloc(t, d.latent, 0)), append(shs, f.devAlloc(t, d.shared, 0))
			}
			for r := range bufs {
				w := ws.shard(r, tc.tp)
				bufs[r].wRow, bufs[r].wKept = f.devAlloc(t, w, 0), f.devAlloc(t, w, 0)
				if packed {
					bufs[r].wKept = f.devAlloc(t, packedWeight(t, w, shard, tc.latent), 0)
				}
				for range 3 * len(ws.steps) {
					bufs[r].outs = append(bufs[r].outs, f.devAlloc(t, nil, maxM*tc.hidden))
				}
			}
			got := make([][][][]kernel.BF16, 3) // [mode][rank][step]
			for m := range got {
				got[m] = make([][][]kernel.BF16, tc.tp)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			errs := onUpRanks(tc.tp, func(r int, ex mailbox.Exchanger) (err error) {
				unbind, err := f.bind()
				if err != nil {
					return err
				}
				defer unbind()
				up, err := f.newUp(ctx, ex, tc.hidden, tc.latent, maxM, 10*time.Second)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, up.Close()) }()
				b := bufs[r]
				for mode := range 3 {
					switch mode {
					case 0:
						err = up.SetWeight(ctx, ws.shard(r, tc.tp))
					case 2:
						err = up.SetWeightDevice(ctx, b.wRow)
					}
					if err != nil {
						return err
					}
					for i, d := range ws.steps {
						in := DeviceInputs{M: d.m, Latent: lats[i], Shared: shs[i] + DevicePtr(2*r*shard), SharedStride: tc.hidden}
						if mode == 1 {
							in.Weight, in.WeightPacked = b.wKept, packed
						}
						o := b.outs[mode*len(ws.steps)+i]
						if err := up.StepDevice(ctx, in, o); err != nil {
							return fmt.Errorf("mode %d, step %d: %w", mode, i, err)
						}
						out, err := f.download(o, maxM*tc.hidden)
						if err != nil {
							return err
						}
						if err := keepBlock(i, d.m, tc.hidden, out, &got[mode][r]); err != nil {
							return err
						}
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			for mode, what := range []string{"SetWeight", "the kept layout passed with the step", "SetWeightDevice"} {
				checkBlocks(t, ws.steps, got[mode], tc.hidden)
				for r := range tc.tp {
					for i := range ws.steps {
						if !equalBlocks(got[mode][r][i], got[1][r][i]) {
							t.Errorf("rank %d, step %d: %s gave another block than the weight passed in the layout the op keeps", r, i, what)
						}
					}
				}
			}
		})
	}
}

// TestGPUEnqueue: steps queued with Enqueue on each rank's own stream,
// every M, fresh inputs per step, then Synchronize: every block within the
// float64 reference's tolerance and identical on every rank; host-waited
// steps afterwards continue the device's slot rotation.
func TestGPUEnqueue(t *testing.T) {
	f := openTestGPU(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, device %d", seed, f.ordinal)
	for i, tc := range []struct {
		desc               string
		tp, hidden, latent int
		ms                 []int
	}{
		{desc: "one rank, reference shape (fused receive)", tp: 1, hidden: 7168, latent: 3584, ms: []int{1, 2, 3, 4, 5, 6, 7, 8, 8, 1}},
		{desc: "two ranks on one device, reference shape", tp: 2, hidden: 7168, latent: 3584, ms: []int{8, 1, 2, 3, 4, 5, 6, 7, 8}},
		{desc: "four ranks on one device, shard 896", tp: 4, hidden: 3584, latent: 512, ms: []int{1, 8, 2, 5, 3}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			maxM := slices.Max(tc.ms)
			shard := tc.hidden / tc.tp
			ws := newWeightSteps(t, seed+uint64(i), tc.hidden, tc.latent, tc.ms)
			const after = 2 // host-waited steps after the enqueued ones
			var lats, shs []DevicePtr
			for _, d := range ws.steps {
				lats, shs = append(lats, f.devAlloc(t, d.latent, 0)), append(shs, f.devAlloc(t, d.shared, 0))
			}
			outs := make([][]DevicePtr, tc.tp)
			for r := range outs {
				for range ws.steps {
					outs[r] = append(outs[r], f.devAlloc(t, nil, maxM*tc.hidden))
				}
			}
			got := make([][][]kernel.BF16, tc.tp)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			errs := onUpRanks(tc.tp, func(r int, ex mailbox.Exchanger) (err error) {
				unbind, err := f.bind()
				if err != nil {
					return err
				}
				defer unbind()
				up, err := f.newUp(ctx, ex, tc.hidden, tc.latent, maxM, 10*time.Second)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, up.Close()) }()
				if err := up.SetWeight(ctx, ws.shard(r, tc.tp)); err != nil {
					return err
				}
				cs, err := f.drv.StreamCreate(cuda.StreamNonBlocking)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, f.drv.StreamDestroy(cs)) }()
				in := func(i int) DeviceInputs {
					return DeviceInputs{M: ws.steps[i].m, Latent: lats[i], Shared: shs[i] + DevicePtr(2*r*shard), SharedStride: tc.hidden}
				}
				n := len(ws.steps) - after
				for i := range n {
					if err := up.Enqueue(in(i), outs[r][i], Stream(cs)); err != nil {
						return fmt.Errorf("enqueue %d: %w", i, err)
					}
				}
				if err := up.Synchronize(ctx, Stream(cs)); err != nil {
					return err
				}
				for i := n; i < len(ws.steps); i++ {
					if err := up.StepDevice(ctx, in(i), outs[r][i]); err != nil {
						return fmt.Errorf("host-waited step %d after the enqueued ones: %w", i, err)
					}
				}
				if err := up.Err(); err != nil {
					return err
				}
				for i, d := range ws.steps {
					out, err := f.download(outs[r][i], maxM*tc.hidden)
					if err != nil {
						return err
					}
					if err := keepBlock(i, d.m, tc.hidden, out, &got[r]); err != nil {
						return err
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			checkBlocks(t, ws.steps, got, tc.hidden)
		})
	}
}

// TestGPURotationOneStepGraph: a graph holding one step replays many times
// (1000; 200 with -short) and stays right, at tp 1 and with two and four
// ranks sharing the device: a Capture of one step, then the caller's own
// stream capture of Enqueue. Before every replay the inputs are rewritten
// in place from one of 4 input sets (4 is no multiple of the 3 slots) and
// the output poisoned, and every replay's block is checked against the
// float64 reference and across ranks: 0 wrong.
func TestGPURotationOneStepGraph(t *testing.T) {
	f := openTestGPU(t)
	replays := 1000
	if testing.Short() {
		replays = 200
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, device %d, %d replays of each graph", seed, f.ordinal, replays)
	const sets = 4
	for i, tc := range []struct {
		desc                  string
		tp, hidden, latent, m int
	}{
		{desc: "one rank", tp: 1, hidden: 1024, latent: 512, m: 3},
		{desc: "two ranks on one device", tp: 2, hidden: 1024, latent: 512, m: 8},
		{desc: "four ranks on one device", tp: 4, hidden: 2048, latent: 256, m: 1},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			shard := tc.hidden / tc.tp
			ws := newWeightSteps(t, seed+uint64(i), tc.hidden, tc.latent, slices.Repeat([]int{tc.m}, sets))
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			hashes := make([][]uint64, tc.tp) // [rank][replay]
			wrong := make([]int, tc.tp)
			errs := onUpRanks(tc.tp, func(r int, ex mailbox.Exchanger) (err error) {
				unbind, err := f.bind()
				if err != nil {
					return err
				}
				defer unbind()
				up, err := f.newUp(ctx, ex, tc.hidden, tc.latent, tc.m, 10*time.Second)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, up.Close()) }()
				if err := up.SetWeight(ctx, ws.shard(r, tc.tp)); err != nil {
					return err
				}
				lat := f.devAlloc(t, nil, tc.m*tc.latent)
				sh := f.devAlloc(t, nil, tc.m*tc.hidden)
				out := f.devAlloc(t, nil, tc.m*tc.hidden)
				st := DeviceStep{Out: out, In: DeviceInputs{M: tc.m, Latent: lat, Shared: sh + DevicePtr(2*r*shard), SharedStride: tc.hidden}}
				pois := poisonBlock(tc.m * tc.hidden)
				// replay runs replay j of some graph with input set j%sets and
				// checks its block.
				replay := func(j int, run func() error) error {
					d := ws.steps[j%sets]
					for _, c := range []struct {
						p DevicePtr
						v []kernel.BF16
					}{{lat, d.latent}, {sh, d.shared}, {out, pois}} {
						if err := f.write(c.p, c.v); err != nil {
							return err
						}
					}
					if err := run(); err != nil {
						return fmt.Errorf("replay %d: %w", j, err)
					}
					block, err := f.download(out, tc.m*tc.hidden)
					if err != nil {
						return err
					}
					res, err := d.want.Check(block, tc.hidden)
					if err != nil {
						return err
					}
					if res.Wrong > 0 {
						if wrong[r] == 0 {
							t.Errorf("rank %d, replay %d: %d of %d wrong, first %v", r, j, res.Wrong, res.Checked, res.First)
						}
						wrong[r] += res.Wrong
					}
					sum := sha256.Sum256(cuda.AsBytes(block))
					hashes[r] = append(hashes[r], binary.LittleEndian.Uint64(sum[:]))
					return nil
				}
				g, err := up.Capture(ctx, []DeviceStep{st})
				if err != nil {
					return fmt.Errorf("capture of one step: %w", err)
				}
				defer func() { err = errors.Join(err, g.Close()) }()
				for j := range replays {
					if err := replay(j, func() error { return g.Replay(ctx, 1) }); err != nil {
						return err
					}
				}
				// The caller's own capture of one Enqueue on its stream.
				cs, err := f.drv.StreamCreate(cuda.StreamNonBlocking)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, f.drv.StreamDestroy(cs)) }()
				if err := f.drv.StreamBeginCapture(cs, cuda.CaptureModeThreadLocal); err != nil {
					return err
				}
				err = up.Enqueue(st.In, st.Out, Stream(cs))
				graph, cerr := f.drv.StreamEndCapture(cs)
				if err := errors.Join(err, cerr); err != nil {
					return fmt.Errorf("capturing Enqueue: %w", err)
				}
				exec, err := f.drv.GraphInstantiate(graph, 0)
				if derr := f.drv.GraphDestroy(graph); err != nil || derr != nil {
					return errors.Join(err, derr)
				}
				defer func() { err = errors.Join(err, f.drv.GraphExecDestroy(exec)) }()
				for j := replays; j < 2*replays; j++ {
					if err := replay(j, func() error {
						if err := f.drv.GraphLaunch(exec, cs); err != nil {
							return err
						}
						return up.Synchronize(ctx, Stream(cs))
					}); err != nil {
						return err
					}
				}
				return up.Err()
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			total := 0
			for r := range tc.tp {
				total += wrong[r]
				if r > 0 && !slices.Equal(hashes[r], hashes[0]) {
					t.Errorf("rank %d received other blocks than rank 0", r)
				}
			}
			t.Logf("%d replays of a one-step Capture graph and %d of a captured Enqueue on %d ranks: %d wrong values", replays, replays, tc.tp, total)
		})
	}
}

// TestGPUDeviceHelpers: DeviceAlloc, CopyToDevice, CopyFromDevice and
// DeviceFree round-trip data, and leave the calling thread's current
// context as they found it (here: none).
func TestGPUDeviceHelpers(t *testing.T) {
	f := openTestGPU(t)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := f.drv.CtxSetCurrent(0); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := f.drv.CtxSetCurrent(f.cctx); err != nil {
			t.Error(err)
		}
	}()
	v := make([]kernel.BF16, 4099)
	kernel.FillRandom(kernel.NewRand(uint64(time.Now().UnixNano())), v, 1)
	p, err := DeviceAlloc(f.ordinal, 2*len(v))
	if err != nil {
		t.Fatal(err)
	}
	if err := CopyToDevice(f.ordinal, p, v); err != nil {
		t.Fatal(err)
	}
	back := poisonBlock(len(v))
	if err := CopyFromDevice(f.ordinal, back, p); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back, v) {
		t.Error("the copy back differs from what was copied to the device")
	}
	if err := DeviceFree(f.ordinal, p); err != nil {
		t.Fatal(err)
	}
	if cur, err := f.drv.CtxGetCurrent(); err != nil || cur != 0 {
		t.Errorf("after the helpers the thread's current context is %#x (%v), want none as before", uintptr(cur), err)
	}
	if _, err := DeviceAlloc(f.ordinal, 0); !errors.Is(err, ErrArgument) {
		t.Errorf("DeviceAlloc of 0 bytes: %v, want ErrArgument", err)
	}
}
