package cuda

import (
	"fmt"
	"strings"
)

// Handles are plain integers holding the driver's opaque pointers, so that
// Go never does pointer arithmetic on them and fakes can mint their own.
type (
	// Device is a CUdevice (a device ordinal as the driver numbers them).
	Device int
	// Context is a CUcontext.
	Context uintptr
	// Stream is a CUstream; 0 is the legacy default stream.
	Stream uintptr
	// Event is a CUevent.
	Event uintptr
	// Module is a CUmodule.
	Module uintptr
	// Function is a CUfunction.
	Function uintptr
	// Graph is a CUgraph.
	Graph uintptr
	// GraphExec is a CUgraphExec.
	GraphExec uintptr
	// DevicePtr is a CUdeviceptr.
	DevicePtr uint64
	// GenericAllocationHandle is a CUmemGenericAllocationHandle (physical
	// memory from MemCreate, or a multicast object).
	GenericAllocationHandle uint64
	// FabricHandle is a CUmemFabricHandle: opaque bytes that another process
	// (on this node or across the NVLink fabric) imports.
	FabricHandle [64]byte
	// UUID is a device's CUuuid.
	UUID [16]byte
)

func (u UUID) String() string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// DeviceAttribute is a CUdevice_attribute.
type DeviceAttribute int

// Device attributes (values from cuda.h).
const (
	AttrMaxThreadsPerBlock                DeviceAttribute = 1
	AttrMaxSharedMemoryPerBlock           DeviceAttribute = 8
	AttrWarpSize                          DeviceAttribute = 10
	AttrClockRate                         DeviceAttribute = 13
	AttrMultiprocessorCount               DeviceAttribute = 16
	AttrPCIBusID                          DeviceAttribute = 33
	AttrPCIDeviceID                       DeviceAttribute = 34
	AttrMemoryClockRate                   DeviceAttribute = 36
	AttrGlobalMemoryBusWidth              DeviceAttribute = 37
	AttrL2CacheSize                       DeviceAttribute = 38
	AttrMaxThreadsPerMultiprocessor       DeviceAttribute = 39
	AttrUnifiedAddressing                 DeviceAttribute = 41
	AttrPCIDomainID                       DeviceAttribute = 50
	AttrComputeCapabilityMajor            DeviceAttribute = 75
	AttrComputeCapabilityMinor            DeviceAttribute = 76
	AttrMaxSharedMemoryPerMultiprocessor  DeviceAttribute = 81
	AttrCooperativeLaunch                 DeviceAttribute = 95
	AttrMaxSharedMemoryPerBlockOptin      DeviceAttribute = 97
	AttrVirtualMemoryManagementSupported  DeviceAttribute = 102
	AttrHandleTypePOSIXFDSupported        DeviceAttribute = 103
	AttrMaxBlocksPerMultiprocessor        DeviceAttribute = 106
	AttrGPUDirectRDMAWithCUDAVMMSupported DeviceAttribute = 110
	AttrClusterLaunch                     DeviceAttribute = 120
	AttrHandleTypeFabricSupported         DeviceAttribute = 128
	AttrMulticastSupported                DeviceAttribute = 132
)

// FuncAttribute is a CUfunction_attribute.
type FuncAttribute int

// Function attributes (values from cuda.h).
const (
	FuncAttrMaxThreadsPerBlock            FuncAttribute = 0
	FuncAttrSharedSizeBytes               FuncAttribute = 1
	FuncAttrLocalSizeBytes                FuncAttribute = 3
	FuncAttrNumRegs                       FuncAttribute = 4
	FuncAttrPTXVersion                    FuncAttribute = 5
	FuncAttrBinaryVersion                 FuncAttribute = 6
	FuncAttrMaxDynamicSharedSizeBytes     FuncAttribute = 8
	FuncAttrPreferredSharedMemoryCarveout FuncAttribute = 9
	FuncAttrNonPortableClusterSizeAllowed FuncAttribute = 14
)

// StreamFlags are CUstream_flags.
type StreamFlags uint32

const (
	StreamDefault     StreamFlags = 0x0
	StreamNonBlocking StreamFlags = 0x1 // no implicit sync with the legacy default stream
)

// EventFlags are CUevent_flags.
type EventFlags uint32

const (
	EventDefault       EventFlags = 0x0
	EventBlockingSync  EventFlags = 0x1
	EventDisableTiming EventFlags = 0x2
)

// HostAllocFlags are the CU_MEMHOSTALLOC_* flags of MemHostAlloc.
type HostAllocFlags uint32

const (
	HostAllocPortable      HostAllocFlags = 0x01
	HostAllocDeviceMap     HostAllocFlags = 0x02
	HostAllocWriteCombined HostAllocFlags = 0x04
)

// CaptureMode is a CUstreamCaptureMode.
type CaptureMode int

const (
	CaptureModeGlobal      CaptureMode = 0
	CaptureModeThreadLocal CaptureMode = 1
	CaptureModeRelaxed     CaptureMode = 2
)

// GraphInstantiateFlags are CUgraphInstantiate_flags.
type GraphInstantiateFlags uint64

const (
	GraphInstantiateAutoFreeOnLaunch GraphInstantiateFlags = 1
	GraphInstantiateUseNodePriority  GraphInstantiateFlags = 8
)

// HandleType is a CUmemAllocationHandleType bit set.
type HandleType uint32

const (
	HandleTypeNone    HandleType = 0x0
	HandleTypePOSIXFD HandleType = 0x1 // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
	HandleTypeFabric  HandleType = 0x8 // CU_MEM_HANDLE_TYPE_FABRIC
)

func (h HandleType) String() string {
	if h == HandleTypeNone {
		return "NONE"
	}
	var parts []string
	if h&HandleTypePOSIXFD != 0 {
		parts = append(parts, "POSIX_FD")
		h &^= HandleTypePOSIXFD
	}
	if h&HandleTypeFabric != 0 {
		parts = append(parts, "FABRIC")
		h &^= HandleTypeFabric
	}
	if h != 0 {
		parts = append(parts, fmt.Sprintf("%#x", uint32(h)))
	}
	return strings.Join(parts, "|")
}

// AccessFlags are CUmemAccess_flags.
type AccessFlags uint32

const (
	AccessNone      AccessFlags = 0x0
	AccessRead      AccessFlags = 0x1
	AccessReadWrite AccessFlags = 0x3
)

// GranularityOption selects CU_MEM_ALLOC_GRANULARITY_* or
// CU_MULTICAST_GRANULARITY_* (the two enums share their values).
type GranularityOption int

const (
	GranularityMinimum     GranularityOption = 0
	GranularityRecommended GranularityOption = 1
)

// AllocationProp describes pinned device memory for MemCreate and
// MemGetAllocationGranularity.
type AllocationProp struct {
	Device      Device
	HandleTypes HandleType // which exports MemCreate must allow
	// GPUDirectRDMA sets allocFlags.gpuDirectRDMACapable.
	GPUDirectRDMA bool
}

// MulticastProp describes a multicast object (CUmulticastObjectProp).
type MulticastProp struct {
	NumDevices  int
	Size        uint64 // bytes that each device binds at most
	HandleTypes HandleType
}

// Access grants a device access to a mapped range (CUmemAccessDesc).
type Access struct {
	Device Device
	Flags  AccessFlags
}

// LaunchConfig is what LaunchKernelEx needs besides the function and its
// parameters. Zero Y and Z dimensions mean 1.
type LaunchConfig struct {
	Grid, Block [3]uint32
	SharedMem   uint32 // dynamic shared memory bytes
	Stream      Stream
	// ProgrammaticSerialization sets CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
	// letting this kernel start before the previous one in the stream ends
	// (it waits with griddepcontrol.wait).
	ProgrammaticSerialization bool
	// ClusterDim sets CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION unless X is 0.
	ClusterDim [3]uint32
	// ClusterPolicy sets CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE
	// unless it is ClusterPolicyDefault: how the driver places a cluster
	// launch's clusters on the GPU. A launch without ClusterDim may not set it.
	ClusterPolicy ClusterSchedulingPolicy
	// SharedCarveout sets CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT
	// to SharedCarveout-1 percent when it is 1..101: the part of the SM's
	// unified L1/shared memory this launch would like as shared memory, a
	// hint (0 %: the most L1, 100 %: the most shared memory). 0 leaves the
	// attribute unset, so the function's own preference (by default, the
	// driver's choice) applies.
	SharedCarveout int
}

// Carveout is the LaunchConfig.SharedCarveout that asks for pct percent
// (0..100) of the unified L1/shared memory as shared memory; for any other
// pct it is a value LaunchKernelEx rejects.
func Carveout(pct int) int {
	if pct < 0 || pct > 100 {
		return -1
	}
	return pct + 1
}

// ClusterSchedulingPolicy is CUclusterSchedulingPolicy.
type ClusterSchedulingPolicy int32

// The cluster scheduling policies (CU_CLUSTER_SCHEDULING_POLICY_*).
const (
	ClusterPolicyDefault       ClusterSchedulingPolicy = 0
	ClusterPolicySpread        ClusterSchedulingPolicy = 1
	ClusterPolicyLoadBalancing ClusterSchedulingPolicy = 2
)
