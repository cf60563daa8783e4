package job

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/tp"
)

// The default job on the CUDA engine: the pools and the weight shard are
// uploaded once, every step runs UpProjection.StepDevice on device
// pointers into them, and the block is copied back for the same checks
// the CPU path makes.

// poisonWord is two bf16 quiet NaNs: an element a step fails to write
// stays a NaN, which the check counts as wrong.
const poisonWord = uint32(kernel.QuietNaN) | uint32(kernel.QuietNaN)<<16

// devMem is device memory in the primary context of one device, bound to
// the calling goroutine's thread while it lives (the job's goroutine
// makes every CUDA call of the job).
type devMem struct {
	drv    *cuda.Driver
	dev    cuda.Device
	unbind func()
	stream cuda.Stream
	allocs []cuda.DevicePtr
}

// openDevMem retains ordinal's primary context, binds it to this thread
// and makes a stream for the job's own copies and fills.
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

// cudaStepper runs the job's steps on the CUDA engine.
type cudaStepper struct {
	mem                         *devMem
	up                          *tp.UpProjection
	latent, shared, weight, out cuda.DevicePtr
	packed                      bool // weight in the kernel's packed layout
	p                           *plan
	rank                        int
}

// deviceWeight is the weight shard as the kernels read it: packed
// (kernel.PackWeight).
func deviceWeight(w []kernel.BF16, shard, latent int) ([]kernel.BF16, bool, error) {
	p := make([]kernel.BF16, kernel.PackedWeightLen(shard, latent))
	if err := kernel.PackWeight(p, w, shard, latent); err != nil {
		return nil, false, fmt.Errorf("packing the weight shard: %w", err)
	}
	return p, true, nil
}

// newCUDAStepper uploads this rank's operands, sets the op up (a
// collective) on the mailbox pickBackend chose, and waits at a barrier so
// that no rank's first step waits for another's setup.
func newCUDAStepper(ctx context.Context, g group, p *plan, in *inputs, drv *cuda.Driver) (_ *cudaStepper, err error) {
	c := p.cfg
	mem, err := openDevMem(drv, deviceOf(g))
	if err != nil {
		return nil, fmt.Errorf("device %d: %w", deviceOf(g), err)
	}
	s := &cudaStepper{mem: mem, p: p, rank: g.Rank()}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.close())
		}
	}()
	if s.latent, err = mem.upload("latent pool", in.latent); err != nil {
		return nil, err
	}
	if s.shared, err = mem.upload("shared pool", in.shared); err != nil {
		return nil, err
	}
	w, packed, err := deviceWeight(in.weight, p.shape.Shard(), c.Latent)
	if err != nil {
		return nil, err
	}
	if s.weight, err = mem.upload("weight shard", w); err != nil {
		return nil, err
	}
	s.packed = packed
	if s.out, err = mem.alloc("output block", 2*p.shape.M*c.Hidden); err != nil {
		return nil, err
	}
	if err := mem.settle(); err != nil {
		return nil, err
	}
	s.up, err = tp.NewUpProjection(ctx, g, c.Hidden, c.Latent, p.shape.M, tp.WithBackend(p.mailbox),
		tp.WithSlots(c.Slots), tp.WithDeadline(c.Deadline), tp.WithDevice(deviceOf(g)), tp.WithCUDADriver(drv))
	if err != nil {
		return nil, err
	}
	if err := g.Barrier(ctx); err != nil {
		return nil, fmt.Errorf("barrier before the first step: %w", err)
	}
	return s, nil
}

func (s *cudaStepper) step(ctx context.Context, m, o int, got []kernel.BF16) (time.Duration, error) {
	c := s.p.cfg
	if err := s.mem.fill(s.out, poisonWord, m*c.Hidden/2); err != nil {
		return 0, fmt.Errorf("poisoning the output block: %w", err)
	}
	in := tp.DeviceInputs{M: m,
		Latent:       s.latent + cuda.DevicePtr(2*o*c.Latent),
		Weight:       s.weight,
		WeightPacked: s.packed,
		Shared:       s.shared + cuda.DevicePtr(2*(o*c.Hidden+s.rank*s.p.shape.Shard())),
		SharedStride: c.Hidden}
	t0 := time.Now()
	if err := s.up.StepDevice(ctx, in, s.out); err != nil {
		return 0, err
	}
	took := time.Since(t0)
	if err := s.mem.drv.MemcpyDtoH(cuda.AsBytes(got[:m*c.Hidden]), s.out); err != nil {
		return 0, fmt.Errorf("copying the block to the host: %w", err)
	}
	return took, nil
}

func (s *cudaStepper) mailboxName() string { return s.up.Backend() }

// close releases the op first (its kernels read the buffers), then the
// buffers.
func (s *cudaStepper) close() error {
	var errs []error
	if s.up != nil {
		errs = append(errs, s.up.Close())
		s.up = nil
	}
	if s.mem != nil {
		errs = append(errs, s.mem.close())
		s.mem = nil
	}
	return errors.Join(errs...)
}
