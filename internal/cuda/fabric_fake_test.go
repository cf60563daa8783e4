package cuda

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"github.com/tprun/tprun/internal/cuda/cudatest"
)

// TestFakeFabric: with a fabric directory, the fake driver's FABRIC
// handles work like the real ones across an NVLink domain: an allocation
// exported as a fabric handle and imported (as another node's process
// would) maps the same bytes; the creator's release removes it from the
// fabric. Without the directory every FABRIC request is refused with
// NOT_PERMITTED, as on a node without an IMEX channel.
func TestFakeFabric(t *testing.T) {
	fabric := t.TempDir()
	t.Setenv(cudatest.FabricDirEnv, fabric)
	d := openFake(t)
	rng := newRand(t)
	prop := AllocationProp{Device: 1, HandleTypes: HandleTypeFabric}
	gran := ok(d.MemGetAllocationGranularity(prop, GranularityMinimum))(t)
	size := 3 * gran
	h := ok(d.MemCreate(size, prop))(t)
	fh := ok(d.MemExportFabric(h))(t)
	if ents, _ := os.ReadDir(fabric); len(ents) != 1 {
		t.Fatalf("fabric holds %v", ents)
	}
	imp := ok(d.MemImportFabric(fh))(t)

	va := ok(d.MemAddressReserve(2*size, gran))(t)
	mine, theirs := va, va+DevicePtr(size)
	if err := d.MemMap(mine, size, 0, h); err != nil {
		t.Fatal(err)
	}
	if err := d.MemMap(theirs, size, 0, imp); err != nil {
		t.Fatal(err)
	}
	want := randBytes(rng, int(size))
	if err := d.MemcpyHtoD(mine, want); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, size)
	if err := d.MemcpyDtoH(got, theirs); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Error("the imported mapping does not hold the exporter's bytes")
	}
	for _, err := range []error{d.MemUnmap(mine, size), d.MemUnmap(theirs, size), d.MemAddressFree(va, 2*size), d.MemRelease(imp), d.MemRelease(h)} {
		if err != nil {
			t.Error(err)
		}
	}
	if ents, _ := os.ReadDir(fabric); len(ents) != 0 {
		t.Errorf("left on the fabric: %v", ents)
	}
	// A handle whose allocation is gone, or forged, is refused.
	if _, err := d.MemImportFabric(fh); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("import after release: %v", err)
	}
	forged := fh
	copy(forged[1:], "fabric-../../etc")
	if _, err := d.MemImportFabric(forged); !errors.Is(err, ErrInvalidValue) {
		t.Errorf("forged handle: %v", err)
	}

	t.Setenv(cudatest.FabricDirEnv, "")
	if _, err := d.MemCreate(size, prop); !errors.Is(err, ErrNotPermitted) {
		t.Errorf("FABRIC without a fabric: %v, want NOT_PERMITTED", err)
	}
	if _, err := d.MemImportFabric(fh); !errors.Is(err, ErrNotPermitted) {
		t.Errorf("FABRIC import without a fabric: %v, want NOT_PERMITTED", err)
	}
}
