package job

import (
	"errors"
	"fmt"

	"github.com/tprun/tprun/tp"
)

// The step benchmark's device memory, through tp's public helpers as a
// rank program without a framework would hold it: the pools, the copies
// of the weight shard the steps rotate over (passed per step in
// DeviceInputs.Weight, packed where tp.PreferPacked says the kernels run
// faster on that), and the output blocks.

// benchMem is device memory on one device, freed together.
type benchMem struct {
	device int
	allocs []tp.DevicePtr
}

// alloc allocates n bytes.
func (m *benchMem) alloc(what string, n int) (tp.DevicePtr, error) {
	p, err := tp.DeviceAlloc(m.device, n)
	if err != nil {
		return 0, fmt.Errorf("allocating the %s: %w", what, err)
	}
	m.allocs = append(m.allocs, p)
	return p, nil
}

// upload allocates a buffer holding v.
func (m *benchMem) upload(what string, v []tp.BF16) (tp.DevicePtr, error) {
	p, err := m.alloc(what, 2*len(v))
	if err != nil {
		return 0, err
	}
	if err := tp.CopyToDevice(m.device, p, v); err != nil {
		return 0, fmt.Errorf("copying the %s to the device: %w", what, err)
	}
	return p, nil
}

// close frees everything alloc allocated (each free waits for the
// device's work in flight first).
func (m *benchMem) close() error {
	var errs []error
	for _, p := range m.allocs {
		errs = append(errs, tp.DeviceFree(m.device, p))
	}
	m.allocs = nil
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("releasing the benchmark's device memory: %w", err)
	}
	return nil
}

// deviceWeight is the weight shard as the kernels read it fastest: packed
// (tp.PackWeight) when tp.PreferPacked says so for the shape, else
// row-major as drawn.
func deviceWeight(w []tp.BF16, shard, latent int) ([]tp.BF16, bool, error) {
	if !tp.PreferPacked(shard, latent) {
		return w, false, nil
	}
	p := make([]tp.BF16, tp.PackedWeightLen(shard, latent))
	if err := tp.PackWeight(p, w, shard, latent); err != nil {
		return nil, false, fmt.Errorf("packing the weight shard: %w", err)
	}
	return p, true, nil
}
