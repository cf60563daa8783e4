package kernel

import (
	_ "embed"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
)

// Launch geometry of the skinny kernel (kernel/skinny.h, docs/contracts.md
// "kernel ABI"). Every combination of an entry point, 1..MaxWarps(entry)
// warps and 1..MaxCluster CTAs per cluster runs correctly on every valid
// shape (the GPU harness checks them all); the table only says which is
// fastest.
const (
	// MaxCluster is the largest K split across the CTAs of a cluster (the
	// portable cluster size).
	MaxCluster = 8
	// MaxStagedShared bounds the dynamic shared memory of the staged entry
	// points; a shape that would need more gets the unstaged twin of the
	// same weight layout ("_d8" for "_s8" and "_c", "_t32" for "_s32",
	// "_d8p" for "_s8p").
	MaxStagedShared = 200 << 10
	// DefaultSharedLimit is the dynamic shared memory a function gets
	// without raising CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
	DefaultSharedLimit = 48 << 10
)

// LaunchConfig is everything a launcher needs besides the parameter block:
// cuModuleGetFunction(Function), then cuLaunchKernelEx with grid (GridX,1,1),
// block (BlockX,1,1), SharedBytes of dynamic shared memory, the cluster
// dimension attribute (Cluster,1,1), the programmatic stream serialization
// attribute, the cluster scheduling policy and shared memory carveout
// attributes when set, and SkinnyParams.TileRows = TileRows. When
// SharedBytes > DefaultSharedLimit, raise the function's
// CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES to at least SharedBytes
// once after loading.
type LaunchConfig struct {
	Function    string // "tprun_skinny_m<M><variant>"
	TileRows    int    // output columns per CTA: 16 or 32
	Depth       int    // 32-k weight chunks in flight per warp: 4 or 8 (0 for stage 2)
	Stage       int    // 0: latent from L2; 1: latent slice in shared memory ("_s*"); 2: weight slab too ("_c"); 3: latent from L2 by whole lines ("_d8pl"; it adds in another order than its row-major twin "_d8", so results may differ from it in the last bit); 4: as 0, running the M = 8 tile code at every M ("_t32pw"; at 16 warps without a cluster and M <= 2 it sums the warps in another order than "_t32p", so results may differ from it in the last bit); 5: as 0, the latent and shared loads cached in L2 only ("_t32pn", the fused step's; bit-identical to "_t32p")
	Packed      bool   // the entry point reads the packed weight layout (PackWeight), not row-major
	OneInstance bool   // the entry point's tile code is compiled once for every cluster size ("_d8p1")
	Warps       int    // warps per CTA
	Cluster     int    // CTAs per cluster; they split K
	GridX       int    // ceil(shard/TileRows) * Cluster
	BlockX      int    // 32 * Warps
	SharedBytes int    // dynamic shared memory per CTA
	// L2Prefetch is SkinnyParams.L2Prefetch, the plan of L2 prefetches the
	// kernel issues before its weight loads, or in the LSU form right after
	// them (skinny.h; 0: none). A hint measured per shape: it never changes
	// the result.
	L2Prefetch int
	// ClusterPolicy is the launch's cluster scheduling policy preference
	// (CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE, a
	// CUclusterSchedulingPolicy: 0 the driver's default, 1 spread, 2 load
	// balancing), set only when it is not 0, which needs Cluster > 1. Like
	// L2Prefetch a measured hint: where the driver places the clusters,
	// never what they compute. Load balancing took 0.2-0.37 µs off shard
	// 3584's 32/4/g/4/4/pf48.8l/p (bench/NOTES-kernel.md, 2026-11-30s).
	ClusterPolicy int
	// Carveout is the launch's preferred shared memory carveout
	// (CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT): the percent
	// (1..100) of the SM's unified L1/shared memory it would like as
	// shared memory; 0 leaves it to the driver. A measured hint like the
	// two above: how the SM's memory is split, never what is computed. At
	// shard 896 on the H200, 65 % took 0.03-0.06 µs off M 1-6 and 80 %
	// 0.1-0.2 µs off M 7-8 (and with "_t32pw", 0.1 µs off M 5-6), while
	// shards 3584 and 7168 gained nothing and lost with other values
	// (bench/NOTES-kernel.md, 2026-11-30aj and ak), so ConfigFor sets it
	// only for a shape the table measured.
	Carveout int
}

// MaxClusterPolicy is the largest ClusterPolicy (CU_CLUSTER_SCHEDULING_POLICY_LOAD_BALANCING).
const MaxClusterPolicy = 2

// MaxCarveout is the largest Carveout: all of the unified memory that can
// be shared memory.
const MaxCarveout = 100

// L2 prefetch plan fields (skinny.h, TPRUN_PF_*): helpers in bits 0-15,
// sixteenths (0..16) in bits 16-23, "own" in bit 24, the LSU form in bit 25.
const (
	pfSixteenthsShift = 16
	pfValidBits       = 1<<26 - 1 // helpers, sixteenths, own, LSU (bit 25)
)

// validPrefetch says whether x is a well-formed L2 prefetch plan.
func validPrefetch(x int) bool {
	return x >= 0 && x&^pfValidBits == 0 && (x>>pfSixteenthsShift)&0xff <= 16
}

// variant is one compiled entry point family.
type variant struct {
	suffix   string
	tileRows int
	depth    int
	stage    int
	maxWarps int
	packed   bool // reads the packed weight layout
	// one: the tile code compiled once for launches with and without a
	// cluster (skinny.cu, ClusterShape kAny), not once for each.
	one bool
}

var variants = [...]variant{
	{"", 16, 4, 0, 8, false, false},
	{"_d8", 16, 8, 0, 16, false, false},
	{"_t32", 32, 4, 0, 16, false, false},
	{"_s8", 16, 8, 1, 16, false, false},
	{"_s32", 32, 4, 1, 16, false, false},
	{"_c", 16, 0, 2, 16, false, false},
	{"_d8p", 16, 8, 0, 16, true, false},
	{"_t32p", 32, 4, 0, 16, true, false},
	{"_s8p", 16, 8, 1, 16, true, false},
	{"_d8p1", 16, 8, 0, 16, true, true},
	// "_d8pl": "_d8p" reading the latent by whole 128-byte lines (skinny.cu,
	// skinny_lines), packed only.
	{"_d8pl", 16, 8, 3, 16, true, false},
	// "_t32pw": "_t32p" running the tile code of M = 8 at every M, the
	// rows M..7 never loaded nor stored (skinny.cu, latent_rows), packed
	// only. Stage 4 names the family; the latent comes from L2 as in stage 0.
	{"_t32pw", 32, 4, 4, 16, true, false},
	// "_t32pn": "_t32p" with the latent and shared loads cached in L2 only
	// (skinny.cu, ld_act), packed only: the fused step's family (step
	// table), the same sums as "_t32p". Stage 5 names it.
	{"_t32pn", 32, 4, 5, 16, true, false},
}

func findVariant(tileRows, depth, stage int, packed, one bool) (variant, bool) {
	for _, v := range variants {
		if v.tileRows == tileRows && v.depth == depth && v.stage == stage && v.packed == packed && v.one == one {
			return v, true
		}
	}
	return variant{}, false
}

// mustVariant is findVariant for the fixed families named in this file
// (each with two instances of the tile code).
func mustVariant(tileRows, depth, stage int, packed bool) variant {
	v, ok := findVariant(tileRows, depth, stage, packed, false)
	if !ok {
		panic(fmt.Sprintf("kernel: no entry point %d/%d/%d packed=%v", tileRows, depth, stage, packed))
	}
	return v
}

// unstaged is the entry point with the same tile and weight layout that
// keeps everything in registers: the fallback when a staged one would need
// too much shared memory.
func unstaged(v variant) variant {
	if v.tileRows == 32 {
		return mustVariant(32, 4, 0, v.packed)
	}
	return mustVariant(16, 8, 0, v.packed)
}

// twin is the entry point closest to v that reads the other weight layout
// when v's is not the one asked for: "_d8", "_t32", "_s8" and their "p"
// forms map onto each other; the lean "" and slab "_c" entries (row-major
// only) map to "_d8p", "_s32" to "_t32p", "_d8p1" and "_d8pl" (packed
// only) to "_d8", and "_t32pw" and "_t32pn" (packed only) to "_t32".
func twin(v variant, packed bool) variant {
	switch {
	case v.packed == packed:
		return v
	case v.stage == 2 || v.stage == 3 || (v.tileRows == 16 && v.depth == 4):
		return mustVariant(16, 8, 0, packed)
	case v.tileRows == 32:
		return mustVariant(32, 4, 0, packed)
	default:
		return mustVariant(16, 8, v.stage, packed)
	}
}

// SkinnySharedBytes is the dynamic shared memory of one CTA (skinny.h):
// reduction buffers, plus for stage 1 the latent slice and for stage 2 the
// latent slice and the weight slab, rows padded to an odd multiple of 64 bytes.
func SkinnySharedBytes(m, latent, tileRows, warps, cluster, stage int) int {
	b := (warps + cluster) * 8 * (tileRows + 4) * 4
	if stage == 1 || stage == 2 {
		chunks := (latent + 31) / 32
		per := (chunks + cluster - 1) / cluster
		rows := m
		if stage == 2 {
			rows += tileRows
		}
		b += rows * (per | 1) * 64
	}
	return b
}

func makeConfig(m, shard, latent int, v variant, warps, cluster int) LaunchConfig {
	return LaunchConfig{
		Function:    fmt.Sprintf("tprun_skinny_m%d%s", m, v.suffix),
		TileRows:    v.tileRows,
		Depth:       v.depth,
		Stage:       v.stage,
		Packed:      v.packed,
		OneInstance: v.one,
		Warps:       warps,
		Cluster:     cluster,
		GridX:       (shard + v.tileRows - 1) / v.tileRows * cluster,
		BlockX:      32 * warps,
		SharedBytes: SkinnySharedBytes(m, latent, v.tileRows, warps, cluster, v.stage),
	}
}

// Validate says whether c can launch the skinny kernel for m rows of a
// shard×latent weight: an existing entry point for m, warps and cluster in
// range, and grid, block and shared memory that agree with them.
func (c LaunchConfig) Validate(m, shard, latent int) error {
	if m < 1 || m > MaxM || shard < ShardAlign || shard%ShardAlign != 0 || latent < LatentAlign || latent%LatentAlign != 0 {
		return fmt.Errorf("%w: launch config for M=%d shard=%d latent=%d", ErrShape, m, shard, latent)
	}
	v, ok := findVariant(c.TileRows, c.Depth, c.Stage, c.Packed, c.OneInstance)
	switch {
	case !ok:
		return fmt.Errorf("kernel: no entry point with %d rows, depth %d, stage %d, packed %v, one instance %v",
			c.TileRows, c.Depth, c.Stage, c.Packed, c.OneInstance)
	case c.Warps < 1 || c.Warps > v.maxWarps:
		return fmt.Errorf("kernel: %d warps, entry %q takes 1..%d", c.Warps, v.suffix, v.maxWarps)
	case c.Cluster < 1 || c.Cluster > MaxCluster:
		return fmt.Errorf("kernel: cluster %d outside 1..%d", c.Cluster, MaxCluster)
	}
	if !validPrefetch(c.L2Prefetch) {
		return fmt.Errorf("kernel: L2 prefetch plan %#x is not one skinny.h defines", c.L2Prefetch)
	}
	if err := validPolicy(c.ClusterPolicy, c.Cluster); err != nil {
		return err
	}
	if c.Carveout < 0 || c.Carveout > MaxCarveout {
		return fmt.Errorf("kernel: shared memory carveout %d%% outside 0..%d (0: the driver's choice)", c.Carveout, MaxCarveout)
	}
	want := makeConfig(m, shard, latent, v, c.Warps, c.Cluster)
	want.L2Prefetch = c.L2Prefetch
	want.ClusterPolicy = c.ClusterPolicy
	want.Carveout = c.Carveout
	if c != want {
		return fmt.Errorf("kernel: launch config %+v inconsistent, want %+v", c, want)
	}
	if c.Stage > 0 && c.SharedBytes > MaxStagedShared {
		return fmt.Errorf("kernel: %d bytes of shared memory, more than %d", c.SharedBytes, MaxStagedShared)
	}
	return nil
}

// validPolicy says why a cluster scheduling policy cannot go with a
// cluster of the given size, or nil.
func validPolicy(policy, cluster int) error {
	switch {
	case policy < 0 || policy > MaxClusterPolicy:
		return fmt.Errorf("kernel: cluster scheduling policy %d outside 0..%d", policy, MaxClusterPolicy)
	case policy != 0 && cluster < 2:
		return fmt.Errorf("kernel: cluster scheduling policy %d needs clusters of 2 or more CTAs, not %d", policy, cluster)
	}
	return nil
}

//go:embed config_table.tsv
var configTableTSV string

// tableEntry is one measured row of config_table.tsv.
type tableEntry struct {
	latent, shard, m int
	v                variant
	warps, cluster   int
	prefetch         int // LaunchConfig.L2Prefetch
	policy           int // LaunchConfig.ClusterPolicy
	carveout         int // LaunchConfig.Carveout
}

// ConfigTableEnv names a config table file (config_table.tsv format) that
// ConfigFor uses instead of the embedded one: for kernel development only,
// with FatbinEnv, to try a new sweep's table without rebuilding Go. Load
// fails when the file cannot be read or parsed.
const ConfigTableEnv = "TPRUN_KERNELS_CONFIG_TABLE"

// ConfigTableOverride is the path in ConfigTableEnv, or "".
func ConfigTableOverride() string { return os.Getenv(ConfigTableEnv) }

// measured parses the config table once; the result is never modified.
var measured = sync.OnceValues(loadConfigTable)

// loadConfigTable parses ConfigTableEnv's file, or else the embedded table.
func loadConfigTable() ([]tableEntry, error) {
	return loadTable(ConfigTableEnv, "config_table.tsv", configTableTSV)
}

// loadTable parses the file named by the environment variable env, or else
// the embedded text; name is the table's file name, for errors.
func loadTable(env, name, embedded string) ([]tableEntry, error) {
	path := os.Getenv(env)
	if path == "" {
		return parseTable(name, embedded)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kernel: %s: %w", env, err)
	}
	e, err := parseTable(name, string(b))
	if err != nil {
		return nil, fmt.Errorf("kernel: %s=%s: %w", env, path, err)
	}
	return e, nil
}

// The step table: launch configs for a skinny launch that carries the fused
// receive (the fused step of tp.UpProjection on separate GPUs). Its receive
// CTAs and the peer's stores change what is fastest, so the step is
// measured on its own: scripts/step-sweep runs the step (tp 2 on two GPUs)
// with each candidate config for every m and writes the best per m. Same
// format as config_table.tsv; only exact (latent, shard, m) matches are
// used, every other launch with a fused receive takes ConfigForLayout's
// pick. The key has no hidden size, tp, mailbox backend or skipped slice:
// an entry measured on the unicast tp-2 step (hidden = 2 shard, own slice
// skipped) also serves, say, a multicast step or a tp-4 step of the same
// shard and latent, whose receive CTAs poll other numbers of columns.
// Every entry must be in the weight layout the kernel table picks for its
// shape (PreferPacked): the weight is laid out once.
//
//go:embed step_table.tsv
var stepTableTSV string

// StepTableEnv names a step table file (config_table.tsv format) that
// StepConfigForLayout uses instead of the embedded step_table.tsv: for
// scripts/step-sweep and kernel development. Load fails when the file cannot
// be read or parsed.
const StepTableEnv = "TPRUN_KERNELS_STEP_TABLE"

// StepTableOverride is the path in StepTableEnv, or "".
func StepTableOverride() string { return os.Getenv(StepTableEnv) }

// stepMeasured parses the step table once; the result is never modified.
var stepMeasured = sync.OnceValues(loadStepTable)

// loadStepTable parses StepTableEnv's file, or else the embedded step
// table, and checks each entry's layout against the kernel table's.
func loadStepTable() ([]tableEntry, error) {
	entries, err := loadTable(StepTableEnv, "step_table.tsv", stepTableTSV)
	if err != nil {
		return nil, err
	}
	src := "step_table.tsv"
	if path := StepTableOverride(); path != "" {
		src = StepTableEnv + "=" + path
	}
	for _, e := range entries {
		if want := PreferPacked(e.shard, e.latent); e.v.packed != want {
			return nil, fmt.Errorf("kernel: %s: latent %d shard %d m %d: packed=%v, but the weight of that shape is laid out packed=%v (PreferPacked)",
				src, e.latent, e.shard, e.m, e.v.packed, want)
		}
	}
	return entries, nil
}

// StepConfigForLayout is the launch config of a skinny kernel with a fused
// receive (SkinnyArgs.Receive set): the step table's entry for exactly this
// latent, shard and m (its entry point swapped for the twin that reads the
// given weight layout, as ConfigForLayout does), else ConfigForLayout.
func StepConfigForLayout(m, shard, latent int, packed bool) LaunchConfig {
	m, shard, latent = clampShape(m, shard, latent)
	if entries, err := stepMeasured(); err == nil {
		for _, e := range entries {
			if e.m == m && e.shard == shard && e.latent == latent {
				return configFrom(e, twin(e.v, packed), m, shard, latent)
			}
		}
	}
	return ConfigForLayout(m, shard, latent, packed)
}

// parseTable parses a table in config_table.tsv's format; name is its file
// name, for errors.
func parseTable(name, text string) ([]tableEntry, error) {
	var out []tableEntry
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		// latent shard m tile_rows depth stage warps cluster [l2_prefetch [packed [one [cluster_policy [carveout]]]] median_us]:
		// 14 fields; 13 (no carveout column), 12 (no cluster_policy), 11
		// (no one column), 10 (no packed column) or 8-9 (no l2_prefetch) in
		// older tables.
		f := strings.Fields(line)
		if len(f) < 8 || len(f) > 14 {
			return nil, fmt.Errorf("kernel: %s line %d: %d fields, want 8 to 14", name, i+1, len(f))
		}
		prefetch, packed, one, policy, carveout := 0, false, false, 0, 0
		if len(f) >= 10 {
			x, err := strconv.Atoi(f[8])
			if err != nil || !validPrefetch(x) {
				return nil, fmt.Errorf("kernel: %s line %d: l2_prefetch %q is not a plan skinny.h defines", name, i+1, f[8])
			}
			prefetch = x
		}
		// The 0/1 columns packed (f[9]) and one (f[10]).
		bit := func(col int, what string) (bool, error) {
			switch f[col] {
			case "0":
				return false, nil
			case "1":
				return true, nil
			}
			return false, fmt.Errorf("kernel: %s line %d: %s %q is not 0 or 1", name, i+1, what, f[col])
		}
		var err error
		if len(f) >= 11 {
			if packed, err = bit(9, "packed"); err != nil {
				return nil, err
			}
		}
		if len(f) >= 12 {
			if one, err = bit(10, "one"); err != nil {
				return nil, err
			}
		}
		if len(f) >= 13 {
			x, err := strconv.Atoi(f[11])
			if err != nil || x < 0 || x > MaxClusterPolicy {
				return nil, fmt.Errorf("kernel: %s line %d: cluster_policy %q is not 0..%d", name, i+1, f[11], MaxClusterPolicy)
			}
			policy = x
		}
		if len(f) == 14 {
			x, err := strconv.Atoi(f[12])
			if err != nil || x < 0 || x > MaxCarveout {
				return nil, fmt.Errorf("kernel: %s line %d: carveout %q is not 0..%d", name, i+1, f[12], MaxCarveout)
			}
			carveout = x
		}
		var n [8]int
		for j := range n {
			x, err := strconv.Atoi(f[j])
			if err != nil {
				return nil, fmt.Errorf("kernel: %s line %d field %d: %w", name, i+1, j+1, err)
			}
			n[j] = x
		}
		v, ok := findVariant(n[3], n[4], n[5], packed, one)
		if !ok || n[6] < 1 || n[6] > v.maxWarps || n[7] < 1 || n[7] > MaxCluster ||
			n[2] < 1 || n[2] > MaxM || n[0] < LatentAlign || n[1] < ShardAlign {
			return nil, fmt.Errorf("kernel: %s line %d: invalid entry %q", name, i+1, line)
		}
		if policy != 0 && n[7] < 2 {
			return nil, fmt.Errorf("kernel: %s line %d: cluster_policy %d needs a cluster of 2 or more, not %d", name, i+1, policy, n[7])
		}
		out = append(out, tableEntry{latent: n[0], shard: n[1], m: n[2], v: v, warps: n[6], cluster: n[7], prefetch: prefetch, policy: policy, carveout: carveout})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("kernel: %s has no entries", name)
	}
	// A weight is laid out once for every M: one layout per shape.
	type shape struct{ latent, shard int }
	first := map[shape]tableEntry{}
	for _, e := range out {
		k := shape{e.latent, e.shard}
		if f, ok := first[k]; !ok {
			first[k] = e
		} else if f.v.packed != e.v.packed {
			return nil, fmt.Errorf("kernel: %s: latent %d shard %d mixes weight layouts (M %d packed=%v, M %d packed=%v)",
				name, e.latent, e.shard, f.m, f.v.packed, e.m, e.v.packed)
		}
	}
	return out, nil
}

// fallbackConfig is used only if the embedded table failed to parse (a
// test fails then): the measured best for the reference shapes' shard 896.
var fallbackConfig = tableEntry{v: variants[1], warps: 16, cluster: 1}

// ConfigFor picks the launch config of the skinny kernel for m latent rows
// (1..8) and a shard×latent weight slice, in the weight layout the table
// measured best for that shape (LaunchConfig.Packed; PreferPacked). Shapes
// measured by the sweep (config_table.tsv, see bench/NOTES-kernel.md) get
// their measured best; any other shape gets the entry, warps, cluster, L2
// prefetch plan and cluster scheduling policy of the measured shape nearest
// in log(shard) + log(latent) (one shape for every m, so one layout; the two
// hints were measured for that shape, not this one) and the driver's
// carveout (Carveout 0: a carveout is measured per shape), with a staged entry
// swapped for its unstaged twin
// when its shared memory would exceed MaxStagedShared. The result always
// satisfies Validate for a shape that Shape.Validate accepts; m is clamped
// to 1..MaxM so that no input panics.
func ConfigFor(m, shard, latent int) LaunchConfig {
	m, shard, latent = clampShape(m, shard, latent)
	best := nearestEntry(m, shard, latent)
	return configFrom(best, best.v, m, shard, latent)
}

// ConfigForLayout is ConfigFor for a weight in the given layout: ConfigFor's
// pick, with its entry point swapped for the twin that reads the other
// layout (twin) when the table measured the other one best.
func ConfigForLayout(m, shard, latent int, packed bool) LaunchConfig {
	m, shard, latent = clampShape(m, shard, latent)
	best := nearestEntry(m, shard, latent)
	return configFrom(best, twin(best.v, packed), m, shard, latent)
}

// clampShape is the shape the config lookups use: m in 1..MaxM, shard and
// latent at least one alignment unit, so that no input panics.
func clampShape(m, shard, latent int) (int, int, int) {
	return min(max(m, 1), MaxM), max(shard, ShardAlign), max(latent, LatentAlign)
}

// PreferPacked says whether the table measured the packed weight layout
// (PackWeight) faster for a shard×latent weight: the layout ConfigFor picks
// for every m of that shape. A caller that uploads the weight once packs it
// when this holds and passes SkinnyArgs.WeightPacked.
func PreferPacked(shard, latent int) bool { return ConfigFor(1, shard, latent).Packed }

// nearestEntry is the table entry for m at the measured shape nearest to
// shard×latent (ties: the first in table order). If that shape lacks m,
// the nearest entry for m in the same weight layout; failing that,
// fallbackConfig in that layout. So every m of a shape gets one layout.
func nearestEntry(m, shard, latent int) tableEntry {
	entries, err := measured()
	if err != nil {
		return fallbackConfig
	}
	return nearestIn(entries, m, shard, latent)
}

// nearestIn is nearestEntry over the given entries.
func nearestIn(entries []tableEntry, m, shard, latent int) tableEntry {
	dist := math.Inf(1)
	var near tableEntry
	for _, e := range entries {
		d := math.Abs(math.Log(float64(shard)/float64(e.shard))) + math.Abs(math.Log(float64(latent)/float64(e.latent)))
		if d < dist {
			dist, near = d, e
		}
	}
	best, found := fallbackConfig, false
	for _, e := range entries {
		if e.m == m && e.shard == near.shard && e.latent == near.latent {
			best, found = e, true
			break
		}
	}
	if !found { // the table lacks this m for that shape: nearest with this m and layout
		best.v = twin(best.v, near.v.packed)
		dist = math.Inf(1)
		for _, e := range entries {
			if e.m != m || e.v.packed != near.v.packed {
				continue
			}
			d := math.Abs(math.Log(float64(shard)/float64(e.shard))) + math.Abs(math.Log(float64(latent)/float64(e.latent)))
			if d < dist {
				dist, best = d, e
			}
		}
	}
	if best.shard != shard || best.latent != latent {
		// The carveout was measured for that shape alone; at shards 3584
		// and 7168 no value helped and most cost 0.1-2 µs: not extrapolated.
		best.carveout = 0
	}
	return best
}

func configFrom(best tableEntry, v variant, m, shard, latent int) LaunchConfig {
	if v.stage > 0 && SkinnySharedBytes(m, latent, v.tileRows, best.warps, best.cluster, v.stage) > MaxStagedShared {
		v = unstaged(v)
	}
	c := makeConfig(m, shard, latent, v, best.warps, best.cluster)
	c.L2Prefetch = best.prefetch
	c.ClusterPolicy = best.policy
	c.Carveout = best.carveout
	return c
}

// ReceiveConfig is the launch geometry of tprun_receive (no cluster, no
// dynamic shared memory; PDL allowed).
type ReceiveConfig struct {
	Function string
	GridX    int
	BlockX   int
}

// ReceiveConfigFor gives one thread per 16-byte vector of the m×hidden
// block, up to 132 blocks of 256 threads (one wave on an H200; each thread
// then polls several vectors in turn).
func ReceiveConfigFor(m, hidden int) ReceiveConfig {
	const block, maxGrid = 256, 132
	vec := max(m, 1) * max(hidden, 8) / 8
	grid := min(max((vec+block-1)/block, 1), maxGrid)
	return ReceiveConfig{Function: "tprun_receive", GridX: grid, BlockX: block}
}

// SkinnyParams mirrors tprun_skinny_params (kernel/skinny.h) byte for byte:
// pass a pointer to it as the kernel's only parameter. Device addresses are
// CUdeviceptr values.
type SkinnyParams struct {
	Latent       uint64     // bf16 [M][LatentDim]
	Weight       uint64     // bf16 [Shard][LatentDim], or packed (Flags)
	Shared       uint64     // bf16, element (m,n) at Shared[m*SharedStride+n]
	Dst          [16]uint64 // bf16 [M][Hidden] each; first NDst used
	LatentDim    int32
	Shard        int32
	Hidden       int32
	Rank         int32
	SharedStride int32 // elements
	NDst         int32 // 1..16
	TileRows     int32 // LaunchConfig.TileRows
	L2Prefetch   int32 // LaunchConfig.L2Prefetch
	// The fused receive (SkinnyArgs.Receive; RecvSlot 0: none).
	RecvSlot, RecvOut, RecvStatus, RecvTimeoutNs uint64
	RecvFlags                                    int32 // as ReceiveParams.Flags
	Flags                                        int32 // SkinnyPacked for a packed weight (LaunchConfig.Packed), else 0
}

// SkinnyPacked is the tprun_skinny_params.flags bit of a packed weight
// (TPRUN_SKINNY_PACKED).
const SkinnyPacked = 1

// ReceiveParams mirrors tprun_receive_params (kernel/skinny.h).
type ReceiveParams struct {
	Slot      uint64 // bf16 [M][Hidden], the local mailbox slot
	Out       uint64 // bf16 [M][Hidden]
	Status    uint64 // uint32 [ReceiveStatusWords], zeroed by the caller before the launch
	TimeoutNs uint64
	M         int32
	Hidden    int32
	Shard     int32
	Flags     int32 // ReceiveAbortable, ReceiveSkip with the rank at ReceiveSkipRankShift, or 0
}

// Receive flags and the abort word (skinny.h, TPRUN_RECEIVE_ABORTABLE,
// TPRUN_RECEIVE_SKIP): with ReceiveSkip the receive leaves the columns of
// the rank in bits ReceiveSkipRankShift.. (8 bits) alone.
const (
	ReceiveAbortable     = 1
	ReceiveSkip          = 2
	ReceiveSkipRankShift = 8
	ReceiveAbortWord     = 32
)

// ReceiveStatusWords is the length of the receive kernel's status array:
// word 0 is 1 after a timeout, word 1+r is 1 when rank r's slice (r < 16)
// was incomplete at the deadline.
const ReceiveStatusWords = 1 + MaxTP
