package cuda

/*
#include "trampolines.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// cProp fills a CUmemAllocationProp: pinned device memory on p.Device.
// Everything else (win32 metadata, compression, usage) stays zero, as the
// driver requires on Linux.
func (p AllocationProp) cProp() C.CUmemAllocationProp {
	var cp C.CUmemAllocationProp
	cp._type = C.CU_MEM_ALLOCATION_TYPE_PINNED
	cp.requestedHandleTypes = C.CUmemAllocationHandleType(p.HandleTypes)
	cp.location._type = C.CU_MEM_LOCATION_TYPE_DEVICE
	cp.location.id = C.int(p.Device)
	if p.GPUDirectRDMA {
		cp.allocFlags.gpuDirectRDMACapable = 1
	}
	return cp
}

func (p MulticastProp) cProp() C.CUmulticastObjectProp {
	var cp C.CUmulticastObjectProp
	cp.numDevices = C.uint(p.NumDevices)
	cp.size = C.size_t(p.Size)
	cp.handleTypes = C.ulonglong(p.HandleTypes)
	return cp
}

// MemGetAllocationGranularity is the size and alignment unit of MemCreate,
// MemMap and MemAddressReserve for prop (2 MiB on the H200).
func (d *Driver) MemGetAllocationGranularity(prop AllocationProp, opt GranularityOption) (uint64, error) {
	p, err := d.fn(symMemGetAllocationGranularity)
	if err != nil {
		return 0, err
	}
	cp := prop.cProp()
	var g C.size_t
	if r := C.tp_cuMemGetAllocationGranularity(p, &g, &cp, C.int(opt)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuMemGetAllocationGranularity(device=%d, handleTypes=%s, option=%d)", int(prop.Device), prop.HandleTypes, int(opt))
	}
	return uint64(g), nil
}

// MemCreate allocates size bytes (a multiple of the granularity) of
// physical memory on prop.Device. With HandleTypeFabric it fails with
// ErrNotPermitted where the node has no IMEX channel.
func (d *Driver) MemCreate(size uint64, prop AllocationProp) (GenericAllocationHandle, error) {
	p, err := d.fn(symMemCreate)
	if err != nil {
		return 0, err
	}
	cp := prop.cProp()
	var h C.CUmemGenericAllocationHandle
	if r := C.tp_cuMemCreate(p, &h, C.size_t(size), &cp, 0); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuMemCreate(size=%d, device=%d, handleTypes=%s)", size, int(prop.Device), prop.HandleTypes)
	}
	return GenericAllocationHandle(h), nil
}

// MemRelease drops the handle's reference; the memory is freed once it is
// also unmapped everywhere.
func (d *Driver) MemRelease(h GenericAllocationHandle) error {
	p, err := d.fn(symMemRelease)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemRelease(p, C.CUmemGenericAllocationHandle(h)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemRelease(handle=%#x)", uint64(h))
	}
	return nil
}

// MemExportPOSIXFD exports h (memory or multicast object created with
// HandleTypePOSIXFD) as a new file descriptor owned by the caller.
func (d *Driver) MemExportPOSIXFD(h GenericAllocationHandle) (int, error) {
	p, err := d.fn(symMemExportToShareableHandle)
	if err != nil {
		return -1, err
	}
	fd := C.int(-1)
	if r := C.tp_cuMemExportToShareableHandle_fd(p, &fd, C.CUmemGenericAllocationHandle(h)); r != C.CUDA_SUCCESS {
		return -1, d.errorf(r, "cuMemExportToShareableHandle(handle=%#x, type=POSIX_FD)", uint64(h))
	}
	return int(fd), nil
}

// MemExportFabric exports h (created with HandleTypeFabric) as fabric
// handle bytes.
func (d *Driver) MemExportFabric(h GenericAllocationHandle) (FabricHandle, error) {
	p, err := d.fn(symMemExportToShareableHandle)
	if err != nil {
		return FabricHandle{}, err
	}
	var fh FabricHandle
	if r := C.tp_cuMemExportToShareableHandle_fabric(p, (*C.CUmemFabricHandle)(unsafe.Pointer(&fh)), C.CUmemGenericAllocationHandle(h)); r != C.CUDA_SUCCESS {
		return FabricHandle{}, d.errorf(r, "cuMemExportToShareableHandle(handle=%#x, type=FABRIC)", uint64(h))
	}
	return fh, nil
}

// MemImportPOSIXFD imports memory (or a multicast object) exported by
// MemExportPOSIXFD, possibly in another process. The caller still owns fd
// and may close it once this returns.
func (d *Driver) MemImportPOSIXFD(fd int) (GenericAllocationHandle, error) {
	p, err := d.fn(symMemImportFromShareableHandle)
	if err != nil {
		return 0, err
	}
	var h C.CUmemGenericAllocationHandle
	if r := C.tp_cuMemImportFromShareableHandle_fd(p, &h, C.int(fd)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuMemImportFromShareableHandle(fd=%d, type=POSIX_FD)", fd)
	}
	return GenericAllocationHandle(h), nil
}

// MemImportFabric imports memory (or a multicast object) from fabric
// handle bytes.
func (d *Driver) MemImportFabric(fh FabricHandle) (GenericAllocationHandle, error) {
	p, err := d.fn(symMemImportFromShareableHandle)
	if err != nil {
		return 0, err
	}
	var h C.CUmemGenericAllocationHandle
	if r := C.tp_cuMemImportFromShareableHandle_fabric(p, &h, (*C.CUmemFabricHandle)(unsafe.Pointer(&fh))); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuMemImportFromShareableHandle(type=FABRIC)")
	}
	return GenericAllocationHandle(h), nil
}

// MemAddressReserve reserves size bytes of virtual address space aligned
// to alignment (0: the granularity).
func (d *Driver) MemAddressReserve(size, alignment uint64) (DevicePtr, error) {
	p, err := d.fn(symMemAddressReserve)
	if err != nil {
		return 0, err
	}
	var ptr C.CUdeviceptr
	if r := C.tp_cuMemAddressReserve(p, &ptr, C.size_t(size), C.size_t(alignment), 0, 0); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuMemAddressReserve(size=%d, alignment=%d)", size, alignment)
	}
	return DevicePtr(ptr), nil
}

// MemAddressFree returns a reservation (unmap everything in it first).
func (d *Driver) MemAddressFree(ptr DevicePtr, size uint64) error {
	p, err := d.fn(symMemAddressFree)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemAddressFree(p, C.CUdeviceptr(ptr), C.size_t(size)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemAddressFree(ptr=%#x, size=%d)", uint64(ptr), size)
	}
	return nil
}

// MemMap maps size bytes of h, starting at offset within it, at ptr inside
// a reservation. The mapping is not accessible until MemSetAccess.
func (d *Driver) MemMap(ptr DevicePtr, size, offset uint64, h GenericAllocationHandle) error {
	p, err := d.fn(symMemMap)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemMap(p, C.CUdeviceptr(ptr), C.size_t(size), C.size_t(offset), C.CUmemGenericAllocationHandle(h), 0); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemMap(ptr=%#x, size=%d, offset=%d, handle=%#x)", uint64(ptr), size, offset, uint64(h))
	}
	return nil
}

// MemUnmap unmaps the range [ptr, ptr+size).
func (d *Driver) MemUnmap(ptr DevicePtr, size uint64) error {
	p, err := d.fn(symMemUnmap)
	if err != nil {
		return err
	}
	if r := C.tp_cuMemUnmap(p, C.CUdeviceptr(ptr), C.size_t(size)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemUnmap(ptr=%#x, size=%d)", uint64(ptr), size)
	}
	return nil
}

// MemSetAccess grants each listed device its access to a mapped range.
func (d *Driver) MemSetAccess(ptr DevicePtr, size uint64, access ...Access) error {
	if len(access) == 0 {
		return fmt.Errorf("cuda: cuMemSetAccess(ptr=%#x, size=%d): no access descriptors: %w", uint64(ptr), size, ErrInvalidValue)
	}
	p, err := d.fn(symMemSetAccess)
	if err != nil {
		return err
	}
	desc := make([]C.CUmemAccessDesc, len(access))
	for i, a := range access {
		desc[i].location._type = C.CU_MEM_LOCATION_TYPE_DEVICE
		desc[i].location.id = C.int(a.Device)
		desc[i].flags = C.CUmemAccess_flags(a.Flags)
	}
	if r := C.tp_cuMemSetAccess(p, C.CUdeviceptr(ptr), C.size_t(size), &desc[0], C.size_t(len(desc))); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMemSetAccess(ptr=%#x, size=%d, access=%v)", uint64(ptr), size, access)
	}
	return nil
}

// MulticastGetGranularity is the size unit of a multicast object for prop.
func (d *Driver) MulticastGetGranularity(prop MulticastProp, opt GranularityOption) (uint64, error) {
	p, err := d.fn(symMulticastGetGranularity)
	if err != nil {
		return 0, err
	}
	cp := prop.cProp()
	var g C.size_t
	if r := C.tp_cuMulticastGetGranularity(p, &g, &cp, C.int(opt)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuMulticastGetGranularity(numDevices=%d, size=%d, handleTypes=%s, option=%d)",
			prop.NumDevices, prop.Size, prop.HandleTypes, int(opt))
	}
	return uint64(g), nil
}

// MulticastCreate creates a multicast object for prop.NumDevices devices.
func (d *Driver) MulticastCreate(prop MulticastProp) (GenericAllocationHandle, error) {
	p, err := d.fn(symMulticastCreate)
	if err != nil {
		return 0, err
	}
	cp := prop.cProp()
	var h C.CUmemGenericAllocationHandle
	if r := C.tp_cuMulticastCreate(p, &h, &cp); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuMulticastCreate(numDevices=%d, size=%d, handleTypes=%s)", prop.NumDevices, prop.Size, prop.HandleTypes)
	}
	return GenericAllocationHandle(h), nil
}

// MulticastAddDevice adds dev to the multicast team. Every device must be
// added before any memory is bound.
func (d *Driver) MulticastAddDevice(mc GenericAllocationHandle, dev Device) error {
	p, err := d.fn(symMulticastAddDevice)
	if err != nil {
		return err
	}
	if r := C.tp_cuMulticastAddDevice(p, C.CUmemGenericAllocationHandle(mc), C.CUdevice(dev)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMulticastAddDevice(mc=%#x, device=%d)", uint64(mc), int(dev))
	}
	return nil
}

// MulticastBindMem binds size bytes of mem (from memOffset) at mcOffset of
// the multicast object, for the device that owns mem.
func (d *Driver) MulticastBindMem(mc GenericAllocationHandle, mcOffset uint64, mem GenericAllocationHandle, memOffset, size uint64) error {
	p, err := d.fn(symMulticastBindMem)
	if err != nil {
		return err
	}
	if r := C.tp_cuMulticastBindMem(p, C.CUmemGenericAllocationHandle(mc), C.size_t(mcOffset),
		C.CUmemGenericAllocationHandle(mem), C.size_t(memOffset), C.size_t(size), 0); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMulticastBindMem(mc=%#x, mcOffset=%d, mem=%#x, memOffset=%d, size=%d)",
			uint64(mc), mcOffset, uint64(mem), memOffset, size)
	}
	return nil
}

// MulticastUnbind unbinds dev's memory from [mcOffset, mcOffset+size).
func (d *Driver) MulticastUnbind(mc GenericAllocationHandle, dev Device, mcOffset, size uint64) error {
	p, err := d.fn(symMulticastUnbind)
	if err != nil {
		return err
	}
	if r := C.tp_cuMulticastUnbind(p, C.CUmemGenericAllocationHandle(mc), C.CUdevice(dev), C.size_t(mcOffset), C.size_t(size)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuMulticastUnbind(mc=%#x, device=%d, mcOffset=%d, size=%d)", uint64(mc), int(dev), mcOffset, size)
	}
	return nil
}
