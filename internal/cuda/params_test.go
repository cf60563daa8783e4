package cuda

import (
	"bytes"
	"math"
	"testing"
)

func TestParamsLayout(t *testing.T) {
	tests := []struct {
		desc  string
		build func(p *Params)
		want  []byte
	}{
		{
			desc:  "empty struct",
			build: func(p *Params) {},
			want:  []byte{},
		},
		{
			desc:  "u32 then pointer: 4 bytes of padding before the pointer",
			build: func(p *Params) { p.U32(0x04030201).Ptr(0x1817161514131211) },
			want: []byte{1, 2, 3, 4, 0, 0, 0, 0,
				0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18},
		},
		{
			desc:  "pointer then u32: tail padding to 8",
			build: func(p *Params) { p.Ptr(0x0807060504030201).I32(-2) },
			want: []byte{1, 2, 3, 4, 5, 6, 7, 8,
				0xfe, 0xff, 0xff, 0xff, 0, 0, 0, 0},
		},
		{
			desc:  "only 4-byte fields: no padding",
			build: func(p *Params) { p.U32(1).F32(1.0).I32(3) },
			want:  []byte{1, 0, 0, 0, 0, 0, 0x80, 0x3f, 3, 0, 0, 0},
		},
		{
			desc:  "array of pointers then two ints",
			build: func(p *Params) { p.Ptr(1).Ptr(2).U32(7).U32(9) },
			want: []byte{1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0,
				7, 0, 0, 0, 9, 0, 0, 0},
		},
		{
			desc:  "i64 and u64 sign and width",
			build: func(p *Params) { p.I64(-1).U64(math.MaxUint64 - 1) },
			want: []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
				0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var p Params
			tc.build(&p)
			if got := p.Bytes(); !bytes.Equal(got, tc.want) {
				t.Errorf("Bytes() = % x, want % x", got, tc.want)
			}
		})
	}
}

func TestParamsBytesIsACopy(t *testing.T) {
	var p Params
	p.U32(5)
	a := p.Bytes()
	p.U64(6)
	if len(a) != 4 || a[0] != 5 {
		t.Errorf("earlier Bytes() changed: % x", a)
	}
	if p.Len() != 16 {
		t.Errorf("Len() = %d, want 16", p.Len())
	}
}

func TestAsBytes(t *testing.T) {
	words := []uint32{0x04030201, 0x08070605}
	b := AsBytes(words)
	if !bytes.Equal(b, []byte{1, 2, 3, 4, 5, 6, 7, 8}) {
		t.Errorf("AsBytes = % x", b)
	}
	b[0] = 0xff // a view, not a copy
	if words[0] != 0x040302ff {
		t.Errorf("AsBytes copied: words[0] = %#x", words[0])
	}
	if AsBytes([]uint16(nil)) != nil {
		t.Error("AsBytes(nil) != nil")
	}
}
