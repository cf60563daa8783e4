package kernel

import (
	"slices"
	"strings"
	"testing"
)

// unpackWeight reads a packed weight the way the kernel's lanes do
// (skinny.cu, skinny): lane l of the warp holding 16-row group g and
// 32-k chunk c takes 16 bytes at (h*32 + l)*8 of block (g, c) as its A
// fragment for row 16g + 8h + l/4, k 32c + 8(l%4) .. +7. It returns the
// row-major [shard][latent] weight those fragments describe.
func unpackWeight(p []BF16, shard, latent int) []BF16 {
	chunks := (latent + 31) / 32
	w := make([]BF16, shard*latent)
	for g := range (shard + 15) / 16 {
		for c := range chunks {
			block := p[(g*chunks+c)*512:][:512]
			// Lane l's 16 bytes q: the A fragment {a0, a1, a2, a3} of the
			// chunk's MMA q, each register two k of one row: a0 row l/4,
			// a1 row l/4+8 (k 4q, 4q+1 of its 8), a2 and a3 the same
			// rows at k 4q+2, 4q+3.
			for q := range 2 {
				for l := range 32 {
					for e := range 8 {
						a := e / 2
						row := 16*g + l/4 + 8*(a%2)
						k := 32*c + 8*(l%4) + 4*q + 2*(a/2) + e%2
						if row < shard && k < latent {
							w[row*latent+k] = block[(q*32+l)*8+e]
						}
					}
				}
			}
		}
	}
	return w
}

func TestPackWeight(t *testing.T) {
	rng := testRand(t)
	for _, tc := range []struct {
		desc          string
		shard, latent int
	}{
		{"whole groups and chunks", 64, 128},
		{"a partial 16-row group", 200, 96},
		{"a k tail", 48, 3600},
		{"both", 8, 40},
		{"benchmark shape", 896, 3584},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			w := make([]BF16, tc.shard*tc.latent)
			for i := range w {
				w[i] = BF16FromFloat32(float32(rng.NormFloat64()))
				if w[i] == 0 { // zeros would hide a dropped element
					w[i] = 0x3F80
				}
			}
			n := PackedWeightLen(tc.shard, tc.latent)
			if want := (tc.shard + 15) / 16 * ((tc.latent + 31) / 32) * 512; n != want {
				t.Fatalf("PackedWeightLen = %d, want %d", n, want)
			}
			p := make([]BF16, n)
			for i := range p {
				p[i] = poison
			}
			if err := PackWeight(p, w, tc.shard, tc.latent); err != nil {
				t.Fatal(err)
			}
			got := unpackWeight(p, tc.shard, tc.latent)
			for i := range w {
				if got[i] != w[i] {
					t.Fatalf("element (%d, %d): the kernel would read %#04x, want %#04x", i/tc.latent, i%tc.latent, got[i], w[i])
				}
			}
			back := make([]BF16, len(w))
			if err := UnpackWeight(back, p, tc.shard, tc.latent); err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(back, w) {
				t.Error("UnpackWeight(PackWeight(w)) != w")
			}
			nonzero := 0
			for _, v := range p {
				if v == poison {
					t.Fatal("an element of the packed buffer was not written")
				}
				if v != 0 {
					nonzero++
				}
			}
			if nonzero != len(w) {
				t.Errorf("%d nonzero packed elements, want the %d of the weight (padding must be zero)", nonzero, len(w))
			}
		})
	}
}

func TestPackWeightRejects(t *testing.T) {
	w := make([]BF16, 16*32)
	for _, tc := range []struct {
		desc          string
		dst           []BF16
		w             []BF16
		shard, latent int
		want          string
	}{
		{"short weight", make([]BF16, 512), w[:100], 16, 32, "100 elements"},
		{"short destination", make([]BF16, 511), w, 16, 32, "destination of 511"},
		{"empty shape", nil, nil, 0, 32, "0×32"},
	} {
		err := PackWeight(tc.dst, tc.w, tc.shard, tc.latent)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error with %q", tc.desc, err, tc.want)
		}
	}
	for _, tc := range []struct {
		desc          string
		dst, p        []BF16
		shard, latent int
		want          string
	}{
		{"short packed weight", make([]BF16, 16*32), make([]BF16, 511), 16, 32, "511 packed"},
		{"short destination", make([]BF16, 100), make([]BF16, 512), 16, 32, "destination of 100"},
		{"empty shape", nil, nil, 16, 0, "16×0"},
	} {
		err := UnpackWeight(tc.dst, tc.p, tc.shard, tc.latent)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("unpack, %s: %v, want an error with %q", tc.desc, err, tc.want)
		}
	}
}
