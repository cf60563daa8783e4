package cuda

/*
#include "trampolines.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// MemGetInfo returns free and total memory of the current context's device.
func (d *Driver) MemGetInfo() (free, total uint64, err error) {
	p, err := d.fn(symMemGetInfo)
	if err != nil {
		return 0, 0, err
	}
	var f, t C.size_t
	if r := C.tp_cuMemGetInfo_v2(p, &f, &t); r != C.CUDA_SUCCESS {
		return 0, 0, d.errorf(r, "cuMemGetInfo_v2")
	}
	return uint64(f), uint64(t), nil
}

// MemAlloc allocates size bytes of device memory in the current context.
func (d *Driver) MemAlloc(size uint64) (DevicePtr, error) {
	p, err := d.fn(symMemAlloc)
	if err != nil {
		return 0, err
	}
	var ptr C.CUdeviceptr
	if r := C.tp_cuMemAlloc_v2(p, &ptr, C.size_t(size)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuMemAlloc_v2(size=%d)", size)
	}
	return DevicePtr(ptr), nil
}

// MemFree frees memory from MemAlloc.
func (d *Driver) MemFree(ptr DevicePtr) error {
	p, err := d.fn(symMemFree)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemFree_v2(p, C.CUdeviceptr(ptr)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemFree_v2(ptr=%#x)", uint64(ptr))
	}
	return nil
}

// MemcpyHtoD copies src to device memory at dst. It is synchronous, which
// is what makes passing Go memory safe: the driver is done with src when
// the call returns.
func (d *Driver) MemcpyHtoD(dst DevicePtr, src []byte) error {
	if len(src) == 0 {
		return nil
	}
	p, err := d.fn(symMemcpyHtoD)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemcpyHtoD_v2(p, C.CUdeviceptr(dst), unsafe.Pointer(&src[0]), C.size_t(len(src))); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemcpyHtoD_v2(dst=%#x, bytes=%d)", uint64(dst), len(src))
	}
	return nil
}

// MemcpyDtoH copies len(dst) bytes from device memory at src into dst
// (synchronous, like MemcpyHtoD).
func (d *Driver) MemcpyDtoH(dst []byte, src DevicePtr) error {
	if len(dst) == 0 {
		return nil
	}
	p, err := d.fn(symMemcpyDtoH)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemcpyDtoH_v2(p, unsafe.Pointer(&dst[0]), C.CUdeviceptr(src), C.size_t(len(dst))); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemcpyDtoH_v2(src=%#x, bytes=%d)", uint64(src), len(dst))
	}
	return nil
}

// MemcpyDtoD copies n bytes between device buffers.
func (d *Driver) MemcpyDtoD(dst, src DevicePtr, n uint64) error {
	p, err := d.fn(symMemcpyDtoD)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemcpyDtoD_v2(p, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemcpyDtoD_v2(dst=%#x, src=%#x, bytes=%d)", uint64(dst), uint64(src), n)
	}
	return nil
}

// MemcpyDtoDAsync queues a device-to-device copy of n bytes on s. (There
// are no asynchronous host copies here: the driver would read Go memory
// after the call returned.)
func (d *Driver) MemcpyDtoDAsync(dst, src DevicePtr, n uint64, s Stream) error {
	p, err := d.fn(symMemcpyDtoDAsync)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemcpyDtoDAsync_v2(p, C.CUdeviceptr(dst), C.CUdeviceptr(src), C.size_t(n), C.uintptr_t(s)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemcpyDtoDAsync_v2(dst=%#x, src=%#x, bytes=%d, stream=%#x)", uint64(dst), uint64(src), n, uintptr(s))
	}
	return nil
}

// MemsetD8 sets n bytes at ptr to v.
func (d *Driver) MemsetD8(ptr DevicePtr, v uint8, n uint64) error {
	p, err := d.fn(symMemsetD8)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemsetD8_v2(p, C.CUdeviceptr(ptr), C.uchar(v), C.size_t(n)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemsetD8_v2(ptr=%#x, value=%#x, count=%d)", uint64(ptr), v, n)
	}
	return nil
}

// MemsetD32 sets n 32-bit words at ptr (4-byte aligned) to v.
func (d *Driver) MemsetD32(ptr DevicePtr, v uint32, n uint64) error {
	p, err := d.fn(symMemsetD32)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemsetD32_v2(p, C.CUdeviceptr(ptr), C.uint(v), C.size_t(n)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemsetD32_v2(ptr=%#x, value=%#x, count=%d)", uint64(ptr), v, n)
	}
	return nil
}

// MemsetD8Async queues MemsetD8 on s (usable under stream capture).
func (d *Driver) MemsetD8Async(ptr DevicePtr, v uint8, n uint64, s Stream) error {
	p, err := d.fn(symMemsetD8Async)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemsetD8Async(p, C.CUdeviceptr(ptr), C.uchar(v), C.size_t(n), C.uintptr_t(s)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemsetD8Async(ptr=%#x, value=%#x, count=%d, stream=%#x)", uint64(ptr), v, n, uintptr(s))
	}
	return nil
}

// MemsetD32Async queues MemsetD32 on s (usable under stream capture).
func (d *Driver) MemsetD32Async(ptr DevicePtr, v uint32, n uint64, s Stream) error {
	p, err := d.fn(symMemsetD32Async)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemsetD32Async(p, C.CUdeviceptr(ptr), C.uint(v), C.size_t(n), C.uintptr_t(s)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemsetD32Async(ptr=%#x, value=%#x, count=%d, stream=%#x)", uint64(ptr), v, n, uintptr(s))
	}
	return nil
}

// MemHostAlloc allocates size bytes of page-locked host memory. The slice
// is C memory owned by the driver: release it with MemFreeHost, and keep
// no reference to it afterwards.
func (d *Driver) MemHostAlloc(size int, flags HostAllocFlags) ([]byte, error) {
	if size <= 0 {
		return nil, fmt.Errorf("cuda: cuMemHostAlloc(size=%d): %w", size, ErrInvalidValue)
	}
	p, err := d.fn(symMemHostAlloc)
	if err != nil {
		return nil, err
	}
	var host unsafe.Pointer
	if r := C.tp_cuMemHostAlloc(p, &host, C.size_t(size), C.uint(flags)); r != C.CUDA_SUCCESS {
		return nil, d.errorf(r, "cuMemHostAlloc(size=%d, flags=%#x)", size, uint32(flags))
	}
	return unsafe.Slice((*byte)(host), size), nil
}

// MemFreeHost frees a slice returned by MemHostAlloc.
func (d *Driver) MemFreeHost(b []byte) error {
	if len(b) == 0 {
		return fmt.Errorf("cuda: cuMemFreeHost: empty slice: %w", ErrInvalidValue)
	}
	p, err := d.fn(symMemFreeHost)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemFreeHost(p, unsafe.Pointer(&b[0])); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemFreeHost(ptr=%p)", &b[0])
	}
	return nil
}

// MemHostGetDevicePointer is the device address of host memory allocated
// with HostAllocDeviceMap.
func (d *Driver) MemHostGetDevicePointer(b []byte) (DevicePtr, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("cuda: cuMemHostGetDevicePointer_v2: empty slice: %w", ErrInvalidValue)
	}
	p, err := d.fn(symMemHostGetDevicePointer)
	if err != nil {
		return 0, err
	}
	var dp C.CUdeviceptr
	if r := C.tp_cuMemHostGetDevicePointer_v2(p, &dp, unsafe.Pointer(&b[0]), 0); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuMemHostGetDevicePointer_v2(ptr=%p)", &b[0])
	}
	return DevicePtr(dp), nil
}

// AsBytes views a slice of fixed-size numbers as its bytes (no copy), for
// MemcpyHtoD and MemcpyDtoH of typed host buffers.
func AsBytes[T ~int8 | ~uint8 | ~int16 | ~uint16 | ~int32 | ~uint32 | ~int64 | ~uint64 | ~float32 | ~float64](s []T) []byte {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*int(unsafe.Sizeof(s[0])))
}
