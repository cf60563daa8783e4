package cuda

import (
	"errors"
	"fmt"
	"strconv"
)

// Result is a CUresult code. It implements error and prints with a
// built-in name, so codes read well even when no driver is loaded. Result
// values are comparable, so errors.Is(err, cuda.ErrNotPermitted) works on
// any error returned by this package.
type Result int

// Result codes from cuda.h (CUDA 12.4). Codes that are not listed still work
// as Result values; they print with the driver's name when one is loaded.
const (
	Success                         Result = 0
	ErrInvalidValue                 Result = 1
	ErrOutOfMemory                  Result = 2
	ErrNotInitialized               Result = 3
	ErrDeinitialized                Result = 4
	ErrProfilerDisabled             Result = 5
	ErrStubLibrary                  Result = 34
	ErrDeviceUnavailable            Result = 46
	ErrNoDevice                     Result = 100
	ErrInvalidDevice                Result = 101
	ErrDeviceNotLicensed            Result = 102
	ErrInvalidImage                 Result = 200
	ErrInvalidContext               Result = 201
	ErrMapFailed                    Result = 205
	ErrUnmapFailed                  Result = 206
	ErrAlreadyMapped                Result = 208
	ErrNoBinaryForGPU               Result = 209
	ErrAlreadyAcquired              Result = 210
	ErrNotMapped                    Result = 211
	ErrECCUncorrectable             Result = 214
	ErrUnsupportedLimit             Result = 215
	ErrContextAlreadyInUse          Result = 216
	ErrPeerAccessUnsupported        Result = 217
	ErrInvalidPTX                   Result = 218
	ErrInvalidGraphicsContext       Result = 219
	ErrNVLinkUncorrectable          Result = 220
	ErrJITCompilerNotFound          Result = 221
	ErrUnsupportedPTXVersion        Result = 222
	ErrJITCompilationDisabled       Result = 223
	ErrUnsupportedExecAffinity      Result = 224
	ErrUnsupportedDevsideSync       Result = 225
	ErrInvalidSource                Result = 300
	ErrFileNotFound                 Result = 301
	ErrSharedObjectSymbolNotFound   Result = 302
	ErrSharedObjectInitFailed       Result = 303
	ErrOperatingSystem              Result = 304
	ErrInvalidHandle                Result = 400
	ErrIllegalState                 Result = 401
	ErrLossyQuery                   Result = 402
	ErrNotFound                     Result = 500
	ErrNotReady                     Result = 600
	ErrIllegalAddress               Result = 700
	ErrLaunchOutOfResources         Result = 701
	ErrLaunchTimeout                Result = 702
	ErrLaunchIncompatibleTexturing  Result = 703
	ErrPeerAccessAlreadyEnabled     Result = 704
	ErrPeerAccessNotEnabled         Result = 705
	ErrPrimaryContextActive         Result = 708
	ErrContextIsDestroyed           Result = 709
	ErrAssert                       Result = 710
	ErrTooManyPeers                 Result = 711
	ErrHostMemoryAlreadyRegistered  Result = 712
	ErrHostMemoryNotRegistered      Result = 713
	ErrHardwareStackError           Result = 714
	ErrIllegalInstruction           Result = 715
	ErrMisalignedAddress            Result = 716
	ErrInvalidAddressSpace          Result = 717
	ErrInvalidPC                    Result = 718
	ErrLaunchFailed                 Result = 719
	ErrCooperativeLaunchTooLarge    Result = 720
	ErrNotPermitted                 Result = 800
	ErrNotSupported                 Result = 801
	ErrSystemNotReady               Result = 802
	ErrSystemDriverMismatch         Result = 803
	ErrCompatNotSupportedOnDevice   Result = 804
	ErrMPSConnectionFailed          Result = 805
	ErrMPSRPCFailure                Result = 806
	ErrMPSServerNotReady            Result = 807
	ErrMPSMaxClientsReached         Result = 808
	ErrMPSMaxConnectionsReached     Result = 809
	ErrMPSClientTerminated          Result = 810
	ErrCDPNotSupported              Result = 811
	ErrCDPVersionMismatch           Result = 812
	ErrStreamCaptureUnsupported     Result = 900
	ErrStreamCaptureInvalidated     Result = 901
	ErrStreamCaptureMerge           Result = 902
	ErrStreamCaptureUnmatched       Result = 903
	ErrStreamCaptureUnjoined        Result = 904
	ErrStreamCaptureIsolation       Result = 905
	ErrStreamCaptureImplicit        Result = 906
	ErrCapturedEvent                Result = 907
	ErrStreamCaptureWrongThread     Result = 908
	ErrTimeout                      Result = 909
	ErrGraphExecUpdateFailure       Result = 910
	ErrExternalDevice               Result = 911
	ErrInvalidClusterSize           Result = 912
	ErrFunctionNotLoaded            Result = 913
	ErrInvalidResourceType          Result = 914
	ErrInvalidResourceConfiguration Result = 915
	ErrUnknown                      Result = 999
)

// Error formats as "cuda: NAME (code): message", using the built-in table.
func (r Result) Error() string {
	name, msg := r.builtin()
	return "cuda: " + formatCode(r, name, msg)
}

// String is the cuda.h name, e.g. "CUDA_ERROR_NOT_PERMITTED".
func (r Result) String() string {
	name, _ := r.builtin()
	if name == "" {
		return "CUresult(" + strconv.Itoa(int(r)) + ")"
	}
	return name
}

// formatCode renders "NAME (code): message", leaving out what is unknown.
func formatCode(r Result, name, msg string) string {
	if name == "" {
		name = "CUresult"
	}
	s := name + " (" + strconv.Itoa(int(r)) + ")"
	if msg != "" {
		s += ": " + msg
	}
	return s
}

// builtin returns the cuda.h name and a short description of r. A switch
// rather than a map keeps the table immutable and out of package state.
func (r Result) builtin() (name, msg string) {
	switch r {
	case Success:
		return "CUDA_SUCCESS", "no error"
	case ErrInvalidValue:
		return "CUDA_ERROR_INVALID_VALUE", "invalid argument"
	case ErrOutOfMemory:
		return "CUDA_ERROR_OUT_OF_MEMORY", "out of memory"
	case ErrNotInitialized:
		return "CUDA_ERROR_NOT_INITIALIZED", "initialization error"
	case ErrDeinitialized:
		return "CUDA_ERROR_DEINITIALIZED", "driver shutting down"
	case ErrProfilerDisabled:
		return "CUDA_ERROR_PROFILER_DISABLED", "profiler disabled while using external profiling tool"
	case ErrStubLibrary:
		return "CUDA_ERROR_STUB_LIBRARY", "CUDA driver is a stub library"
	case ErrDeviceUnavailable:
		return "CUDA_ERROR_DEVICE_UNAVAILABLE", "CUDA-capable device(s) is/are busy or unavailable"
	case ErrNoDevice:
		return "CUDA_ERROR_NO_DEVICE", "no CUDA-capable device is detected"
	case ErrInvalidDevice:
		return "CUDA_ERROR_INVALID_DEVICE", "invalid device ordinal"
	case ErrDeviceNotLicensed:
		return "CUDA_ERROR_DEVICE_NOT_LICENSED", "device doesn't have valid Grid license"
	case ErrInvalidImage:
		return "CUDA_ERROR_INVALID_IMAGE", "device kernel image is invalid"
	case ErrInvalidContext:
		return "CUDA_ERROR_INVALID_CONTEXT", "invalid device context"
	case ErrMapFailed:
		return "CUDA_ERROR_MAP_FAILED", "mapping of buffer object failed"
	case ErrUnmapFailed:
		return "CUDA_ERROR_UNMAP_FAILED", "unmapping of buffer object failed"
	case ErrAlreadyMapped:
		return "CUDA_ERROR_ALREADY_MAPPED", "resource already mapped"
	case ErrNoBinaryForGPU:
		return "CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"
	case ErrAlreadyAcquired:
		return "CUDA_ERROR_ALREADY_ACQUIRED", "resource already acquired"
	case ErrNotMapped:
		return "CUDA_ERROR_NOT_MAPPED", "resource not mapped"
	case ErrECCUncorrectable:
		return "CUDA_ERROR_ECC_UNCORRECTABLE", "uncorrectable ECC error encountered"
	case ErrUnsupportedLimit:
		return "CUDA_ERROR_UNSUPPORTED_LIMIT", "limit is not supported on this architecture"
	case ErrContextAlreadyInUse:
		return "CUDA_ERROR_CONTEXT_ALREADY_IN_USE", "exclusive-thread device already in use by a different thread"
	case ErrPeerAccessUnsupported:
		return "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED", "peer access is not supported between these two devices"
	case ErrInvalidPTX:
		return "CUDA_ERROR_INVALID_PTX", "a PTX JIT compilation failed"
	case ErrInvalidGraphicsContext:
		return "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT", "invalid OpenGL or DirectX context"
	case ErrNVLinkUncorrectable:
		return "CUDA_ERROR_NVLINK_UNCORRECTABLE", "uncorrectable NVLink error detected during the execution"
	case ErrJITCompilerNotFound:
		return "CUDA_ERROR_JIT_COMPILER_NOT_FOUND", "PTX JIT compiler library not found"
	case ErrUnsupportedPTXVersion:
		return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION", "the provided PTX was compiled with an unsupported toolchain"
	case ErrJITCompilationDisabled:
		return "CUDA_ERROR_JIT_COMPILATION_DISABLED", "PTX JIT compilation was disabled"
	case ErrUnsupportedExecAffinity:
		return "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY", "the provided execution affinity is not supported"
	case ErrUnsupportedDevsideSync:
		return "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC", "the provided PTX contains unsupported call to cudaDeviceSynchronize"
	case ErrInvalidSource:
		return "CUDA_ERROR_INVALID_SOURCE", "device kernel source is invalid"
	case ErrFileNotFound:
		return "CUDA_ERROR_FILE_NOT_FOUND", "file not found"
	case ErrSharedObjectSymbolNotFound:
		return "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND", "shared object symbol not found"
	case ErrSharedObjectInitFailed:
		return "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED", "shared object initialization failed"
	case ErrOperatingSystem:
		return "CUDA_ERROR_OPERATING_SYSTEM", "OS call failed or operation not supported on this OS"
	case ErrInvalidHandle:
		return "CUDA_ERROR_INVALID_HANDLE", "invalid resource handle"
	case ErrIllegalState:
		return "CUDA_ERROR_ILLEGAL_STATE", "the operation cannot be performed in the present state"
	case ErrLossyQuery:
		return "CUDA_ERROR_LOSSY_QUERY", "attempted introspection would be semantically lossy"
	case ErrNotFound:
		return "CUDA_ERROR_NOT_FOUND", "named symbol not found"
	case ErrNotReady:
		return "CUDA_ERROR_NOT_READY", "device not ready"
	case ErrIllegalAddress:
		return "CUDA_ERROR_ILLEGAL_ADDRESS", "an illegal memory access was encountered"
	case ErrLaunchOutOfResources:
		return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES", "too many resources requested for launch"
	case ErrLaunchTimeout:
		return "CUDA_ERROR_LAUNCH_TIMEOUT", "the launch timed out and was terminated"
	case ErrLaunchIncompatibleTexturing:
		return "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING", "launch uses incompatible texturing mode"
	case ErrPeerAccessAlreadyEnabled:
		return "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED", "peer access is already enabled"
	case ErrPeerAccessNotEnabled:
		return "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED", "peer access has not been enabled"
	case ErrPrimaryContextActive:
		return "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE", "primary context active"
	case ErrContextIsDestroyed:
		return "CUDA_ERROR_CONTEXT_IS_DESTROYED", "context is destroyed"
	case ErrAssert:
		return "CUDA_ERROR_ASSERT", "device-side assert triggered"
	case ErrTooManyPeers:
		return "CUDA_ERROR_TOO_MANY_PEERS", "peer mapping resources exhausted"
	case ErrHostMemoryAlreadyRegistered:
		return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", "part or all of the requested memory range is already mapped"
	case ErrHostMemoryNotRegistered:
		return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED", "pointer does not correspond to a registered memory region"
	case ErrHardwareStackError:
		return "CUDA_ERROR_HARDWARE_STACK_ERROR", "hardware stack error"
	case ErrIllegalInstruction:
		return "CUDA_ERROR_ILLEGAL_INSTRUCTION", "an illegal instruction was encountered"
	case ErrMisalignedAddress:
		return "CUDA_ERROR_MISALIGNED_ADDRESS", "misaligned address"
	case ErrInvalidAddressSpace:
		return "CUDA_ERROR_INVALID_ADDRESS_SPACE", "operation not supported on global/shared address space"
	case ErrInvalidPC:
		return "CUDA_ERROR_INVALID_PC", "invalid program counter"
	case ErrLaunchFailed:
		return "CUDA_ERROR_LAUNCH_FAILED", "unspecified launch failure"
	case ErrCooperativeLaunchTooLarge:
		return "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE", "too many blocks in cooperative launch"
	case ErrNotPermitted:
		return "CUDA_ERROR_NOT_PERMITTED", "operation not permitted"
	case ErrNotSupported:
		return "CUDA_ERROR_NOT_SUPPORTED", "operation not supported"
	case ErrSystemNotReady:
		return "CUDA_ERROR_SYSTEM_NOT_READY", "system not yet initialized"
	case ErrSystemDriverMismatch:
		return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "system has unsupported display driver / cuda driver combination"
	case ErrCompatNotSupportedOnDevice:
		return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE", "forward compatibility was attempted on non supported HW"
	case ErrMPSConnectionFailed:
		return "CUDA_ERROR_MPS_CONNECTION_FAILED", "MPS client failed to connect to the MPS control daemon or the MPS server"
	case ErrMPSRPCFailure:
		return "CUDA_ERROR_MPS_RPC_FAILURE", "the remote procedural call between the MPS server and the MPS client failed"
	case ErrMPSServerNotReady:
		return "CUDA_ERROR_MPS_SERVER_NOT_READY", "MPS server is not ready to accept new MPS client requests"
	case ErrMPSMaxClientsReached:
		return "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED", "the hardware resources required to create MPS client have been exhausted"
	case ErrMPSMaxConnectionsReached:
		return "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED", "the hardware resources required to support device connections have been exhausted"
	case ErrMPSClientTerminated:
		return "CUDA_ERROR_MPS_CLIENT_TERMINATED", "the MPS client has been terminated by the server"
	case ErrCDPNotSupported:
		return "CUDA_ERROR_CDP_NOT_SUPPORTED", "the module is using CUDA Dynamic Parallelism, but the current configuration does not support it"
	case ErrCDPVersionMismatch:
		return "CUDA_ERROR_CDP_VERSION_MISMATCH", "unsupported interaction between different versions of CUDA Dynamic Parallelism"
	case ErrStreamCaptureUnsupported:
		return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED", "operation not permitted when stream is capturing"
	case ErrStreamCaptureInvalidated:
		return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED", "operation failed due to a previous error during capture"
	case ErrStreamCaptureMerge:
		return "CUDA_ERROR_STREAM_CAPTURE_MERGE", "operation would result in a merge of separate capture sequences"
	case ErrStreamCaptureUnmatched:
		return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED", "capture was not ended in the same stream as it began"
	case ErrStreamCaptureUnjoined:
		return "CUDA_ERROR_STREAM_CAPTURE_UNJOINED", "capturing stream has unjoined work"
	case ErrStreamCaptureIsolation:
		return "CUDA_ERROR_STREAM_CAPTURE_ISOLATION", "dependency created on uncaptured work in another stream"
	case ErrStreamCaptureImplicit:
		return "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT", "operation would make the legacy stream depend on a capturing blocking stream"
	case ErrCapturedEvent:
		return "CUDA_ERROR_CAPTURED_EVENT", "operation not permitted on an event last recorded in a capturing stream"
	case ErrStreamCaptureWrongThread:
		return "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD", "attempt to terminate a thread-local capture sequence from another thread"
	case ErrTimeout:
		return "CUDA_ERROR_TIMEOUT", "wait operation timed out"
	case ErrGraphExecUpdateFailure:
		return "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE", "the graph update was not performed because it included changes which violated constraints specific to instantiated graph update"
	case ErrExternalDevice:
		return "CUDA_ERROR_EXTERNAL_DEVICE", "an async error has occurred in an external entity outside of CUDA"
	case ErrInvalidClusterSize:
		return "CUDA_ERROR_INVALID_CLUSTER_SIZE", "a kernel launch error has occurred due to cluster misconfiguration"
	case ErrFunctionNotLoaded:
		return "CUDA_ERROR_FUNCTION_NOT_LOADED", "the function handle is not loaded when calling an API that requires a loaded function"
	case ErrInvalidResourceType:
		return "CUDA_ERROR_INVALID_RESOURCE_TYPE", "one or more resources passed in are not valid resource types for the operation"
	case ErrInvalidResourceConfiguration:
		return "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION", "one or more resources are insufficient or non-applicable for the operation"
	case ErrUnknown:
		return "CUDA_ERROR_UNKNOWN", "unknown error"
	}
	return "", ""
}

// Error is a failed driver call: the operation with its arguments, the
// result code, and the name and message the loaded driver gave for it
// (empty when the driver has none, e.g. for codes newer than it).
// errors.Is(err, ErrNotPermitted) and errors.As(err, &r Result) see Code.
type Error struct {
	Op      string // e.g. "cuMemCreate(size=2097152, device=1)"
	Code    Result
	Name    string // from cuGetErrorName
	Message string // from cuGetErrorString
}

func (e *Error) Error() string {
	name, msg := e.Name, e.Message
	if name == "" || msg == "" {
		bn, bm := e.Code.builtin()
		if name == "" {
			name = bn
		}
		if msg == "" {
			msg = bm
		}
	}
	return "cuda: " + e.Op + ": " + formatCode(e.Code, name, msg)
}

// Unwrap exposes the Result so that errors.Is works with the Err* codes.
func (e *Error) Unwrap() error { return e.Code }

// Sentinels for failures that are not driver result codes.
var (
	// ErrNoDriver: the driver library could not be loaded (no NVIDIA
	// driver on this machine). The wrapping error carries dlerror's text.
	ErrNoDriver = errors.New("cuda: no CUDA driver")
	// ErrMissingSymbol: the loaded driver lacks a function this package
	// needs (too old a driver). See *SymbolError for the name.
	ErrMissingSymbol = errors.New("cuda: driver function not found")
	// ErrClosed: a method was called after Close.
	ErrClosed = errors.New("cuda: driver closed")
)

// SymbolError names a driver function that dlsym could not find.
type SymbolError struct {
	Library string
	Symbol  string
	Detail  string // dlerror text, if any
}

func (e *SymbolError) Error() string {
	s := fmt.Sprintf("cuda: %s has no %s", e.Library, e.Symbol)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// Is makes errors.Is(err, ErrMissingSymbol) true.
func (e *SymbolError) Is(target error) bool { return target == ErrMissingSymbol }

// Code returns the driver result code inside err, if there is one.
func Code(err error) (Result, bool) {
	var r Result
	if errors.As(err, &r) {
		return r, true
	}
	return 0, false
}

// IsNotPermitted reports CUDA_ERROR_NOT_PERMITTED (800), which a FABRIC
// allocation returns where no IMEX channel exists.
func IsNotPermitted(err error) bool { return errors.Is(err, ErrNotPermitted) }

// IsNotSupported reports CUDA_ERROR_NOT_SUPPORTED (801).
func IsNotSupported(err error) bool { return errors.Is(err, ErrNotSupported) }

// IsOutOfMemory reports CUDA_ERROR_OUT_OF_MEMORY (2).
func IsOutOfMemory(err error) bool { return errors.Is(err, ErrOutOfMemory) }

// IsNoDevice reports CUDA_ERROR_NO_DEVICE (100): a driver without GPUs.
func IsNoDevice(err error) bool { return errors.Is(err, ErrNoDevice) }
