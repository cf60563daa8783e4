package main

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/tp"
)

// The op calls below stand in for package tp's weight-owning,
// stream-ordered op (UpProjection.SetWeight, SetWeightDevice, Enqueue,
// Synchronize, Err) where this build's tp lacks them: the weight is kept
// here and passed with every step, and a device step runs synchronously
// on the op's own stream (ordered after the caller's stream only when the
// caller has synchronized it).

// weights is the weight the steps pass.
type weights struct {
	host   atomic.Pointer[[]kernel.BF16]
	device atomic.Uint64
}

func (o *op) setWeightHost(_ context.Context, w []kernel.BF16) error {
	c := append([]kernel.BF16(nil), w...)
	o.w.host.Store(&c)
	return nil
}

func (o *op) setWeightDevice(_ context.Context, p tp.DevicePtr) error {
	if o.u.Backend() == "host" {
		return fmt.Errorf("%w: a device weight on the host backend", tp.ErrBackendUnavailable)
	}
	o.w.device.Store(uint64(p))
	return nil
}

func (o *op) stepHost(ctx context.Context, in tp.UpInputs, out []kernel.BF16) error {
	w := o.w.host.Load()
	if w == nil {
		return fmt.Errorf("%w: no host weight given (tprun_op_set_weight_host)", errArgument)
	}
	in.Weight = *w
	return o.u.Step(ctx, in, out)
}

func (o *op) enqueue(in tp.DeviceInputs, out tp.DevicePtr, _ uintptr) error {
	if o.u.Backend() == "host" {
		return fmt.Errorf("%w: a device step on the host backend", tp.ErrBackendUnavailable)
	}
	in.Weight = tp.DevicePtr(o.w.device.Load())
	if in.Weight == 0 {
		return fmt.Errorf("%w: no device weight given (tprun_op_set_weight_device)", errArgument)
	}
	return o.u.StepDevice(context.Background(), in, out)
}

func (o *op) synchronize(context.Context, uintptr) error { return nil }

func (o *op) check() error { return nil }
