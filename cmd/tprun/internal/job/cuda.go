package job

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tprun/tprun/tp"
)

// The default job on the CUDA engine, through tp's public API as a rank
// program would use it: the pools are uploaded once (tp.DeviceAlloc,
// tp.CopyToDevice), the op gets the row-major weight shard once
// (SetWeight, which packs it where the kernels prefer that), every step
// runs UpProjection.StepDevice on device pointers into the pools, and the
// block is copied back for the same checks the CPU path makes.

// cudaStepper runs the job's steps on the CUDA engine.
type cudaStepper struct {
	up             *tp.UpProjection
	device         int
	allocs         []tp.DevicePtr
	latent, shared tp.DevicePtr
	out            tp.DevicePtr
	poison         []tp.BF16 // a block of poisonValue, copied over out before each step
	p              *plan
	rank           int
}

// newCUDAStepper sets the op up (a collective) on the mailbox pickBackend
// chose, gives it this rank's weight shard, uploads the pools, and waits
// at a barrier so that no rank's first step waits for another's setup.
func newCUDAStepper(ctx context.Context, g group, p *plan, in *inputs) (_ *cudaStepper, err error) {
	c := p.cfg
	s := &cudaStepper{device: deviceOf(g), p: p, rank: g.Rank()}
	defer func() {
		if err != nil {
			err = errors.Join(err, s.close())
		}
	}()
	s.up, err = tp.NewUpProjection(ctx, g, c.Hidden, c.Latent, p.shape.M, tp.WithBackend(p.mailbox),
		tp.WithSlots(c.Slots), tp.WithDeadline(c.Deadline), tp.WithDevice(s.device))
	if err != nil {
		return nil, err
	}
	if err := s.up.SetWeight(ctx, in.weight); err != nil {
		return nil, err
	}
	if s.latent, err = s.upload("latent pool", in.latent); err != nil {
		return nil, err
	}
	if s.shared, err = s.upload("shared pool", in.shared); err != nil {
		return nil, err
	}
	s.poison = make([]tp.BF16, p.shape.M*c.Hidden)
	for i := range s.poison {
		s.poison[i] = poisonValue
	}
	if s.out, err = s.upload("output block", s.poison); err != nil {
		return nil, err
	}
	if err := g.Barrier(ctx); err != nil {
		return nil, fmt.Errorf("barrier before the first step: %w", err)
	}
	return s, nil
}

// upload allocates device memory holding v.
func (s *cudaStepper) upload(what string, v []tp.BF16) (tp.DevicePtr, error) {
	ptr, err := tp.DeviceAlloc(s.device, 2*len(v))
	if err != nil {
		return 0, fmt.Errorf("the %s: %w", what, err)
	}
	s.allocs = append(s.allocs, ptr)
	if err := tp.CopyToDevice(s.device, ptr, v); err != nil {
		return 0, fmt.Errorf("the %s: %w", what, err)
	}
	return ptr, nil
}

func (s *cudaStepper) step(ctx context.Context, m, o int, got []tp.BF16) (time.Duration, error) {
	c := s.p.cfg
	if err := tp.CopyToDevice(s.device, s.out, s.poison[:m*c.Hidden]); err != nil {
		return 0, fmt.Errorf("poisoning the output block: %w", err)
	}
	in := tp.DeviceInputs{M: m,
		Latent:       s.latent + tp.DevicePtr(2*o*c.Latent),
		Shared:       s.shared + tp.DevicePtr(2*(o*c.Hidden+s.rank*s.p.shape.Shard())),
		SharedStride: c.Hidden} // Weight left out: the op's own (SetWeight)
	t0 := time.Now()
	if err := s.up.StepDevice(ctx, in, s.out); err != nil {
		return 0, err
	}
	took := time.Since(t0)
	if err := tp.CopyFromDevice(s.device, got[:m*c.Hidden], s.out); err != nil {
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
	for _, ptr := range s.allocs {
		errs = append(errs, tp.DeviceFree(s.device, ptr))
	}
	s.allocs = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("releasing the job's device memory: %w", err)
	}
	return nil
}
