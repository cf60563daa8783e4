package cuda

import (
	"encoding/binary"
	"math"
)

// Params builds the bytes of a C struct passed to a kernel by value, laying
// out fields the way the C/C++ compiler does on the targets CUDA supports:
// each scalar at the next multiple of its own size, and the whole struct
// padded to its largest alignment. Fields must be appended in declaration
// order. The zero value is an empty struct, ready to use.
type Params struct {
	b        []byte
	maxAlign int
}

func (p *Params) put(size int, write func([]byte)) *Params {
	if size > p.maxAlign {
		p.maxAlign = size
	}
	for len(p.b)%size != 0 {
		p.b = append(p.b, 0)
	}
	start := len(p.b)
	p.b = append(p.b, make([]byte, size)...)
	write(p.b[start:])
	return p
}

// U32 appends an unsigned int / uint32_t field.
func (p *Params) U32(v uint32) *Params {
	return p.put(4, func(b []byte) { binary.LittleEndian.PutUint32(b, v) })
}

// I32 appends an int / int32_t field.
func (p *Params) I32(v int32) *Params { return p.U32(uint32(v)) }

// F32 appends a float field.
func (p *Params) F32(v float32) *Params { return p.U32(math.Float32bits(v)) }

// U64 appends an unsigned long long / uint64_t / size_t field.
func (p *Params) U64(v uint64) *Params {
	return p.put(8, func(b []byte) { binary.LittleEndian.PutUint64(b, v) })
}

// I64 appends a long long / int64_t field.
func (p *Params) I64(v int64) *Params { return p.U64(uint64(v)) }

// Ptr appends a device pointer field (any T* in the kernel's struct).
func (p *Params) Ptr(v DevicePtr) *Params { return p.U64(uint64(v)) }

// Len is the size so far, without the final padding.
func (p *Params) Len() int { return len(p.b) }

// Bytes returns the struct's bytes, padded to its alignment (sizeof in C).
// The result is a copy; p may be extended afterwards.
func (p *Params) Bytes() []byte {
	out := append([]byte(nil), p.b...)
	if p.maxAlign > 0 {
		for len(out)%p.maxAlign != 0 {
			out = append(out, 0)
		}
	}
	return out
}
