package tp

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda"
)

// fakeCopyDriver is an in-memory copyDriver: it keeps what is allocated,
// logs what is queued on each stream, and gives every copy a drawn GPU
// time that the events around it report. failAt > 0 makes the failAt-th
// call fail with errCopyInjected.
type fakeCopyDriver struct {
	t        *testing.T
	rng      *rand.Rand
	calls    []string // every call, in order
	failAt   int
	next     uint64
	mem      map[cuda.DevicePtr]uint64 // live allocations and their sizes
	filled   map[cuda.DevicePtr]bool   // written by a memset
	events   map[cuda.Event]bool       // live events
	streams  map[cuda.Stream]bool      // live streams
	log      []streamOp                // what was queued, in order
	synced   int                       // len(log) at the last wait for the stream
	copyTime []time.Duration           // the GPU time of each copy, in order
	released []string                  // what a failed release left live
}

// streamOp is one thing queued on a stream: a copy or an event record.
type streamOp struct {
	copyN    uint64
	dst, src cuda.DevicePtr
	event    cuda.Event // 0: a copy
	copyIdx  int
}

var errCopyInjected = errors.New("injected copy driver failure")

func newFakeCopyDriver(t *testing.T, seed uint64) *fakeCopyDriver {
	return &fakeCopyDriver{t: t, rng: rand.New(rand.NewPCG(seed, 17)), mem: map[cuda.DevicePtr]uint64{},
		filled: map[cuda.DevicePtr]bool{}, events: map[cuda.Event]bool{}, streams: map[cuda.Stream]bool{}}
}

func (d *fakeCopyDriver) call(name string) error {
	d.calls = append(d.calls, name)
	if len(d.calls) == d.failAt {
		return fmt.Errorf("%s: %w", name, errCopyInjected)
	}
	return nil
}

func (d *fakeCopyDriver) id() uint64 { d.next += 0x1000; return d.next }

func (d *fakeCopyDriver) MemAlloc(size uint64) (cuda.DevicePtr, error) {
	if err := d.call("MemAlloc"); err != nil {
		return 0, err
	}
	p := cuda.DevicePtr(d.id())
	d.mem[p] = size
	return p, nil
}

func (d *fakeCopyDriver) MemFree(p cuda.DevicePtr) error {
	if err := d.call("MemFree"); err != nil {
		d.released = append(d.released, "buffer")
		return err
	}
	if _, ok := d.mem[p]; !ok {
		d.t.Errorf("MemFree(%#x) of nothing allocated", uint64(p))
	}
	if d.synced != len(d.log) {
		d.t.Errorf("MemFree(%#x) while queued work was not waited for", uint64(p))
	}
	delete(d.mem, p)
	return nil
}

func (d *fakeCopyDriver) stream(s cuda.Stream) {
	if !d.streams[s] {
		d.t.Errorf("stream %#x is not live", uintptr(s))
	}
}

func (d *fakeCopyDriver) MemsetD32Async(p cuda.DevicePtr, _ uint32, n uint64, s cuda.Stream) error {
	if err := d.call("MemsetD32Async"); err != nil {
		return err
	}
	d.stream(s)
	if d.mem[p] < 4*n {
		d.t.Errorf("memset of %d words at %#x, a buffer of %d bytes", n, uint64(p), d.mem[p])
	}
	d.filled[p] = true
	return nil
}

func (d *fakeCopyDriver) MemcpyDtoDAsync(dst, src cuda.DevicePtr, n uint64, s cuda.Stream) error {
	if err := d.call("MemcpyDtoDAsync"); err != nil {
		return err
	}
	d.stream(s)
	if dst == src || d.mem[dst] < n || d.mem[src] < n || !d.filled[src] {
		d.t.Errorf("copy of %d bytes from %#x (%d bytes, filled %v) to %#x (%d bytes)",
			n, uint64(src), d.mem[src], d.filled[src], uint64(dst), d.mem[dst])
	}
	d.copyTime = append(d.copyTime, time.Duration(100_000+d.rng.IntN(900_000)))
	d.log = append(d.log, streamOp{copyN: n, dst: dst, src: src, copyIdx: len(d.copyTime) - 1})
	return nil
}

func (d *fakeCopyDriver) StreamCreate(flags cuda.StreamFlags) (cuda.Stream, error) {
	if err := d.call("StreamCreate"); err != nil {
		return 0, err
	}
	if flags != cuda.StreamNonBlocking {
		d.t.Errorf("stream flags %v: a stream that waits for the legacy stream would time others' work too", flags)
	}
	s := cuda.Stream(d.id())
	d.streams[s] = true
	return s, nil
}

func (d *fakeCopyDriver) StreamSynchronize(s cuda.Stream) error {
	if err := d.call("StreamSynchronize"); err != nil {
		return err
	}
	d.stream(s)
	d.synced = len(d.log)
	return nil
}

func (d *fakeCopyDriver) StreamDestroy(s cuda.Stream) error {
	if err := d.call("StreamDestroy"); err != nil {
		d.released = append(d.released, "stream")
		return err
	}
	d.stream(s)
	delete(d.streams, s)
	return nil
}

func (d *fakeCopyDriver) EventCreate(cuda.EventFlags) (cuda.Event, error) {
	if err := d.call("EventCreate"); err != nil {
		return 0, err
	}
	e := cuda.Event(d.id())
	d.events[e] = true
	return e, nil
}

func (d *fakeCopyDriver) EventRecord(e cuda.Event, s cuda.Stream) error {
	if err := d.call("EventRecord"); err != nil {
		return err
	}
	d.stream(s)
	if !d.events[e] {
		d.t.Errorf("record of event %#x, not live", uintptr(e))
	}
	d.log = append(d.log, streamOp{event: e})
	return nil
}

func (d *fakeCopyDriver) EventSynchronize(e cuda.Event) error {
	if err := d.call("EventSynchronize"); err != nil {
		return err
	}
	i := slices.IndexFunc(d.log, func(o streamOp) bool { return o.event == e })
	if i < 0 {
		d.t.Errorf("wait for event %#x, never recorded", uintptr(e))
	}
	d.synced = max(d.synced, i+1)
	return nil
}

// EventElapsedTime is the GPU time of the copies queued between the two
// records; the caller must have waited for the end.
func (d *fakeCopyDriver) EventElapsedTime(start, end cuda.Event) (time.Duration, error) {
	if err := d.call("EventElapsedTime"); err != nil {
		return 0, err
	}
	i := slices.IndexFunc(d.log, func(o streamOp) bool { return o.event == start })
	j := slices.IndexFunc(d.log, func(o streamOp) bool { return o.event == end })
	if i < 0 || j <= i || j >= d.synced {
		d.t.Errorf("elapsed time between records %d and %d, %d of the log waited for", i, j, d.synced)
		return 0, errors.New("fake: bad event pair")
	}
	var took time.Duration
	for _, o := range d.log[i:j] {
		if o.event == 0 {
			took += d.copyTime[o.copyIdx]
		}
	}
	return took, nil
}

func (d *fakeCopyDriver) EventDestroy(e cuda.Event) error {
	if err := d.call("EventDestroy"); err != nil {
		d.released = append(d.released, "event")
		return err
	}
	if !d.events[e] {
		d.t.Errorf("destroy of event %#x, not live", uintptr(e))
	}
	delete(d.events, e)
	return nil
}

// live names what is still allocated.
func (d *fakeCopyDriver) live() []string {
	var s []string
	for range d.mem {
		s = append(s, "buffer")
	}
	for range d.events {
		s = append(s, "event")
	}
	for range d.streams {
		s = append(s, "stream")
	}
	slices.Sort(s)
	return s
}

// TestMeasureCopyBandwidth: the bandwidth is read plus write bytes over the
// median GPU time of copies each timed alone, after warm-up copies, from a
// filled source; and every buffer, event and stream is released, also
// when any driver call fails.
func TestMeasureCopyBandwidth(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 5))
	n := 4 * (1 + rng.IntN(1<<20))
	d := newFakeCopyDriver(t, seed)
	bw, err := measureCopyBandwidth(d, n)
	if err != nil {
		t.Fatal(err)
	}
	// Which copies were timed: those with an event record on each side.
	var timed []time.Duration
	for i, o := range d.log {
		if o.event == 0 && i > 0 && i+1 < len(d.log) && d.log[i-1].event != 0 && d.log[i+1].event != 0 {
			if o.copyN != uint64(n) {
				t.Errorf("a timed copy of %d bytes, want %d", o.copyN, n)
			}
			timed = append(timed, d.copyTime[o.copyIdx])
		}
	}
	if len(timed) < 3 || len(d.copyTime) <= len(timed) || d.log[0].event != 0 {
		t.Errorf("%d copies, %d of them timed, the first queued thing a copy: %v; want warm-up copies first, then several timed",
			len(d.copyTime), len(timed), d.log[0].event == 0)
	}
	slices.Sort(timed)
	med := timed[(len(timed)-1)/2]
	if want := 2 * float64(n) / med.Seconds(); bw != want {
		t.Errorf("bandwidth %g B/s, want 2 × %d bytes over the median %v = %g", bw, n, med, want)
	}
	if l := d.live(); len(l) > 0 {
		t.Errorf("left live: %v", l)
	}

	// Every call of that run, failed in turn.
	calls := len(d.calls)
	for k := 1; k <= calls; k++ {
		f := newFakeCopyDriver(t, seed)
		f.failAt = k
		bw, err := measureCopyBandwidth(f, n)
		if !errors.Is(err, errCopyInjected) || bw != 0 {
			t.Errorf("call %d (%s) failed: got %g, %v; want 0 and the failure", k, d.calls[k-1], bw, err)
		}
		slices.Sort(f.released)
		if l := f.live(); !slices.Equal(l, f.released) {
			t.Errorf("call %d (%s) failed: left live %v, want only what a failed release kept (%v)", k, d.calls[k-1], l, f.released)
		}
	}
}

// TestGPUMeasureCopyBandwidth: on a GPU, the event-timed bandwidth is at
// least that of the same copy timed by the wall clock around a
// synchronizing copy (which adds the launch and the wait), and not far
// above it.
func TestGPUMeasureCopyBandwidth(t *testing.T) {
	f := openTestGPU(t)
	bw, err := MeasureCopyBandwidth(f.ordinal)
	if err != nil {
		t.Fatal(err)
	}
	const n = CopyBandwidthBytes
	var bufs []DevicePtr
	for range 2 {
		p, err := DeviceAlloc(f.ordinal, n)
		if err != nil {
			t.Fatal(err)
		}
		bufs = append(bufs, p)
		t.Cleanup(func() {
			if err := DeviceFree(f.ordinal, p); err != nil {
				t.Error(err)
			}
		})
	}
	runtime.LockOSThread() // the fixture's context is current on this thread
	defer runtime.UnlockOSThread()
	var wall []time.Duration
	for i := range 7 {
		t0 := time.Now()
		if err := f.drv.MemcpyDtoD(cuda.DevicePtr(bufs[1]), cuda.DevicePtr(bufs[0]), n); err != nil {
			t.Fatal(err)
		}
		if err := f.drv.CtxSynchronize(); err != nil {
			t.Fatal(err)
		}
		if i > 0 { // the first warms up
			wall = append(wall, time.Since(t0))
		}
	}
	slices.Sort(wall)
	wallBW := 2 * float64(n) / wall[(len(wall)-1)/2].Seconds()
	t.Logf("device %d: %.3f TB/s by events, %.3f TB/s by the wall clock", f.ordinal, bw/1e12, wallBW/1e12)
	if bw < 0.95*wallBW || bw > 2*wallBW {
		t.Errorf("%.3f TB/s by events, %.3f TB/s by the wall clock around the same copy", bw/1e12, wallBW/1e12)
	}
}

// TestDeviceInfoWithoutGPU: without a usable GPU the report helpers say
// why, as CheckGPU does.
func TestDeviceInfoWithoutGPU(t *testing.T) {
	gpuErr := CheckGPU()
	if gpuErr == nil {
		t.Skip("a GPU is usable here")
	}
	if _, err := DeviceName(0); !errors.Is(err, gpuErr) {
		t.Errorf("DeviceName: %v, want %v", err, gpuErr)
	}
	if _, _, err := DriverVersion(); !errors.Is(err, gpuErr) {
		t.Errorf("DriverVersion: %v, want %v", err, gpuErr)
	}
	if _, err := MeasureCopyBandwidth(0); !errors.Is(err, gpuErr) {
		t.Errorf("MeasureCopyBandwidth: %v, want %v", err, gpuErr)
	}
}

// TestGPUDeviceInfo: the name and version are there, and a device that
// does not exist is an ErrArgument naming it.
func TestGPUDeviceInfo(t *testing.T) {
	f := openTestGPU(t)
	name, err := DeviceName(f.ordinal)
	if err != nil || strings.TrimSpace(name) == "" {
		t.Errorf("DeviceName(%d) = %q, %v", f.ordinal, name, err)
	}
	want, err := f.drv.DriverVersion()
	if err != nil {
		t.Fatal(err)
	}
	major, minor, err := DriverVersion()
	if err != nil || 1000*major+10*minor != want {
		t.Errorf("DriverVersion() = %d.%d, %v; the driver says %d", major, minor, err, want)
	}
	count, err := f.drv.DeviceCount()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DeviceName(count); !errors.Is(err, ErrArgument) || !strings.Contains(err.Error(), fmt.Sprint(count)) {
		t.Errorf("DeviceName(%d) of %d devices: %v, want ErrArgument naming it", count, count, err)
	}
}
