package tp

import (
	"errors"
	"testing"

	"github.com/tprun/tprun/internal/cuda"
)

// loadedFake is the fake kernels behind an engine's reference to its
// context's shared module.
func loadedFake(k stepKernels) *fakeKernels {
	if r, ok := k.(*kernelRef); ok {
		k = r.m.k
	}
	return k.(*fakeKernels)
}

// countingKernels counts loads and unloads.
type countingKernels struct {
	stepKernels
	unloads *int
}

func (c countingKernels) unload() error { *c.unloads++; return nil }

// TestKernelShare: the ops of one context share one module, loaded once
// and unloaded with the last reference (a reference dropped twice counts
// once); another context gets a module of its own; a failed load is
// returned and leaves nothing behind.
func TestKernelShare(t *testing.T) {
	s := &kernelShare{modules: map[kernelKey]*sharedModule{}}
	loads, unloads := 0, 0
	load := func() (stepKernels, error) { loads++; return countingKernels{unloads: &unloads}, nil }
	d := &fakeDrv{}
	a, b := kernelKey{d, cuda.Context(1)}, kernelKey{d, cuda.Context(2)}
	var refs []stepKernels
	for range 5 {
		k, err := s.get(a, load)
		if err != nil {
			t.Fatal(err)
		}
		refs = append(refs, k)
	}
	if loads != 1 {
		t.Fatalf("5 ops of one context: %d loads, want 1", loads)
	}
	kb, err := s.get(b, load)
	if err != nil || loads != 2 {
		t.Fatalf("another context: %v, %d loads, want 2", err, loads)
	}
	for i, k := range refs {
		if err := k.unload(); err != nil {
			t.Fatal(err)
		}
		if err := k.unload(); err != nil { // a second drop of the same reference
			t.Fatal(err)
		}
		if i < len(refs)-1 && unloads != 0 {
			t.Fatalf("after %d of 5 references dropped: %d unloads, want 0", i+1, unloads)
		}
	}
	if unloads != 1 {
		t.Fatalf("every reference of one context dropped: %d unloads, want 1", unloads)
	}
	if err := kb.unload(); err != nil || unloads != 2 || len(s.modules) != 0 {
		t.Fatalf("last module: %v, %d unloads, %d modules left", err, unloads, len(s.modules))
	}
	boom := errors.New("no module")
	if _, err := s.get(a, func() (stepKernels, error) { return nil, boom }); !errors.Is(err, boom) || len(s.modules) != 0 {
		t.Fatalf("failed load: %v, %d modules", err, len(s.modules))
	}
}
