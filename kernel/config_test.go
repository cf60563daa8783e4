package kernel

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// The harness (scripts/kernel-harness/harness.cu, check mode) verifies every
// entry point with these warps and cluster sizes on 240 shapes; ConfigFor
// must stay inside them.
var (
	checkedWarps    = map[int]bool{1: true, 2: true, 4: true, 8: true, 16: true}
	checkedClusters = map[int]bool{1: true, 2: true, 3: true, 4: true, 6: true, 8: true}
)

func TestParamLayoutMatchesSkinnyH(t *testing.T) {
	var s SkinnyParams
	var r ReceiveParams
	cases := []struct {
		desc      string
		got, want uintptr
	}{
		{"sizeof tprun_skinny_params", unsafe.Sizeof(s), 224},
		{"alignof tprun_skinny_params", unsafe.Alignof(s), 8},
		{"latent", unsafe.Offsetof(s.Latent), 0},
		{"weight", unsafe.Offsetof(s.Weight), 8},
		{"shared", unsafe.Offsetof(s.Shared), 16},
		{"dst", unsafe.Offsetof(s.Dst), 24},
		{"latent_dim", unsafe.Offsetof(s.LatentDim), 152},
		{"shard", unsafe.Offsetof(s.Shard), 156},
		{"hidden", unsafe.Offsetof(s.Hidden), 160},
		{"rank", unsafe.Offsetof(s.Rank), 164},
		{"shared_stride", unsafe.Offsetof(s.SharedStride), 168},
		{"ndst", unsafe.Offsetof(s.NDst), 172},
		{"tile_rows", unsafe.Offsetof(s.TileRows), 176},
		{"l2_prefetch", unsafe.Offsetof(s.L2Prefetch), 180},
		{"recv_slot", unsafe.Offsetof(s.RecvSlot), 184},
		{"recv_out", unsafe.Offsetof(s.RecvOut), 192},
		{"recv_status", unsafe.Offsetof(s.RecvStatus), 200},
		{"recv_timeout_ns", unsafe.Offsetof(s.RecvTimeoutNs), 208},
		{"recv_flags", unsafe.Offsetof(s.RecvFlags), 216},
		{"flags", unsafe.Offsetof(s.Flags), 220},
		{"sizeof tprun_receive_params", unsafe.Sizeof(r), 48},
		{"slot", unsafe.Offsetof(r.Slot), 0},
		{"out", unsafe.Offsetof(r.Out), 8},
		{"status", unsafe.Offsetof(r.Status), 16},
		{"timeout_ns", unsafe.Offsetof(r.TimeoutNs), 24},
		{"m", unsafe.Offsetof(r.M), 32},
		{"receive hidden", unsafe.Offsetof(r.Hidden), 36},
		{"receive shard", unsafe.Offsetof(r.Shard), 40},
		{"receive flags", unsafe.Offsetof(r.Flags), 44},
	}
	for _, tc := range cases {
		if tc.got != tc.want {
			t.Errorf("%s: %d, skinny.h says %d", tc.desc, tc.got, tc.want)
		}
	}
	if len(s.Dst) != MaxTP || ReceiveStatusWords != 17 {
		t.Errorf("dst has %d entries and status %d words; skinny.h: 16 and 17", len(s.Dst), ReceiveStatusWords)
	}
}

func TestConfigTableParses(t *testing.T) {
	entries, err := measured()
	if err != nil {
		t.Fatalf("embedded config_table.tsv: %v", err)
	}
	seen := map[[3]int]bool{}
	for _, e := range entries {
		key := [3]int{e.latent, e.shard, e.m}
		if seen[key] {
			t.Errorf("duplicate entry latent %d shard %d m %d", e.latent, e.shard, e.m)
		}
		seen[key] = true
		got := ConfigFor(e.m, e.shard, e.latent)
		want := makeConfig(e.m, e.shard, e.latent, e.v, e.warps, e.cluster)
		want.L2Prefetch = e.prefetch
		want.ClusterPolicy = e.policy
		want.Carveout = e.carveout
		if got != want {
			t.Errorf("measured shape latent %d shard %d m %d: ConfigFor %+v, table %+v", e.latent, e.shard, e.m, got, want)
		}
	}
	// The benchmark shapes of issue 4, every M.
	for _, shard := range []int{7168, 3584, 1792, 896, 448} {
		for m := 1; m <= MaxM; m++ {
			if !seen[[3]int{3584, shard, m}] {
				t.Errorf("no measured entry for latent 3584 shard %d m %d", shard, m)
			}
		}
	}
}

func TestConfigForCoversEveryValidShape(t *testing.T) {
	shards := []int{8, 16, 24, 40, 200, 448, 456, 896, 1000, 1024, 1792, 2048, 3584, 4096, 7168, 8192, 14336, 65536}
	latents := []int{8, 16, 24, 512, 1000, 1024, 2048, 3584, 3600, 7168, 16384, 65536, MaxLatent}
	for m := 1; m <= MaxM; m++ {
		for _, shard := range shards {
			for _, latent := range latents {
				checkConfig(t, m, shard, latent)
			}
		}
	}
	rng := rand.New(rand.NewPCG(uint64(len(shards)), 7))
	for range 2000 {
		checkConfig(t, 1+rng.IntN(MaxM), ShardAlign*(1+rng.IntN(4096)), LatentAlign*(1+rng.IntN(MaxLatent/LatentAlign)))
	}
}

func checkConfig(t *testing.T, m, shard, latent int) {
	t.Helper()
	c := ConfigFor(m, shard, latent)
	desc := fmt.Sprintf("M=%d shard=%d latent=%d -> %+v", m, shard, latent, c)
	if err := c.Validate(m, shard, latent); err != nil {
		t.Fatalf("%s: %v", desc, err)
	}
	if !checkedWarps[c.Warps] || !checkedClusters[c.Cluster] {
		t.Fatalf("%s: warps/cluster outside what the GPU check covers", desc)
	}
	if !strings.HasPrefix(c.Function, fmt.Sprintf("tprun_skinny_m%d", m)) {
		t.Fatalf("%s: function for another M", desc)
	}
	if c.GridX <= 0 || c.GridX%c.Cluster != 0 || c.GridX/c.Cluster*c.TileRows < shard {
		t.Fatalf("%s: grid does not cover the shard in whole clusters", desc)
	}
	if c.BlockX > 512 || c.SharedBytes > MaxStagedShared {
		t.Fatalf("%s: block or shared memory over the limits", desc)
	}
}

func TestConfigForNeverPanics(t *testing.T) {
	for _, tc := range []struct{ m, shard, latent int }{{0, 896, 3584}, {9, 896, 3584}, {-3, 0, 0}, {1, -8, -8}} {
		c := ConfigFor(tc.m, tc.shard, tc.latent)
		if c.Function == "" || c.GridX <= 0 {
			t.Errorf("ConfigFor(%d, %d, %d) = %+v", tc.m, tc.shard, tc.latent, c)
		}
	}
}

func TestStagedFallsBackWhenSharedMemoryIsShort(t *testing.T) {
	small := SkinnySharedBytes(8, 3584, 16, 16, 1, 2)
	huge := SkinnySharedBytes(8, MaxLatent, 16, 16, 8, 1)
	if small > MaxStagedShared || huge <= MaxStagedShared {
		t.Fatalf("shared bytes %d (3584) and %d (2^20) do not straddle the limit", small, huge)
	}
	for m := 1; m <= MaxM; m++ {
		c := ConfigFor(m, 1024, MaxLatent)
		if c.Stage > 0 && c.SharedBytes > MaxStagedShared {
			t.Errorf("M=%d latent 2^20: staged with %d bytes", m, c.SharedBytes)
		}
	}
}

func TestLaunchConfigValidateRejects(t *testing.T) {
	good := ConfigFor(4, 896, 3584)
	if err := good.Validate(4, 896, 3584); err != nil {
		t.Fatalf("good config rejected: %v", err)
	}
	mod := func(f func(*LaunchConfig)) LaunchConfig { c := good; f(&c); return c }
	cases := []struct {
		desc             string
		c                LaunchConfig
		m, shard, latent int
	}{
		{"other M's function", good, 5, 896, 3584},
		{"grid for another shard", good, 4, 1792, 3584},
		{"unknown entry point", mod(func(c *LaunchConfig) { c.Depth = 6 }), 4, 896, 3584},
		{"too many warps", mod(func(c *LaunchConfig) { c.Warps = 32; c.BlockX = 1024 }), 4, 896, 3584},
		{"cluster 9", mod(func(c *LaunchConfig) { c.Cluster = 9 }), 4, 896, 3584},
		{"block not 32*warps", mod(func(c *LaunchConfig) { c.BlockX++ }), 4, 896, 3584},
		{"short shared memory", mod(func(c *LaunchConfig) { c.SharedBytes -= 16 }), 4, 896, 3584},
		{"M 0", good, 0, 896, 3584},
		{"shard not a multiple of 8", good, 4, 900, 3584},
		{"latent not a multiple of 8", good, 4, 896, 3590},
		{"prefetch plan with unknown bits", mod(func(c *LaunchConfig) { c.L2Prefetch = 1 << 26 }), 4, 896, 3584},
		{"prefetch plan of 17 sixteenths", mod(func(c *LaunchConfig) { c.L2Prefetch = 17 << 16 }), 4, 896, 3584},
		{"the other instance form", mod(func(c *LaunchConfig) { c.OneInstance = !c.OneInstance }), 4, 896, 3584},
		{"cluster policy 3", mod(func(c *LaunchConfig) { c.ClusterPolicy = 3 }), 4, 896, 3584},
		{"cluster policy -1", mod(func(c *LaunchConfig) { c.ClusterPolicy = -1 }), 4, 896, 3584},
	}
	for _, tc := range cases {
		if err := tc.c.Validate(tc.m, tc.shard, tc.latent); err == nil {
			t.Errorf("%s: accepted", tc.desc)
		}
	}
	// A scheduling policy needs a cluster launch.
	c1 := makeConfig(4, 896, 3584, variants[1], 16, 1)
	c1.ClusterPolicy = 2
	if err := c1.Validate(4, 896, 3584); err == nil {
		t.Error("cluster policy 2 with cluster 1: accepted")
	}
	c4 := makeConfig(4, 896, 3584, mustVariant(32, 4, 0, true), 8, 4)
	c4.ClusterPolicy = 2
	if err := c4.Validate(4, 896, 3584); err != nil {
		t.Errorf("cluster policy 2 with cluster 4: %v", err)
	}
}

func TestParseConfigTableRejects(t *testing.T) {
	cases := []struct{ desc, text string }{
		{"empty", "# only comments\n"},
		{"short line", "3584 896 1 16 8 0 16\n"},
		{"not a number", "3584 896 x 16 8 0 16 1\n"},
		{"no such entry point", "3584 896 1 16 6 0 16 1\n"},
		{"lean entry with 16 warps", "3584 896 1 16 4 0 16 1\n"},
		{"cluster 9", "3584 896 1 16 8 0 16 9\n"},
		{"M 9", "3584 896 9 16 8 0 16 1\n"},
		{"stage 2 with depth 8", "3584 896 1 16 8 2 16 1\n"},
		{"stage 3 with depth 0", "3584 896 1 16 0 3 16 1\n"},
		{"stage 3 row-major (no such entry point)", "3584 896 1 16 8 3 16 1 0 0 0 2.4\n"},
		{"stage 3 with 32 rows (no such entry point)", "3584 896 1 32 4 3 8 1 0 1 0 2.4\n"},
		{"stage 3 one-instance (no such entry point)", "3584 896 1 16 8 3 16 1 0 1 1 2.4\n"},
		{"stage 4 row-major (no such entry point)", "3584 896 5 32 4 4 16 2 0 0 0 0 80 2.4\n"},
		{"stage 4 with 16 rows (no such entry point)", "3584 896 5 16 8 4 16 1 0 1 0 0 80 2.4\n"},
		{"stage 4 one-instance (no such entry point)", "3584 896 5 32 4 4 16 2 0 1 1 0 80 2.4\n"},
		{"stage 5 row-major (no such entry point)", "3584 3584 5 32 4 5 4 4 0 0 0 0 65 7.4\n"},
		{"stage 5 with 16 rows (no such entry point)", "3584 3584 5 16 8 5 4 4 0 1 0 0 65 7.4\n"},
		{"stage 5 one-instance (no such entry point)", "3584 3584 5 32 4 5 4 4 0 1 1 0 65 7.4\n"},
		{"stage 6", "3584 896 5 32 4 6 16 2 0 1 0 0 80 2.4\n"},
		{"15 fields", "3584 896 1 32 4 0 8 4 0 1 0 2 80 2.5 7\n"},
		{"carveout 101", "3584 896 1 32 4 0 8 4 0 1 0 2 101 2.5\n"},
		{"carveout -1", "3584 896 1 32 4 0 8 4 0 1 0 2 -1 2.5\n"},
		{"carveout not a number", "3584 896 1 32 4 0 8 4 0 1 0 2 max 2.5\n"},
		{"cluster policy 3", "3584 896 1 32 4 0 8 4 0 1 0 3 2.5\n"},
		{"cluster policy -1", "3584 896 1 32 4 0 8 4 0 1 0 -1 2.5\n"},
		{"cluster policy not a number", "3584 896 1 32 4 0 8 4 0 1 0 lb 2.5\n"},
		{"cluster policy without a cluster", "3584 896 1 16 8 0 16 1 0 1 0 2 2.5\n"},
		{"one neither 0 nor 1", "3584 896 1 16 8 0 16 1 0 1 2 2.5\n"},
		{"one-instance row-major entry (no such entry point)", "3584 896 1 16 8 0 16 1 0 0 1 2.5\n"},
		{"one-instance 32-row entry (no such entry point)", "3584 896 1 32 4 0 8 4 0 1 1 2.5\n"},
		{"packed neither 0 nor 1", "3584 896 1 16 8 0 16 1 0 2 2.5\n"},
		{"packed lean entry (no such entry point)", "3584 896 1 16 4 0 8 1 0 1 2.5\n"},
		{"packed slab entry (no such entry point)", "3584 896 1 16 0 2 8 1 0 1 2.5\n"},
		{"one shape in two layouts", "3584 896 1 16 8 0 16 1 0 1 2.5\n3584 896 2 16 8 0 16 1 0 0 2.5\n"},
		{"prefetch not a number", "3584 896 1 16 8 0 16 1 x 2.5\n"},
		{"prefetch plan with unknown bits", "3584 896 1 16 8 0 16 1 67108864 2.5\n"},
	}
	for _, tc := range cases {
		if _, err := parseTable("config_table.tsv", tc.text); err == nil {
			t.Errorf("%s: parsed", tc.desc)
		}
	}
	e, err := parseTable("config_table.tsv", "# c\n3584\t896\t1\t32\t4\t1\t16\t2\t2.5\n")
	if err != nil || len(e) != 1 || e[0].v.stage != 1 || e[0].v.tileRows != 32 || e[0].warps != 16 || e[0].cluster != 2 || e[0].prefetch != 0 {
		t.Errorf("valid line: %+v, %v", e, err)
	}
	e, err = parseTable("config_table.tsv", "3584\t896\t1\t32\t4\t0\t8\t4\t0\t1\t2.6\n3584\t896\t2\t32\t4\t0\t8\t4\t0\t1\t2.6\n")
	if err != nil || len(e) != 2 || !e[0].v.packed || e[0].v.suffix != "_t32p" || e[1].cluster != 4 {
		t.Errorf("valid packed lines: %+v, %v", e, err)
	}
	e, err = parseTable("config_table.tsv", "3584\t896\t3\t16\t8\t0\t16\t1\t0\t1\t1\t2.49\n3584\t896\t4\t32\t4\t0\t8\t4\t0\t1\t0\t2.5\n")
	if err != nil || len(e) != 2 || e[0].v.suffix != "_d8p1" || !e[0].v.one || e[1].v.suffix != "_t32p" || e[1].v.one {
		t.Errorf("valid lines with the one column: %+v, %v", e, err)
	}
	// One valid line of each later entry point family: parsed, and the
	// launch config made from it.
	for _, tc := range []struct {
		desc, table, text            string
		m, shard                     int
		suffix                       string
		stage, rows, warps, clusters int
		carveout                     int
	}{
		{"line-wise", "config_table.tsv", "3584\t896\t3\t16\t8\t3\t16\t1\t0\t1\t0\t0\t2.39\n", 3, 896, "_d8pl", 3, 16, 16, 1, 0},
		{"wide", "config_table.tsv", "3584\t896\t5\t32\t4\t4\t16\t2\t0\t1\t0\t0\t80\t2.39\n", 5, 896, "_t32pw", 4, 32, 16, 2, 80},
		{"step's", "step_table.tsv", "3584\t3584\t8\t32\t4\t5\t4\t4\t34078768\t1\t0\t2\t65\t7.6\n", 8, 3584, "_t32pn", 5, 32, 4, 4, 65},
	} {
		e, err := parseTable(tc.table, tc.text)
		if err != nil || len(e) != 1 || e[0].v.suffix != tc.suffix || e[0].v.stage != tc.stage || !e[0].v.packed ||
			e[0].warps != tc.warps || e[0].cluster != tc.clusters || e[0].carveout != tc.carveout {
			t.Errorf("valid line of the %s entry: %+v, %v", tc.desc, e, err)
			continue
		}
		c := configFrom(e[0], e[0].v, tc.m, tc.shard, 3584)
		if c.Function != fmt.Sprintf("tprun_skinny_m%d%s", tc.m, tc.suffix) || c.Stage != tc.stage || c.TileRows != tc.rows ||
			c.Cluster != tc.clusters || c.Carveout != tc.carveout ||
			c.SharedBytes != SkinnySharedBytes(tc.m, 3584, tc.rows, tc.warps, tc.clusters, 0) || c.Validate(tc.m, tc.shard, 3584) != nil {
			t.Errorf("%s entry's config: %+v, %v", tc.desc, c, c.Validate(tc.m, tc.shard, 3584))
		}
	}
	e, err = parseTable("config_table.tsv", "3584\t3584\t1\t32\t4\t0\t4\t4\t34078768\t1\t0\t2\t6.0\n3584\t3584\t2\t32\t4\t0\t4\t4\t0\t1\t0\t0\t6.1\n")
	if err != nil || len(e) != 2 || e[0].policy != 2 || e[1].policy != 0 || e[0].prefetch != 34078768 || e[0].cluster != 4 {
		t.Errorf("valid lines with the cluster_policy column: %+v, %v", e, err)
	}
	if c := configFrom(e[0], e[0].v, 1, 3584, 3584); c.ClusterPolicy != 2 || c.Carveout != 0 || c.Validate(1, 3584, 3584) != nil {
		t.Errorf("config from a load-balancing entry: %+v, %v", c, c.Validate(1, 3584, 3584))
	}
	e, err = parseTable("config_table.tsv", "3584\t896\t8\t32\t4\t0\t16\t2\t0\t1\t0\t0\t80\t2.35\n3584\t896\t7\t32\t4\t0\t16\t2\t0\t1\t0\t2\t0\t2.5\n")
	if err == nil {
		// A carveout belongs to the shape it was measured on.
		if b := nearestIn(e, 8, 896, 3584); b.carveout != 80 {
			t.Errorf("measured shape: carveout %d, want 80", b.carveout)
		}
		for _, sh := range [][2]int{{768, 3584}, {1024, 3584}, {896, 4096}} {
			if b := nearestIn(e, 8, sh[0], sh[1]); b.carveout != 0 || b.warps != 16 || b.cluster != 2 {
				t.Errorf("shard %d latent %d (nearest: 896, 3584): %+v, want that entry without its carveout", sh[0], sh[1], b)
			}
		}
	}
	if err != nil || len(e) != 2 || e[0].carveout != 80 || e[0].policy != 0 || e[1].carveout != 0 || e[1].policy != 2 {
		t.Errorf("valid lines with the carveout column: %+v, %v", e, err)
	} else if c := configFrom(e[0], e[0].v, 8, 896, 3584); c.Carveout != 80 || c.Validate(8, 896, 3584) != nil {
		t.Errorf("config from an entry with a carveout: %+v, %v", c, c.Validate(8, 896, 3584))
	} else if c.Carveout = 101; c.Validate(8, 896, 3584) == nil {
		t.Error("Validate accepted a carveout of 101 %")
	}
	plan := 32 | 8<<16 | 1<<24
	e, err = parseTable("config_table.tsv", fmt.Sprintf("# c\n3584\t3584\t2\t16\t8\t0\t8\t1\t%d\t6.9\n", plan))
	if err != nil || len(e) != 1 || e[0].prefetch != plan || e[0].warps != 8 {
		t.Errorf("valid line with a prefetch plan: %+v, %v", e, err)
	}
}

func TestReceiveConfigFor(t *testing.T) {
	cases := []struct {
		desc      string
		m, hidden int
		grid      int
	}{
		{"tiny", 1, 64, 1},
		{"one M row of 7168", 1, 7168, 4},
		{"8 rows of 7168", 8, 7168, 28},
		{"capped at one wave", 8, 65536, 132},
	}
	for _, tc := range cases {
		c := ReceiveConfigFor(tc.m, tc.hidden)
		if c.GridX != tc.grid || c.BlockX != 256 || c.Function != "tprun_receive" {
			t.Errorf("%s: %+v, want grid %d", tc.desc, c, tc.grid)
		}
	}
}

// ConfigTableEnv replaces the embedded table; an unreadable or invalid
// file is an error naming the variable.
func TestConfigTableOverride(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "table.tsv")
	plan := 16 | 8<<16 | 1<<24
	if err := os.WriteFile(good, fmt.Appendf(nil, "# dev\n3584\t3584\t2\t16\t4\t0\t8\t1\t%d\t7.0\n", plan), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ConfigTableEnv, good)
	e, err := loadConfigTable()
	if err != nil || len(e) != 1 || e[0].prefetch != plan || e[0].v.depth != 4 {
		t.Errorf("override table: %+v, %v", e, err)
	}
	bad := filepath.Join(dir, "bad.tsv")
	if err := os.WriteFile(bad, []byte("3584 3584 2 16 6 0 8 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{bad, filepath.Join(dir, "missing.tsv")} {
		t.Setenv(ConfigTableEnv, path)
		if _, err := loadConfigTable(); err == nil || !strings.Contains(err.Error(), ConfigTableEnv) {
			t.Errorf("%s: %v; want an error naming %s", path, err, ConfigTableEnv)
		}
	}
	t.Setenv(ConfigTableEnv, "")
	if e, err := loadConfigTable(); err != nil || len(e) < 8 {
		t.Errorf("embedded table: %d entries, %v", len(e), err)
	}
}

// The step table: exact (latent, shard, m) entries win for a launch with a
// fused receive, every other shape gets ConfigForLayout's pick; every entry
// is a valid config in the layout the kernel table picks for its shape (the
// weight is packed once, by PreferPacked), and its env override is read
// like the kernel table's.
func TestStepConfig(t *testing.T) {
	entries, err := stepMeasured()
	if err != nil || len(entries) == 0 {
		t.Fatalf("step table: %d entries, %v", len(entries), err)
	}
	for _, e := range entries {
		if e.v.packed != PreferPacked(e.shard, e.latent) {
			t.Errorf("step entry latent %d shard %d m %d: packed %v, the kernel table's layout is packed %v",
				e.latent, e.shard, e.m, e.v.packed, PreferPacked(e.shard, e.latent))
		}
		for _, packed := range []bool{false, true} {
			c := StepConfigForLayout(e.m, e.shard, e.latent, packed)
			want := configFrom(e, twin(e.v, packed), e.m, e.shard, e.latent)
			if c != want {
				t.Errorf("StepConfigForLayout(%d, %d, %d, %v) = %+v, want the entry's %+v", e.m, e.shard, e.latent, packed, c, want)
			}
			if err := c.Validate(e.m, e.shard, e.latent); err != nil {
				t.Errorf("step entry m %d shard %d: %v", e.m, e.shard, err)
			}
		}
	}
	// A shape the step table lacks: ConfigForLayout's pick.
	for _, tc := range []struct{ m, shard, latent int }{{1, 896, 3584}, {8, 1792, 3584}, {3, 1024, 1024}} {
		for _, packed := range []bool{false, true} {
			if got, want := StepConfigForLayout(tc.m, tc.shard, tc.latent, packed), ConfigForLayout(tc.m, tc.shard, tc.latent, packed); got != want {
				t.Errorf("StepConfigForLayout(%d, %d, %d, %v) = %+v, want ConfigForLayout's %+v", tc.m, tc.shard, tc.latent, packed, got, want)
			}
		}
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "step.tsv")
	if err := os.WriteFile(good, []byte("3584\t896\t2\t32\t4\t0\t8\t2\t0\t1\t8.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(StepTableEnv, good)
	if e, err := loadStepTable(); err != nil || len(e) != 1 || e[0].cluster != 2 || e[0].shard != 896 {
		t.Errorf("override step table: %+v, %v", e, err)
	}
	// A row-major entry for a shape whose weight the kernel table packs.
	wrong := filepath.Join(dir, "wrong-layout.tsv")
	if err := os.WriteFile(wrong, []byte("3584\t3584\t2\t16\t8\t0\t8\t1\t0\t0\t8.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if !PreferPacked(3584, 3584) {
		t.Fatal("the kernel table no longer packs shard 3584: pick another shape for the layout check")
	}
	for _, path := range []string{filepath.Join(dir, "missing.tsv"), wrong} {
		t.Setenv(StepTableEnv, path)
		if _, err := loadStepTable(); err == nil || !strings.Contains(err.Error(), StepTableEnv) {
			t.Errorf("%s: %v; want an error naming %s", path, err, StepTableEnv)
		}
	}
}

func TestReceiveCTAs(t *testing.T) {
	for _, tc := range []struct{ m, hidden, block, cluster, want int }{
		{8, 7168, 256, 1, 28},  // 7168 vectors
		{1, 7168, 512, 1, 2},   // 896 vectors
		{8, 7168, 128, 1, 56},  // 7168 / 128
		{1, 64, 256, 1, 1},     // fewer vectors than threads
		{3, 7168, 256, 4, 12},  // 2688 vectors: 11 CTAs, rounded up to whole clusters
		{8, 65536, 32, 1, 132}, // capped
		{8, 65536, 32, 8, 136}, // the cap rounded up to whole clusters
		{0, 0, 0, 0, 1},        // nonsense in, still a valid count
	} {
		if got := ReceiveCTAs(tc.m, tc.hidden, tc.block, tc.cluster); got != tc.want {
			t.Errorf("ReceiveCTAs(%d, %d, %d, %d) = %d, want %d", tc.m, tc.hidden, tc.block, tc.cluster, got, tc.want)
		}
	}
}

// sumsLikeTwin: "_t32pw" adds like "_t32" except where "_t32" takes the
// warp-per-vector epilogue (16 warps, no cluster, M <= 2).
func TestSumsLikeTwin(t *testing.T) {
	w, ok := findVariant(32, 4, 4, true, false)
	if !ok {
		t.Fatal("no _t32pw variant")
	}
	l, _ := findVariant(16, 8, 3, true, false)
	p, _ := findVariant(32, 4, 0, true, false)
	n, ok := findVariant(32, 4, 5, true, false)
	if !ok {
		t.Fatal("no _t32pn variant")
	}
	for _, tc := range []struct {
		v              variant
		m, warps, clus int
		want           bool
	}{
		{w, 1, 16, 1, false}, {w, 2, 16, 1, false}, {w, 3, 16, 1, true}, {w, 1, 16, 2, true},
		{w, 2, 8, 1, true}, {w, 1, 4, 1, true}, {w, 5, 16, 2, true}, {w, 8, 16, 1, true},
		{l, 3, 16, 1, false}, {p, 1, 16, 1, true}, {n, 1, 16, 1, true}, {n, 8, 4, 4, true},
	} {
		c := makeConfig(tc.m, 896, 3584, tc.v, tc.warps, tc.clus)
		if got := sumsLikeTwin(c, tc.m); got != tc.want {
			t.Errorf("%s %d warps cluster %d M %d: %v, want %v", c.Function, tc.warps, tc.clus, tc.m, got, tc.want)
		}
	}
}

// The Python scripts of the kernel harness name configs by
// scripts/kernel-harness/cfgname.py, whose ENTRIES and STAGES must list the
// same entry point families as variants (the step sweep rejects a config
// it does not know: 2026-12-01am).
func TestCfgnameKnowsEveryVariant(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "scripts", "kernel-harness", "cfgname.py"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	entries := regexp.MustCompile(`(?s)\nENTRIES = \{(.*?)\}`).FindStringSubmatch(src)
	stages := regexp.MustCompile(`\nSTAGES = "([a-z]+)"`).FindStringSubmatch(src)
	if entries == nil || stages == nil {
		t.Fatal("cfgname.py: no ENTRIES set or STAGES string")
	}
	var got []string
	for _, m := range regexp.MustCompile(`\((\d+), (\d+), (\d+), (\d), (\d)\)`).FindAllStringSubmatch(entries[1], -1) {
		got = append(got, strings.Join(m[1:], " "))
	}
	var want []string
	maxStage := 0
	for _, v := range variants {
		want = append(want, fmt.Sprintf("%d %d %d %d %d", v.tileRows, v.depth, v.stage, b2i(v.packed), b2i(v.one)))
		maxStage = max(maxStage, v.stage)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("cfgname.py ENTRIES (tile_rows depth stage packed one):\n  %v\nkernel.variants:\n  %v", got, want)
	}
	if len(stages[1]) != maxStage+1 {
		t.Errorf("cfgname.py STAGES %q names %d stages, variants use 0..%d", stages[1], len(stages[1]), maxStage)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
