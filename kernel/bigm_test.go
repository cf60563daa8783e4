package kernel

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tprun/tprun/internal/cuda"
)

// Every M above MaxSkinnyM at random shapes (and the table's own) gets a
// config of the larger-M kernel that Validate accepts, names an entry
// point Load looks up, and fits the shared memory Load allows it.
func TestBigmConfigFor(t *testing.T) {
	rng := testRand(t)
	names := mustSkinnyFunctions()
	entries, err := bigmMeasured()
	if err != nil {
		t.Fatal(err)
	}
	type shape struct{ shard, latent int }
	shapes := []shape{{8, 8}, {40, 520}, {960, 720}, {ShardAlign * 4096, MaxLatent}}
	for _, e := range entries {
		shapes = append(shapes, shape{e.shard, e.latent})
	}
	for range 50 {
		shapes = append(shapes, shape{ShardAlign * (1 + rng.IntN(4096)), LatentAlign * (1 + rng.IntN(MaxLatent/LatentAlign))})
	}
	for _, sh := range shapes {
		for m := MaxSkinnyM + 1; m <= MaxM; m++ {
			c := ConfigFor(m, sh.shard, sh.latent)
			where := fmt.Sprintf("M %d shard %d latent %d: %+v", m, sh.shard, sh.latent, c)
			if err := c.Validate(m, sh.shard, sh.latent); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			f, _ := findFamily(c.Family)
			switch {
			case c != BigmConfigFor(m, sh.shard, sh.latent) || c != StepConfigFor(m, sh.shard, sh.latent):
				t.Fatalf("%s: ConfigFor, BigmConfigFor and StepConfigFor differ", where)
			case c.CodeM != BigmCode(m) || c.CodeM < m || (c.CodeM > BigmCodes[0] && c.CodeM/2 >= m):
				t.Fatalf("%s: code size %d for M %d", where, c.CodeM, m)
			case !slices.Contains(names, c.Function) || !slices.Contains(names, c.Function+rotSuffix):
				t.Fatalf("%s: Load does not look up %s", where, c.Function)
			case !f.smem || c.SharedBytes > bigmMaxShared(f) || c.SharedBytes <= DefaultSharedLimit:
				t.Fatalf("%s: shared memory %d, Load allows %d", where, c.SharedBytes, bigmMaxShared(f))
			case c.GridX != (sh.shard+c.TileRows-1)/c.TileRows*c.Cluster || c.TileRows*c.KSplit != f.tileRows*c.Warps:
				t.Fatalf("%s: grid or tile inconsistent", where)
			}
		}
	}
	// The lookup: exact shapes take their row, others the nearest shape's
	// row of the same code size.
	for _, e := range entries {
		m := e.mt
		if m > BigmCodes[0] {
			m = e.mt/2 + 1 + rng.IntN(e.mt/2)
		} else {
			m = MaxSkinnyM + 1 + rng.IntN(e.mt-MaxSkinnyM)
		}
		c := ConfigFor(m, e.shard, e.latent)
		if c.Warps != e.warps || c.KSplit != e.ksplit || c.Cluster != e.cluster || c.L2Prefetch != e.prefetch || c.CodeM != e.mt {
			t.Errorf("M %d at the table's shape %d×%d: %+v, want the row %+v", m, e.shard, e.latent, c, e)
		}
	}
	// A skinny config for M above MaxSkinnyM and a larger-M config for M up
	// to it are refused.
	if err := ConfigFor(8, 896, 3584).Validate(9, 896, 3584); err == nil {
		t.Error("a skinny config validated for M 9")
	}
	if err := ConfigFor(9, 896, 3584).Validate(8, 896, 3584); err == nil {
		t.Error("a larger-M config validated for M 8")
	}
	c := ConfigFor(100, 896, 3584)
	for _, bad := range []func(*LaunchConfig){
		func(c *LaunchConfig) { c.KSplit = 3 },
		func(c *LaunchConfig) { c.KSplit = 0 },
		func(c *LaunchConfig) { c.CodeM = 64 },
		func(c *LaunchConfig) { c.TileRows *= 2 },
		func(c *LaunchConfig) { c.SharedBytes = DefaultSharedLimit },
		func(c *LaunchConfig) { c.Function = "tprun_bigm_mt64_tc" },
	} {
		x := c
		bad(&x)
		if err := x.Validate(100, 896, 3584); err == nil {
			t.Errorf("config %+v validated for M 100", x)
		}
	}
}

func TestBigmCode(t *testing.T) {
	for m := 1; m <= MaxM; m++ {
		c := BigmCode(m)
		i := slices.Index(BigmCodes[:], c)
		if i < 0 || c < m || (i > 0 && BigmCodes[i-1] >= m) {
			t.Errorf("BigmCode(%d) = %d", m, c)
		}
	}
	if BigmCodes[len(BigmCodes)-1] != MaxM {
		t.Errorf("the largest code size %d is not MaxM %d", BigmCodes[len(BigmCodes)-1], MaxM)
	}
}

// The code sizes and the latent window are bigm.cu's.
func TestBigmSizesMatchSource(t *testing.T) {
	src, err := os.ReadFile("bigm.cu")
	if err != nil {
		t.Fatal(err)
	}
	s := string(src)
	var codes []int
	for _, m := range regexp.MustCompile(`(?m)^\s*TPRUN_BIGM_ENTRY\((\d+), NAME`).FindAllStringSubmatch(s, -1) {
		n, _ := strconv.Atoi(m[1])
		codes = append(codes, n)
	}
	if !slices.Equal(codes, BigmCodes[:]) {
		t.Errorf("bigm.cu builds code sizes %v, BigmCodes is %v", codes, BigmCodes)
	}
	for _, want := range []string{
		"static constexpr int kKW = 1024 / MT;",
		"static_assert(MT == 16 || MT == 32 || MT == 64 || MT == 128",
		"const uint32_t parts = (uint32_t)wk * (uint32_t)MT * (uint32_t)(rows + 4) * 4u;",
		"const uint32_t lat = 2u * BigmSizes<MT>::kWinBytes;",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("bigm.cu no longer has %q, which BigmSharedBytes and bigmWindowChunks assume", want)
		}
	}
	for _, mt := range BigmCodes {
		if bigmWindowChunks(mt) != 1024/mt || bigmWindowChunks(mt)*mt*64 != bigmWindowBytes {
			t.Errorf("mt %d: window %d chunks", mt, bigmWindowChunks(mt))
		}
	}
}

func TestParseBigmTableRejects(t *testing.T) {
	row := "3584\t896\t64\ttc\t8\t4\t8\t16777216\t-"
	table := func(rows ...string) string { return BigmTableHeader + "\n" + strings.Join(rows, "\n") + "\n" }
	field := func(i int, v string) string {
		f := strings.Split(row, "\t")
		f[i] = v
		return strings.Join(f, "\t")
	}
	if e, err := parseBigmTable("t", table(row, field(8, "3.25"))); err == nil || len(e) != 0 {
		t.Errorf("a shape twice parsed: %v", err)
	}
	e, err := parseBigmTable("t", table(row))
	if err != nil || len(e) != 1 || e[0].warps != 8 || e[0].ksplit != 4 || e[0].cluster != 8 || e[0].mt != 64 || !e[0].f.smem {
		t.Fatalf("valid row: %+v, %v", e, err)
	}
	for _, tc := range []struct{ desc, text string }{
		{"skinny family", table(field(3, "t32p"))},
		{"no such family", table(field(3, "zz"))},
		{"mt not a code size", table(field(2, "48"))},
		{"mt 8", table(field(2, "8"))},
		{"warps 16", table(field(4, "16"))},
		{"ksplit not dividing warps", table(field(5, "3"))},
		{"ksplit times depth past the window", table(strings.Replace(field(5, "8"), "\t64\t", "\t128\t", 1))},
		{"cluster 9", table(field(6, "9"))},
		{"another prefetch plan", table(field(7, "32"))},
		{"median not a number", table(field(8, "fast"))},
		{"shard unaligned", table(field(1, "900"))},
		{"old header", strings.Replace(table(row), "ksplit\t", "", 1)},
	} {
		if _, err := parseBigmTable("t", tc.text); err == nil {
			t.Errorf("%s: parsed", tc.desc)
		}
	}
}

// A launch for M above MaxSkinnyM: the larger-M entry point with the M in
// the flags, its grid, block, cluster and shared memory, which Load has
// allowed the function; a fused receive with it is refused.
func TestLaunchBigm(t *testing.T) {
	d := newFakeDriver("")
	k, err := Load(d)
	if err != nil {
		t.Fatal(err)
	}
	defer k.Close()
	names := mustSkinnyFunctions()
	set := 0
	for _, name := range names {
		f := d.funcs[name]
		if strings.HasPrefix(name, "tprun_bigm_") {
			fam, _ := findFamily(strings.TrimSuffix(name[strings.LastIndex(strings.TrimSuffix(name, rotSuffix), "_")+1:], rotSuffix))
			if d.shared[f] != bigmMaxShared(fam) || d.shared[f] <= DefaultSharedLimit {
				t.Errorf("%s: Load allowed %d bytes of shared memory, want %d", name, d.shared[f], bigmMaxShared(fam))
			}
			set++
		} else if _, ok := d.shared[f]; ok {
			t.Errorf("%s: Load set its shared memory", name)
		}
	}
	if set != 2*len(BigmCodes) {
		t.Errorf("Load allowed %d larger-M functions their shared memory, want %d", set, 2*len(BigmCodes))
	}
	rng := testRand(t)
	for _, m := range []int{9, 16, 17, 64, 100, MaxM} {
		s := Shape{M: m, Hidden: 7168, Latent: 3584, TP: 8}
		a := SkinnyArgs{Shape: s, Rank: 3, Latent: alignedPtr(rng), Weight: alignedPtr(rng), WeightPacked: true,
			Shared: alignedPtr(rng), SharedStride: s.Hidden, Dst: []cuda.DevicePtr{alignedPtr(rng), alignedPtr(rng)}}
		d.launches = nil
		if err := k.LaunchSkinny(0x5, a, true); err != nil {
			t.Fatalf("M %d: %v", m, err)
		}
		c := ConfigFor(m, s.Shard(), s.Latent)
		l := d.launches[0]
		p := l.params[0]
		flags := int(int32(uint32(p[220]) | uint32(p[221])<<8 | uint32(p[222])<<16 | uint32(p[223])<<24))
		tile := int(uint32(p[176]) | uint32(p[177])<<8)
		switch {
		case l.f != d.funcs[c.Function] || c.CodeM != BigmCode(m):
			t.Errorf("M %d: launched %#x, want %s", m, l.f, c.Function)
		case flags != SkinnyPacked|m<<SkinnyRowsShift:
			t.Errorf("M %d: flags %#x", m, flags)
		case tile != c.TileRows:
			t.Errorf("M %d: tile_rows %d, want %d", m, tile, c.TileRows)
		case l.cfg.Grid != [3]uint32{uint32(c.GridX), 1, 1} || l.cfg.Block != [3]uint32{uint32(c.BlockX), 1, 1} ||
			l.cfg.ClusterDim != [3]uint32{uint32(c.Cluster), 1, 1} || int(l.cfg.SharedMem) != c.SharedBytes || !l.cfg.ProgrammaticSerialization:
			t.Errorf("M %d: launch %+v, config %+v", m, l.cfg, c)
		}
		a.Receive = &ReceiveArgs{M: m, Hidden: s.Hidden, Shard: s.Shard(), Slot: alignedPtr(rng), Out: alignedPtr(rng), Status: alignedPtr(rng), Timeout: 1}
		d.launches = nil
		if err := k.LaunchSkinny(0x5, a, true); !errors.Is(err, ErrArgs) || !strings.Contains(err.Error(), "fused receive") || len(d.launches) != 0 {
			t.Errorf("M %d with a fused receive: %v, %d launches", m, err, len(d.launches))
		}
	}
	// The receive takes every M up to MaxM.
	if err := k.LaunchReceive(0x5, ReceiveArgs{M: MaxM, Hidden: 7168, Shard: 896, Slot: alignedPtr(rng), Out: alignedPtr(rng), Status: alignedPtr(rng), Timeout: 1}, true); err != nil {
		t.Errorf("LaunchReceive M %d: %v", MaxM, err)
	}
}

// Load fails, naming the function, when the driver refuses the shared
// memory a larger-M entry point needs.
func TestLoadBigmSharedRefused(t *testing.T) {
	d := &refusingDriver{fakeDriver: newFakeDriver("")}
	if _, err := Load(d); err == nil || !strings.Contains(err.Error(), "tprun_bigm_") || !errors.Is(err, cuda.ErrNotPermitted) {
		t.Fatalf("Load = %v, want the refusal naming a larger-M entry point", err)
	}
	if len(d.unloaded) != 1 {
		t.Errorf("module unloaded %d times after the failed load", len(d.unloaded))
	}
}

type refusingDriver struct{ *fakeDriver }

func (d *refusingDriver) FuncSetAttribute(cuda.Function, cuda.FuncAttribute, int) error {
	return cuda.ErrNotPermitted
}
