package cuda

/*
#include "trampolines.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"unsafe"
)

// DefaultLibrary is the soname Open loads: the driver API library that the
// NVIDIA driver installs (never the toolkit's stub).
const DefaultLibrary = "libcuda.so.1"

// sym indexes Driver.fns. The names live in symbolTable.
type sym int

const (
	symGetErrorName sym = iota
	symGetErrorString
	symInit
	symDriverGetVersion
	symDeviceGetCount
	symDeviceGet
	symDeviceGetAttribute
	symDeviceGetName
	symDeviceGetPCIBusID
	symDeviceGetUUID
	symDeviceTotalMem
	symDeviceCanAccessPeer
	symDevicePrimaryCtxRetain
	symDevicePrimaryCtxRelease
	symCtxSetCurrent
	symCtxGetCurrent
	symCtxSynchronize
	symStreamCreate
	symStreamDestroy
	symStreamSynchronize
	symStreamWaitEvent
	symEventCreate
	symEventDestroy
	symEventRecord
	symEventSynchronize
	symEventElapsedTime
	symMemGetInfo
	symMemAlloc
	symMemFree
	symMemHostAlloc
	symMemFreeHost
	symMemHostGetDevicePointer
	symMemcpyHtoD
	symMemcpyDtoH
	symMemcpyDtoD
	symMemcpyDtoDAsync
	symMemsetD8
	symMemsetD32
	symMemsetD8Async
	symMemsetD32Async
	symModuleLoadData
	symModuleUnload
	symModuleGetFunction
	symFuncSetAttribute
	symFuncGetAttribute
	symLaunchKernelEx
	symStreamBeginCapture
	symStreamEndCapture
	symGraphInstantiate
	symGraphUpload
	symGraphLaunch
	symGraphExecDestroy
	symGraphDestroy
	symGraphDebugDotPrint
	symMemCreate
	symMemRelease
	symMemExportToShareableHandle
	symMemImportFromShareableHandle
	symMemAddressReserve
	symMemAddressFree
	symMemMap
	symMemUnmap
	symMemSetAccess
	symMemGetAllocationGranularity
	symMulticastCreate
	symMulticastAddDevice
	symMulticastBindMem
	symMulticastUnbind
	symMulticastGetGranularity
	numSyms
)

type symSpec struct {
	name string
	// optional symbols may be missing (older drivers); calls that need
	// them then fail with a *SymbolError instead of Open failing.
	optional bool
}

// symbolTable maps every sym to the exact exported name. Versioned names
// (_v2) are spelled out because cuda.h's #defines are not available here;
// the per-thread-stream variants (_ptsz/_ptds) are deliberately not used.
// Built on each call so that no package state exists to be mutated.
func symbolTable() *[numSyms]symSpec {
	return &[numSyms]symSpec{
		symGetErrorName:                 {name: "cuGetErrorName"},
		symGetErrorString:               {name: "cuGetErrorString"},
		symInit:                         {name: "cuInit"},
		symDriverGetVersion:             {name: "cuDriverGetVersion"},
		symDeviceGetCount:               {name: "cuDeviceGetCount"},
		symDeviceGet:                    {name: "cuDeviceGet"},
		symDeviceGetAttribute:           {name: "cuDeviceGetAttribute"},
		symDeviceGetName:                {name: "cuDeviceGetName"},
		symDeviceGetPCIBusID:            {name: "cuDeviceGetPCIBusId"},
		symDeviceGetUUID:                {name: "cuDeviceGetUuid_v2"},
		symDeviceTotalMem:               {name: "cuDeviceTotalMem_v2"},
		symDeviceCanAccessPeer:          {name: "cuDeviceCanAccessPeer"},
		symDevicePrimaryCtxRetain:       {name: "cuDevicePrimaryCtxRetain"},
		symDevicePrimaryCtxRelease:      {name: "cuDevicePrimaryCtxRelease_v2"},
		symCtxSetCurrent:                {name: "cuCtxSetCurrent"},
		symCtxGetCurrent:                {name: "cuCtxGetCurrent"},
		symCtxSynchronize:               {name: "cuCtxSynchronize"},
		symStreamCreate:                 {name: "cuStreamCreate"},
		symStreamDestroy:                {name: "cuStreamDestroy_v2"},
		symStreamSynchronize:            {name: "cuStreamSynchronize"},
		symStreamWaitEvent:              {name: "cuStreamWaitEvent"},
		symEventCreate:                  {name: "cuEventCreate"},
		symEventDestroy:                 {name: "cuEventDestroy_v2"},
		symEventRecord:                  {name: "cuEventRecord"},
		symEventSynchronize:             {name: "cuEventSynchronize"},
		symEventElapsedTime:             {name: "cuEventElapsedTime"},
		symMemGetInfo:                   {name: "cuMemGetInfo_v2"},
		symMemAlloc:                     {name: "cuMemAlloc_v2"},
		symMemFree:                      {name: "cuMemFree_v2"},
		symMemHostAlloc:                 {name: "cuMemHostAlloc"},
		symMemFreeHost:                  {name: "cuMemFreeHost"},
		symMemHostGetDevicePointer:      {name: "cuMemHostGetDevicePointer_v2"},
		symMemcpyHtoD:                   {name: "cuMemcpyHtoD_v2"},
		symMemcpyDtoH:                   {name: "cuMemcpyDtoH_v2"},
		symMemcpyDtoD:                   {name: "cuMemcpyDtoD_v2"},
		symMemcpyDtoDAsync:              {name: "cuMemcpyDtoDAsync_v2"},
		symMemsetD8:                     {name: "cuMemsetD8_v2"},
		symMemsetD32:                    {name: "cuMemsetD32_v2"},
		symMemsetD8Async:                {name: "cuMemsetD8Async"},
		symMemsetD32Async:               {name: "cuMemsetD32Async"},
		symModuleLoadData:               {name: "cuModuleLoadData"},
		symModuleUnload:                 {name: "cuModuleUnload"},
		symModuleGetFunction:            {name: "cuModuleGetFunction"},
		symFuncSetAttribute:             {name: "cuFuncSetAttribute"},
		symFuncGetAttribute:             {name: "cuFuncGetAttribute"},
		symLaunchKernelEx:               {name: "cuLaunchKernelEx"},
		symStreamBeginCapture:           {name: "cuStreamBeginCapture_v2"},
		symStreamEndCapture:             {name: "cuStreamEndCapture"},
		symGraphInstantiate:             {name: "cuGraphInstantiateWithFlags"},
		symGraphUpload:                  {name: "cuGraphUpload"},
		symGraphLaunch:                  {name: "cuGraphLaunch"},
		symGraphExecDestroy:             {name: "cuGraphExecDestroy"},
		symGraphDestroy:                 {name: "cuGraphDestroy"},
		symGraphDebugDotPrint:           {name: "cuGraphDebugDotPrint"},
		symMemCreate:                    {name: "cuMemCreate"},
		symMemRelease:                   {name: "cuMemRelease"},
		symMemExportToShareableHandle:   {name: "cuMemExportToShareableHandle"},
		symMemImportFromShareableHandle: {name: "cuMemImportFromShareableHandle"},
		symMemAddressReserve:            {name: "cuMemAddressReserve"},
		symMemAddressFree:               {name: "cuMemAddressFree"},
		symMemMap:                       {name: "cuMemMap"},
		symMemUnmap:                     {name: "cuMemUnmap"},
		symMemSetAccess:                 {name: "cuMemSetAccess"},
		symMemGetAllocationGranularity:  {name: "cuMemGetAllocationGranularity"},
		symMulticastCreate:              {name: "cuMulticastCreate", optional: true},
		symMulticastAddDevice:           {name: "cuMulticastAddDevice", optional: true},
		symMulticastBindMem:             {name: "cuMulticastBindMem", optional: true},
		symMulticastUnbind:              {name: "cuMulticastUnbind", optional: true},
		symMulticastGetGranularity:      {name: "cuMulticastGetGranularity", optional: true},
	}
}

// Driver is the CUDA driver API of one dlopened libcuda. Its methods may be
// called from any goroutine, but CUDA's current context is per OS thread:
// see BindContext. Close must not race with other methods.
type Driver struct {
	lib *library
	fns [numSyms]unsafe.Pointer
}

// Open loads libcuda.so.1. On a machine without the NVIDIA driver it
// returns an error that wraps ErrNoDriver. It does not call cuInit.
func Open() (*Driver, error) { return OpenLibrary(DefaultLibrary) }

// OpenLibrary loads the driver API from path (a soname or a file path).
// Every required function must be present, or the error (a *SymbolError,
// errors.Is ErrMissingSymbol) names the first one that is not.
func OpenLibrary(path string) (*Driver, error) {
	lib, err := openLibrary(path)
	if err != nil {
		return nil, fmt.Errorf("%w: dlopen %s: %w", ErrNoDriver, path, err)
	}
	d := &Driver{lib: lib}
	for i, spec := range symbolTable() {
		p, err := lib.lookup(spec.name)
		if err != nil {
			if spec.optional {
				continue
			}
			cerr := lib.close()
			serr := &SymbolError{Library: path, Symbol: spec.name, Detail: err.Error()}
			if cerr != nil {
				return nil, fmt.Errorf("%w (and dlclose: %v)", serr, cerr)
			}
			return nil, serr
		}
		d.fns[i] = p
	}
	return d, nil
}

// Path is the library this Driver was opened from.
func (d *Driver) Path() string {
	if d.lib == nil {
		return ""
	}
	return d.lib.path
}

// Close dlcloses the library. Everything created through the Driver must
// be released first; using any handle afterwards is undefined. Close is
// idempotent; methods called after it return ErrClosed.
func (d *Driver) Close() error {
	if d.lib == nil {
		return nil
	}
	lib := d.lib
	d.lib = nil
	d.fns = [numSyms]unsafe.Pointer{}
	if err := lib.close(); err != nil {
		return fmt.Errorf("cuda: dlclose %s: %w", lib.path, err)
	}
	return nil
}

// HasMulticast reports whether the driver exports the multicast object
// API (CUDA 12.1+). It says nothing about whether the devices support it:
// see AttrMulticastSupported.
func (d *Driver) HasMulticast() bool {
	for _, s := range []sym{symMulticastCreate, symMulticastAddDevice, symMulticastBindMem,
		symMulticastUnbind, symMulticastGetGranularity} {
		if d.fns[s] == nil {
			return false
		}
	}
	return true
}

// fn returns the function pointer for s, or why it cannot be called.
func (d *Driver) fn(s sym) (unsafe.Pointer, error) {
	if d.lib == nil {
		return nil, ErrClosed
	}
	if p := d.fns[s]; p != nil {
		return p, nil
	}
	return nil, &SymbolError{Library: d.lib.path, Symbol: symbolTable()[s].name}
}

// errorf turns a failed CUresult into an *Error naming the operation, with
// the driver's own name and message for the code. Callers invoke it only
// on failure, so formatting costs nothing on the fast path.
func (d *Driver) errorf(r C.CUresult, format string, args ...any) error {
	e := &Error{Op: fmt.Sprintf(format, args...), Code: Result(r)}
	e.Name, e.Message = d.describe(e.Code)
	return e
}

// describe asks the driver for the name and message of r; empty strings
// when it does not know r (then Error falls back to the built-in table).
func (d *Driver) describe(r Result) (name, msg string) {
	if d.lib == nil {
		return "", ""
	}
	var s *C.char
	if p := d.fns[symGetErrorName]; p != nil && C.tp_cuGetErrorName(p, C.CUresult(r), &s) == C.CUDA_SUCCESS && s != nil {
		name = C.GoString(s)
	}
	s = nil
	if p := d.fns[symGetErrorString]; p != nil && C.tp_cuGetErrorString(p, C.CUresult(r), &s) == C.CUDA_SUCCESS && s != nil {
		msg = C.GoString(s)
	}
	return name, msg
}

// BindContext locks the calling goroutine to its OS thread and makes ctx
// current there, because CUDA's current context belongs to a thread and a
// goroutine may otherwise move between threads between two calls. Call the
// returned function (once) to unlock the thread when done.
func (d *Driver) BindContext(ctx Context) (unbind func(), err error) {
	runtime.LockOSThread()
	if err := d.CtxSetCurrent(ctx); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	return runtime.UnlockOSThread, nil
}
