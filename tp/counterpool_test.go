package tp

import (
	"math/rand/v2"
	"testing"

	"github.com/tprun/tprun/internal/cuda"
)

// poolDriver is device memory as a map of allocations.
type poolDriver struct {
	next   cuda.DevicePtr
	allocs map[cuda.DevicePtr][]byte
	frees  int
}

func (d *poolDriver) MemAlloc(size uint64) (cuda.DevicePtr, error) {
	d.next += 1 << 20
	b := make([]byte, size)
	for i := range b {
		b[i] = 0xA5 // what a fresh allocation may hold: the pool must zero
	}
	d.allocs[d.next] = b
	return d.next, nil
}

func (d *poolDriver) MemFree(p cuda.DevicePtr) error {
	delete(d.allocs, p)
	d.frees++
	return nil
}

func (d *poolDriver) MemcpyHtoD(dst cuda.DevicePtr, src []byte) error {
	for base, b := range d.allocs {
		if dst >= base && dst < base+cuda.DevicePtr(len(b)) {
			copy(b[dst-base:], src)
			return nil
		}
	}
	panic("copy outside every allocation")
}

func (d *poolDriver) StreamSynchronize(cuda.Stream) error { return nil }

func (d *poolDriver) word(p cuda.DevicePtr) []byte {
	for base, b := range d.allocs {
		if p >= base && p < base+cuda.DevicePtr(len(b)) {
			return b[p-base : p-base+counterBytes]
		}
	}
	return nil
}

// TestCounterPool: counters of one context share blocks, are zeroed,
// distinct and 8-byte aligned; a block is freed with its last counter; a
// counter given back twice or not from the pool is an error; two contexts
// never share a block.
func TestCounterPool(t *testing.T) {
	d := &poolDriver{allocs: map[cuda.DevicePtr][]byte{}}
	p := &counterPool{blocks: map[counterKey][]*counterBlock{}}
	a, b := counterKey{d, 1}, counterKey{d, 2}
	n := countersPerBlock + 1 + rand.IntN(countersPerBlock)
	got := map[cuda.DevicePtr]bool{}
	var ptrs []cuda.DevicePtr
	for range n {
		ptr, err := p.get(a)
		if err != nil {
			t.Fatal(err)
		}
		if ptr%counterBytes != 0 || got[ptr] {
			t.Fatalf("counter %#x: misaligned or handed out twice", uint64(ptr))
		}
		for _, x := range d.word(ptr) {
			if x != 0 {
				t.Fatalf("counter %#x not zeroed: % x", uint64(ptr), d.word(ptr))
			}
		}
		got[ptr] = true
		ptrs = append(ptrs, ptr)
	}
	if len(d.allocs) != 2 {
		t.Fatalf("%d counters in %d blocks, want 2", n, len(d.allocs))
	}
	other, err := p.get(b)
	if err != nil {
		t.Fatal(err)
	}
	if got[other] || len(d.allocs) != 3 {
		t.Fatalf("another context's counter %#x shares a block (%d blocks)", uint64(other), len(d.allocs))
	}
	rand.Shuffle(len(ptrs), func(i, j int) { ptrs[i], ptrs[j] = ptrs[j], ptrs[i] })
	for i, ptr := range ptrs {
		if err := p.put(a, ptr); err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := p.put(a, ptr); err == nil {
				t.Fatal("a counter given back twice: no error")
			}
		}
	}
	if len(d.allocs) != 1 || d.frees != 2 {
		t.Fatalf("after every counter of one context came back: %d blocks left, %d freed; want 1 and 2", len(d.allocs), d.frees)
	}
	if err := p.put(a, other); err == nil {
		t.Fatal("a counter of another context given back: no error")
	}
	if err := p.put(b, other); err != nil || len(d.allocs) != 0 {
		t.Fatalf("last counter back: %v, %d blocks left", err, len(d.allocs))
	}
}
