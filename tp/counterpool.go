package tp

import (
	"errors"
	"fmt"
	"sync"

	"github.com/tprun/tprun/internal/cuda"
)

// The slot counters of the ops of one device context share device memory
// blocks, so that a step reads its counter from L2 rather than from HBM.
// A model holds one op per layer and its decode graph runs one step of
// each in turn; between two steps of one op the other layers stream their
// weights, hundreds of MiB, which evicts a counter that sits alone in its
// cache line. Counters packed side by side (16 to a 128-byte line) are
// touched by consecutive layers' steps and stay in L2.

// counterBytes is one op's two uint32 words (kernel.SlotRotation).
const counterBytes = 8

// countersPerBlock is how many counters one device allocation holds.
const countersPerBlock = 512

// counterDriver is what the pool needs of the driver.
type counterDriver interface {
	MemAlloc(size uint64) (cuda.DevicePtr, error)
	MemFree(p cuda.DevicePtr) error
	MemcpyHtoD(dst cuda.DevicePtr, src []byte) error
	StreamSynchronize(s cuda.Stream) error
}

// counterKey names the memory a block belongs to: the driver and the
// context the op binds when it allocates and frees.
type counterKey struct {
	drv counterDriver
	ctx cuda.Context
}

type counterBlock struct {
	base cuda.DevicePtr
	used [countersPerBlock]bool
	n    int
}

// counterPool hands out zeroed counters from shared blocks; a block is
// freed when its last counter is. The caller has the context of key bound.
type counterPool struct {
	mu     sync.Mutex
	blocks map[counterKey][]*counterBlock
}

var counters = &counterPool{blocks: map[counterKey][]*counterBlock{}}

// get returns a zeroed counter of key's context.
func (p *counterPool) get(key counterKey) (cuda.DevicePtr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var b *counterBlock
	for _, c := range p.blocks[key] {
		if c.n < countersPerBlock {
			b = c
			break
		}
	}
	if b == nil {
		base, err := key.drv.MemAlloc(countersPerBlock * counterBytes)
		if err != nil {
			return 0, err
		}
		b = &counterBlock{base: base}
		p.blocks[key] = append(p.blocks[key], b)
	}
	i := 0
	for b.used[i] {
		i++
	}
	ptr := b.base + cuda.DevicePtr(i*counterBytes)
	if err := key.drv.MemcpyHtoD(ptr, make([]byte, counterBytes)); err != nil {
		return 0, errors.Join(fmt.Errorf("zeroing: %w", err), p.releaseEmpty(key, b))
	}
	if err := key.drv.StreamSynchronize(0); err != nil {
		return 0, errors.Join(fmt.Errorf("zeroing: %w", err), p.releaseEmpty(key, b))
	}
	b.used[i] = true
	b.n++
	return ptr, nil
}

// put gives a counter back; the block goes when its last counter does.
func (p *counterPool) put(key counterKey, ptr cuda.DevicePtr) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, b := range p.blocks[key] {
		if ptr < b.base || ptr >= b.base+countersPerBlock*counterBytes {
			continue
		}
		i := int(ptr-b.base) / counterBytes
		if !b.used[i] {
			return fmt.Errorf("slot counter %#x given back twice", uint64(ptr))
		}
		b.used[i] = false
		b.n--
		return p.releaseEmpty(key, b)
	}
	return fmt.Errorf("slot counter %#x is not from the pool", uint64(ptr))
}

// releaseEmpty frees b if no counter of it is in use.
func (p *counterPool) releaseEmpty(key counterKey, b *counterBlock) error {
	if b.n > 0 {
		return nil
	}
	bs := p.blocks[key]
	for j, c := range bs {
		if c == b {
			bs = append(bs[:j], bs[j+1:]...)
			break
		}
	}
	if len(bs) == 0 {
		delete(p.blocks, key)
	} else {
		p.blocks[key] = bs
	}
	return key.drv.MemFree(b.base)
}
