package tp

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/tprun/tprun/internal/cuda"
)

// CopyBandwidthBytes is the size of each copy MeasureCopyBandwidth times:
// far beyond any L2 cache, and long enough that the launch of a copy is
// lost in it.
const CopyBandwidthBytes = 1 << 30

// MeasureCopyBandwidth times device-to-device copies of CopyBandwidthBytes
// on device (an ordinal), in its primary context, and returns the bytes
// read plus written per second of the median copy: the memory bandwidth a
// kernel that streams its operands from HBM can at best reach, for
// comparing a memory-bound step against (a weight of B bytes cannot be
// read in less than B over it). Each copy is timed with a pair of CUDA
// events on a stream of its own, so neither the launch nor the host's
// wait is counted; two untimed copies warm the memory up first.
//
// It allocates twice CopyBandwidthBytes of device memory for the time of
// the call and keeps the device busy for some tens of milliseconds; other
// work running on the device at the same time lowers the figure.
func MeasureCopyBandwidth(device int) (bytesPerSecond float64, err error) {
	drv, unbind, err := primaries.bind(device)
	if err != nil {
		return 0, fmt.Errorf("tp: device %d: measuring the copy bandwidth: %w", device, err)
	}
	defer unbind()
	bw, err := measureCopyBandwidth(drv, CopyBandwidthBytes)
	if err != nil {
		return 0, fmt.Errorf("tp: device %d: measuring the copy bandwidth: %w", device, err)
	}
	return bw, nil
}

// The copies measureCopyBandwidth makes: warm-up copies first, then timed
// ones.
const (
	copyWarmups = 2
	copyTimed   = 10
)

// copyDriver is the part of the driver that measureCopyBandwidth needs,
// with the device's context current on the calling thread.
type copyDriver interface {
	MemAlloc(size uint64) (cuda.DevicePtr, error)
	MemFree(p cuda.DevicePtr) error
	MemsetD32Async(p cuda.DevicePtr, v uint32, n uint64, s cuda.Stream) error
	MemcpyDtoDAsync(dst, src cuda.DevicePtr, n uint64, s cuda.Stream) error
	StreamCreate(flags cuda.StreamFlags) (cuda.Stream, error)
	StreamSynchronize(s cuda.Stream) error
	StreamDestroy(s cuda.Stream) error
	EventCreate(flags cuda.EventFlags) (cuda.Event, error)
	EventRecord(e cuda.Event, s cuda.Stream) error
	EventSynchronize(e cuda.Event) error
	EventElapsedTime(start, end cuda.Event) (time.Duration, error)
	EventDestroy(e cuda.Event) error
}

var _ copyDriver = (*cuda.Driver)(nil)

// measureCopyBandwidth is MeasureCopyBandwidth with copies of n bytes
// (a multiple of 4) on drv. Whatever it made it releases, also on error,
// after waiting for its stream.
func measureCopyBandwidth(drv copyDriver, n int) (bw float64, err error) {
	s, err := drv.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return 0, fmt.Errorf("creating a stream: %w", err)
	}
	var bufs []cuda.DevicePtr
	var evs []cuda.Event
	defer func() {
		// The copies must have finished before their buffers are freed.
		errs := []error{err, drv.StreamSynchronize(s)}
		for _, ev := range evs {
			errs = append(errs, drv.EventDestroy(ev))
		}
		for _, p := range bufs {
			errs = append(errs, drv.MemFree(p))
		}
		errs = append(errs, drv.StreamDestroy(s))
		if err = errors.Join(errs...); err != nil {
			bw = 0
		}
	}()
	for _, what := range []string{"source", "destination"} {
		p, err := drv.MemAlloc(uint64(n))
		if err != nil {
			return 0, fmt.Errorf("allocating the copy %s (%d bytes): %w", what, n, err)
		}
		bufs = append(bufs, p)
	}
	src, dst := bufs[0], bufs[1]
	// bf16 ones, so the source holds what a weight might.
	if err := drv.MemsetD32Async(src, 0x3F803F80, uint64(n/4), s); err != nil {
		return 0, fmt.Errorf("filling the copy source: %w", err)
	}
	for range copyTimed + 1 {
		ev, err := drv.EventCreate(cuda.EventDefault)
		if err != nil {
			return 0, fmt.Errorf("creating the timing events: %w", err)
		}
		evs = append(evs, ev)
	}
	for range copyWarmups {
		if err := drv.MemcpyDtoDAsync(dst, src, uint64(n), s); err != nil {
			return 0, fmt.Errorf("warm-up copy: %w", err)
		}
	}
	for i := range copyTimed {
		if err := drv.EventRecord(evs[i], s); err != nil {
			return 0, fmt.Errorf("recording a timing event: %w", err)
		}
		if err := drv.MemcpyDtoDAsync(dst, src, uint64(n), s); err != nil {
			return 0, fmt.Errorf("timed copy %d: %w", i, err)
		}
	}
	if err := drv.EventRecord(evs[copyTimed], s); err != nil {
		return 0, fmt.Errorf("recording a timing event: %w", err)
	}
	if err := drv.EventSynchronize(evs[copyTimed]); err != nil {
		return 0, fmt.Errorf("waiting for the copies: %w", err)
	}
	times := make([]time.Duration, copyTimed)
	for i := range times {
		if times[i], err = drv.EventElapsedTime(evs[i], evs[i+1]); err != nil {
			return 0, fmt.Errorf("reading the time of copy %d: %w", i, err)
		}
	}
	slices.Sort(times)
	med := times[(len(times)-1)/2] // of an even count, the lower middle one
	if med <= 0 {
		return 0, fmt.Errorf("a %d-byte copy took %v", n, med)
	}
	return 2 * float64(n) / med.Seconds(), nil
}
