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

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/tp"
)

// The step benchmark (`tprun bench`, whose ranks run `tprun __bench`): the
// time of the whole fused step (skinny kernel, stores to every rank,
// receive) per M, from CUDA graph replays with the weights rotated through
// enough copies that they stream from HBM, next to the HBM floor of the
// weight shard measured in the same run.

// BenchConfig is the benchmark's settings: the job flags it uses (shape,
// M list, mailbox, slots, deadline, seed; it always runs the CUDA engine,
// and times replays instead of --iters steps) and its own.
type BenchConfig struct {
	Job      *Config
	Replays  int    // timed graph replays per M
	Warmup   int    // untimed replays per M first
	RotateMB int    // MiB of weight copies per rank that the steps rotate through
	Table    string // rank 0 also writes the table here as TSV ("" none)
	JSONOut  string // rank 0 also writes the BenchReport here as JSON ("" none)
	// Version is the program's version, for the report.
	Version string
}

// BenchJobFlags are the job flags the benchmark takes, in the order the
// help lists them.
var BenchJobFlags = []string{"hidden", "latent", "m", "mailbox", "slots", "seed", "deadline"}

// BenchFlags are the benchmark's own flags, in the order the help lists
// them.
var BenchFlags = []string{"replays", "warmup", "rotate-mb", "table", "json-out"}

// RegisterBenchFlags defines BenchJobFlags and BenchFlags on fs. Unlike the
// default job, the benchmark runs every M from 1 to 8 unless told
// otherwise.
func RegisterBenchFlags(fs *flag.FlagSet) *BenchConfig {
	all := flag.NewFlagSet("job", flag.ContinueOnError)
	bc := &BenchConfig{Job: RegisterFlags(all), Replays: 200, Warmup: 20, RotateMB: 512}
	bc.Job.M = []int{1, 2, 3, 4, 5, 6, 7, 8}
	for _, name := range BenchJobFlags {
		f := all.Lookup(name)
		fs.Var(f.Value, f.Name, f.Usage)
	}
	fs.Var(&intValue{p: &bc.Replays, min: 1}, "replays", "timed CUDA graph replays per M")
	fs.Var(&intValue{p: &bc.Warmup, min: 0}, "warmup", "untimed replays per M before timing")
	fs.Var(&intValue{p: &bc.RotateMB, min: 1}, "rotate-mb", "MiB of weight copies per rank the steps rotate through (at least 512 keeps them out of L2)")
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
// graph of K steps, K the number of weight copies (a multiple of the slot
// count), step k reading copy k; checks one replay's K blocks against the
// float64 reference and across ranks; then times Replays replays with
// events. The step time is a replay's time over K; rank 0 prints, per M,
// the slowest rank's median and p90 over replays, and the floor: the
// shard's weight bytes over the device-to-device copy bandwidth (read plus
// write) measured in the same run, averaged over the ranks. Rank 0 says on
// stderr how far it has come when the run takes more than a few seconds.
func Bench(ctx context.Context, g *tp.Group, bc *BenchConfig, stdout, stderr io.Writer) error {
	return bench(ctx, g, bc, stdout, stderr, openBenchGPU)
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

func bench(ctx context.Context, g group, bc *BenchConfig, stdout, stderr io.Writer, gpu func() (*cuda.Driver, error)) (err error) {
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
	drv, err := p.pickBenchBackend(ctx, g, gpu)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := drv.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("job: bench: rank %d: closing the CUDA driver: %w", rank, cerr)
		}
	}()
	fail := func(err error) error { return fmt.Errorf("job: bench: rank %d: %w", rank, err) }
	in, err := p.newInputs(ctx, rank)
	if err != nil {
		return fail(err)
	}
	mem, err := openDevMem(drv, deviceOf(g))
	if err != nil {
		return fail(fmt.Errorf("device %d: %w", deviceOf(g), err))
	}
	defer func() {
		if cerr := mem.close(); cerr != nil && err == nil {
			err = fail(cerr)
		}
	}()
	gpuName, err := drv.DeviceName(mem.dev)
	if err != nil {
		return fail(fmt.Errorf("device %d: its name: %w", deviceOf(g), err))
	}
	driverVersion, err := drv.DriverVersion()
	if err != nil {
		return fail(fmt.Errorf("the CUDA driver's version: %w", err))
	}
	bw, err := copyBandwidth(mem)
	if err != nil {
		return fail(fmt.Errorf("measuring the copy bandwidth: %w", err))
	}
	rig, err := newBenchRig(mem, p, in, rank, bc.RotateMB)
	if err != nil {
		return fail(err)
	}
	up, err := tp.NewUpProjection(ctx, g, cfg.Hidden, cfg.Latent, p.shape.M, tp.WithBackend(p.mailbox),
		tp.WithSlots(cfg.Slots), tp.WithDeadline(cfg.Deadline), tp.WithDevice(deviceOf(g)))
	if err != nil {
		return fail(err)
	}
	defer func() {
		if cerr := up.Close(); cerr != nil && err == nil {
			err = fail(cerr)
		}
	}()
	if err := g.Barrier(ctx); err != nil {
		return fail(fmt.Errorf("barrier before the benchmark: %w", err))
	}

	shard := p.shape.Shard()
	sb := shard * cfg.Latent * 2
	report := &BenchReport{
		Schema: BenchSchema, Version: bc.Version, Driver: fmt.Sprintf("%d.%d", driverVersion/1000, driverVersion%1000/10),
		Shape:   BenchShape{TP: size, Hidden: cfg.Hidden, Latent: cfg.Latent, Shard: shard, WeightShardBytes: sb},
		Backend: "cuda", Mailbox: up.Backend(), MailboxReason: p.reason, WeightLayout: "row-major",
		StepsPerGraph: rig.k, Warmup: bc.Warmup, Replays: bc.Replays, RotateMB: bc.RotateMB, Slots: cfg.Slots,
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
		layout = "packed (kernel.PreferPacked)"
	}
	out.printf("# per rank: weight shard %.1f MB, %s, rotated through %d copies (%.0f MB) so that it streams from HBM;\n",
		float64(sb)/1e6, layout, rig.k, float64(rig.k*rig.shardBytes)/1e6)
	if f := kernel.FatbinOverride(); f != "" {
		out.printf("# kernels from %s=%s, not the embedded build\n", kernel.FatbinEnv, f)
	}
	if v := os.Getenv(tp.ReceiveModeEnv); v != "" {
		out.printf("# receive: %s=%s\n", tp.ReceiveModeEnv, v)
	}
	if f := kernel.ConfigTableOverride(); f != "" {
		out.printf("# launch table from %s=%s, not the embedded one\n", kernel.ConfigTableEnv, f)
	}
	if f := kernel.StepTableOverride(); f != "" {
		out.printf("# step launch table from %s=%s, not the embedded one\n", kernel.StepTableEnv, f)
	}
	out.printf("# one CUDA graph = %d steps (skinny kernel + stores to every rank + receive, PDL-chained), %d warm-up and %d timed replays per M\n",
		rig.k, bc.Warmup, bc.Replays)

	var failures []string
	progress.startLoop(time.Now())
	for _, m := range cfg.M {
		rec, err := rig.run(ctx, up, m, bc.Warmup, bc.Replays)
		if err != nil {
			//lint:ignore ST1005 M, the row count, as the tables spell it
			return fail(fmt.Errorf("M=%d: %w", m, err))
		}
		rec.bandwidth, rec.device, rec.gpu = bw, deviceOf(g), gpuName
		all, err := g.AllGather(ctx, rec.encode())
		if err != nil {
			//lint:ignore ST1005 M, the row count, as the tables spell it
			return fail(fmt.Errorf("M=%d: gathering the results: %w", m, err))
		}
		var recs []benchRecord
		for q, b := range all {
			r, err := decodeBenchRecord(b)
			if err != nil {
				//lint:ignore ST1005 M, the row count, as the tables spell it
				return fail(fmt.Errorf("M=%d: rank %d's result: %w", m, q, err))
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
				copyBytes>>20, strings.Join(strs, ", "))
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
	if rank == 0 && bc.Table != "" {
		if err := writeBenchTable(bc.Table, report.Rows); err != nil {
			return fail(err)
		}
	}
	if rank == 0 && bc.JSONOut != "" {
		if err := report.writeFile(bc.JSONOut); err != nil {
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
	for _, k := range []string{kernel.FatbinEnv, kernel.ConfigTableEnv, kernel.StepTableEnv, tp.ReceiveModeEnv} {
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
	Warmup        int               `json:"warmup"`
	Replays       int               `json:"replays"`
	RotateMB      int               `json:"rotate_mb"`
	Slots         int               `json:"slots"`
	Overrides     map[string]string `json:"overrides"` // environment overrides in effect
	Rows          []BenchRow        `json:"rows"`
	OK            bool              `json:"ok"` // every block within tolerance and identical on every rank
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

// copyBytes is the size of the copy that measures the bandwidth: far
// beyond L2, long enough that launch costs vanish.
const copyBytes = 1 << 30

// copyBandwidth times device-to-device copies of copyBytes and returns
// the median's read-plus-write bytes per second.
func copyBandwidth(mem *devMem) (bw float64, err error) {
	drv := mem.drv
	src, err := mem.alloc("copy source", copyBytes)
	if err != nil {
		return 0, err
	}
	dst, err := mem.alloc("copy destination", copyBytes)
	if err != nil {
		return 0, err
	}
	defer func() { err = errors.Join(err, mem.free(dst), mem.free(src)) }()
	if err := mem.fill(src, 0x3F803F80, copyBytes/4); err != nil {
		return 0, err
	}
	const warm, reps = 2, 10
	var evs []cuda.Event
	defer func() {
		for _, ev := range evs {
			err = errors.Join(err, drv.EventDestroy(ev))
		}
	}()
	for range reps + 1 {
		ev, err := drv.EventCreate(cuda.EventDefault)
		if err != nil {
			return 0, err
		}
		evs = append(evs, ev)
	}
	for range warm {
		if err := drv.MemcpyDtoDAsync(dst, src, copyBytes, mem.stream); err != nil {
			return 0, err
		}
	}
	for i := range reps {
		if err := drv.EventRecord(evs[i], mem.stream); err != nil {
			return 0, err
		}
		if err := drv.MemcpyDtoDAsync(dst, src, copyBytes, mem.stream); err != nil {
			return 0, err
		}
	}
	if err := drv.EventRecord(evs[reps], mem.stream); err != nil {
		return 0, err
	}
	if err := drv.EventSynchronize(evs[reps]); err != nil {
		return 0, err
	}
	times := make([]time.Duration, reps)
	for i := range reps {
		if times[i], err = drv.EventElapsedTime(evs[i], evs[i+1]); err != nil {
			return 0, err
		}
	}
	med := percentile(times, 0.5)
	if med <= 0 {
		return 0, fmt.Errorf("a %d-byte copy took %v", copyBytes, med)
	}
	return 2 * copyBytes / med.Seconds(), nil
}

// benchRig holds the device operands of the benchmark: the pools, k copies
// of the weight shard and k output blocks.
type benchRig struct {
	mem                    *devMem
	p                      *plan
	in                     *inputs
	rank, k                int
	latent, shared, weight cuda.DevicePtr
	packed                 bool // weight copies in the kernel's packed layout
	outs                   cuda.DevicePtr
	shardBytes, outBytes   int // shardBytes: one weight copy as stored (packed: padded)
}

// newBenchRig uploads the pools and the weight shard, and copies the shard
// until rotateMB is covered; the copy count is rounded up to a multiple of
// the slot count, since a graph must hold whole rounds of slots.
func newBenchRig(mem *devMem, p *plan, in *inputs, rank, rotateMB int) (*benchRig, error) {
	c := p.cfg
	w, packed, err := deviceWeight(in.weight, p.shape.Shard(), c.Latent)
	if err != nil {
		return nil, err
	}
	r := &benchRig{mem: mem, p: p, in: in, rank: rank, packed: packed, shardBytes: 2 * len(w), outBytes: 2 * p.shape.M * c.Hidden}
	slots := c.Slots
	r.k = max((rotateMB<<20+r.shardBytes-1)/r.shardBytes, 1)
	r.k = (r.k + slots - 1) / slots * slots
	if r.latent, err = mem.upload("latent pool", in.latent); err != nil {
		return nil, err
	}
	if r.shared, err = mem.upload("shared pool", in.shared); err != nil {
		return nil, err
	}
	if r.weight, err = mem.alloc("weight copies", r.k*r.shardBytes); err != nil {
		return nil, err
	}
	if err := mem.drv.MemcpyHtoD(r.weight, cuda.AsBytes(w)); err != nil {
		return nil, fmt.Errorf("copying the weight shard to the device: %w", err)
	}
	if err := mem.settle(); err != nil {
		return nil, err
	}
	for i := 1; i < r.k; i++ {
		if err := mem.drv.MemcpyDtoDAsync(r.weight+cuda.DevicePtr(i*r.shardBytes), r.weight, uint64(r.shardBytes), mem.stream); err != nil {
			return nil, fmt.Errorf("copying the weight shard (copy %d): %w", i, err)
		}
	}
	if r.outs, err = mem.alloc("output blocks", r.k*r.outBytes); err != nil {
		return nil, err
	}
	return r, mem.settle()
}

// run captures the graph for m, warms up, checks one replay and times the
// rest; the record holds this rank's numbers and the hashes of the checked
// blocks.
func (r *benchRig) run(ctx context.Context, up *tp.UpProjection, m, warmup, replays int) (rec benchRecord, err error) {
	c := r.p.cfg
	steps := make([]tp.DeviceStep, r.k)
	offs := make([]int, r.k)
	for k := range steps {
		o := r.p.offset(k, m)
		offs[k] = o
		steps[k] = tp.DeviceStep{
			In: tp.DeviceInputs{M: m,
				Latent:       tp.DevicePtr(r.latent + cuda.DevicePtr(2*o*c.Latent)),
				Weight:       tp.DevicePtr(r.weight + cuda.DevicePtr(k*r.shardBytes)),
				WeightPacked: r.packed,
				Shared:       tp.DevicePtr(r.shared + cuda.DevicePtr(2*(o*c.Hidden+r.rank*r.p.shape.Shard()))),
				SharedStride: c.Hidden},
			Out: tp.DevicePtr(r.outs + cuda.DevicePtr(k*r.outBytes)),
		}
	}
	g, err := up.Capture(ctx, steps)
	if err != nil {
		return rec, err
	}
	defer func() { err = errors.Join(err, g.Close()) }()
	if err := g.Replay(ctx, warmup); err != nil {
		return rec, fmt.Errorf("warm-up: %w", err)
	}
	if err := r.mem.fill(r.outs, poisonWord, r.k*r.outBytes/4); err != nil {
		return rec, fmt.Errorf("poisoning the output blocks: %w", err)
	}
	if err := g.Replay(ctx, 1); err != nil {
		return rec, fmt.Errorf("checked replay: %w", err)
	}
	block := make([]kernel.BF16, m*c.Hidden)
	for k := range r.k {
		if err := r.mem.drv.MemcpyDtoH(cuda.AsBytes(block), r.outs+cuda.DevicePtr(k*r.outBytes)); err != nil {
			return rec, fmt.Errorf("copying block %d to the host: %w", k, err)
		}
		res, err := r.in.expected(r.p, offs[k], m).Check(block, c.Hidden)
		if err != nil {
			return rec, fmt.Errorf("checking block %d: %w", k, err)
		}
		rec.checked += res.Checked
		rec.wrong += res.Wrong
		rec.worst = max(rec.worst, res.Worst)
		sum := sha256.Sum256(cuda.AsBytes(block))
		rec.hashes = append(rec.hashes, binary.LittleEndian.Uint64(sum[:8]))
	}
	times, err := g.TimeReplays(ctx, replays)
	if err != nil {
		return rec, fmt.Errorf("timed replays: %w", err)
	}
	for i := range times {
		times[i] /= time.Duration(r.k)
	}
	rec.median, rec.p10, rec.p90 = percentile(times, 0.5), percentile(times, 0.1), percentile(times, 0.9)
	return rec, nil
}
