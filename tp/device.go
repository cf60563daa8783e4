package tp

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/tprun/tprun/internal/cuda"
)

// DevicePtr is a device address (a CUdeviceptr) in the primary context of
// the rank's device: the context the CUDA runtime and PyTorch use, so a
// tensor's data_ptr() is one as it is, and so is what DeviceAlloc returns.
type DevicePtr uint64

// Stream is a CUDA stream handle as the driver (CUstream) and the runtime
// (cudaStream_t, torch.cuda.current_stream().cuda_stream) both give it; 0
// is the legacy default stream.
type Stream uintptr

// The process's CUDA state: one driver, opened on first use and kept for
// the life of the process (as the CUDA runtime keeps its own), and the
// primary context of every device the device-memory helpers touched,
// retained once and never released, so that memory they allocate outlives
// any op. An op retains its device's primary context itself while it
// lives.
var (
	processGPU = sync.OnceValues(openGPU)
	primaries  = &primaryContexts{ctx: map[int]cuda.Context{}}
)

// CheckGPU reports why this process cannot use a GPU, or nil when the CUDA
// driver loads and sees a device: what "a GPU is usable here" means for the
// auto choices. The error matches ErrNoDriver when there is no CUDA driver
// library, and ErrNoGPU when the driver sees no device.
func CheckGPU() error {
	_, err := processGPU()
	return err
}

// openGPU opens and initializes the CUDA driver and checks that it sees a
// device. The caller closes the driver.
func openGPU() (*cuda.Driver, error) {
	drv, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	if err := drv.Init(); err != nil {
		if cuda.IsNoDevice(err) {
			err = fmt.Errorf("%w: %w", ErrNoGPU, err)
		}
		return nil, errors.Join(fmt.Errorf("cuInit: %w", err), drv.Close())
	}
	n, err := drv.DeviceCount()
	if err == nil && n < 1 {
		err = ErrNoGPU
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("counting devices: %w", err), drv.Close())
	}
	return drv, nil
}

// ErrNoGPU: the CUDA driver loads but reports no device.
var ErrNoGPU = errors.New("tp: the CUDA driver sees no device")

// ErrNoDriver: the CUDA driver library (libcuda.so.1) cannot be loaded.
var ErrNoDriver = cuda.ErrNoDriver

// contextDriver is the part of the driver that binding a context needs.
type contextDriver interface {
	CtxGetCurrent() (cuda.Context, error)
	CtxSetCurrent(ctx cuda.Context) error
}

// bindRestoring makes ctx current on the calling goroutine's OS thread,
// which it locks, and returns the function that makes the previous
// context current again and unlocks the thread. A caller from C or Python
// comes with its own thread and its own current context (PyTorch's), which
// must be as it was when the call returns.
func bindRestoring(drv contextDriver, ctx cuda.Context) (unbind func(), err error) {
	runtime.LockOSThread()
	prev, err := drv.CtxGetCurrent()
	if err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("reading the current context: %w", err)
	}
	if prev == ctx {
		return runtime.UnlockOSThread, nil
	}
	if err := drv.CtxSetCurrent(ctx); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return func() {
		// Setting back a context that was current a moment ago fails only
		// when the driver itself is going away; the caller's own next call
		// reports that, and there is nothing else to restore.
		_ = drv.CtxSetCurrent(prev)
		runtime.UnlockOSThread()
	}, nil
}

// gpuDriver is the process's driver as the engine uses it: every binding
// restores the caller's context (bindRestoring).
type gpuDriver struct{ *cuda.Driver }

// BindContext is bindRestoring.
func (d gpuDriver) BindContext(ctx cuda.Context) (unbind func(), err error) {
	return bindRestoring(d.Driver, ctx)
}

// primaryContexts holds the primary context of each device the helpers
// used.
type primaryContexts struct {
	mu  sync.Mutex
	ctx map[int]cuda.Context
}

// bind binds device's primary context (retaining it on first use) to the
// calling thread.
func (p *primaryContexts) bind(device int) (*cuda.Driver, func(), error) {
	drv, err := processGPU()
	if err != nil {
		return nil, nil, err
	}
	p.mu.Lock()
	cctx, ok := p.ctx[device]
	if !ok {
		cctx, err = retainPrimary(drv, device)
		if err == nil {
			p.ctx[device] = cctx
		}
	}
	p.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	unbind, err := bindRestoring(drv, cctx)
	if err != nil {
		return nil, nil, err
	}
	return drv, unbind, nil
}

func retainPrimary(drv *cuda.Driver, device int) (cuda.Context, error) {
	n, err := drv.DeviceCount()
	if err != nil {
		return 0, err
	}
	if device < 0 || device >= n {
		return 0, fmt.Errorf("no device %d (the driver sees %d)", device, n)
	}
	dev, err := drv.DeviceGet(device)
	if err != nil {
		return 0, err
	}
	return drv.DevicePrimaryCtxRetain(dev)
}

// DeviceAlloc allocates bytes of device memory on device (an ordinal), in
// its primary context, for callers without a framework of their own.
// The memory is not initialized; DeviceFree frees it.
func DeviceAlloc(device int, bytes int) (DevicePtr, error) {
	if bytes <= 0 {
		return 0, fmt.Errorf("tp: device %d: allocating %d bytes: %w: want a positive size", device, bytes, ErrArgument)
	}
	drv, unbind, err := primaries.bind(device)
	if err != nil {
		return 0, fmt.Errorf("tp: device %d: allocating %d bytes: %w", device, bytes, err)
	}
	defer unbind()
	p, err := drv.MemAlloc(uint64(bytes))
	if err != nil {
		return 0, fmt.Errorf("tp: device %d: allocating %d bytes: %w", device, bytes, err)
	}
	return DevicePtr(p), nil
}

// DeviceFree frees memory DeviceAlloc returned. Like cuMemFree, it waits
// for the device's work in flight first.
func DeviceFree(device int, p DevicePtr) error {
	drv, unbind, err := primaries.bind(device)
	if err != nil {
		return fmt.Errorf("tp: device %d: freeing %#x: %w", device, uint64(p), err)
	}
	defer unbind()
	if err := drv.MemFree(cuda.DevicePtr(p)); err != nil {
		return fmt.Errorf("tp: device %d: freeing %#x: %w", device, uint64(p), err)
	}
	return nil
}

// CopyToDevice copies src to device memory at dst on device and returns
// once the data is there. It is ordered after the work queued on the
// legacy default stream (and on streams that synchronize with it), not
// after work on non-blocking streams: synchronize those first.
func CopyToDevice(device int, dst DevicePtr, src []BF16) error {
	if len(src) == 0 {
		return nil
	}
	drv, unbind, err := primaries.bind(device)
	if err != nil {
		return fmt.Errorf("tp: device %d: copying %d elements to %#x: %w", device, len(src), uint64(dst), err)
	}
	defer unbind()
	if err := drv.MemcpyHtoD(cuda.DevicePtr(dst), cuda.AsBytes(src)); err != nil {
		return fmt.Errorf("tp: device %d: copying %d elements to %#x: %w", device, len(src), uint64(dst), err)
	}
	// A copy from pageable memory may return before its DMA has landed.
	if err := drv.StreamSynchronize(0); err != nil {
		return fmt.Errorf("tp: device %d: waiting for the copy to %#x: %w", device, uint64(dst), err)
	}
	return nil
}

// CopyFromDevice copies len(dst) elements from device memory at src on
// device into dst, with CopyToDevice's ordering.
func CopyFromDevice(device int, dst []BF16, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	drv, unbind, err := primaries.bind(device)
	if err != nil {
		return fmt.Errorf("tp: device %d: copying %d elements from %#x: %w", device, len(dst), uint64(src), err)
	}
	defer unbind()
	if err := drv.MemcpyDtoH(cuda.AsBytes(dst), cuda.DevicePtr(src)); err != nil {
		return fmt.Errorf("tp: device %d: copying %d elements from %#x: %w", device, len(dst), uint64(src), err)
	}
	return nil
}
