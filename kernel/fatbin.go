package kernel

import (
	_ "embed"
	"fmt"
	"os"
	"strings"
)

// The compiled kernels: SASS for sm_90 and sm_100 plus compute_100 PTX,
// built by scripts/build-kernels on a GPU machine from FatbinSources, and
// committed. Strings, so the embedded bytes can never be
// changed at run time.
var (
	//go:embed kernels.fatbin
	fatbin string
	//go:embed kernels.fatbin.stamp
	fatbinStamp string
)

// FatbinSources are the files whose hash FatbinStamp records, in hashing
// order, relative to the repository root (see SourcesHash).
var FatbinSources = [...]string{"kernel/skinny.h", "kernel/skinny_prims.cuh", "kernel/skinny.cu", "kernel/receive.cu", "kernel/bigm.cu", "kernel/families.tsv", "scripts/build-kernels"}

// Fatbin returns a copy of the embedded fatbin, ready for cuModuleLoadData.
// Its functions: tprun_receive, tprun_skinny_m<M>_<family> and
// tprun_bigm_mt<MT>_<family>, see LaunchConfig.Function.
func Fatbin() []byte { return []byte(fatbin) }

// FatbinEnv names a fatbin file that Load uses instead of the embedded one.
// It is for kernel development: a fatbin built by scripts/build-kernels
// from changed sources can be tried without rebuilding the Go binaries. Its
// entry points and parameter blocks must be this build's (same skinny.h
// and families.tsv).
const FatbinEnv = "TPRUN_KERNELS_FATBIN"

// FatbinOverride is the path in FatbinEnv, or "" when the embedded fatbin
// is used. Programs should say so when it is set.
func FatbinOverride() string { return os.Getenv(FatbinEnv) }

// image is the fatbin Load loads: the embedded one, or FatbinEnv's file.
func image() ([]byte, error) {
	path := FatbinOverride()
	if path == "" {
		return Fatbin(), nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kernel: %s: %w", FatbinEnv, err)
	}
	return b, nil
}

// FatbinStamp is the hex sha256 of the kernel sources the embedded fatbin
// was built from, as written by scripts/build-kernels.
func FatbinStamp() string { return strings.TrimSpace(fatbinStamp) }
