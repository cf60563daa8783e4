package tp

import (
	"fmt"
)

// DeviceName is the product name of device (an ordinal), e.g. "NVIDIA
// H200", for reports. It needs no context on the device.
func DeviceName(device int) (string, error) {
	drv, err := processGPU()
	if err != nil {
		return "", fmt.Errorf("tp: device %d: its name: %w", device, err)
	}
	n, err := drv.DeviceCount()
	if err != nil {
		return "", fmt.Errorf("tp: device %d: its name: %w", device, err)
	}
	if device < 0 || device >= n {
		return "", fmt.Errorf("tp: device %d: its name: %w: no device %d (the driver sees %d)", device, ErrArgument, device, n)
	}
	dev, err := drv.DeviceGet(device)
	if err != nil {
		return "", fmt.Errorf("tp: device %d: its name: %w", device, err)
	}
	name, err := drv.DeviceName(dev)
	if err != nil {
		return "", fmt.Errorf("tp: device %d: its name: %w", device, err)
	}
	return name, nil
}

// DriverVersion is the newest CUDA version the installed driver supports,
// as major and minor (13 and 0 for CUDA 13.0), for reports.
func DriverVersion() (major, minor int, err error) {
	drv, err := processGPU()
	if err != nil {
		return 0, 0, fmt.Errorf("tp: the CUDA driver's version: %w", err)
	}
	v, err := drv.DriverVersion()
	if err != nil {
		return 0, 0, fmt.Errorf("tp: the CUDA driver's version: %w", err)
	}
	return v / 1000, v % 1000 / 10, nil
}
