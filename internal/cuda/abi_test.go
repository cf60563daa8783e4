package cuda

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

// cudaHABI holds the numbers read off NVIDIA's cuda.h (CUDA 12.4, vendored
// by triton-lang/triton, third_party/nvidia/backend/include/cuda.h) for
// x86-64 and aarch64 Linux (LP64). Every "sizeof:" and "offsetof:" entry of
// cABI must be here; scripts/check-cuda-abi checks them against the real
// cuda.h of the GPU machine.
func cudaHABI() map[string]int64 {
	return map[string]int64{
		"sizeof:CUdeviceptr":                      8,
		"sizeof:CUdevice":                         4,
		"sizeof:CUresult":                         4,
		"sizeof:CUcontext":                        8,
		"sizeof:CUstream":                         8,
		"sizeof:CUmemGenericAllocationHandle":     8,
		"sizeof:CUdevice_attribute":               4,
		"sizeof:CUfunction_attribute":             4,
		"sizeof:CUstreamCaptureMode":              4,
		"sizeof:CUmemAllocationHandleType":        4,
		"sizeof:CUmemAccess_flags":                4,
		"sizeof:CUmemLocationType":                4,
		"sizeof:CUmemAllocationType":              4,
		"sizeof:CUmemAllocationGranularity_flags": 4,
		"sizeof:CUmulticastGranularity_flags":     4,
		"sizeof:CUlaunchAttributeID":              4,

		"sizeof:CUuuid":         16,
		"offsetof:CUuuid.bytes": 0,

		"sizeof:CUmemFabricHandle":        64,
		"offsetof:CUmemFabricHandle.data": 0,

		"sizeof:CUmemLocation":        8,
		"offsetof:CUmemLocation.type": 0,
		"offsetof:CUmemLocation.id":   4,

		// type, requestedHandleTypes, location{type,id}, 4 bytes of padding
		// before the pointer, then allocFlags{u8,u8,u16,u8[4]}.
		"sizeof:CUmemAllocationProp":                                   32,
		"offsetof:CUmemAllocationProp.type":                            0,
		"offsetof:CUmemAllocationProp.requestedHandleTypes":            4,
		"offsetof:CUmemAllocationProp.location":                        8,
		"offsetof:CUmemAllocationProp.location.type":                   8,
		"offsetof:CUmemAllocationProp.location.id":                     12,
		"offsetof:CUmemAllocationProp.win32HandleMetaData":             16,
		"offsetof:CUmemAllocationProp.allocFlags":                      24,
		"offsetof:CUmemAllocationProp.allocFlags.compressionType":      24,
		"offsetof:CUmemAllocationProp.allocFlags.gpuDirectRDMACapable": 25,
		"offsetof:CUmemAllocationProp.allocFlags.usage":                26,
		"offsetof:CUmemAllocationProp.allocFlags.reserved":             28,

		// numDevices, 4 bytes of padding, then three 8-byte fields.
		"sizeof:CUmulticastObjectProp":               32,
		"offsetof:CUmulticastObjectProp.numDevices":  0,
		"offsetof:CUmulticastObjectProp.size":        8,
		"offsetof:CUmulticastObjectProp.handleTypes": 16,
		"offsetof:CUmulticastObjectProp.flags":       24,

		"sizeof:CUmemAccessDesc":                 12,
		"offsetof:CUmemAccessDesc.location":      0,
		"offsetof:CUmemAccessDesc.location.type": 0,
		"offsetof:CUmemAccessDesc.location.id":   4,
		"offsetof:CUmemAccessDesc.flags":         8,

		// The union is padded to 64 bytes by its "char pad[64]" member.
		"sizeof:CUlaunchAttributeValue":                                          64,
		"offsetof:CUlaunchAttributeValue.pad":                                    0,
		"offsetof:CUlaunchAttributeValue.cooperative":                            0,
		"offsetof:CUlaunchAttributeValue.clusterDim":                             0,
		"offsetof:CUlaunchAttributeValue.clusterDim.x":                           0,
		"offsetof:CUlaunchAttributeValue.clusterDim.y":                           4,
		"offsetof:CUlaunchAttributeValue.clusterDim.z":                           8,
		"offsetof:CUlaunchAttributeValue.clusterSchedulingPolicyPreference":      0,
		"offsetof:CUlaunchAttributeValue.programmaticStreamSerializationAllowed": 0,
		"offsetof:CUlaunchAttributeValue.sharedMemCarveout":                      0,

		// id, char pad[8 - sizeof(id)], value.
		"sizeof:CUlaunchAttribute":         72,
		"offsetof:CUlaunchAttribute.id":    0,
		"offsetof:CUlaunchAttribute.pad":   4,
		"offsetof:CUlaunchAttribute.value": 8,

		// Seven unsigned ints, 4 bytes of padding, two pointers, numAttrs,
		// tail padding to 8.
		"sizeof:CUlaunchConfig":                  56,
		"offsetof:CUlaunchConfig.gridDimX":       0,
		"offsetof:CUlaunchConfig.gridDimY":       4,
		"offsetof:CUlaunchConfig.gridDimZ":       8,
		"offsetof:CUlaunchConfig.blockDimX":      12,
		"offsetof:CUlaunchConfig.blockDimY":      16,
		"offsetof:CUlaunchConfig.blockDimZ":      20,
		"offsetof:CUlaunchConfig.sharedMemBytes": 24,
		"offsetof:CUlaunchConfig.hStream":        32,
		"offsetof:CUlaunchConfig.attrs":          40,
		"offsetof:CUlaunchConfig.numAttrs":       48,
	}
}

func TestABILayoutMatchesCudaH(t *testing.T) {
	want := cudaHABI()
	seen := map[string]bool{}
	for _, e := range cABI() {
		if strings.HasPrefix(e.name, "enum:") {
			continue
		}
		seen[e.name] = true
		w, ok := want[e.name]
		if !ok {
			t.Errorf("%s = %d is not pinned in cudaHABI", e.name, e.value)
			continue
		}
		if e.value != w {
			t.Errorf("%s = %d, cuda.h says %d", e.name, e.value, w)
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("%s is pinned but not measured by abi.go", name)
		}
	}
}

// The enum values declared in cutypes.h (used by the C side) and the Go
// constants (used by callers) must agree wherever both exist, and every Go
// value must be one the dump exports.
func TestABIEnumsAgree(t *testing.T) {
	c := map[string]int64{}
	for _, e := range cABI() {
		if strings.HasPrefix(e.name, "enum:") {
			c[e.name] = e.value
		}
	}
	overlap := 0
	names := map[string]bool{}
	for _, e := range goABI() {
		if names[e.name] {
			t.Errorf("%s listed twice in goABI", e.name)
		}
		names[e.name] = true
		if v, ok := c[e.name]; ok {
			overlap++
			if v != e.value {
				t.Errorf("%s: cutypes.h %d, Go %d", e.name, v, e.value)
			}
		}
	}
	if overlap < 40 {
		t.Errorf("only %d enum values checked between C and Go", overlap)
	}
	// A few values pinned directly from cuda.h, so that a typo made in
	// both places at once still fails here.
	spot := map[string]int64{
		"enum:CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR":                 1,
		"enum:CU_MEM_HANDLE_TYPE_FABRIC":                                8,
		"enum:CU_MEM_ACCESS_FLAGS_PROT_READWRITE":                       3,
		"enum:CU_MEM_LOCATION_TYPE_DEVICE":                              1,
		"enum:CU_MEM_ALLOCATION_TYPE_PINNED":                            1,
		"enum:CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION":                    4,
		"enum:CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE": 5,
		"enum:CU_CLUSTER_SCHEDULING_POLICY_DEFAULT":                     0,
		"enum:CU_CLUSTER_SCHEDULING_POLICY_SPREAD":                      1,
		"enum:CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING":              2,
		"enum:CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION":    6,
		"enum:CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT":     14,
		"enum:CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED":                  132,
		"enum:CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED":         128,
		"enum:CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED":  102,
		"enum:CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN":    97,
		"enum:CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES":          8,
		"enum:CUDA_ERROR_NOT_PERMITTED":                                 800,
	}
	all := map[string]int64{}
	for _, e := range abiDump() {
		all[e.name] = e.value
	}
	for name, want := range spot {
		if got, ok := all[name]; !ok || got != want {
			t.Errorf("%s = %d (present %v), cuda.h says %d", name, got, ok, want)
		}
	}
}

// abiDump is everything scripts/check-cuda-abi compares: the C layout and
// enum values, plus the Go constants, one entry per name, sorted.
func abiDump() []abiEntry {
	byName := map[string]abiEntry{}
	for _, e := range cABI() {
		byName[e.name] = e
	}
	for _, e := range goABI() {
		byName[e.name] = e
	}
	out := make([]abiEntry, 0, len(byName))
	for _, e := range byName {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// TestABIDump writes "name value" lines for scripts/check-cuda-abi to the
// file named by TPRUN_CUDA_ABI_DUMP (and does nothing else without it).
func TestABIDump(t *testing.T) {
	path := os.Getenv("TPRUN_CUDA_ABI_DUMP")
	if path == "" {
		t.Skip("TPRUN_CUDA_ABI_DUMP not set (scripts/check-cuda-abi sets it)")
	}
	var b strings.Builder
	for _, e := range abiDump() {
		fmt.Fprintf(&b, "%s %d\n", e.name, e.value)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}
