package kernel

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// The harness (scripts/kernel-harness/harness.cu, check mode) verifies every
// entry point with these warps and cluster sizes on 240 shapes; ConfigFor
// must stay inside them.
var (
	checkedWarps    = map[int]bool{1: true, 2: true, 4: true, 8: true, 16: true}
	checkedClusters = map[int]bool{1: true, 2: true, 3: true, 4: true, 6: true, 8: true}
)

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
		want := makeConfig(e.m, e.shard, e.f, e.warps, e.cluster)
		want.L2Prefetch = e.prefetch
		want.ClusterPolicy = e.policy
		want.Carveout = e.carveout
		if got != want {
			t.Errorf("measured shape latent %d shard %d m %d: ConfigFor %+v, table %+v", e.latent, e.shard, e.m, got, want)
		}
	}
	// The benchmark shapes (scripts/bench-kernel), every M.
	for _, shard := range []int{7168, 3584, 1792, 896, 448} {
		for m := 1; m <= MaxSkinnyM; m++ {
			if !seen[[3]int{3584, shard, m}] {
				t.Errorf("no measured entry for latent 3584 shard %d m %d", shard, m)
			}
		}
	}
}

func TestConfigForCoversEveryValidShape(t *testing.T) {
	shards := []int{8, 16, 24, 40, 200, 448, 456, 896, 1000, 1024, 1792, 2048, 3584, 4096, 7168, 8192, 14336, 65536}
	latents := []int{8, 16, 24, 512, 1000, 1024, 2048, 3584, 3600, 7168, 16384, 65536, MaxLatent}
	for m := 1; m <= MaxSkinnyM; m++ {
		for _, shard := range shards {
			for _, latent := range latents {
				checkConfig(t, m, shard, latent)
			}
		}
	}
	rng := rand.New(rand.NewPCG(uint64(len(shards)), 7))
	for range 2000 {
		checkConfig(t, 1+rng.IntN(MaxSkinnyM), ShardAlign*(1+rng.IntN(4096)), LatentAlign*(1+rng.IntN(MaxLatent/LatentAlign)))
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
	if c.BlockX > 512 || c.SharedBytes > DefaultSharedLimit {
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
		{"unknown family", mod(func(c *LaunchConfig) { c.Family = "d8" }), 4, 896, 3584},
		{"the function of another family", mod(func(c *LaunchConfig) { c.Function += "x" }), 4, 896, 3584},
		{"tile rows not the family's", mod(func(c *LaunchConfig) { c.TileRows = 48 - c.TileRows }), 4, 896, 3584},
		{"too many warps", mod(func(c *LaunchConfig) { c.Warps = 32; c.BlockX = 1024 }), 4, 896, 3584},
		{"cluster 9", mod(func(c *LaunchConfig) { c.Cluster = 9 }), 4, 896, 3584},
		{"block not 32*warps", mod(func(c *LaunchConfig) { c.BlockX++ }), 4, 896, 3584},
		{"short shared memory", mod(func(c *LaunchConfig) { c.SharedBytes -= 16 }), 4, 896, 3584},
		{"M 0", good, 0, 896, 3584},
		{"shard not a multiple of 8", good, 4, 900, 3584},
		{"latent not a multiple of 8", good, 4, 896, 3590},
		{"prefetch plan with unknown bits", mod(func(c *LaunchConfig) { c.L2Prefetch = 1 << 26 }), 4, 896, 3584},
		{"prefetch plan of 17 sixteenths", mod(func(c *LaunchConfig) { c.L2Prefetch = 17 << 16 }), 4, 896, 3584},
		{"cluster policy 3", mod(func(c *LaunchConfig) { c.ClusterPolicy = 3 }), 4, 896, 3584},
		{"cluster policy -1", mod(func(c *LaunchConfig) { c.ClusterPolicy = -1 }), 4, 896, 3584},
	}
	for _, tc := range cases {
		if err := tc.c.Validate(tc.m, tc.shard, tc.latent); err == nil {
			t.Errorf("%s: accepted", tc.desc)
		}
	}
	// A scheduling policy needs a cluster launch.
	d8p, _ := findFamily("d8p")
	t32p, _ := findFamily("t32p")
	c1 := makeConfig(4, 896, d8p, 16, 1)
	c1.ClusterPolicy = 2
	if err := c1.Validate(4, 896, 3584); err == nil {
		t.Error("cluster policy 2 with cluster 1: accepted")
	}
	c4 := makeConfig(4, 896, t32p, 8, 4)
	c4.ClusterPolicy = 2
	if err := c4.Validate(4, 896, 3584); err != nil {
		t.Errorf("cluster policy 2 with cluster 4: %v", err)
	}
}

func TestParseConfigTableRejects(t *testing.T) {
	const row = "3584\t896\t1\td8p\t16\t1\t0\t0\t0\t2.5"
	table := func(rows ...string) string { return "# c\n" + TableHeader + "\n" + strings.Join(rows, "\n") + "\n" }
	field := func(i int, v string) string {
		f := strings.Split(row, "\t")
		f[i] = v
		return strings.Join(f, "\t")
	}
	cases := []struct{ desc, text string }{
		{"empty", "# only comments\n"},
		{"no header row", row + "\n"},
		{"header only", table()},
		{"header in another order", strings.Replace(table(row), "warps\tcluster", "cluster\twarps", 1)},
		{"short row", table("3584\t896\t1\td8p\t16\t1\t0\t0\t2.5")},
		{"long row", table(row + "\t7")},
		{"spaces for tabs", table(strings.ReplaceAll(row, "\t", " "))},
		{"not a number", table(field(2, "x"))},
		{"no such family", table(field(3, "d8"))},
		{"row-major family of the past", table(field(3, ""))},
		{"M 9", table(field(2, "9"))},
		{"M 0", table(field(2, "0"))},
		{"shard not a multiple of 8", table(field(1, "900"))},
		{"latent not a multiple of 8", table(field(0, "3590"))},
		{"17 warps", table(field(4, "17"))},
		{"0 warps", table(field(4, "0"))},
		{"cluster 9", table(field(5, "9"))},
		{"prefetch not a number", table(field(6, "x"))},
		{"prefetch plan with unknown bits", table(field(6, "67108864"))},
		{"cluster policy 3", table(field(5, "4"), field(7, "3"))},
		{"cluster policy -1", table(field(7, "-1"))},
		{"cluster policy without a cluster", table(field(7, "2"))},
		{"carveout 101", table(field(8, "101"))},
		{"carveout -1", table(field(8, "-1"))},
		{"median not a number", table(field(9, "fast"))},
		{"one shape twice", table(row, row)},
	}
	for _, tc := range cases {
		if _, err := parseTable("config_table.tsv", tc.text); err == nil {
			t.Errorf("%s: parsed", tc.desc)
		}
	}
	// One valid row of each family, and the launch config made from it.
	fams, err := families()
	if err != nil {
		t.Fatal(err)
	}
	plan := 32 | 8<<16 | 1<<24
	for _, f := range fams {
		if f.smem {
			text := table(fmt.Sprintf("3584\t3584\t5\t%s\t4\t4\t%d\t2\t65\t7.4", f.name, plan))
			if _, err := parseTable("config_table.tsv", text); err == nil {
				t.Errorf("a skinny table row naming the larger-M family %s parsed", f.name)
			}
			continue
		}
		text := table(fmt.Sprintf("3584\t3584\t5\t%s\t4\t4\t%d\t2\t65\t7.4", f.name, plan))
		e, err := parseTable("step_table.tsv", text)
		if err != nil || len(e) != 1 || e[0].f != f || e[0].warps != 4 || e[0].cluster != 4 || e[0].prefetch != plan ||
			e[0].policy != 2 || e[0].carveout != 65 {
			t.Errorf("valid row of family %s: %+v, %v", f.name, e, err)
			continue
		}
		c := configFrom(e[0], 5, 3584)
		if c.Function != "tprun_skinny_m5_"+f.name || c.Family != f.name || c.TileRows != f.tileRows || c.Cluster != 4 ||
			c.ClusterPolicy != 2 || c.Carveout != 65 || c.L2Prefetch != plan ||
			c.SharedBytes != SkinnySharedBytes(f.tileRows, 4, 4) || c.Validate(5, 3584, 3584) != nil {
			t.Errorf("family %s entry's config: %+v, %v", f.name, c, c.Validate(5, 3584, 3584))
		}
	}
	e, err := parseTable("config_table.tsv", table("3584\t896\t8\tt32p\t16\t2\t0\t0\t80\t2.35", "3584\t896\t7\tt32p\t16\t2\t0\t2\t0\t2.5"))
	if err != nil || len(e) != 2 {
		t.Fatalf("valid rows with a carveout: %+v, %v", e, err)
	}
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

// families.tsv: the embedded spec parses, names the families of both
// tables, and its parser rejects what the build would not understand.
func TestFamilies(t *testing.T) {
	fams, err := families()
	if err != nil || len(fams) == 0 {
		t.Fatalf("families.tsv: %d families, %v", len(fams), err)
	}
	used := map[string]bool{}
	big, err := bigmMeasured()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range big {
		used[e.f.name] = true
	}
	for _, tbl := range []func() ([]tableEntry, error){measured, stepMeasured} {
		entries, err := tbl()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range entries {
			used[e.f.name] = true
		}
	}
	for _, f := range fams {
		if !used[f.name] {
			t.Errorf("family %s: no launch table picks it, so it should not be built", f.name)
		}
	}
	if f, ok := findFamily(fallbackConfig.f.name); !ok || f != fallbackConfig.f {
		t.Errorf("fallbackConfig's family %+v is not families.tsv's %+v", fallbackConfig.f, f)
	}
	if f, ok := findFamily(bigmFallback.f.name); !ok || f != bigmFallback.f {
		t.Errorf("bigmFallback's family %+v is not families.tsv's %+v", bigmFallback.f, f)
	}
	for _, mt := range BigmCodes {
		if !bigmSplitOK(mt, bigmFallback.f, bigmFallback.warps, bigmFallback.ksplit) {
			t.Errorf("bigmFallback's K split %d does not fit code size %d", bigmFallback.ksplit, mt)
		}
	}
	const good = "d8p\t16\t8\tring\t0\t0\t0\t16"
	spec := func(rows ...string) string { return familiesHeader + "\n" + strings.Join(rows, "\n") + "\n" }
	if f, err := parseFamilies(spec(good, "x1\t32\t4\tlines\t0\t0\t0\t8")); err != nil || len(f) != 2 || !f[1].lines || f[1].maxWarps != 8 {
		t.Errorf("valid spec: %+v, %v", f, err)
	}
	for _, tc := range []struct{ desc, text string }{
		{"no header", good + "\n"},
		{"no rows", spec()},
		{"name with an underscore", spec(strings.Replace(good, "d8p", "d8_p", 1))},
		{"empty name", spec(strings.Replace(good, "d8p", "", 1))},
		{"a name twice", spec(good, good)},
		{"tile rows 24", spec(strings.Replace(good, "16\t8", "24\t8", 1))},
		{"latent neither ring nor lines", spec(strings.Replace(good, "ring", "staged", 1))},
		{"wide 2", spec(strings.Replace(good, "ring\t0", "ring\t2", 1))},
		{"lines with one instance", spec(strings.Replace(good, "ring\t0\t0", "lines\t0\t1", 1))},
		{"warps 0", spec(strings.TrimSuffix(good, "16") + "0")},
		{"short row", spec(strings.TrimSuffix(good, "\t16"))},
	} {
		if _, err := parseFamilies(tc.text); err == nil {
			t.Errorf("%s: parsed", tc.desc)
		}
	}
}

// scripts/build-kernels writes the instance list from families.tsv and
// hashes the same sources as FatbinSources, in the same order.
func TestBuildScriptReadsTheSpec(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "scripts", "build-kernels"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	m := regexp.MustCompile(`(?m)^SOURCES=\(([^)]*)\)`).FindStringSubmatch(src)
	if m == nil {
		t.Fatal("scripts/build-kernels: no SOURCES=(...) line")
	}
	if got := strings.Fields(m[1]); !slices.Equal(got, FatbinSources[:]) {
		t.Errorf("build-kernels hashes %v, FatbinSources is %v", got, FatbinSources)
	}
	if !strings.Contains(src, "kernel/families.tsv") || !strings.Contains(src, strings.ReplaceAll(familiesHeader, "\t", `\t`)) {
		t.Error("build-kernels does not read families.tsv with its header row")
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
	if err := os.WriteFile(good, fmt.Appendf(nil, "# dev\n%s\n3584\t3584\t2\td8p1\t8\t1\t%d\t0\t0\t7.0\n", TableHeader, plan), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(ConfigTableEnv, good)
	loadConfigTable := func() ([]tableEntry, error) {
		return loadTable(ConfigTableEnv, "config_table.tsv", configTableTSV, parseTable)
	}
	e, err := loadConfigTable()
	if err != nil || len(e) != 1 || e[0].prefetch != plan || e[0].f.name != "d8p1" {
		t.Errorf("override table: %+v, %v", e, err)
	}
	bad := filepath.Join(dir, "bad.tsv")
	if err := os.WriteFile(bad, []byte(TableHeader+"\n3584\t3584\t2\td8\t8\t1\t0\t0\t0\t7.0\n"), 0o644); err != nil {
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
// fused receive, every other shape gets ConfigFor's pick; every entry is a
// valid config, and its env override is read like the kernel table's.
func TestStepConfig(t *testing.T) {
	entries, err := stepMeasured()
	if err != nil || len(entries) == 0 {
		t.Fatalf("step table: %d entries, %v", len(entries), err)
	}
	for _, e := range entries {
		c := StepConfigFor(e.m, e.shard, e.latent)
		if want := configFrom(e, e.m, e.shard); c != want {
			t.Errorf("StepConfigFor(%d, %d, %d) = %+v, want the entry's %+v", e.m, e.shard, e.latent, c, want)
		}
		if err := c.Validate(e.m, e.shard, e.latent); err != nil {
			t.Errorf("step entry m %d shard %d: %v", e.m, e.shard, err)
		}
	}
	// A shape the step table lacks: ConfigFor's pick.
	for _, tc := range []struct{ m, shard, latent int }{{1, 896, 3584}, {8, 1792, 3584}, {3, 1024, 1024}} {
		if got, want := StepConfigFor(tc.m, tc.shard, tc.latent), ConfigFor(tc.m, tc.shard, tc.latent); got != want {
			t.Errorf("StepConfigFor(%d, %d, %d) = %+v, want ConfigFor's %+v", tc.m, tc.shard, tc.latent, got, want)
		}
	}
	loadStepTable := func() ([]tableEntry, error) {
		return loadTable(StepTableEnv, "step_table.tsv", stepTableTSV, parseTable)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "step.tsv")
	if err := os.WriteFile(good, []byte(TableHeader+"\n3584\t896\t2\tt32p\t8\t2\t0\t0\t0\t8.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(StepTableEnv, good)
	if e, err := loadStepTable(); err != nil || len(e) != 1 || e[0].cluster != 2 || e[0].shard != 896 {
		t.Errorf("override step table: %+v, %v", e, err)
	}
	bad := filepath.Join(dir, "bad.tsv")
	if err := os.WriteFile(bad, []byte("3584\t896\t2\tt32p\t8\t2\t0\t0\t0\t8.0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, path := range []string{filepath.Join(dir, "missing.tsv"), bad} {
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

// The kernel harness's Python scripts (scripts/kernel-harness/cfgname.py)
// read the families from families.tsv and write tables with TableHeader.
func TestCfgnameReadsTheSpec(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("no python3")
	}
	cmd := exec.Command(py, "-c", "import cfgname; print(repr(cfgname.TABLE_HEADER)); print(' '.join(cfgname.families()))")
	cmd.Dir = filepath.Join("..", "scripts", "kernel-harness")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cfgname.py: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	fams, err := families()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range fams {
		names = append(names, f.name)
	}
	if want := fmt.Sprintf("%q", TableHeader); len(lines) != 2 || strings.ReplaceAll(lines[0], "'", `"`) != want || lines[1] != strings.Join(names, " ") {
		t.Errorf("cfgname.py says\n%s\nwant the header %s and the families %v", out, want, names)
	}
}
