package topo

import (
	"errors"
	"fmt"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Sentinels for errors.Is on what Preflight returns.
var (
	// ErrNoDriver: NVML could not be loaded or the kernel driver is not
	// running, so there is no NVIDIA GPU to check. Callers fall back to the
	// CPU (the launcher) or report it and exit 3 (`tprun topo`).
	ErrNoDriver = errors.New("no NVIDIA driver found (libnvidia-ml.so.1 not loadable)")
	// ErrRefused: the check ran and the job must not start on these GPUs.
	// The error is a *CheckError listing the reasons.
	ErrRefused = errors.New("topology check refused the job")
)

// CheckError lists why the topology check refused the job, each problem in
// plain words naming the device or pair. It matches ErrRefused.
type CheckError struct {
	Problems []string
}

func (e *CheckError) Error() string {
	return "topology check: " + strings.Join(e.Problems, "; ")
}

// Is reports ErrRefused so callers need not know the concrete type.
func (e *CheckError) Is(target error) bool { return target == ErrRefused }

// NVMLError is an NVML call that failed where the check cannot go on
// without its answer (Init, the device count, a device handle, the PCI bus
// id that CUDA numbering depends on). errors.Is works with the nvml.Return
// it wraps.
type NVMLError struct {
	Op     string // NVML function, e.g. "DeviceGetCount"
	Device int    // NVML index, or -1 when the call is not about a device
	Ret    nvml.Return
}

func (e *NVMLError) Error() string {
	if e.Device < 0 {
		return fmt.Sprintf("nvml %s: %v", e.Op, e.Ret)
	}
	return fmt.Sprintf("nvml %s (nvml device %d): %v", e.Op, e.Device, e.Ret)
}

func (e *NVMLError) Unwrap() error { return e.Ret }
