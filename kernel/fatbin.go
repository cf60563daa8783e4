package kernel

import (
	_ "embed"
	"strings"
)

// The compiled kernels: SASS for sm_90 and sm_100 plus compute_100 PTX,
// built by scripts/build-kernels on a GPU machine from skinny.h, skinny.cu
// and receive.cu, and committed. Strings, so the embedded bytes can never be
// changed at run time.
var (
	//go:embed kernels.fatbin
	fatbin string
	//go:embed kernels.fatbin.stamp
	fatbinStamp string
)

// FatbinSources are the files whose hash FatbinStamp records, in hashing
// order, relative to the repository root (see SourcesHash).
var FatbinSources = [...]string{"kernel/skinny.h", "kernel/skinny.cu", "kernel/receive.cu", "scripts/build-kernels"}

// Fatbin returns a copy of the embedded fatbin, ready for cuModuleLoadData.
// Its functions: tprun_receive and tprun_skinny_m<M><variant>, see
// LaunchConfig.Function.
func Fatbin() []byte { return []byte(fatbin) }

// FatbinStamp is the hex sha256 of the kernel sources the embedded fatbin
// was built from, as written by scripts/build-kernels.
func FatbinStamp() string { return strings.TrimSpace(fatbinStamp) }
