package cuda

/*
#include <stdlib.h>
#include "trampolines.h"
*/
import "C"

import (
	"fmt"
	"unsafe"
)

// MaxKernelParams is the most parameters one LaunchKernelEx takes (the
// trampoline builds the pointer array on the C stack).
const MaxKernelParams = 256

// Compile-time check that MaxKernelParams equals TP_MAX_KERNEL_PARAMS in
// trampolines.h: either difference going negative overflows uint.
const (
	_ = uint(MaxKernelParams - C.TP_MAX_KERNEL_PARAMS)
	_ = uint(C.TP_MAX_KERNEL_PARAMS - MaxKernelParams)
)

// ModuleLoadData loads a module from a fatbin, cubin or PTX image. The
// image is copied into C memory, NUL-terminated (PTX needs it), for the
// duration of the call.
func (d *Driver) ModuleLoadData(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, fmt.Errorf("cuda: cuModuleLoadData: empty image: %w", ErrInvalidImage)
	}
	p, err := d.fn(symModuleLoadData)
	if err != nil {
		return 0, err
	}
	cimg := C.malloc(C.size_t(len(image) + 1))
	if cimg == nil {
		return 0, fmt.Errorf("cuda: cuModuleLoadData(bytes=%d): malloc: %w", len(image), ErrOutOfMemory)
	}
	defer C.free(cimg)
	buf := unsafe.Slice((*byte)(cimg), len(image)+1)
	copy(buf, image)
	buf[len(image)] = 0
	var m C.uintptr_t
	if r := C.tp_cuModuleLoadData(p, &m, cimg); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuModuleLoadData(bytes=%d)", len(image))
	}
	return Module(m), nil
}

// ModuleUnload unloads m; its functions become invalid.
func (d *Driver) ModuleUnload(m Module) error {
	p, err := d.fn(symModuleUnload)
	if err != nil {
		return err
	}
	if r := C.tp_cuModuleUnload(p, C.uintptr_t(m)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuModuleUnload(module=%#x)", uintptr(m))
	}
	return nil
}

// ModuleGetFunction looks a kernel up by its (mangled or extern "C") name.
func (d *Driver) ModuleGetFunction(m Module, name string) (Function, error) {
	p, err := d.fn(symModuleGetFunction)
	if err != nil {
		return 0, err
	}
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	var f C.uintptr_t
	if r := C.tp_cuModuleGetFunction(p, &f, C.uintptr_t(m), cname); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuModuleGetFunction(module=%#x, name=%q)", uintptr(m), name)
	}
	return Function(f), nil
}

// FuncSetAttribute sets an attribute of f, e.g. the dynamic shared memory
// limit a launch needs above 48 KiB.
func (d *Driver) FuncSetAttribute(f Function, attr FuncAttribute, v int) error {
	p, err := d.fn(symFuncSetAttribute)
	if err != nil {
		return err
	}
	if r := C.tp_cuFuncSetAttribute(p, C.uintptr_t(f), C.int(attr), C.int(v)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuFuncSetAttribute(func=%#x, attr=%d, value=%d)", uintptr(f), int(attr), v)
	}
	return nil
}

// FuncGetAttribute reads an attribute of f.
func (d *Driver) FuncGetAttribute(f Function, attr FuncAttribute) (int, error) {
	p, err := d.fn(symFuncGetAttribute)
	if err != nil {
		return 0, err
	}
	var v C.int
	if r := C.tp_cuFuncGetAttribute(p, &v, C.int(attr), C.uintptr_t(f)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuFuncGetAttribute(func=%#x, attr=%d)", uintptr(f), int(attr))
	}
	return int(v), nil
}

// LaunchKernelEx launches f with cuLaunchKernelEx. Each element of params
// is the bytes of one kernel parameter, in order; a kernel that takes one
// struct by value gets one element (see Params for building it). The
// values are copied into C memory for the call, and the driver copies them
// again before it returns, so params may be reused at once.
func (d *Driver) LaunchKernelEx(cfg LaunchConfig, f Function, params ...[]byte) error {
	p, err := d.fn(symLaunchKernelEx)
	if err != nil {
		return err
	}
	if len(params) > MaxKernelParams {
		return fmt.Errorf("cuda: cuLaunchKernelEx: %d parameters, at most %d: %w", len(params), MaxKernelParams, ErrInvalidValue)
	}
	var l C.tp_launch
	for i := 0; i < 3; i++ {
		l.grid[i] = C.uint(dim(cfg.Grid[i], i))
		l.block[i] = C.uint(dim(cfg.Block[i], i))
		if cfg.ClusterDim[0] != 0 {
			l.cluster[i] = C.uint(dim(cfg.ClusterDim[i], i))
		}
	}
	switch {
	case cfg.ClusterPolicy < ClusterPolicyDefault || cfg.ClusterPolicy > ClusterPolicyLoadBalancing:
		return fmt.Errorf("cuda: cuLaunchKernelEx: cluster scheduling policy %d is not one cuda.h defines: %w", cfg.ClusterPolicy, ErrInvalidValue)
	case cfg.ClusterPolicy != ClusterPolicyDefault && cfg.ClusterDim[0] == 0:
		return fmt.Errorf("cuda: cuLaunchKernelEx: cluster scheduling policy %d without a cluster dimension: %w", cfg.ClusterPolicy, ErrInvalidValue)
	}
	l.clusterPolicy = C.int(cfg.ClusterPolicy)
	if cfg.SharedCarveout < 0 || cfg.SharedCarveout > 101 {
		return fmt.Errorf("cuda: cuLaunchKernelEx: shared memory carveout %d is not 0 (unset) or 1..101 (Carveout(0..100)): %w", cfg.SharedCarveout, ErrInvalidValue)
	}
	l.carveout = C.int(cfg.SharedCarveout - 1)
	l.sharedMem = C.uint(cfg.SharedMem)
	if cfg.ProgrammaticSerialization {
		l.programmatic = 1
	}
	l.stream = C.uintptr_t(cfg.Stream)

	// One C allocation: n uint32 offsets, then each value 16-byte aligned.
	n := len(params)
	var mem, blob unsafe.Pointer
	if n > 0 {
		hdr := align16(4 * n)
		total := hdr
		for i, b := range params {
			if len(b) == 0 {
				return fmt.Errorf("cuda: cuLaunchKernelEx: parameter %d is empty: %w", i, ErrInvalidValue)
			}
			total += align16(len(b))
		}
		mem = C.malloc(C.size_t(total))
		if mem == nil {
			return fmt.Errorf("cuda: cuLaunchKernelEx: malloc(%d): %w", total, ErrOutOfMemory)
		}
		defer C.free(mem)
		offsets := unsafe.Slice((*uint32)(mem), n)
		blob = unsafe.Add(mem, hdr)
		values := unsafe.Slice((*byte)(blob), total-hdr)
		off := 0
		for i, b := range params {
			offsets[i] = uint32(off)
			copy(values[off:], b)
			off += align16(len(b))
		}
	}
	if r := C.tp_cuLaunchKernelEx(p, &l, C.uintptr_t(f), blob, (*C.uint32_t)(mem), C.uint(n)); r != C.CUDA_SUCCESS {
		carveout := "unset"
		if cfg.SharedCarveout > 0 {
			carveout = fmt.Sprintf("%d%%", cfg.SharedCarveout-1)
		}
		return d.errorf(r, "cuLaunchKernelEx(func=%#x, grid=%v, block=%v, smem=%d, stream=%#x, pdl=%t, cluster=%v, policy=%d, carveout=%s, params=%d)",
			uintptr(f), cfg.Grid, cfg.Block, cfg.SharedMem, uintptr(cfg.Stream), cfg.ProgrammaticSerialization, cfg.ClusterDim, cfg.ClusterPolicy, carveout, n)
	}
	return nil
}

// dim turns a zero Y or Z dimension into 1 (X stays as given: zero is a
// caller error the driver reports).
func dim(v uint32, axis int) uint32 {
	if v == 0 && axis > 0 {
		return 1
	}
	return v
}

func align16(n int) int { return (n + 15) &^ 15 }
