package cuda

/*
#include <stddef.h>
#include "cutypes.h"

// The layout of every struct declared in cutypes.h, and the enum values as
// declared there, measured by the C compiler. abi_test.go compares them with
// numbers taken from cuda.h; scripts/check-cuda-abi compiles the same
// expressions against the real cuda.h. The name encodes the C expression:
// "sizeof:T", "offsetof:T.member.path", "enum:NAME".
typedef struct { const char *name; long long value; } tp_abi_entry;

#define TP_SZ(T) { "sizeof:" #T, (long long)sizeof(T) }
#define TP_OFF(T, f) { "offsetof:" #T "." #f, (long long)offsetof(T, f) }
#define TP_EN(N) { "enum:" #N, (long long)(N) }

static const tp_abi_entry tp_abi[] = {
    TP_SZ(CUdeviceptr),
    TP_SZ(CUdevice),
    TP_SZ(CUresult),
    TP_SZ(CUcontext),
    TP_SZ(CUstream),
    TP_SZ(CUmemGenericAllocationHandle),
    TP_SZ(CUdevice_attribute),
    TP_SZ(CUfunction_attribute),
    TP_SZ(CUstreamCaptureMode),
    TP_SZ(CUmemAllocationHandleType),
    TP_SZ(CUmemAccess_flags),
    TP_SZ(CUmemLocationType),
    TP_SZ(CUmemAllocationType),
    TP_SZ(CUmemAllocationGranularity_flags),
    TP_SZ(CUmulticastGranularity_flags),
    TP_SZ(CUlaunchAttributeID),

    TP_SZ(CUuuid),
    TP_OFF(CUuuid, bytes),

    TP_SZ(CUmemFabricHandle),
    TP_OFF(CUmemFabricHandle, data),

    TP_SZ(CUmemLocation),
    TP_OFF(CUmemLocation, type),
    TP_OFF(CUmemLocation, id),

    TP_SZ(CUmemAllocationProp),
    TP_OFF(CUmemAllocationProp, type),
    TP_OFF(CUmemAllocationProp, requestedHandleTypes),
    TP_OFF(CUmemAllocationProp, location),
    TP_OFF(CUmemAllocationProp, location.type),
    TP_OFF(CUmemAllocationProp, location.id),
    TP_OFF(CUmemAllocationProp, win32HandleMetaData),
    TP_OFF(CUmemAllocationProp, allocFlags),
    TP_OFF(CUmemAllocationProp, allocFlags.compressionType),
    TP_OFF(CUmemAllocationProp, allocFlags.gpuDirectRDMACapable),
    TP_OFF(CUmemAllocationProp, allocFlags.usage),
    TP_OFF(CUmemAllocationProp, allocFlags.reserved),

    TP_SZ(CUmulticastObjectProp),
    TP_OFF(CUmulticastObjectProp, numDevices),
    TP_OFF(CUmulticastObjectProp, size),
    TP_OFF(CUmulticastObjectProp, handleTypes),
    TP_OFF(CUmulticastObjectProp, flags),

    TP_SZ(CUmemAccessDesc),
    TP_OFF(CUmemAccessDesc, location),
    TP_OFF(CUmemAccessDesc, location.type),
    TP_OFF(CUmemAccessDesc, location.id),
    TP_OFF(CUmemAccessDesc, flags),

    TP_SZ(CUlaunchAttributeValue),
    TP_OFF(CUlaunchAttributeValue, pad),
    TP_OFF(CUlaunchAttributeValue, cooperative),
    TP_OFF(CUlaunchAttributeValue, clusterDim),
    TP_OFF(CUlaunchAttributeValue, clusterDim.x),
    TP_OFF(CUlaunchAttributeValue, clusterDim.y),
    TP_OFF(CUlaunchAttributeValue, clusterDim.z),
    TP_OFF(CUlaunchAttributeValue, clusterSchedulingPolicyPreference),
    TP_OFF(CUlaunchAttributeValue, programmaticStreamSerializationAllowed),
    TP_OFF(CUlaunchAttributeValue, sharedMemCarveout),

    TP_SZ(CUlaunchAttribute),
    TP_OFF(CUlaunchAttribute, id),
    TP_OFF(CUlaunchAttribute, pad),
    TP_OFF(CUlaunchAttribute, value),

    TP_SZ(CUlaunchConfig),
    TP_OFF(CUlaunchConfig, gridDimX),
    TP_OFF(CUlaunchConfig, gridDimY),
    TP_OFF(CUlaunchConfig, gridDimZ),
    TP_OFF(CUlaunchConfig, blockDimX),
    TP_OFF(CUlaunchConfig, blockDimY),
    TP_OFF(CUlaunchConfig, blockDimZ),
    TP_OFF(CUlaunchConfig, sharedMemBytes),
    TP_OFF(CUlaunchConfig, hStream),
    TP_OFF(CUlaunchConfig, attrs),
    TP_OFF(CUlaunchConfig, numAttrs),

    TP_EN(CUDA_SUCCESS),
    TP_EN(CUDA_ERROR_INVALID_VALUE),
    TP_EN(CUDA_ERROR_NOT_INITIALIZED),
    TP_EN(CUDA_ERROR_NOT_FOUND),
    TP_EN(CUDA_ERROR_NOT_PERMITTED),
    TP_EN(CUDA_ERROR_NOT_SUPPORTED),
    TP_EN(CUDA_ERROR_UNKNOWN),
    TP_EN(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
    TP_EN(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
    TP_EN(CU_DEVICE_ATTRIBUTE_WARP_SIZE),
    TP_EN(CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
    TP_EN(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
    TP_EN(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID),
    TP_EN(CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID),
    TP_EN(CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE),
    TP_EN(CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH),
    TP_EN(CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
    TP_EN(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
    TP_EN(CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING),
    TP_EN(CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID),
    TP_EN(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
    TP_EN(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
    TP_EN(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
    TP_EN(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH),
    TP_EN(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN),
    TP_EN(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED),
    TP_EN(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED),
    TP_EN(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR),
    TP_EN(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED),
    TP_EN(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH),
    TP_EN(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED),
    TP_EN(CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED),
    TP_EN(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
    TP_EN(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
    TP_EN(CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES),
    TP_EN(CU_FUNC_ATTRIBUTE_NUM_REGS),
    TP_EN(CU_FUNC_ATTRIBUTE_PTX_VERSION),
    TP_EN(CU_FUNC_ATTRIBUTE_BINARY_VERSION),
    TP_EN(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
    TP_EN(CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT),
    TP_EN(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED),
    TP_EN(CU_STREAM_DEFAULT),
    TP_EN(CU_STREAM_NON_BLOCKING),
    TP_EN(CU_EVENT_DEFAULT),
    TP_EN(CU_EVENT_BLOCKING_SYNC),
    TP_EN(CU_EVENT_DISABLE_TIMING),
    TP_EN(CU_MEMHOSTALLOC_PORTABLE),
    TP_EN(CU_MEMHOSTALLOC_DEVICEMAP),
    TP_EN(CU_MEMHOSTALLOC_WRITECOMBINED),
    TP_EN(CU_STREAM_CAPTURE_MODE_GLOBAL),
    TP_EN(CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
    TP_EN(CU_STREAM_CAPTURE_MODE_RELAXED),
    TP_EN(CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH),
    TP_EN(CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY),
    TP_EN(CU_MEM_HANDLE_TYPE_NONE),
    TP_EN(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
    TP_EN(CU_MEM_HANDLE_TYPE_FABRIC),
    TP_EN(CU_MEM_ACCESS_FLAGS_PROT_NONE),
    TP_EN(CU_MEM_ACCESS_FLAGS_PROT_READ),
    TP_EN(CU_MEM_ACCESS_FLAGS_PROT_READWRITE),
    TP_EN(CU_MEM_LOCATION_TYPE_DEVICE),
    TP_EN(CU_MEM_ALLOCATION_TYPE_PINNED),
    TP_EN(CU_MEM_ALLOC_GRANULARITY_MINIMUM),
    TP_EN(CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
    TP_EN(CU_MULTICAST_GRANULARITY_MINIMUM),
    TP_EN(CU_MULTICAST_GRANULARITY_RECOMMENDED),
    TP_EN(CU_IPC_HANDLE_SIZE),
    TP_EN(CU_LAUNCH_ATTRIBUTE_IGNORE),
    TP_EN(CU_LAUNCH_ATTRIBUTE_COOPERATIVE),
    TP_EN(CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION),
    TP_EN(CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE),
    TP_EN(CU_CLUSTER_SCHEDULING_POLICY_DEFAULT),
    TP_EN(CU_CLUSTER_SCHEDULING_POLICY_SPREAD),
    TP_EN(CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING),
    TP_EN(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION),
    TP_EN(CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT),
};

static int tp_abi_count(void) { return (int)(sizeof(tp_abi) / sizeof(tp_abi[0])); }
static const char *tp_abi_name(int i) { return tp_abi[i].name; }
static long long tp_abi_value(int i) { return tp_abi[i].value; }
*/
import "C"

// abiEntry is one measured ABI fact: "sizeof:T", "offsetof:T.f" or
// "enum:NAME", and its value.
type abiEntry struct {
	name  string
	value int64
}

// cABI returns the layout and enum values of cutypes.h as the C compiler
// sees them.
func cABI() []abiEntry {
	n := int(C.tp_abi_count())
	out := make([]abiEntry, n)
	for i := range out {
		out[i] = abiEntry{name: C.GoString(C.tp_abi_name(C.int(i))), value: int64(C.tp_abi_value(C.int(i)))}
	}
	return out
}

// goABI returns the cuda.h values that the Go side hard-codes, under their
// cuda.h names, so that scripts/check-cuda-abi can compare them with the
// real header too.
func goABI() []abiEntry {
	e := func(name string, v int64) abiEntry { return abiEntry{name: "enum:" + name, value: v} }
	out := []abiEntry{
		e("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK", int64(AttrMaxThreadsPerBlock)),
		e("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK", int64(AttrMaxSharedMemoryPerBlock)),
		e("CU_DEVICE_ATTRIBUTE_WARP_SIZE", int64(AttrWarpSize)),
		e("CU_DEVICE_ATTRIBUTE_CLOCK_RATE", int64(AttrClockRate)),
		e("CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT", int64(AttrMultiprocessorCount)),
		e("CU_DEVICE_ATTRIBUTE_PCI_BUS_ID", int64(AttrPCIBusID)),
		e("CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID", int64(AttrPCIDeviceID)),
		e("CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE", int64(AttrMemoryClockRate)),
		e("CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH", int64(AttrGlobalMemoryBusWidth)),
		e("CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE", int64(AttrL2CacheSize)),
		e("CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR", int64(AttrMaxThreadsPerMultiprocessor)),
		e("CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING", int64(AttrUnifiedAddressing)),
		e("CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID", int64(AttrPCIDomainID)),
		e("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR", int64(AttrComputeCapabilityMajor)),
		e("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR", int64(AttrComputeCapabilityMinor)),
		e("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR", int64(AttrMaxSharedMemoryPerMultiprocessor)),
		e("CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH", int64(AttrCooperativeLaunch)),
		e("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", int64(AttrMaxSharedMemoryPerBlockOptin)),
		e("CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", int64(AttrVirtualMemoryManagementSupported)),
		e("CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED", int64(AttrHandleTypePOSIXFDSupported)),
		e("CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR", int64(AttrMaxBlocksPerMultiprocessor)),
		e("CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED", int64(AttrGPUDirectRDMAWithCUDAVMMSupported)),
		e("CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH", int64(AttrClusterLaunch)),
		e("CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED", int64(AttrHandleTypeFabricSupported)),
		e("CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED", int64(AttrMulticastSupported)),
		e("CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK", int64(FuncAttrMaxThreadsPerBlock)),
		e("CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES", int64(FuncAttrSharedSizeBytes)),
		e("CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES", int64(FuncAttrLocalSizeBytes)),
		e("CU_FUNC_ATTRIBUTE_NUM_REGS", int64(FuncAttrNumRegs)),
		e("CU_FUNC_ATTRIBUTE_PTX_VERSION", int64(FuncAttrPTXVersion)),
		e("CU_FUNC_ATTRIBUTE_BINARY_VERSION", int64(FuncAttrBinaryVersion)),
		e("CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", int64(FuncAttrMaxDynamicSharedSizeBytes)),
		e("CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT", int64(FuncAttrPreferredSharedMemoryCarveout)),
		e("CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED", int64(FuncAttrNonPortableClusterSizeAllowed)),
		e("CU_STREAM_DEFAULT", int64(StreamDefault)),
		e("CU_STREAM_NON_BLOCKING", int64(StreamNonBlocking)),
		e("CU_EVENT_DEFAULT", int64(EventDefault)),
		e("CU_EVENT_BLOCKING_SYNC", int64(EventBlockingSync)),
		e("CU_EVENT_DISABLE_TIMING", int64(EventDisableTiming)),
		e("CU_MEMHOSTALLOC_PORTABLE", int64(HostAllocPortable)),
		e("CU_MEMHOSTALLOC_DEVICEMAP", int64(HostAllocDeviceMap)),
		e("CU_MEMHOSTALLOC_WRITECOMBINED", int64(HostAllocWriteCombined)),
		e("CU_STREAM_CAPTURE_MODE_GLOBAL", int64(CaptureModeGlobal)),
		e("CU_STREAM_CAPTURE_MODE_THREAD_LOCAL", int64(CaptureModeThreadLocal)),
		e("CU_STREAM_CAPTURE_MODE_RELAXED", int64(CaptureModeRelaxed)),
		e("CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH", int64(GraphInstantiateAutoFreeOnLaunch)),
		e("CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY", int64(GraphInstantiateUseNodePriority)),
		e("CU_MEM_HANDLE_TYPE_NONE", int64(HandleTypeNone)),
		e("CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR", int64(HandleTypePOSIXFD)),
		e("CU_MEM_HANDLE_TYPE_FABRIC", int64(HandleTypeFabric)),
		e("CU_MEM_ACCESS_FLAGS_PROT_NONE", int64(AccessNone)),
		e("CU_MEM_ACCESS_FLAGS_PROT_READ", int64(AccessRead)),
		e("CU_MEM_ACCESS_FLAGS_PROT_READWRITE", int64(AccessReadWrite)),
		e("CU_MEM_ALLOC_GRANULARITY_MINIMUM", int64(GranularityMinimum)),
		e("CU_MEM_ALLOC_GRANULARITY_RECOMMENDED", int64(GranularityRecommended)),
		e("CU_MULTICAST_GRANULARITY_MINIMUM", int64(GranularityMinimum)),
		e("CU_MULTICAST_GRANULARITY_RECOMMENDED", int64(GranularityRecommended)),
		e("CU_IPC_HANDLE_SIZE", int64(len(FabricHandle{}))),
	}
	// Every Result with a built-in name: the names must mean the same codes
	// in the real header.
	for r := Result(0); r < 1000; r++ {
		if name, _ := r.builtin(); name != "" {
			out = append(out, e(name, int64(r)))
		}
	}
	return out
}
