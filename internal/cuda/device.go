package cuda

/*
#include "trampolines.h"
*/
import "C"

import (
	"time"
	"unsafe"
)

// Init calls cuInit(0). It must succeed before any other call except
// DriverVersion; on a driver without GPUs it fails with ErrNoDevice.
func (d *Driver) Init() error {
	p, err := d.fn(symInit)
	if err != nil {
		return err
	}
	if r := C.tp_cuInit(p, 0); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuInit(0)")
	}
	return nil
}

// DriverVersion is the CUDA version the driver supports, as
// 1000*major + 10*minor (13000 for CUDA 13.0).
func (d *Driver) DriverVersion() (int, error) {
	p, err := d.fn(symDriverGetVersion)
	if err != nil {
		return 0, err
	}
	var v C.int
	if r := C.tp_cuDriverGetVersion(p, &v); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuDriverGetVersion")
	}
	return int(v), nil
}

// DeviceCount is the number of CUDA devices visible to this process.
func (d *Driver) DeviceCount() (int, error) {
	p, err := d.fn(symDeviceGetCount)
	if err != nil {
		return 0, err
	}
	var n C.int
	if r := C.tp_cuDeviceGetCount(p, &n); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuDeviceGetCount")
	}
	return int(n), nil
}

// DeviceGet returns the device with the given ordinal.
func (d *Driver) DeviceGet(ordinal int) (Device, error) {
	p, err := d.fn(symDeviceGet)
	if err != nil {
		return 0, err
	}
	var dev C.CUdevice
	if r := C.tp_cuDeviceGet(p, &dev, C.int(ordinal)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuDeviceGet(ordinal=%d)", ordinal)
	}
	return Device(dev), nil
}

// DeviceAttribute reads one attribute of dev.
func (d *Driver) DeviceAttribute(dev Device, attr DeviceAttribute) (int, error) {
	p, err := d.fn(symDeviceGetAttribute)
	if err != nil {
		return 0, err
	}
	var v C.int
	if r := C.tp_cuDeviceGetAttribute(p, &v, C.int(attr), C.CUdevice(dev)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuDeviceGetAttribute(attr=%d, device=%d)", int(attr), int(dev))
	}
	return int(v), nil
}

// ComputeCapability returns dev's major and minor compute capability.
func (d *Driver) ComputeCapability(dev Device) (major, minor int, err error) {
	if major, err = d.DeviceAttribute(dev, AttrComputeCapabilityMajor); err != nil {
		return 0, 0, err
	}
	if minor, err = d.DeviceAttribute(dev, AttrComputeCapabilityMinor); err != nil {
		return 0, 0, err
	}
	return major, minor, nil
}

// DeviceName is dev's product name, e.g. "NVIDIA H200".
func (d *Driver) DeviceName(dev Device) (string, error) {
	p, err := d.fn(symDeviceGetName)
	if err != nil {
		return "", err
	}
	var buf [256]C.char
	if r := C.tp_cuDeviceGetName(p, &buf[0], C.int(len(buf)), C.CUdevice(dev)); r != C.CUDA_SUCCESS {
		return "", d.errorf(r, "cuDeviceGetName(device=%d)", int(dev))
	}
	return C.GoString(&buf[0]), nil
}

// DevicePCIBusID is dev's PCI address, "domain:bus:device.function" in
// hex, as NVML and sysfs also spell it (modulo case and domain width).
func (d *Driver) DevicePCIBusID(dev Device) (string, error) {
	p, err := d.fn(symDeviceGetPCIBusID)
	if err != nil {
		return "", err
	}
	var buf [64]C.char
	if r := C.tp_cuDeviceGetPCIBusId(p, &buf[0], C.int(len(buf)), C.CUdevice(dev)); r != C.CUDA_SUCCESS {
		return "", d.errorf(r, "cuDeviceGetPCIBusId(device=%d)", int(dev))
	}
	return C.GoString(&buf[0]), nil
}

// DeviceUUID is dev's UUID (the MIG instance's under MIG), the key that
// matches a CUDA device with its NVML device.
func (d *Driver) DeviceUUID(dev Device) (UUID, error) {
	p, err := d.fn(symDeviceGetUUID)
	if err != nil {
		return UUID{}, err
	}
	var u UUID
	if r := C.tp_cuDeviceGetUuid_v2(p, (*C.CUuuid)(unsafe.Pointer(&u)), C.CUdevice(dev)); r != C.CUDA_SUCCESS {
		return UUID{}, d.errorf(r, "cuDeviceGetUuid_v2(device=%d)", int(dev))
	}
	return u, nil
}

// DeviceTotalMem is dev's memory in bytes.
func (d *Driver) DeviceTotalMem(dev Device) (uint64, error) {
	p, err := d.fn(symDeviceTotalMem)
	if err != nil {
		return 0, err
	}
	var n C.size_t
	if r := C.tp_cuDeviceTotalMem_v2(p, &n, C.CUdevice(dev)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuDeviceTotalMem_v2(device=%d)", int(dev))
	}
	return uint64(n), nil
}

// DeviceCanAccessPeer reports whether dev can map memory of peer.
func (d *Driver) DeviceCanAccessPeer(dev, peer Device) (bool, error) {
	p, err := d.fn(symDeviceCanAccessPeer)
	if err != nil {
		return false, err
	}
	var can C.int
	if r := C.tp_cuDeviceCanAccessPeer(p, &can, C.CUdevice(dev), C.CUdevice(peer)); r != C.CUDA_SUCCESS {
		return false, d.errorf(r, "cuDeviceCanAccessPeer(device=%d, peer=%d)", int(dev), int(peer))
	}
	return can != 0, nil
}

// DevicePrimaryCtxRetain retains (creating on first use) dev's primary
// context, the one the CUDA runtime and PyTorch share. Balance every call
// with DevicePrimaryCtxRelease.
func (d *Driver) DevicePrimaryCtxRetain(dev Device) (Context, error) {
	p, err := d.fn(symDevicePrimaryCtxRetain)
	if err != nil {
		return 0, err
	}
	var ctx C.uintptr_t
	if r := C.tp_cuDevicePrimaryCtxRetain(p, &ctx, C.CUdevice(dev)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuDevicePrimaryCtxRetain(device=%d)", int(dev))
	}
	return Context(ctx), nil
}

// DevicePrimaryCtxRelease drops one reference to dev's primary context.
func (d *Driver) DevicePrimaryCtxRelease(dev Device) error {
	p, err := d.fn(symDevicePrimaryCtxRelease)
	if err != nil {
		return err
	}
	if r := C.tp_cuDevicePrimaryCtxRelease_v2(p, C.CUdevice(dev)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuDevicePrimaryCtxRelease_v2(device=%d)", int(dev))
	}
	return nil
}

// CtxSetCurrent makes ctx current on the calling OS thread (see
// BindContext for keeping a goroutine on that thread).
func (d *Driver) CtxSetCurrent(ctx Context) error {
	p, err := d.fn(symCtxSetCurrent)
	if err != nil {
		return err
	}
	if r := C.tp_cuCtxSetCurrent(p, C.uintptr_t(ctx)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuCtxSetCurrent(ctx=%#x)", uintptr(ctx))
	}
	return nil
}

// CtxGetCurrent is the calling OS thread's current context (0 if none).
func (d *Driver) CtxGetCurrent() (Context, error) {
	p, err := d.fn(symCtxGetCurrent)
	if err != nil {
		return 0, err
	}
	var ctx C.uintptr_t
	if r := C.tp_cuCtxGetCurrent(p, &ctx); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuCtxGetCurrent")
	}
	return Context(ctx), nil
}

// CtxSynchronize waits for all work in the current context.
func (d *Driver) CtxSynchronize() error {
	p, err := d.fn(symCtxSynchronize)
	if err != nil {
		return err
	}
	if r := C.tp_cuCtxSynchronize(p); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuCtxSynchronize")
	}
	return nil
}

// StreamCreate creates a stream in the current context.
func (d *Driver) StreamCreate(flags StreamFlags) (Stream, error) {
	p, err := d.fn(symStreamCreate)
	if err != nil {
		return 0, err
	}
	var s C.uintptr_t
	if r := C.tp_cuStreamCreate(p, &s, C.uint(flags)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuStreamCreate(flags=%#x)", uint32(flags))
	}
	return Stream(s), nil
}

// StreamDestroy destroys s once its work is done (it does not wait).
func (d *Driver) StreamDestroy(s Stream) error {
	p, err := d.fn(symStreamDestroy)
	if err != nil {
		return err
	}
	if r := C.tp_cuStreamDestroy_v2(p, C.uintptr_t(s)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuStreamDestroy_v2(stream=%#x)", uintptr(s))
	}
	return nil
}

// StreamSynchronize waits until all work in s is done.
func (d *Driver) StreamSynchronize(s Stream) error {
	p, err := d.fn(symStreamSynchronize)
	if err != nil {
		return err
	}
	if r := C.tp_cuStreamSynchronize(p, C.uintptr_t(s)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuStreamSynchronize(stream=%#x)", uintptr(s))
	}
	return nil
}

// StreamWaitEvent makes later work in s wait for e.
func (d *Driver) StreamWaitEvent(s Stream, e Event) error {
	p, err := d.fn(symStreamWaitEvent)
	if err != nil {
		return err
	}
	if r := C.tp_cuStreamWaitEvent(p, C.uintptr_t(s), C.uintptr_t(e), 0); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuStreamWaitEvent(stream=%#x, event=%#x)", uintptr(s), uintptr(e))
	}
	return nil
}

// EventCreate creates an event in the current context.
func (d *Driver) EventCreate(flags EventFlags) (Event, error) {
	p, err := d.fn(symEventCreate)
	if err != nil {
		return 0, err
	}
	var e C.uintptr_t
	if r := C.tp_cuEventCreate(p, &e, C.uint(flags)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuEventCreate(flags=%#x)", uint32(flags))
	}
	return Event(e), nil
}

// EventDestroy destroys e.
func (d *Driver) EventDestroy(e Event) error {
	p, err := d.fn(symEventDestroy)
	if err != nil {
		return err
	}
	if r := C.tp_cuEventDestroy_v2(p, C.uintptr_t(e)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuEventDestroy_v2(event=%#x)", uintptr(e))
	}
	return nil
}

// EventRecord records e in s.
func (d *Driver) EventRecord(e Event, s Stream) error {
	p, err := d.fn(symEventRecord)
	if err != nil {
		return err
	}
	if r := C.tp_cuEventRecord(p, C.uintptr_t(e), C.uintptr_t(s)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuEventRecord(event=%#x, stream=%#x)", uintptr(e), uintptr(s))
	}
	return nil
}

// EventSynchronize waits until e has completed.
func (d *Driver) EventSynchronize(e Event) error {
	p, err := d.fn(symEventSynchronize)
	if err != nil {
		return err
	}
	if r := C.tp_cuEventSynchronize(p, C.uintptr_t(e)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuEventSynchronize(event=%#x)", uintptr(e))
	}
	return nil
}

// EventElapsedTime is the time between two completed events (the driver
// measures in milliseconds with about 0.5 µs resolution).
func (d *Driver) EventElapsedTime(start, end Event) (time.Duration, error) {
	p, err := d.fn(symEventElapsedTime)
	if err != nil {
		return 0, err
	}
	var ms C.float
	if r := C.tp_cuEventElapsedTime(p, &ms, C.uintptr_t(start), C.uintptr_t(end)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuEventElapsedTime(start=%#x, end=%#x)", uintptr(start), uintptr(end))
	}
	return time.Duration(float64(ms) * float64(time.Millisecond)), nil
}
