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

// sourceRel is the fake driver's C source within the repository.
const sourceRel = "internal/cuda/testdata/fakecuda.c"

// source is the fake driver's C source: where this file was compiled, or,
// for a test binary carried to another machine (a GPU machine without Go),
// in the checkout around the working directory (the binaries run from
// their package's directory). "" when neither has it.
func source() string {
	_, file, _, _ := runtime.Caller(0)
	if p := filepath.Join(filepath.Dir(file), "..", "testdata", "fakecuda.c"); exists(p) {
		return p
	}
	dir, err := os.Getwd()
	if err != nil {
		return ""
	}
	for {
		if p := filepath.Join(dir, filepath.FromSlash(sourceRel)); exists(p) {
			return p
		}
		up := filepath.Dir(dir)
		if up == dir {
			return ""
		}
		dir = up
	}
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Build compiles the fake driver into dir and returns the shared object's
// path; it skips t when no C compiler is found ($CC, else gcc) or the
// source is not on this machine.
func Build(t testing.TB, dir string, defines ...string) string {
	t.Helper()
	cc := os.Getenv("CC")
	if cc == "" {
		cc = "gcc"
	}
	if _, err := exec.LookPath(cc); err != nil {
		t.Skipf("no C compiler (%s) to build the fake driver: %v", cc, err)
	}
	src := source()
	if src == "" {
		t.Skipf("the fake driver's source (%s) is neither where this test was built nor above the working directory", sourceRel)
	}
	out := filepath.Join(dir, "libfakecuda.so")
	args := append([]string{"-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", out}, defines...)
	args = append(args, src)
	if msg, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("building the fake driver: %v\n%s", err, msg)
	}
	return out
}
