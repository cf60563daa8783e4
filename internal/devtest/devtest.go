// Package devtest holds what the tests that run tprun jobs share about the
// GPUs there are (it imports tp, so it cannot live in proctest, which tp's
// own tests import).
package devtest

import (
	"errors"
	"strconv"
	"strings"
	"testing"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/tp"
)

// SharedDevices reports whether a GPU is usable here (tp.CheckGPU, as the
// default job's auto choice decides) and, when CUDA sees fewer GPUs than
// the n ranks, the --devices flag that runs them on the GPUs there are,
// repeated (tprun's default, one GPU per rank, would fail its topology
// check); else no flag.
func SharedDevices(t testing.TB, n int) (flags []string, gpu bool) {
	t.Helper()
	if err := tp.CheckGPU(); err != nil {
		return nil, false
	}
	drv, err := cuda.Open()
	if err != nil {
		t.Fatalf("tp.CheckGPU found a GPU, but: %v", err)
	}
	if err := drv.Init(); err != nil {
		t.Fatalf("tp.CheckGPU found a GPU, but: %v", errors.Join(err, drv.Close()))
	}
	visible, err := drv.DeviceCount()
	if err := errors.Join(err, drv.Close()); err != nil {
		t.Fatal(err)
	}
	if visible < 1 || visible >= n {
		return nil, true
	}
	ords := make([]string, n)
	for i := range ords {
		ords[i] = strconv.Itoa(i % visible)
	}
	return []string{"--devices", strings.Join(ords, ",")}, true
}
