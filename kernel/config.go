package kernel

import (
	_ "embed"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Launch geometry of the skinny kernel (kernel/skinny.h). Every
// combination of a family, 1..its warps and 1..MaxCluster CTAs per cluster
// runs correctly on every valid shape (the GPU harness checks them all);
// the tables only say which is fastest.
const (
	// MaxCluster is the largest K split across the CTAs of a cluster (the
	// portable cluster size).
	MaxCluster = 8
	// DefaultSharedLimit is the dynamic shared memory a function gets
	// without raising CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES. No
	// skinny launch needs more (SkinnySharedBytes).
	DefaultSharedLimit = 48 << 10
	// MaxSharedOptIn is the most dynamic shared memory one CTA may have on
	// sm_90 (227 KiB) once the function's max dynamic shared size
	// attribute allows it: Load sets that attribute for the larger-M entry
	// points, whose launches need more than DefaultSharedLimit
	// (BigmSharedBytes).
	MaxSharedOptIn = 227 << 10
)

// BigmCodes are the code sizes MT of the larger-M entry points
// (tprun_bigm_mt<MT>_<family>, bigm.cu): a launch for M rows takes the
// smallest MT >= M (BigmCode).
var BigmCodes = [...]int{16, 32, 64, 128}

// BigmCode is the code size of the larger-M entry point that serves m
// rows: the smallest of BigmCodes at least m (m clamped to 1..MaxM).
func BigmCode(m int) int {
	for _, c := range BigmCodes {
		if m <= c {
			return c
		}
	}
	return BigmCodes[len(BigmCodes)-1]
}

// bigmWindowBytes is one latent window of the larger-M kernel: 1024/MT
// chunks of 32 k of MT rows (bigm.cu, BigmSizes), 64 KiB at every MT.
const bigmWindowBytes = 64 << 10

// BigmSharedBytes is the dynamic shared memory of a larger-M launch of
// code size mt with rows output columns per CTA and ksplit warp groups
// splitting K inside it (skinny.h): two latent windows, or the fp32
// partial sums [ksplit][mt][rows+4] over them, whichever is larger, and 16
// bytes for the slot word.
func BigmSharedBytes(mt, rows, ksplit int) int {
	return max(2*bigmWindowBytes, ksplit*mt*(rows+4)*4) + 16
}

// bigmWindowChunks is the latent window of code size mt in 32-k chunks
// (bigm.cu, BigmSizes::kKW).
func bigmWindowChunks(mt int) int { return bigmWindowBytes / (mt * 64) }

// LaunchConfig is everything a launcher needs besides the parameter block:
// cuModuleGetFunction(Function), then cuLaunchKernelEx with grid (GridX,1,1),
// block (BlockX,1,1), SharedBytes of dynamic shared memory, the cluster
// dimension attribute (Cluster,1,1), the programmatic stream serialization
// attribute, the cluster scheduling policy and shared memory carveout
// attributes when set, and SkinnyParams.TileRows = TileRows.
type LaunchConfig struct {
	Function string // "tprun_skinny_m<M>_<Family>", or "tprun_bigm_mt<CodeM>_<Family>" for M above MaxSkinnyM
	Family   string // a family of families.tsv: the entry point's compile-time options
	// TileRows is the output columns per CTA: the family's (16 or 32), or
	// for a larger-M family Warps times the family's columns per warp.
	TileRows int
	// CodeM is the larger-M entry point's code size (BigmCode(M)), 0 for
	// a skinny one. Such a launch carries M in the parameter block's flags
	// (SkinnyRowsShift) and has no fused receive.
	CodeM int
	// KSplit is, for a larger-M launch, how many warp groups split K inside
	// a CTA (Warps/KSplit warps own TileRows columns together); 0 for a
	// skinny one, whose warps all split K.
	KSplit      int
	Warps       int // warps per CTA
	Cluster     int // CTAs per cluster; they split K
	GridX       int // ceil(shard/TileRows) * Cluster
	BlockX      int // 32 * Warps
	SharedBytes int // dynamic shared memory per CTA; above DefaultSharedLimit only for CodeM > 0
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
	// never what they compute.
	ClusterPolicy int
	// Carveout is the launch's preferred shared memory carveout
	// (CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT): the percent
	// (1..100) of the SM's unified L1/shared memory it would like as
	// shared memory; 0 leaves it to the driver. A measured hint like the
	// two above: how the SM's memory is split, never what is computed. It
	// helps some small shards and costs the large ones, so ConfigFor sets
	// it only for a shape the table measured.
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

// The families of entry points: families.tsv, which scripts/build-kernels
// reads too (it writes the instance list of skinny.cu from it).
//
//go:embed families.tsv
var familiesTSV string

// family is one row of families.tsv: the compile-time options of the tile
// template (skinny.cu, Family) that the Go side needs.
type family struct {
	name     string
	tileRows int  // output columns per CTA (smem: per warp)
	depth    int  // weight chunks in flight per warp
	lines    bool // the latent by whole lines: adds in its own order
	smem     bool // the larger-M tile (bigm.cu): entry points per code size MT
	wide     bool // the M = 8 code at every M
	one      bool // one instance of the tile code for every cluster size
	l2only   bool // latent and shared loads cached in L2 only
	maxWarps int
}

// familiesHeader is the header row of families.tsv.
const familiesHeader = "family\ttile_rows\tdepth\tlatent\twide\tone\tl2only\twarps"

// families parses families.tsv once; the result is never modified.
var families = sync.OnceValues(func() ([]family, error) { return parseFamilies(familiesTSV) })

// parseFamilies reads a family spec in families.tsv's format.
func parseFamilies(text string) ([]family, error) {
	var out []family
	rows, err := tsvRows("families.tsv", text, familiesHeader)
	if err != nil {
		return nil, err
	}
	for _, r := range rows {
		f, bad := r.fields, r.errf
		fam := family{name: f[0]}
		if fam.name == "" || strings.ContainsFunc(fam.name, func(c rune) bool {
			return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9')
		}) {
			return nil, bad("family name %q is not lower-case letters and digits", f[0])
		}
		if slices.ContainsFunc(out, func(o family) bool { return o.name == fam.name }) {
			return nil, bad("family %s twice", fam.name)
		}
		var nums [3]int
		for i, col := range []int{1, 2, 7} {
			if nums[i], err = strconv.Atoi(f[col]); err != nil {
				return nil, bad("column %d: %v", col+1, err)
			}
		}
		fam.tileRows, fam.depth, fam.maxWarps = nums[0], nums[1], nums[2]
		switch f[3] {
		case "ring":
		case "lines":
			fam.lines = true
		case "smem":
			fam.smem = true
		default:
			return nil, bad("latent %q is not ring, lines or smem", f[3])
		}
		for i, p := range []*bool{&fam.wide, &fam.one, &fam.l2only} {
			switch f[4+i] {
			case "0":
			case "1":
				*p = true
			default:
				return nil, bad("column %d: %q is not 0 or 1", 5+i, f[4+i])
			}
		}
		switch {
		case fam.tileRows != 16 && fam.tileRows != 32:
			return nil, bad("tile_rows %d is not 16 or 32", fam.tileRows)
		case fam.depth < 1 || fam.depth > 16:
			return nil, bad("depth %d is not 1..16", fam.depth)
		case fam.maxWarps < 1 || fam.maxWarps > 32:
			return nil, bad("warps %d is not 1..32", fam.maxWarps)
		case fam.lines && (fam.wide || fam.one || fam.l2only):
			return nil, bad("the line-wise tile takes none of wide, one, l2only")
		case fam.smem && (fam.wide || fam.one || fam.l2only):
			return nil, bad("the larger-M tile takes none of wide, one, l2only")
		case fam.smem && (fam.depth > 8 || 8%fam.depth != 0):
			return nil, bad("depth %d of the larger-M tile does not divide its smallest latent window (8 chunks)", fam.depth)
		case fam.smem && fam.maxWarps > 8:
			return nil, bad("warps %d: the larger-M tile takes at most 8 (its accumulators need up to 255 registers a thread)", fam.maxWarps)
		case fam.smem && bigmMaxShared(fam) > MaxSharedOptIn:
			return nil, bad("%d warps of %d rows need more than %d bytes of shared memory", fam.maxWarps, fam.tileRows, MaxSharedOptIn)
		}
		out = append(out, fam)
	}
	return out, nil
}

// findFamily is the family of that name.
func findFamily(name string) (family, bool) {
	fams, err := families()
	if err != nil {
		return family{}, false
	}
	i := slices.IndexFunc(fams, func(f family) bool { return f.name == name })
	if i < 0 {
		return family{}, false
	}
	return fams[i], true
}

// SkinnySharedBytes is the dynamic shared memory of one CTA (skinny.h):
// the warps' and the cluster's reduction buffers.
func SkinnySharedBytes(tileRows, warps, cluster int) int {
	return (warps + cluster) * 8 * (tileRows + 4) * 4
}

// NewLaunchConfig is the launch config of the named family's entry point
// for m rows of a shard-row weight slice with warps warps per CTA and
// cluster CTAs per cluster, and none of the three hints: what ConfigFor
// gives for a table row naming them. It checks only that the family
// exists; Validate says whether the config can launch. For tools that
// launch configs of their choosing, such as the kernel benchmark harness.
func NewLaunchConfig(m, shard int, familyName string, warps, cluster int) (LaunchConfig, error) {
	f, ok := findFamily(familyName)
	if !ok {
		return LaunchConfig{}, fmt.Errorf("kernel: no entry point family %q (families.tsv)", familyName)
	}
	return makeConfig(m, shard, f, warps, cluster), nil
}

// bigmMaxShared is the most dynamic shared memory any launch of a
// larger-M family needs (every code size, warps and K split): what Load
// allows its functions.
func bigmMaxShared(f family) int {
	n := 0
	for _, mt := range BigmCodes {
		for w := 1; w <= f.maxWarps; w++ {
			for ks := 1; ks <= w; ks++ {
				if bigmSplitOK(mt, f, w, ks) {
					n = max(n, BigmSharedBytes(mt, f.tileRows*w/ks, ks))
				}
			}
		}
	}
	return n
}

// bigmSplitOK says whether ksplit groups of a CTA's warps can split K in
// the code of size mt (bigm.cu traps otherwise): ksplit divides the warps,
// and each group's steps in a latent window are whole turns of its weight
// ring.
func bigmSplitOK(mt int, f family, warps, ksplit int) bool {
	return ksplit >= 1 && warps%ksplit == 0 && bigmWindowChunks(mt)%(ksplit*f.depth) == 0
}

// makeBigmConfig is the launch config of a larger-M family for m rows:
// warps per CTA, ksplit of them splitting K (so warps/ksplit own the
// CTA's columns), cluster CTAs per cluster.
func makeBigmConfig(m, shard int, f family, warps, ksplit, cluster int) LaunchConfig {
	mt := BigmCode(m)
	rows := f.tileRows * warps / max(ksplit, 1)
	return LaunchConfig{
		Function:    fmt.Sprintf("tprun_bigm_mt%d_%s", mt, f.name),
		Family:      f.name,
		TileRows:    rows,
		CodeM:       mt,
		KSplit:      ksplit,
		Warps:       warps,
		Cluster:     cluster,
		GridX:       (shard + rows - 1) / max(rows, 1) * cluster,
		BlockX:      32 * warps,
		SharedBytes: BigmSharedBytes(mt, rows, ksplit),
	}
}

func makeConfig(m, shard int, f family, warps, cluster int) LaunchConfig {
	if f.smem {
		return makeBigmConfig(m, shard, f, warps, 1, cluster)
	}
	return LaunchConfig{
		Function:    fmt.Sprintf("tprun_skinny_m%d_%s", m, f.name),
		Family:      f.name,
		TileRows:    f.tileRows,
		Warps:       warps,
		Cluster:     cluster,
		GridX:       (shard + f.tileRows - 1) / f.tileRows * cluster,
		BlockX:      32 * warps,
		SharedBytes: SkinnySharedBytes(f.tileRows, warps, cluster),
	}
}

// Validate says whether c can launch the skinny kernel for m rows of a
// shard×latent weight: an existing family, warps and cluster in range, and
// grid, block and shared memory that agree with them.
func (c LaunchConfig) Validate(m, shard, latent int) error {
	if m < 1 || m > MaxM || shard < ShardAlign || shard%ShardAlign != 0 || latent < LatentAlign || latent%LatentAlign != 0 {
		return fmt.Errorf("%w: launch config for M=%d shard=%d latent=%d", ErrShape, m, shard, latent)
	}
	f, ok := findFamily(c.Family)
	switch {
	case !ok:
		return fmt.Errorf("kernel: no entry point family %q (families.tsv)", c.Family)
	case !f.smem && m > MaxSkinnyM:
		return fmt.Errorf("kernel: family %s is a skinny one (M up to %d), not for M=%d", f.name, MaxSkinnyM, m)
	case f.smem && m <= MaxSkinnyM:
		return fmt.Errorf("kernel: family %s is for M above %d, not M=%d (the skinny kernels serve it)", f.name, MaxSkinnyM, m)
	case c.Warps < 1 || c.Warps > f.maxWarps:
		return fmt.Errorf("kernel: %d warps, family %s takes 1..%d", c.Warps, f.name, f.maxWarps)
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
	want := makeConfig(m, shard, f, c.Warps, c.Cluster)
	if f.smem {
		if !bigmSplitOK(BigmCode(m), f, c.Warps, c.KSplit) {
			return fmt.Errorf("kernel: K split %d: it must divide the %d warps, and %d times depth %d must divide the %d-chunk latent window of code size %d",
				c.KSplit, c.Warps, c.KSplit, f.depth, bigmWindowChunks(BigmCode(m)), BigmCode(m))
		}
		want = makeBigmConfig(m, shard, f, c.Warps, c.KSplit, c.Cluster)
	}
	want.L2Prefetch = c.L2Prefetch
	want.ClusterPolicy = c.ClusterPolicy
	want.Carveout = c.Carveout
	if c != want {
		return fmt.Errorf("kernel: launch config %+v inconsistent, want %+v", c, want)
	}
	limit := DefaultSharedLimit
	if f.smem {
		limit = MaxSharedOptIn
	}
	if c.SharedBytes > limit {
		return fmt.Errorf("kernel: %d bytes of shared memory, more than %d", c.SharedBytes, limit)
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

// tableEntry is one measured row of a launch table.
type tableEntry struct {
	latent, shard, m int
	f                family
	warps, cluster   int
	prefetch         int // LaunchConfig.L2Prefetch
	policy           int // LaunchConfig.ClusterPolicy
	carveout         int // LaunchConfig.Carveout
}

// ConfigTableEnv names a launch table file (config_table.tsv's format)
// that ConfigFor uses instead of the embedded one: for kernel development,
// to try a new sweep's table without rebuilding Go. Load fails when the
// file cannot be read or parsed.
const ConfigTableEnv = "TPRUN_KERNELS_CONFIG_TABLE"

// ConfigTableOverride is the path in ConfigTableEnv, or "".
func ConfigTableOverride() string { return os.Getenv(ConfigTableEnv) }

// measured parses the config table once; the result is never modified.
var measured = sync.OnceValues(func() ([]tableEntry, error) {
	return loadTable(ConfigTableEnv, "config_table.tsv", configTableTSV, parseTable)
})

// loadTable parses, with parse, the file named by the environment variable
// env, or else the embedded text; name is the table's file name, for
// errors.
func loadTable[E any](env, name, embedded string, parse func(name, text string) ([]E, error)) ([]E, error) {
	path := os.Getenv(env)
	if path == "" {
		return parse(name, embedded)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kernel: %s: %w", env, err)
	}
	e, err := parse(name, string(b))
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
// used, every other launch with a fused receive takes ConfigFor's pick. The
// key has no hidden size, tp, mailbox backend or skipped slice: an entry
// measured on the unicast tp-2 step (hidden = 2 shard, own slice skipped)
// also serves, say, a multicast step or a tp-4 step of the same shard and
// latent, whose receive CTAs poll other numbers of columns.
//
//go:embed step_table.tsv
var stepTableTSV string

// StepTableEnv names a step table file (config_table.tsv's format) that
// StepConfigFor uses instead of the embedded step_table.tsv: for
// scripts/step-sweep and kernel development. Load fails when the file cannot
// be read or parsed.
const StepTableEnv = "TPRUN_KERNELS_STEP_TABLE"

// StepTableOverride is the path in StepTableEnv, or "".
func StepTableOverride() string { return os.Getenv(StepTableEnv) }

// stepMeasured parses the step table once; the result is never modified.
var stepMeasured = sync.OnceValues(func() ([]tableEntry, error) {
	return loadTable(StepTableEnv, "step_table.tsv", stepTableTSV, parseTable)
})

// StepConfigFor is the launch config of a skinny kernel with a fused
// receive (SkinnyArgs.Receive set): the step table's entry for exactly this
// latent, shard and m, else ConfigFor's.
func StepConfigFor(m, shard, latent int) LaunchConfig {
	m, shard, latent = clampShape(m, shard, latent)
	if entries, err := stepMeasured(); err == nil {
		for _, e := range entries {
			if e.m == m && e.shard == shard && e.latent == latent {
				return configFrom(e, m, shard)
			}
		}
	}
	return ConfigFor(m, shard, latent)
}

// TableHeader is the header row of the launch tables (config_table.tsv,
// step_table.tsv), tab-separated: the shape (latent, shard, m), the launch
// (family, warps, cluster and the three hints of LaunchConfig), and the
// median time the sweep measured for it, which the lookup does not use.
const TableHeader = "latent\tshard\tm\tfamily\twarps\tcluster\tl2_prefetch\tcluster_policy\tcarveout\tmedian_us"

// tsvRow is one data row of a tab-separated file, with its line number for
// errors.
type tsvRow struct {
	fields []string
	errf   func(format string, args ...any) error
}

// tsvRows splits text into its data rows: lines starting with '#' and
// empty lines are comments, the first other line must be header, and every
// row after it has as many tab-separated fields as the header.
func tsvRows(name, text, header string) ([]tsvRow, error) {
	var rows []tsvRow
	seenHeader := false
	want := len(strings.Split(header, "\t"))
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimRight(line, "\r")
		if strings.TrimSpace(line) == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if !seenHeader {
			if line != header {
				return nil, fmt.Errorf("kernel: %s line %d: header %q, want %q", name, i+1, line, header)
			}
			seenHeader = true
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != want {
			return nil, fmt.Errorf("kernel: %s line %d: %d tab-separated fields, want %d (%s)", name, i+1, len(f), want, header)
		}
		n := i + 1
		rows = append(rows, tsvRow{fields: f, errf: func(format string, args ...any) error {
			return fmt.Errorf("kernel: %s line %d: %s", name, n, fmt.Sprintf(format, args...))
		}})
	}
	if !seenHeader {
		return nil, fmt.Errorf("kernel: %s has no header row (%s)", name, header)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("kernel: %s has no entries", name)
	}
	return rows, nil
}

// parseTable parses a table in config_table.tsv's format (TableHeader);
// name is its file name, for errors.
func parseTable(name, text string) ([]tableEntry, error) {
	rows, err := tsvRows(name, text, TableHeader)
	if err != nil {
		return nil, err
	}
	var out []tableEntry
	for _, r := range rows {
		f, bad := r.fields, r.errf
		var n [8]int // latent shard m _ warps cluster prefetch policy carveout
		for j := range 9 {
			if j == 3 {
				continue
			}
			x, err := strconv.Atoi(f[j])
			if err != nil {
				return nil, bad("field %d: %v", j+1, err)
			}
			if j < 3 {
				n[j] = x
			} else {
				n[j-1] = x
			}
		}
		if _, err := strconv.ParseFloat(f[9], 64); err != nil {
			return nil, bad("median_us %q: %v", f[9], err)
		}
		fam, ok := findFamily(f[3])
		e := tableEntry{latent: n[0], shard: n[1], m: n[2], f: fam, warps: n[3], cluster: n[4], prefetch: n[5], policy: n[6], carveout: n[7]}
		switch {
		case !ok:
			return nil, bad("no family %q (families.tsv)", f[3])
		case fam.smem:
			return nil, bad("family %s is a larger-M one (bigm_table.tsv), not a skinny one", fam.name)
		case e.m < 1 || e.m > MaxSkinnyM, e.latent < LatentAlign || e.latent%LatentAlign != 0, e.shard < ShardAlign || e.shard%ShardAlign != 0:
			return nil, bad("shape latent %d shard %d m %d is not one the kernel takes", e.latent, e.shard, e.m)
		case e.warps < 1 || e.warps > fam.maxWarps:
			return nil, bad("%d warps, family %s takes 1..%d", e.warps, fam.name, fam.maxWarps)
		case e.cluster < 1 || e.cluster > MaxCluster:
			return nil, bad("cluster %d is not 1..%d", e.cluster, MaxCluster)
		case !validPrefetch(e.prefetch):
			return nil, bad("l2_prefetch %d is not a plan skinny.h defines", e.prefetch)
		case e.policy < 0 || e.policy > MaxClusterPolicy:
			return nil, bad("cluster_policy %d is not 0..%d", e.policy, MaxClusterPolicy)
		case e.policy != 0 && e.cluster < 2:
			return nil, bad("cluster_policy %d needs a cluster of 2 or more, not %d", e.policy, e.cluster)
		case e.carveout < 0 || e.carveout > MaxCarveout:
			return nil, bad("carveout %d is not 0..%d", e.carveout, MaxCarveout)
		}
		if slices.ContainsFunc(out, func(o tableEntry) bool { return o.latent == e.latent && o.shard == e.shard && o.m == e.m }) {
			return nil, bad("latent %d shard %d m %d twice", e.latent, e.shard, e.m)
		}
		out = append(out, e)
	}
	return out, nil
}

// fallbackConfig is used only if the embedded table failed to parse (a
// test fails then): a geometry that runs every shape.
var fallbackConfig = tableEntry{f: family{name: "t32p", tileRows: 32, depth: 4, maxWarps: 16}, warps: 4, cluster: 1}

// ConfigFor picks the launch config for m latent rows (1..MaxM) and a
// shard×latent weight slice in the packed layout: for m above MaxSkinnyM
// BigmConfigFor's, else the skinny kernel's, as follows. Shapes
// measured by the sweep (config_table.tsv) get their measured best; any
// other shape gets the family, warps, cluster, L2 prefetch plan and cluster
// scheduling policy of the measured shape nearest in log(shard) +
// log(latent) (the two hints were measured for that shape, not this one)
// and the driver's carveout (Carveout 0: a carveout is measured per shape).
// The result always satisfies Validate for a shape that Shape.Validate
// accepts; m is clamped to 1..MaxM so that no input panics.
func ConfigFor(m, shard, latent int) LaunchConfig {
	m, shard, latent = clampShape(m, shard, latent)
	if m > MaxSkinnyM {
		return BigmConfigFor(m, shard, latent)
	}
	return configFrom(nearestEntry(m, shard, latent), m, shard)
}

// clampShape is the shape the config lookups use: m in 1..MaxM, shard and
// latent at least one alignment unit, so that no input panics.
func clampShape(m, shard, latent int) (int, int, int) {
	return min(max(m, 1), MaxM), max(shard, ShardAlign), max(latent, LatentAlign)
}

//go:embed bigm_table.tsv
var bigmTableTSV string

// BigmTableEnv names a table file in bigm_table.tsv's format that
// BigmConfigFor uses instead of the embedded one (kernel development).
const BigmTableEnv = "TPRUN_KERNELS_BIGM_TABLE"

// BigmTableOverride is the path in BigmTableEnv, or "".
func BigmTableOverride() string { return os.Getenv(BigmTableEnv) }

// BigmTableHeader is the header row of bigm_table.tsv: the shape (latent,
// shard, the code size mt), the launch (family, warps, ksplit, cluster,
// l2_prefetch) and the median time a sweep measured ("-": none).
const BigmTableHeader = "latent\tshard\tmt\tfamily\twarps\tksplit\tcluster\tl2_prefetch\tmedian_us"

// bigmEntry is one row of the larger-M table.
type bigmEntry struct {
	latent, shard, mt int
	f                 family
	warps, ksplit     int
	cluster, prefetch int
}

// bigmMeasured parses the larger-M table once; the result is never
// modified.
var bigmMeasured = sync.OnceValues(func() ([]bigmEntry, error) {
	return loadTable(BigmTableEnv, "bigm_table.tsv", bigmTableTSV, parseBigmTable)
})

// parseBigmTable parses a table in bigm_table.tsv's format.
func parseBigmTable(name, text string) ([]bigmEntry, error) {
	rows, err := tsvRows(name, text, BigmTableHeader)
	if err != nil {
		return nil, err
	}
	var out []bigmEntry
	for _, r := range rows {
		f, bad := r.fields, r.errf
		var n [8]int
		for _, j := range []int{0, 1, 2, 4, 5, 6, 7} {
			if n[j], err = strconv.Atoi(f[j]); err != nil {
				return nil, bad("field %d: %v", j+1, err)
			}
		}
		if f[8] != "-" {
			if _, err := strconv.ParseFloat(f[8], 64); err != nil {
				return nil, bad("median_us %q: not a number or -", f[8])
			}
		}
		fam, ok := findFamily(f[3])
		e := bigmEntry{latent: n[0], shard: n[1], mt: n[2], f: fam, warps: n[4], ksplit: n[5], cluster: n[6], prefetch: n[7]}
		switch {
		case !ok:
			return nil, bad("no family %q (families.tsv)", f[3])
		case !fam.smem:
			return nil, bad("family %s is a skinny one, not a larger-M (smem) one", fam.name)
		case !slices.Contains(BigmCodes[:], e.mt):
			return nil, bad("mt %d is not one of the code sizes %v", e.mt, BigmCodes)
		case e.latent < LatentAlign || e.latent%LatentAlign != 0, e.shard < ShardAlign || e.shard%ShardAlign != 0:
			return nil, bad("shape latent %d shard %d is not one the kernel takes", e.latent, e.shard)
		case e.warps < 1 || e.warps > fam.maxWarps:
			return nil, bad("%d warps, family %s takes 1..%d", e.warps, fam.name, fam.maxWarps)
		case !bigmSplitOK(e.mt, fam, e.warps, e.ksplit):
			return nil, bad("ksplit %d does not divide %d warps, or times depth %d not the %d-chunk window of mt %d", e.ksplit, e.warps, fam.depth, bigmWindowChunks(e.mt), e.mt)
		case e.cluster < 1 || e.cluster > MaxCluster:
			return nil, bad("cluster %d is not 1..%d", e.cluster, MaxCluster)
		case e.prefetch != 0 && e.prefetch != bigmPrefetch:
			return nil, bad("l2_prefetch %d is not 0 or %d", e.prefetch, bigmPrefetch)
		}
		// The shared memory fits: parseFamilies bounds bigmMaxShared, the
		// most of any warps and K split the checks above let through.
		if slices.ContainsFunc(out, func(o bigmEntry) bool { return o.latent == e.latent && o.shard == e.shard && o.mt == e.mt }) {
			return nil, bad("latent %d shard %d mt %d twice", e.latent, e.shard, e.mt)
		}
		out = append(out, e)
	}
	return out, nil
}

// bigmPrefetch is the larger-M kernel's L2 prefetch flag: each CTA
// prefetches its own weight range (skinny.h; TPRUN_PF_OWN's bit).
const bigmPrefetch = 1 << 24

// bigmFallback is used only if the embedded table failed to parse (a test
// fails then): a geometry that runs every shape.
var bigmFallback = bigmEntry{f: family{name: "tc", tileRows: 32, depth: 2, smem: true, maxWarps: 8}, warps: 4, ksplit: 1, cluster: 1}

// BigmConfigFor is the launch config of the larger-M kernel for m rows
// (clamped to MaxSkinnyM+1..MaxM) of a shard×latent weight slice: the
// table's entry for code size BigmCode(m) at the shape nearest in
// log(shard) + log(latent). It always satisfies Validate for a shape that
// Shape.Validate accepts.
func BigmConfigFor(m, shard, latent int) LaunchConfig {
	m, shard, latent = clampShape(m, shard, latent)
	m = max(m, MaxSkinnyM+1)
	mt := BigmCode(m)
	best := bigmFallback
	if entries, err := bigmMeasured(); err == nil {
		d := math.Inf(1)
		for _, e := range entries {
			if x := shapeDist(shard, latent, e.shard, e.latent); e.mt == mt && x < d {
				d, best = x, e
			}
		}
	}
	c := makeBigmConfig(m, shard, best.f, best.warps, best.ksplit, best.cluster)
	c.L2Prefetch = best.prefetch
	return c
}

// nearestEntry is the table entry for m at the measured shape nearest to
// shard×latent (ties: the first in table order). If that shape lacks m,
// the nearest entry for m; failing that, fallbackConfig.
func nearestEntry(m, shard, latent int) tableEntry {
	entries, err := measured()
	if err != nil {
		return fallbackConfig
	}
	return nearestIn(entries, m, shard, latent)
}

// nearestIn is nearestEntry over the given entries.
func nearestIn(entries []tableEntry, m, shard, latent int) tableEntry {
	dist := func(e tableEntry) float64 { return shapeDist(shard, latent, e.shard, e.latent) }
	best, found := fallbackConfig, false
	d := math.Inf(1)
	var near tableEntry
	for _, e := range entries {
		if x := dist(e); x < d {
			d, near = x, e
		}
	}
	for _, e := range entries {
		if e.m == m && e.shard == near.shard && e.latent == near.latent {
			best, found = e, true
			break
		}
	}
	if !found { // the table lacks this m for that shape: nearest with this m
		d = math.Inf(1)
		for _, e := range entries {
			if x := dist(e); e.m == m && x < d {
				d, best = x, e
			}
		}
	}
	if best.shard != shard || best.latent != latent {
		// The carveout was measured for that shape alone; at the large
		// shards no value helped and most cost time: not extrapolated.
		best.carveout = 0
	}
	return best
}

// shapeDist is how far the shape shard×latent is from a measured shape
// in the launch tables' lookups: |log(shard/s)| + |log(latent/l)|.
func shapeDist(shard, latent, s, l int) float64 {
	return math.Abs(math.Log(float64(shard)/float64(s))) + math.Abs(math.Log(float64(latent)/float64(l)))
}

func configFrom(e tableEntry, m, shard int) LaunchConfig {
	c := makeConfig(m, shard, e.f, e.warps, e.cluster)
	c.L2Prefetch = e.prefetch
	c.ClusterPolicy = e.policy
	c.Carveout = e.carveout
	return c
}

// ReceiveConfig is the launch geometry of tprun_receive (no cluster, no
// dynamic shared memory; PDL allowed).
type ReceiveConfig struct {
	Function string
	GridX    int
	BlockX   int
}

// receiveName is the receive kernel's entry point.
const receiveName = "tprun_receive"

// ReceiveConfigFor gives one thread per 16-byte vector of the m×hidden
// block, up to 132 blocks of 256 threads (one wave on an H200; each thread
// then polls several vectors in turn).
func ReceiveConfigFor(m, hidden int) ReceiveConfig {
	const block, maxGrid = 256, 132
	vec := max(m, 1) * max(hidden, 8) / 8
	grid := min(max((vec+block-1)/block, 1), maxGrid)
	return ReceiveConfig{Function: receiveName, GridX: grid, BlockX: block}
}

// PreferPacked says which layout the kernels read a shard×latent weight in:
// the packed one (PackWeight), for every shape, since every family of
// families.tsv reads only that layout (row-major families measured slower
// at every shape the tables hold, and a weight is packed once where it is
// uploaded). It exists for callers that choose a layout per shape.
func PreferPacked(shard, latent int) bool { return true }
