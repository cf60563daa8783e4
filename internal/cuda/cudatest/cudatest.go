// Package cudatest builds the fake CUDA driver (internal/cuda's
// testdata/fakecuda.c) for the tests of packages above internal/cuda that
// drive the real binding without a GPU: rank processes on the CPU that
// create, export, import and map "device" memory (host memory in the
// fake). It is for tests only.
package cudatest

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
)

// FabricDirEnv is the variable that gives the fake driver a fabric: the
// directory its FABRIC allocations live in, shared by every process that
// sees it. Unset, FABRIC requests fail with CUDA_ERROR_NOT_PERMITTED, as
// on a node without an IMEX channel.
const FabricDirEnv = "FAKECUDA_FABRIC_DIR"

// source is the fake driver's C source.
func source() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "testdata", "fakecuda.c")
}

// Build compiles the fake driver into dir and returns the shared object's
// path; it skips t when no C compiler is found ($CC, else gcc).
func Build(t testing.TB, dir string, defines ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the fake driver: %v", cc, err)
	}
	out := filepath.Join(dir, "libfakecuda.so")
	args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", out}, defines...)
	args = append(args, source())
	if msg, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("building the fake driver: %v\n%s", err, msg)
	}
	return out
}
