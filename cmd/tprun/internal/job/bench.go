package job

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/tprun/tprun/tp"
)

// The step benchmark (`tprun bench`, whose ranks run `tprun __bench`): the
// time of the whole fused step (skinny kernel, stores to every rank,
// receive) per M, from CUDA graph replays with the weights rotated through
// enough copies that they stream from HBM, next to the HBM floor of the
// weight shard measured in the same run. It runs on tp's public API only,
// as a rank program would: tp's device memory helpers, the weight copies
// passed per step (DeviceInputs.Weight), StepGraph.TimeReplays for the
// step time and tp.MeasureCopyBandwidth for the floor. With --graph
// enqueue the graph is the program's own instead, captured from a stream
// around Enqueue calls (tp.CaptureStream), as a framework's graph capture
// takes a model's steps; with --graph enqueue-ops each of those steps is
// on an op of its own that holds its weight (SetWeight), as a model's
// layers are.

// BenchConfig is the benchmark's settings: the job flags it uses (shape,
// M list, mailbox, slots, deadline, seed; it always runs the CUDA engine,
// and times replays instead of --iters steps) and its own.
type BenchConfig struct {
	Job      *Config
	Replays  int    // timed graph replays per M
	Warmup   int    // untimed replays per M first
	RotateMB int    // MiB of weight copies per rank that the steps rotate through
	Table    string // rank 0 also writes the table here as TSV ("" none)
	// Graph is how the graph of steps is made: GraphCapture,
	// GraphEnqueue or GraphEnqueueOps.
	Graph   string
	JSONOut string // rank 0 also writes the BenchReport here as JSON ("" none)
	// Version is the program's version, for the report.
	Version string
}

// BenchJobFlags are the job flags the benchmark takes, in the order the
// help lists them.
var BenchJobFlags = []string{"hidden", "latent", "m", "mailbox", "slots", "seed", "deadline"}

// BenchFlags are the benchmark's own flags, in the order the help lists
// them.
var BenchFlags = []string{"replays", "warmup", "rotate-mb", "graph", "table", "json-out"}

// The ways the benchmark makes its graph of steps (BenchConfig.Graph).
const (
	// GraphCapture: the op's own Capture, step k reading weight copy k.
	GraphCapture = "capture"
	// GraphEnqueue: the same steps queued with Enqueue on a stream of the
	// program's, captured into a graph of its own (tp.CaptureStream).
	GraphEnqueue = "enqueue"
	// GraphEnqueueOps: as GraphEnqueue, but step k on op k, which holds
	// weight copy k itself (SetWeight), as a model's layers each hold
	// theirs.
	GraphEnqueueOps = "enqueue-ops"
)

// RegisterBenchFlags defines BenchJobFlags and BenchFlags on fs. Unlike the
// default job, the benchmark runs every M from 1 to 8 unless told
// otherwise.
func RegisterBenchFlags(fs *flag.FlagSet) *BenchConfig {
	all := flag.NewFlagSet("job", flag.ContinueOnError)
	bc := &BenchConfig{Job: RegisterFlags(all), Replays: 200, Warmup: 20, RotateMB: 512, Graph: GraphCapture}
	bc.Job.M = []int{1, 2, 3, 4, 5, 6, 7, 8}
	for _, name := range BenchJobFlags {
		f := all.Lookup(name)
		fs.Var(f.Value, f.Name, f.Usage)
	}
	fs.Var(&intValue{p: &bc.Replays, min: 1}, "replays", "timed CUDA graph replays per M")
	fs.Var(&intValue{p: &bc.Warmup, min: 0}, "warmup", "untimed replays per M before timing")
	fs.Var(&intValue{p: &bc.RotateMB, min: 1}, "rotate-mb", "MiB of weight copies per rank the steps rotate through (at least 512 keeps them out of L2)")
	fs.Var(&enumValue{p: &bc.Graph, allowed: []string{GraphCapture, GraphEnqueue, GraphEnqueueOps}}, "graph",
		"how the graph of steps is made: capture (the op's Capture), enqueue (Enqueue on a stream under the program's own capture) or enqueue-ops (as enqueue, an op with its own weight per step)")
	fs.Var(&stringValue{p: &bc.Table}, "table", "rank 0 also writes the table as TSV to FILE")
	fs.Var(&stringValue{p: &bc.JSONOut}, "json-out", "rank 0 also writes the JSON document to FILE")
	return bc
}

// BenchMain joins the job the environment describes and runs Bench on it
// (what `tprun __bench` calls). Rank 0 prints the table on stdout and, on
// a long run, how far it has come on stderr.
func BenchMain(ctx context.Context, bc *BenchConfig, stdout, stderr io.Writer) (err error) {
	g, err := tp.Join(ctx)
	if err != nil {
		return fmt.Errorf("job: bench: join: %w", err)
	}
	defer func() {
		if cerr := g.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("job: bench: rank %d: leaving the group: %w", g.Rank(), cerr)
		}
	}()
	return Bench(ctx, g, bc, stdout, stderr)
}

// Bench measures the fused step on this rank of g (a collective: every
// rank runs it with the same settings). For each M it captures one CUDA
// graph of K steps, K the number of weight copies, step k reading copy k;
// checks one replay's K blocks against the float64 reference and across
// ranks; then times Replays replays with events. The step time is a
// replay's time over K; rank 0 prints, per M, the slowest rank's median
// and p90 over replays, and the floor: the shard's weight bytes over the
// device-to-device copy bandwidth (read plus write,
// tp.MeasureCopyBandwidth) measured in the same run, averaged over the
// ranks. Rank 0 says on stderr how far it has come when the run takes
// more than a few seconds.
func Bench(ctx context.Context, g *tp.Group, bc *BenchConfig, stdout, stderr io.Writer) error {
	return bench(ctx, g, bc, stdout, stderr, tp.CheckGPU)
}

// benchRecord is what each rank contributes per M.
type benchRecord struct {
	median, p10, p90 time.Duration // per step
	checked, wrong   int
	worst, bandwidth float64 // bandwidth in bytes/s
	device           int     // CUDA ordinal
	hashes           []uint64
	gpu              string // the device's name
}

const benchMagic = 0x5450424f // "TPBO"

func (r benchRecord) encode() []byte {
	b := binary.LittleEndian.AppendUint32(nil, benchMagic)
	for _, v := range []uint64{uint64(r.median), uint64(r.p10), uint64(r.p90), uint64(r.checked), uint64(r.wrong),
		math.Float64bits(r.worst), math.Float64bits(r.bandwidth), uint64(r.device), uint64(len(r.hashes))} {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	for _, h := range r.hashes {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	return append(b, r.gpu...)
}

func decodeBenchRecord(b []byte) (benchRecord, error) {
	const fixed = 4 + 9*8
	if len(b) < fixed || binary.LittleEndian.Uint32(b) != benchMagic {
		return benchRecord{}, fmt.Errorf("%w: %d bytes without the bench header", errRecord, len(b))
	}
	u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[4+8*i:]) }
	r := benchRecord{median: time.Duration(u(0)), p10: time.Duration(u(1)), p90: time.Duration(u(2)), checked: int(u(3)),
		wrong: int(u(4)), worst: math.Float64frombits(u(5)), bandwidth: math.Float64frombits(u(6)), device: int(u(7))}
	n := u(8)
	if n > uint64(len(b)-fixed)/8 {
		return benchRecord{}, fmt.Errorf("%w: %d bytes for %d hashes", errRecord, len(b), n)
	}
	for i := range int(n) {
		r.hashes = append(r.hashes, binary.LittleEndian.Uint64(b[fixed+8*i:]))
	}
	r.gpu = string(b[fixed+8*int(n):])
	if !utf8.ValidString(r.gpu) {
		return benchRecord{}, fmt.Errorf("%w: the GPU name is not UTF-8", errRecord)
	}
	return r, nil
}

// benchProgressEvery is how often rank 0 says how far a long benchmark has
// come; tests shorten it.
var benchProgressEvery = 5 * time.Second

// benchProgress is where a benchmark is, for the progress line.
type benchProgress struct {
	mu   sync.Mutex
	ms   []int
	done int       // M values done
	loop time.Time // when the first M began; zero while setting up
}

func (p *benchProgress) startLoop(now time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.loop = now
}

func (p *benchProgress) finished() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done++
}

// line is the progress line at now, after took since the benchmark began:
// the M running, how many are done, and, once one is, about how long the
// rest takes at the pace so far.
func (p *benchProgress) line(now time.Time, took time.Duration) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.loop.IsZero():
		return fmt.Sprintf("bench: setting up (inputs, float64 reference, copy bandwidth, weight copies), %.0f s so far\n", took.Seconds())
	case p.done >= len(p.ms):
		return ""
	}
	s := fmt.Sprintf("bench: M %d: %d of %d M values done", p.ms[p.done], p.done, len(p.ms))
	if p.done > 0 {
		per := now.Sub(p.loop).Seconds() / float64(p.done)
		s += fmt.Sprintf(", about %.0f s left", per*float64(len(p.ms)-p.done))
	}
	return s + "\n"
}

// bench is Bench on any group; gpu says why no GPU is usable here, or nil
// (tp.CheckGPU), and a nil gpu stands for a machine without one, as for
// the default job (runHooks.gpu).
func bench(ctx context.Context, g group, bc *BenchConfig, stdout, stderr io.Writer, gpu func() error) (err error) {
	rank, size := g.Rank(), g.Size()
	switch {
	case bc.Replays < 1:
		return &FlagError{Flag: "replays", Value: fmt.Sprint(bc.Replays), Rule: "must be at least 1"}
	case bc.Warmup < 0:
		return &FlagError{Flag: "warmup", Value: fmt.Sprint(bc.Warmup), Rule: "must not be negative"}
	case bc.RotateMB < 1:
		return &FlagError{Flag: "rotate-mb", Value: fmt.Sprint(bc.RotateMB), Rule: "must be at least 1"}
	}
	if err := CheckBenchMailbox(bc.Job); err != nil {
		return err
	}
	cfg := *bc.Job
	cfg.Backend = "cuda"
	p, err := newPlan(&cfg, size)
	if err != nil {
		return err
	}
	out := &printer{w: stdout, on: rank == 0}
	progress := &benchProgress{ms: cfg.M}
	stopNotes := (&printer{w: stderr, on: rank == 0}).every(benchProgressEvery, func(d time.Duration) string {
		return progress.line(time.Now(), d)
	})
	defer stopNotes()
	// The benchmark runs the CUDA engine (cfg.Backend): pickBackend
	// refuses a machine without a usable GPU, or a job whose mailbox
	// resolves to the host one.
	if err := p.pickBackend(ctx, g, gpu); err != nil {
		return err
	}
	fail := func(err error) error { return fmt.Errorf("job: bench: rank %d: %w", rank, err) }
	device := deviceOf(g)
	in, err := p.newInputs(ctx, rank)
	if err != nil {
		return fail(err)
	}
	gpuName, err := tp.DeviceName(device)
	if err != nil {
		return fail(err)
	}
	driverMajor, driverMinor, err := tp.DriverVersion()
	if err != nil {
		return fail(err)
	}
	bw, err := tp.MeasureCopyBandwidth(device)
	if err != nil {
		return fail(err)
	}
	rig, err := newBenchRig(device, p, in, rank, bc.RotateMB)
	// Freed after the op is closed (deferred below), whose kernels read it.
	defer func() {
		if cerr := rig.close(); cerr != nil && err == nil {
			err = fail(cerr)
		}
	}()
	if err != nil {
		return fail(err)
	}
	up, err := tp.NewUpProjection(ctx, g, cfg.Hidden, cfg.Latent, p.shape.M, tp.WithBackend(p.mailbox),
		tp.WithSlots(cfg.Slots), tp.WithDeadline(cfg.Deadline), tp.WithDevice(device))
	if err != nil {
		return fail(err)
	}
	defer func() {
		if cerr := up.Close(); cerr != nil && err == nil {
			err = fail(cerr)
		}
	}()
	ops := []*tp.UpProjection{up}
	if bc.Graph == GraphEnqueueOps {
		// An op per step, each holding the weight shard itself; closed
		// before the rig's memory is freed, as up is.
		defer func() {
			for _, o := range ops[1:] {
				if cerr := o.Close(); cerr != nil && err == nil {
					err = fail(cerr)
				}
			}
		}()
		for i := range rig.k {
			if i > 0 {
				o, err := tp.NewUpProjection(ctx, g, cfg.Hidden, cfg.Latent, p.shape.M, tp.WithBackend(p.mailbox),
					tp.WithSlots(cfg.Slots), tp.WithDeadline(cfg.Deadline), tp.WithDevice(device))
				if err != nil {
					return fail(fmt.Errorf("op %d of %d: %w", i+1, rig.k, err))
				}
				ops = append(ops, o)
			}
			if err := ops[i].SetWeight(ctx, in.weight); err != nil {
				return fail(fmt.Errorf("op %d of %d: %w", i+1, rig.k, err))
			}
		}
	}
	if err := g.Barrier(ctx); err != nil {
		return fail(fmt.Errorf("barrier before the benchmark: %w", err))
	}

	shard := p.shape.Shard()
	sb := shard * cfg.Latent * 2
	report := &BenchReport{
		Schema: BenchSchema, Version: bc.Version, Driver: fmt.Sprintf("%d.%d", driverMajor, driverMinor),
		Shape:   BenchShape{TP: size, Hidden: cfg.Hidden, Latent: cfg.Latent, Shard: shard, WeightShardBytes: sb},
		Backend: "cuda", Mailbox: up.Backend(), MailboxReason: p.reason, WeightLayout: "row-major",
		StepsPerGraph: rig.k, Graph: bc.Graph, Warmup: bc.Warmup, Replays: bc.Replays, RotateMB: bc.RotateMB, Slots: cfg.Slots,
		Overrides: benchOverrides(), Rows: []BenchRow{},
	}
	report.Host, _ = os.Hostname()
	if rig.packed {
		report.WeightLayout = "packed"
	}
	out.printf("# tprun step benchmark: tp %d, hidden %d, latent %d, shard %d; backend cuda, mailbox %s: %s\n",
		size, cfg.Hidden, cfg.Latent, shard, up.Backend(), p.reason)
	layout := "row-major"
	if rig.packed {
		layout = "packed (tp.PreferPacked)"
	}
	out.printf("# per rank: weight shard %.1f MB, %s, rotated through %d copies (%.0f MB) so that it streams from HBM;\n",
		float64(sb)/1e6, layout, rig.k, float64(rig.k*rig.shardBytes)/1e6)
	for _, l := range kernelOverrides() {
		out.printf("%s\n", l)
	}
	if v := os.Getenv(tp.ReceiveModeEnv); v != "" {
		out.printf("# receive: %s=%s\n", tp.ReceiveModeEnv, v)
	}
	out.printf("# one CUDA graph = %d steps (kernel + stores to every rank + receive, PDL-chained: the skinny kernel up to M 8, the tensor-core kernel then the receive kernel above), %d warm-up and %d timed replays per M\n",
		rig.k, bc.Warmup, bc.Replays)
	switch bc.Graph {
	case GraphEnqueue:
		out.printf("# the graph: %d Enqueue calls on one op, on a stream under the program's own capture (tp.CaptureStream)\n", rig.k)
	case GraphEnqueueOps:
		out.printf("# the graph: one Enqueue call on each of %d ops, each holding its weight shard (SetWeight), on a stream under the program's own capture (tp.CaptureStream)\n", rig.k)
	}

	var failures []string
	// A run that fails at some M still leaves, on rank 0, the rows it
	// timed before and what ended it, in the table and the JSON report.
	stopped := func(m int, err error) error {
		//lint:ignore ST1005 M, the row count, as the tables spell it
		err = fmt.Errorf("M=%d: %w", m, err)
		if rank == 0 {
			report.Error = err.Error()
			if werr := bc.writeOutputs(report); werr != nil {
				err = errors.Join(err, werr)
			}
		}
		return fail(err)
	}
	progress.startLoop(time.Now())
	for _, m := range cfg.M {
		rec, err := rig.run(ctx, ops, bc.Graph, m, bc.Warmup, bc.Replays)
		if err != nil {
			return stopped(m, err)
		}
		rec.bandwidth, rec.device, rec.gpu = bw, device, gpuName
		all, err := g.AllGather(ctx, rec.encode())
		if err != nil {
			return stopped(m, fmt.Errorf("gathering the results: %w", err))
		}
		var recs []benchRecord
		for q, b := range all {
			r, err := decodeBenchRecord(b)
			if err != nil {
				return stopped(m, fmt.Errorf("rank %d's result: %w", q, err))
			}
			recs = append(recs, r)
		}
		row := summarizeBench(m, sb, recs, rec.hashes)
		if len(report.Rows) == 0 {
			strs := make([]string, len(recs))
			for q, r := range recs {
				strs[q] = fmt.Sprintf("%.2f", r.bandwidth/1e12)
				report.GPUs = append(report.GPUs, BenchGPU{Rank: q, Device: r.device, Name: r.gpu, CopyTBps: r.bandwidth / 1e12})
			}
			out.printf("# copy bandwidth (read + write, %d MiB device-to-device copy) per rank: %s TB/s; HBM floor = shard weight bytes / mean bandwidth\n",
				tp.CopyBandwidthBytes>>20, strings.Join(strs, ", "))
			out.printf("# step time = replay time / %d; the slowest rank's median and p90 over the replays\n", rig.k)
			out.printf("#%s", fmt.Sprintf(benchFormat, "M", "median µs", "p90 µs", "floor µs", "ratio", "weight GB/s", "err/tol", "#wrong", "identical")[1:])
		}
		report.Rows = append(report.Rows, row.report(sb, bc.Replays))
		out.printf("%s", row.String(sb))
		progress.finished()
		if row.wrong > 0 {
			failures = append(failures, fmt.Sprintf("M=%d: %d wrong values", m, row.wrong))
		}
		if len(row.differ) > 0 {
			failures = append(failures, fmt.Sprintf("M=%d: ranks %s received other blocks than this rank", m, intList(row.differ)))
		}
	}
	report.OK = len(failures) == 0
	if rank == 0 {
		if err := bc.writeOutputs(report); err != nil {
			return fail(err)
		}
	}
	// No rank ends before rank 0 has written its files: a rank that
	// fails ends the job, and rank 0 would be stopped mid-write.
	if err := g.Barrier(ctx); err != nil {
		return fail(fmt.Errorf("barrier after the benchmark: %w", err))
	}
	if len(failures) > 0 {
		out.printf("# FAILED: %s\n", strings.Join(failures, "; "))
		return fail(fmt.Errorf("%w: %s", ErrCheck, strings.Join(failures, "; ")))
	}
	out.printf("# every checked block within tolerance and identical on all %d ranks\n", size)
	return nil
}

// CheckBenchMailbox refuses, as a *FlagError, a mailbox the benchmark
// cannot time: it runs the CUDA engine, so the host mailbox is out.
func CheckBenchMailbox(c *Config) error {
	if c.Mailbox == "host" || c.Backend == "cpu" {
		return &FlagError{Flag: "mailbox", Value: c.Mailbox, Rule: "the step benchmark runs the CUDA engine on a GPU mailbox: auto, unicast or multicast"}
	}
	return nil
}

// benchOverrides are the environment overrides in effect that change what
// the benchmark runs.
func benchOverrides() map[string]string {
	o := map[string]string{}
	envs := []string{tp.ReceiveModeEnv}
	for _, e := range kernelEnvs {
		envs = append(envs, e.env)
	}
	for _, k := range envs {
		if v := os.Getenv(k); v != "" {
			o[k] = v
		}
	}
	return o
}

// summarizeBench folds every rank's record of one M into a row; own is
// this rank's block hashes.
func summarizeBench(m, shardBytes int, recs []benchRecord, own []uint64) benchRow {
	row := benchRow{m: m}
	var bws []float64
	for q, r := range recs {
		row.median, row.p10, row.p90 = max(row.median, r.median), max(row.p10, r.p10), max(row.p90, r.p90)
		row.worst = max(row.worst, r.worst)
		row.wrong += r.wrong
		bws = append(bws, r.bandwidth)
		if !slices.Equal(r.hashes, own) {
			row.differ = append(row.differ, q)
		}
	}
	row.floor = time.Duration(float64(shardBytes) / mean(bws) * 1e9)
	return row
}

func mean(v []float64) float64 {
	s := 0.0
	for _, x := range v {
		s += x
	}
	return s / float64(len(v))
}

// benchRow is one M of the table.
type benchRow struct {
	m                       int
	median, p10, p90, floor time.Duration
	worst                   float64
	wrong                   int
	differ                  []int // ranks whose blocks differ from this rank's
}

const benchFormat = "%4v %10v %10v %10v %7v %12v %8v %7v %9v\n"

func (r benchRow) ratio() float64 { return float64(r.median) / float64(r.floor) }

func (r benchRow) String(shardBytes int) string {
	identical := "yes"
	if len(r.differ) > 0 {
		identical = "no"
	}
	return fmt.Sprintf(benchFormat, r.m, fmt.Sprintf("%.2f", micros(r.median)), fmt.Sprintf("%.2f", micros(r.p90)),
		fmt.Sprintf("%.2f", micros(r.floor)), fmt.Sprintf("%.2f", r.ratio()),
		fmt.Sprintf("%.0f", float64(shardBytes)/r.median.Seconds()/1e9), fmt.Sprintf("%.2f", r.worst), r.wrong, identical)
}

func (r benchRow) report(shardBytes, replays int) BenchRow {
	return BenchRow{M: r.m, MedianUS: micros(r.median), P10US: micros(r.p10), P90US: micros(r.p90), FloorUS: micros(r.floor),
		Ratio: r.ratio(), WeightGBps: float64(shardBytes) / r.median.Seconds() / 1e9, Replays: replays,
		ErrTol: r.worst, Wrong: r.wrong, Identical: len(r.differ) == 0}
}

// BenchSchema names the format of BenchReport's JSON document; it changes
// when a field changes meaning.
const BenchSchema = "tprun-bench/1"

// BenchReport is the benchmark's result as `tprun bench --json` prints it.
// Times are per step, in microseconds; each is the slowest rank's.
type BenchReport struct {
	Schema        string            `json:"schema"`
	Version       string            `json:"tprun_version"`
	Host          string            `json:"host"`
	Driver        string            `json:"cuda_driver"` // the driver's CUDA version, e.g. "13.0"
	GPUs          []BenchGPU        `json:"gpus"`        // one per rank
	Shape         BenchShape        `json:"shape"`
	Backend       string            `json:"backend"`
	Mailbox       string            `json:"mailbox"`
	MailboxReason string            `json:"mailbox_reason"`
	WeightLayout  string            `json:"weight_layout"`   // "packed" or "row-major"
	StepsPerGraph int               `json:"steps_per_graph"` // one replay's steps: the weight copies
	Graph         string            `json:"graph"`           // how the graph is made: BenchConfig.Graph
	Warmup        int               `json:"warmup"`
	Replays       int               `json:"replays"`
	RotateMB      int               `json:"rotate_mb"`
	Slots         int               `json:"slots"`
	Overrides     map[string]string `json:"overrides"` // environment overrides in effect
	Rows          []BenchRow        `json:"rows"`
	OK            bool              `json:"ok"` // every block within tolerance and identical on every rank
	// Error is what ended the run before its last M ("" when it ran to
	// the end): Rows then hold the M timed before it.
	Error string `json:"error,omitempty"`
}

// BenchGPU is one rank's GPU.
type BenchGPU struct {
	Rank     int     `json:"rank"`
	Device   int     `json:"device"` // CUDA ordinal
	Name     string  `json:"name"`
	CopyTBps float64 `json:"copy_tb_per_s"` // device-to-device copy, read + write bytes
}

// BenchShape is the layer's shape.
type BenchShape struct {
	TP               int `json:"tp"`
	Hidden           int `json:"hidden"`
	Latent           int `json:"latent"`
	Shard            int `json:"shard"`              // hidden / tp: the columns of one rank's slice
	WeightShardBytes int `json:"weight_shard_bytes"` // shard x latent x 2
}

// BenchRow is one M.
type BenchRow struct {
	M          int     `json:"m"`
	MedianUS   float64 `json:"median_us"`
	P10US      float64 `json:"p10_us"`
	P90US      float64 `json:"p90_us"`
	FloorUS    float64 `json:"floor_us"`        // the HBM floor: weight shard bytes / mean copy bandwidth
	Ratio      float64 `json:"ratio"`           // median / floor
	WeightGBps float64 `json:"weight_gb_per_s"` // weight shard bytes / median
	Replays    int     `json:"replays"`
	ErrTol     float64 `json:"err_tol"` // the largest |out - ref| / tolerance within tolerance
	Wrong      int     `json:"wrong"`   // values outside tolerance, summed over ranks
	Identical  bool    `json:"identical"`
}

// writeOutputs writes the report where bc asks: the TSV table (--table)
// and the JSON document (--json-out). A report with Error set is never
// OK.
func (bc *BenchConfig) writeOutputs(r *BenchReport) error {
	if r.Error != "" {
		r.OK = false
	}
	if bc.Table != "" {
		if err := writeBenchTable(bc.Table, r.Rows); err != nil {
			return err
		}
	}
	if bc.JSONOut != "" {
		return r.writeFile(bc.JSONOut)
	}
	return nil
}

// writeFile writes r as indented JSON.
func (r *BenchReport) writeFile(path string) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return fmt.Errorf("encoding the JSON report: %w", err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("writing the JSON report: %w", err)
	}
	return nil
}

// writeBenchTable writes the rows as TSV for scripts/step-sweep and
// scripts/step-ab.
func writeBenchTable(path string, rows []BenchRow) error {
	var b strings.Builder
	b.WriteString("m\tours_us\tp90_us\tfloor_us\tratio\twrong\tidentical\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "%d\t%.2f\t%.2f\t%.2f\t%.3f\t%d\t%v\n", r.M, r.MedianUS, r.P90US, r.FloorUS, r.Ratio, r.Wrong, r.Identical)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("writing the table: %w", err)
	}
	return nil
}

// benchRig holds the device operands of the benchmark: the pools, k copies
// of the weight shard and k output blocks.
type benchRig struct {
	mem                    *benchMem
	p                      *plan
	in                     *inputs
	rank, k                int
	latent, shared, weight tp.DevicePtr
	packed                 bool // weight copies in the kernel's packed layout
	outs                   tp.DevicePtr
	shardBytes, outBytes   int // shardBytes: one weight copy as stored (packed: padded)
}

// newBenchRig uploads the pools, and the weight shard as many times as it
// takes to cover rotateMB (at least once): a graph may hold any number of
// steps. On error the rig holds what it allocated, for close.
func newBenchRig(device int, p *plan, in *inputs, rank, rotateMB int) (*benchRig, error) {
	c := p.cfg
	r := &benchRig{mem: &benchMem{device: device}, p: p, in: in, rank: rank, outBytes: 2 * p.shape.M * c.Hidden}
	w, packed, err := deviceWeight(in.weight, p.shape.Shard(), c.Latent)
	if err != nil {
		return r, err
	}
	r.packed, r.shardBytes = packed, 2*len(w)
	r.k = weightCopies(rotateMB, r.shardBytes)
	if r.latent, err = r.mem.upload("latent pool", in.latent); err != nil {
		return r, err
	}
	if r.shared, err = r.mem.upload("shared pool", in.shared); err != nil {
		return r, err
	}
	if r.weight, err = r.mem.alloc(fmt.Sprintf("%d weight copies", r.k), r.k*r.shardBytes); err != nil {
		return r, err
	}
	for i := range r.k {
		if err := tp.CopyToDevice(device, r.weight+tp.DevicePtr(i*r.shardBytes), w); err != nil {
			return r, fmt.Errorf("copying the weight shard to the device (copy %d of %d): %w", i+1, r.k, err)
		}
	}
	if r.outs, err = r.mem.alloc("output blocks", r.k*r.outBytes); err != nil {
		return r, err
	}
	return r, nil
}

// weightCopies is how many copies of shardBytes it takes to cover rotateMB
// MiB: the fewest, and at least one.
func weightCopies(rotateMB, shardBytes int) int {
	return max((rotateMB<<20+shardBytes-1)/shardBytes, 1)
}

// close frees the rig's device memory.
func (r *benchRig) close() error { return r.mem.close() }

// run makes the graph for m as mode says (BenchConfig.Graph; ops holds
// one op, or for GraphEnqueueOps one per weight copy), warms up, checks
// one replay and times the rest; the record holds this rank's numbers and
// the hashes of the checked blocks.
func (r *benchRig) run(ctx context.Context, ops []*tp.UpProjection, mode string, m, warmup, replays int) (rec benchRecord, err error) {
	c := r.p.cfg
	steps := make([]tp.DeviceStep, r.k)
	offs := make([]int, r.k)
	for k := range steps {
		o := r.p.offset(k, m)
		offs[k] = o
		steps[k] = tp.DeviceStep{
			In: tp.DeviceInputs{M: m,
				Latent:       r.latent + tp.DevicePtr(2*o*c.Latent),
				Weight:       r.weight + tp.DevicePtr(k*r.shardBytes),
				WeightPacked: r.packed,
				Shared:       r.shared + tp.DevicePtr(2*(o*c.Hidden+r.rank*r.p.shape.Shard())),
				SharedStride: c.Hidden},
			Out: r.outs + tp.DevicePtr(k*r.outBytes),
		}
	}
	g, err := r.graph(ctx, ops, mode, steps)
	if err != nil {
		return rec, err
	}
	defer func() { err = errors.Join(err, g.close()) }()
	if err := g.replay(ctx, warmup); err != nil {
		return rec, fmt.Errorf("warm-up: %w", err)
	}
	// The replays have finished (Replay waits for them), so a copy may
	// overwrite their blocks.
	poison := make([]tp.BF16, r.k*r.outBytes/2)
	for i := range poison {
		poison[i] = poisonValue
	}
	if err := tp.CopyToDevice(r.mem.device, r.outs, poison); err != nil {
		return rec, fmt.Errorf("poisoning the output blocks: %w", err)
	}
	if err := g.replay(ctx, 1); err != nil {
		return rec, fmt.Errorf("checked replay: %w", err)
	}
	block := make([]tp.BF16, m*c.Hidden)
	raw := make([]byte, 2*len(block))
	for k := range r.k {
		if err := tp.CopyFromDevice(r.mem.device, block, r.outs+tp.DevicePtr(k*r.outBytes)); err != nil {
			return rec, fmt.Errorf("copying block %d to the host: %w", k, err)
		}
		res, err := r.in.expected(r.p, offs[k], m).Check(block, c.Hidden)
		if err != nil {
			return rec, fmt.Errorf("checking block %d: %w", k, err)
		}
		rec.checked += res.Checked
		rec.wrong += res.Wrong
		rec.worst = max(rec.worst, res.Worst)
		for i, v := range block {
			binary.LittleEndian.PutUint16(raw[2*i:], uint16(v))
		}
		sum := sha256.Sum256(raw)
		rec.hashes = append(rec.hashes, binary.LittleEndian.Uint64(sum[:8]))
	}
	times, err := g.timeReplays(ctx, replays)
	if err != nil {
		return rec, fmt.Errorf("timed replays: %w", err)
	}
	for i := range times {
		times[i] /= time.Duration(r.k)
	}
	rec.median, rec.p10, rec.p90 = percentile(times, 0.5), percentile(times, 0.1), percentile(times, 0.9)
	return rec, nil
}

// benchGraph is the graph of a benchmark's steps, however it was made.
type benchGraph struct {
	replay      func(ctx context.Context, n int) error
	timeReplays func(ctx context.Context, n int) ([]time.Duration, error)
	close       func() error
}

// graph makes the graph of steps as mode says: the op's Capture, or
// Enqueue calls on a stream under the program's own capture, on ops[0]
// with the steps' weight copies or, for GraphEnqueueOps, step k on ops[k]
// with the weight it holds. A replay of the program's graph waits for its
// stream, then for every op's verdict on the steps (Synchronize).
func (r *benchRig) graph(ctx context.Context, ops []*tp.UpProjection, mode string, steps []tp.DeviceStep) (*benchGraph, error) {
	if mode == GraphCapture || mode == "" {
		g, err := ops[0].Capture(ctx, steps)
		if err != nil {
			return nil, err
		}
		return &benchGraph{replay: g.Replay, timeReplays: g.TimeReplays, close: g.Close}, nil
	}
	if mode == GraphEnqueueOps && len(ops) != len(steps) {
		return nil, fmt.Errorf("%d ops for %d steps", len(ops), len(steps))
	}
	g, err := tp.CaptureStream(r.mem.device, func(s tp.Stream) error {
		for k, st := range steps {
			op, in := ops[0], st.In
			if mode == GraphEnqueueOps {
				op, in.Weight, in.WeightPacked = ops[k], 0, false
			}
			if err := op.Enqueue(in, st.Out, s); err != nil {
				return fmt.Errorf("step %d of the graph: %w", k, err)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	verdict := func(err error) error {
		errs := []error{err}
		for _, op := range ops {
			errs = append(errs, op.Synchronize(ctx, g.Stream()))
		}
		return errors.Join(errs...)
	}
	return &benchGraph{
		replay: func(_ context.Context, n int) error { return verdict(g.Replay(n)) },
		timeReplays: func(_ context.Context, n int) ([]time.Duration, error) {
			t, err := g.TimeReplays(n)
			return t, verdict(err)
		},
		close: g.Close,
	}, nil
}
