package kernel

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// unpackWeight reads a packed weight the way the kernel's lanes do
// (skinny.cu, PACKED): lane l of the warp holding 16-row group g and
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

// twin maps every entry point to one of the other layout with the same
// tile, keeping staging where that layout has it, and back.
func TestTwin(t *testing.T) {
	for _, tc := range []struct{ from, packed, rowMajor string }{
		{"", "_d8p", ""}, {"_d8", "_d8p", "_d8"}, {"_t32", "_t32p", "_t32"}, {"_s8", "_s8p", "_s8"},
		{"_s32", "_t32p", "_s32"}, {"_c", "_d8p", "_c"}, {"_d8p", "_d8p", "_d8"}, {"_t32p", "_t32p", "_t32"},
		{"_s8p", "_s8p", "_s8"}, {"_d8p1", "_d8p1", "_d8"}, {"_d8pl", "_d8pl", "_d8"},
		{"_t32pw", "_t32pw", "_t32"}, {"_t32pn", "_t32pn", "_t32"},
	} {
		var v variant
		for _, x := range variants {
			if x.suffix == tc.from {
				v = x
			}
		}
		p, r := twin(v, true), twin(v, false)
		if p.suffix != tc.packed || !p.packed || p.tileRows != v.tileRows || r.suffix != tc.rowMajor || r.packed {
			t.Errorf("twin(%q): packed %q, row-major %q; want %q, %q", tc.from, p.suffix, r.suffix, tc.packed, tc.rowMajor)
		}
	}
}

// A table that lacks some M for a shape still gives every M of that shape
// one layout, the shape's.
func TestLayoutWithMissingM(t *testing.T) {
	path := filepath.Join(t.TempDir(), "table.tsv")
	table := "3584\t896\t1\t16\t8\t0\t16\t1\t0\t1\t2.4\n" + // packed, M 1 only
		"3584\t7168\t5\t16\t8\t0\t4\t1\t0\t0\t13\n" // row-major, M 5 only
	if err := os.WriteFile(path, []byte(table), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ConfigTableEnv, path)
	entries, err := loadConfigTable()
	if err != nil {
		t.Fatal(err)
	}
	for m := 1; m <= MaxM; m++ {
		e := nearestIn(entries, m, 896, 3584)
		c := configFrom(e, e.v, m, 896, 3584)
		if !c.Packed {
			t.Errorf("M %d at shard 896: %+v, want the shape's packed layout", m, c)
		}
		if err := c.Validate(m, 896, 3584); err != nil {
			t.Errorf("M %d: %v", m, err)
		}
	}
}

// Every shape of the table uses one weight layout for all M (the engine
// packs a weight once), and ConfigFor, PreferPacked and ConfigForLayout
// agree on it for shapes in and between the measured ones.
func TestOneLayoutPerShape(t *testing.T) {
	entries, err := measured()
	if err != nil {
		t.Fatal(err)
	}
	type key struct{ latent, shard int }
	layout := map[key]bool{}
	ms := map[key]int{}
	for _, e := range entries {
		k := key{e.latent, e.shard}
		if p, ok := layout[k]; ok && p != e.v.packed {
			t.Errorf("latent %d shard %d: M %d uses packed=%v, another M packed=%v", e.latent, e.shard, e.m, e.v.packed, p)
		}
		layout[k] = e.v.packed
		ms[k]++
	}
	for k, n := range ms {
		if n != MaxM {
			t.Errorf("latent %d shard %d: %d entries, want one per M (%d)", k.latent, k.shard, n, MaxM)
		}
	}
	rng := testRand(t)
	for range 200 {
		shard, latent := 8*(1+rng.IntN(2048)), 8*(1+rng.IntN(2048))
		want := PreferPacked(shard, latent)
		for m := 1; m <= MaxM; m++ {
			if c := ConfigFor(m, shard, latent); c.Packed != want {
				t.Fatalf("shard %d latent %d: ConfigFor(%d) packed=%v, PreferPacked %v", shard, latent, m, c.Packed, want)
			}
			for _, packed := range []bool{false, true} {
				c := ConfigForLayout(m, shard, latent, packed)
				if c.Packed != packed {
					t.Fatalf("ConfigForLayout(%d, %d, %d, %v) gives packed=%v", m, shard, latent, packed, c.Packed)
				}
				if err := c.Validate(m, shard, latent); err != nil {
					t.Fatalf("ConfigForLayout(%d, %d, %d, %v): %v", m, shard, latent, packed, err)
				}
			}
		}
	}
}
