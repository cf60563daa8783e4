package job

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/tp"
)

// The step benchmark drives the device itself beside the op: it measures
// the device-to-device copy bandwidth for its HBM floor, and fills many
// copies of the packed weight shard on the device, which tp's public
// device helpers do not offer. These are its driver-level helpers; the
// default job needs none of them.

// poisonWord is two poisonValue elements, for filling blocks by words.
const poisonWord = uint32(poisonValue) | uint32(poisonValue)<<16

// openBenchGPU opens the CUDA driver for the benchmark's own device work
// and checks that it sees a device.
func openBenchGPU() (*cuda.Driver, error) {
	drv, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	if err := drv.Init(); err != nil {
		return nil, errors.Join(fmt.Errorf("cuInit: %w", err), drv.Close())
	}
	n, err := drv.DeviceCount()
	if err == nil && n < 1 {
		err = tp.ErrNoGPU
	}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("counting devices: %w", err), drv.Close())
	}
	return drv, nil
}

// pickBenchBackend is pickBackend for the benchmark, which also needs the
// driver: it opens it through gpu (nil: no GPU here) and returns it open
// when the job runs on the CUDA engine (the caller closes it).
func (p *plan) pickBenchBackend(ctx context.Context, g group, gpu func() (*cuda.Driver, error)) (*cuda.Driver, error) {
	var drv *cuda.Driver
	var noGPU error
	probe := func() error { return noGPU }
	if gpu != nil {
		drv, noGPU = gpu()
	} else {
		probe = nil
	}
	err := p.pickBackend(ctx, g, probe)
	if err == nil && p.backend == "cuda" {
		return drv, nil
	}
	if drv != nil {
		if cerr := drv.Close(); cerr != nil {
			err = errors.Join(err, fmt.Errorf("job: rank %d: closing the CUDA driver: %w", g.Rank(), cerr))
		}
	}
	return nil, err
}

// devMem is device memory in the primary context of one device, bound to
// the calling goroutine's thread while it lives (the benchmark's goroutine
// makes every CUDA call of its own).
type devMem struct {
	drv    *cuda.Driver
	dev    cuda.Device
	unbind func()
	stream cuda.Stream
	allocs []cuda.DevicePtr
}

// openDevMem retains ordinal's primary context, binds it to this thread
// and makes a stream for the benchmark's own copies and fills.
func openDevMem(drv *cuda.Driver, ordinal int) (_ *devMem, err error) {
	m := &devMem{drv: drv}
	if m.dev, err = drv.DeviceGet(ordinal); err != nil {
		return nil, err
	}
	cctx, err := drv.DevicePrimaryCtxRetain(m.dev)
	if err != nil {
		return nil, err
	}
	if m.unbind, err = drv.BindContext(cctx); err != nil {
		return nil, errors.Join(err, drv.DevicePrimaryCtxRelease(m.dev))
	}
	if m.stream, err = drv.StreamCreate(cuda.StreamNonBlocking); err != nil {
		return nil, errors.Join(err, m.close())
	}
	return m, nil
}

// alloc allocates n bytes.
func (m *devMem) alloc(what string, n int) (cuda.DevicePtr, error) {
	p, err := m.drv.MemAlloc(uint64(n))
	if err != nil {
		return 0, fmt.Errorf("allocating the %s (%d bytes): %w", what, n, err)
	}
	m.allocs = append(m.allocs, p)
	return p, nil
}

// free frees one buffer of alloc's.
func (m *devMem) free(p cuda.DevicePtr) error {
	i := slices.Index(m.allocs, p)
	if i < 0 {
		return fmt.Errorf("free of %#x, which this job did not allocate", uint64(p))
	}
	m.allocs = slices.Delete(m.allocs, i, i+1)
	return m.drv.MemFree(p)
}

// upload allocates and fills a buffer with v.
func (m *devMem) upload(what string, v []kernel.BF16) (cuda.DevicePtr, error) {
	p, err := m.alloc(what, 2*len(v))
	if err != nil {
		return 0, err
	}
	if err := m.drv.MemcpyHtoD(p, cuda.AsBytes(v)); err != nil {
		return 0, fmt.Errorf("copying the %s to the device: %w", what, err)
	}
	return p, nil
}

// settle waits for the copies made on the legacy stream (a copy from
// pageable memory may return before its DMA has landed, and the op's
// stream does not wait for the legacy stream) and for the job's stream.
func (m *devMem) settle() error {
	if err := m.drv.StreamSynchronize(0); err != nil {
		return fmt.Errorf("waiting for the copies to the device: %w", err)
	}
	if err := m.drv.StreamSynchronize(m.stream); err != nil {
		return fmt.Errorf("waiting for the job's stream: %w", err)
	}
	return nil
}

// fill sets n 32-bit words at p to v and waits.
func (m *devMem) fill(p cuda.DevicePtr, v uint32, n int) error {
	if err := m.drv.MemsetD32Async(p, v, uint64(n), m.stream); err != nil {
		return err
	}
	return m.drv.StreamSynchronize(m.stream)
}

// close frees everything, unbinds the thread and releases the context.
func (m *devMem) close() error {
	var errs []error
	if m.stream != 0 {
		errs = append(errs, m.drv.StreamSynchronize(m.stream))
	}
	for _, p := range m.allocs {
		errs = append(errs, m.drv.MemFree(p))
	}
	m.allocs = nil
	if m.stream != 0 {
		errs = append(errs, m.drv.StreamDestroy(m.stream))
		m.stream = 0
	}
	if m.unbind != nil {
		m.unbind()
		m.unbind = nil
		errs = append(errs, m.drv.DevicePrimaryCtxRelease(m.dev))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("releasing the job's device memory: %w", err)
	}
	return nil
}

// deviceWeight is the weight shard as the kernels read it fastest: packed
// (tp.PackWeight) when tp.PreferPacked says so for the shape, else
// row-major as drawn.
func deviceWeight(w []kernel.BF16, shard, latent int) ([]kernel.BF16, bool, error) {
	if !tp.PreferPacked(shard, latent) {
		return w, false, nil
	}
	p := make([]kernel.BF16, tp.PackedWeightLen(shard, latent))
	if err := tp.PackWeight(p, w, shard, latent); err != nil {
		return nil, false, fmt.Errorf("packing the weight shard: %w", err)
	}
	return p, true, nil
}
