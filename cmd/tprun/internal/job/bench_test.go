package job

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/tp"
)

func parseBench(t *testing.T, args ...string) (*BenchConfig, error) {
	t.Helper()
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bc := RegisterBenchFlags(fs)
	return bc, fs.Parse(args)
}

func TestBenchFlags(t *testing.T) {
	bc, err := parseBench(t)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(bc.Job.M, []int{1, 2, 3, 4, 5, 6, 7, 8}) || bc.Replays != 200 || bc.Warmup != 20 || bc.RotateMB != 512 || bc.Graph != GraphCapture {
		t.Errorf("defaults %+v, job %+v", bc, bc.Job)
	}
	bc, err = parseBench(t, "--hidden", "7168", "--latent", "3584", "--m", "8,1", "--replays", "50", "--warmup", "3",
		"--rotate-mb", "600", "--table", "/tmp/x.tsv", "--json-out", "/tmp/x.json", "--mailbox", "unicast", "--graph", "enqueue-ops")
	if err != nil {
		t.Fatal(err)
	}
	if bc.Replays != 50 || bc.Warmup != 3 || bc.RotateMB != 600 || bc.Table != "/tmp/x.tsv" || bc.JSONOut != "/tmp/x.json" ||
		bc.Job.Hidden != 7168 || !slices.Equal(bc.Job.M, []int{8, 1}) || bc.Job.Mailbox != "unicast" || bc.Graph != GraphEnqueueOps {
		t.Errorf("parsed %+v, job %+v", bc, bc.Job)
	}
	// The flags are exactly BenchJobFlags and BenchFlags.
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	RegisterBenchFlags(fs)
	var names []string
	fs.VisitAll(func(f *flag.Flag) { names = append(names, f.Name) })
	want := slices.Sorted(slices.Values(append(slices.Clone(BenchJobFlags), BenchFlags...)))
	if !slices.Equal(names, want) {
		t.Errorf("bench flags %q, want %q", names, want)
	}
	for _, bad := range [][]string{{"--iters", "5"}, {"--backend", "cuda"}, {"--replays", "0"}, {"--warmup", "-1"}, {"--rotate-mb", "0"}, {"--graph", "stream"}, {"--graph", ""}} {
		if _, err := parseBench(t, bad...); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestBenchRefuses: bad settings and a machine without a GPU are refused
// before any collective, with one line and nothing printed.
func TestBenchRefuses(t *testing.T) {
	tests := []struct {
		desc string
		bc   func(*BenchConfig)
		want error
		text string
	}{
		{"no GPU", func(*BenchConfig) {}, tp.ErrBackendUnavailable, "--backend cuda"},
		{"host mailbox", func(bc *BenchConfig) { bc.Job.Mailbox = "host" }, ErrFlag, "GPU mailbox"},
		{"no replays", func(bc *BenchConfig) { bc.Replays = 0 }, ErrFlag, "replays"},
		{"negative warm-up", func(bc *BenchConfig) { bc.Warmup = -1 }, ErrFlag, "warmup"},
		{"no rotation", func(bc *BenchConfig) { bc.RotateMB = 0 }, ErrFlag, "rotate-mb"},
		{"bad shape", func(bc *BenchConfig) { bc.Job.Latent = 100 }, ErrFlag, "latent"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			bc, err := parseBench(t)
			if err != nil {
				t.Fatal(err)
			}
			tc.bc(bc)
			var out, errOut bytes.Buffer
			err = bench(context.Background(), noGroup{size: 2}, bc, &out, &errOut, nil)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) || strings.Contains(err.Error(), "\n") {
				t.Errorf("error %v, want one line matching %v and mentioning %q", err, tc.want, tc.text)
			}
			if out.Len() != 0 || errOut.Len() != 0 {
				t.Errorf("printed %q and %q before refusing", out.String(), errOut.String())
			}
		})
	}
}

func TestBenchRecordRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	for range 50 {
		r := benchRecord{median: time.Duration(rng.Int64N(1e6)), p10: time.Duration(rng.Int64N(1e6)), p90: time.Duration(rng.Int64N(1e6)),
			checked: rng.IntN(1e6), wrong: rng.IntN(10), worst: rng.Float64(), bandwidth: 1e12 + 4e12*rng.Float64(),
			device: rng.IntN(16), gpu: fmt.Sprintf("NVIDIA H%d µ", rng.IntN(1000))}
		for range rng.IntN(40) {
			r.hashes = append(r.hashes, rng.Uint64())
		}
		got, err := decodeBenchRecord(r.encode())
		if err != nil || got.median != r.median || got.p10 != r.p10 || got.p90 != r.p90 || got.checked != r.checked ||
			got.wrong != r.wrong || got.worst != r.worst || got.bandwidth != r.bandwidth || got.device != r.device ||
			got.gpu != r.gpu || !slices.Equal(got.hashes, r.hashes) {
			t.Fatalf("round trip of %+v gave %+v, %v", r, got, err)
		}
		b := r.encode()
		for _, bad := range [][]byte{nil, b[:10], append(slices.Clone(b[:4+8*8]), 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x7F)} {
			if _, err := decodeBenchRecord(bad); !errors.Is(err, errRecord) {
				t.Errorf("decode of %d bytes: %v, want errRecord", len(bad), err)
			}
		}
	}
}

// TestBenchReport: the rows rank 0 folds from every rank's records, as
// `tprun bench --json` prints them and the TSV table holds them, against
// the same figures worked out here from the records.
func TestBenchReport(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 9))
	const size, shardBytes, replays = 3, 3584 * 3584 * 2, 77
	report := &BenchReport{Schema: BenchSchema, Version: "tprun test", Shape: BenchShape{TP: size, Hidden: 3 * 3584, Latent: 3584, Shard: 3584, WeightShardBytes: shardBytes},
		Backend: "cuda", Mailbox: "unicast", Overrides: map[string]string{}, Rows: []BenchRow{}}
	type want struct {
		median, p10, p90, floor, ratio, gbps, worst float64
		wrong                                       int
		identical                                   bool
	}
	var wants []want
	for _, m := range rng.Perm(8) {
		m++
		own := []uint64{rng.Uint64(), rng.Uint64()}
		var recs []benchRecord
		var w want
		w.identical = true
		bwSum := 0.0
		for q := range size {
			r := benchRecord{median: time.Duration(2000 + rng.Int64N(20000)), p10: time.Duration(1000 + rng.Int64N(2000)),
				p90: time.Duration(30000 + rng.Int64N(9000)), worst: rng.Float64(), bandwidth: 3e12 + 2e12*rng.Float64(),
				hashes: own, gpu: "NVIDIA H200", device: q}
			if rng.IntN(4) == 0 {
				r.wrong = 1 + rng.IntN(5)
			}
			if q > 0 && rng.IntN(4) == 0 {
				r.hashes = []uint64{own[0], own[1] ^ 1}
				w.identical = false
			}
			recs = append(recs, r)
			w.median = max(w.median, float64(r.median)/1e3)
			w.p10 = max(w.p10, float64(r.p10)/1e3)
			w.p90 = max(w.p90, float64(r.p90)/1e3)
			w.worst = max(w.worst, r.worst)
			w.wrong += r.wrong
			bwSum += r.bandwidth
		}
		// The floor is kept in whole nanoseconds.
		w.floor = math.Trunc(shardBytes/(bwSum/size)*1e9) / 1e3
		w.ratio = w.median / w.floor
		w.gbps = shardBytes / (w.median * 1e-6) / 1e9
		wants = append(wants, w)
		report.Rows = append(report.Rows, summarizeBench(m, shardBytes, recs, own).report(shardBytes, replays))
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "r.json")
	if err := report.writeFile(path); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var got BenchReport
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("%v:\n%s", err, b)
	}
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil || generic["schema"] != BenchSchema || len(generic["rows"].([]any)) != len(wants) {
		t.Fatalf("generic decode: %v, %v", err, generic)
	}
	if got.Shape != report.Shape || len(got.Rows) != len(wants) {
		t.Fatalf("decoded %+v", got)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Abs(b) }
	for i, w := range wants {
		r := got.Rows[i]
		if r.M != report.Rows[i].M || !near(r.MedianUS, w.median) || !near(r.P10US, w.p10) || !near(r.P90US, w.p90) ||
			!near(r.FloorUS, w.floor) || !near(r.Ratio, w.ratio) || !near(r.WeightGBps, w.gbps) || r.ErrTol != w.worst ||
			r.Wrong != w.wrong || r.Identical != w.identical || r.Replays != replays {
			t.Errorf("row %d: %+v, want %+v", i, r, w)
		}
	}
	// The TSV holds the same rows.
	tsv := filepath.Join(dir, "r.tsv")
	if err := writeBenchTable(tsv, got.Rows); err != nil {
		t.Fatal(err)
	}
	tb, err := os.ReadFile(tsv)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(tb)), "\n")
	if len(lines) != len(wants)+1 || lines[0] != "m\tours_us\tp90_us\tfloor_us\tratio\twrong\tidentical" {
		t.Fatalf("table:\n%s", tb)
	}
	for i, line := range lines[1:] {
		f := strings.Split(line, "\t")
		us, _ := strconv.ParseFloat(f[1], 64)
		if f[0] != strconv.Itoa(got.Rows[i].M) || math.Abs(us-wants[i].median) > 0.005+1e-9 || f[6] != strconv.FormatBool(wants[i].identical) {
			t.Errorf("table row %q, want M %d, %.2f µs, identical %v", line, got.Rows[i].M, wants[i].median, wants[i].identical)
		}
	}
}

// TestBenchWriteOutputsStopped: a run that stopped at some M still writes
// the rows it timed, the error that ended it and ok false, to the table
// and the JSON report; a whole run writes no error field.
func TestBenchWriteOutputsStopped(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 11))
	dir := t.TempDir()
	bc := &BenchConfig{Table: filepath.Join(dir, "t.tsv"), JSONOut: filepath.Join(dir, "r.json")}
	rows := []BenchRow{}
	for _, m := range []int{1, 16, 64} {
		rows = append(rows, BenchRow{M: m, MedianUS: 1 + 20*rng.Float64(), FloorUS: 1 + rng.Float64(), Identical: true})
	}
	stop := fmt.Sprintf("M=128: launching the step: code %d", 1+rng.IntN(900))
	for _, tc := range []struct {
		name, err string
	}{{"stopped", stop}, {"whole", ""}} {
		t.Run(tc.name, func(t *testing.T) {
			r := &BenchReport{Schema: BenchSchema, Rows: rows, OK: true, Error: tc.err}
			if err := bc.writeOutputs(r); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(bc.JSONOut)
			if err != nil {
				t.Fatal(err)
			}
			var got map[string]any
			if err := json.Unmarshal(b, &got); err != nil {
				t.Fatal(err)
			}
			e, has := got["error"]
			if tc.err != "" && (e != stop || got["ok"] != false) || tc.err == "" && (has || got["ok"] != true) {
				t.Errorf("error %v (present %v), ok %v; want error %q", e, has, got["ok"], tc.err)
			}
			if n := len(got["rows"].([]any)); n != len(rows) {
				t.Errorf("%d rows in the JSON report, want %d", n, len(rows))
			}
			tb, err := os.ReadFile(bc.Table)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSpace(string(tb)), "\n")
			if len(lines) != len(rows)+1 || !strings.HasPrefix(lines[3], "64\t") {
				t.Errorf("table:\n%s", tb)
			}
		})
	}
}

func TestBenchProgressLine(t *testing.T) {
	p := &benchProgress{ms: []int{1, 2, 4, 8}}
	t0 := time.Now()
	if l := p.line(t0, 7*time.Second); !strings.Contains(l, "setting up") || !strings.Contains(l, "7 s") {
		t.Errorf("before the first M: %q", l)
	}
	p.startLoop(t0)
	if l := p.line(t0.Add(time.Second), 8*time.Second); l != "bench: M 1: 0 of 4 M values done\n" {
		t.Errorf("during the first M: %q", l)
	}
	p.finished()
	p.finished()
	p.finished()
	// Three M values in 30 s: the fourth takes about 10 s more.
	if l := p.line(t0.Add(30*time.Second), 40*time.Second); l != "bench: M 8: 3 of 4 M values done, about 10 s left\n" {
		t.Errorf("during the last M: %q", l)
	}
	p.finished()
	if l := p.line(t0.Add(40*time.Second), 50*time.Second); l != "" {
		t.Errorf("after the last M: %q", l)
	}
}

// TestWeightCopies: the weight copies cover --rotate-mb with the fewest
// copies (any count will do for a graph); a shard larger than that is one
// copy.
func TestWeightCopies(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, 11))
	for range 1000 {
		mb := 1 + rng.IntN(2048)
		shard := 16 * (1 + rng.IntN(1<<22)) // up to 64 MiB
		k := weightCopies(mb, shard)
		if k < 1 || k*shard < mb<<20 || (k > 1 && (k-1)*shard >= mb<<20) {
			t.Fatalf("seed %d: %d MiB of %d-byte copies: %d copies (%d bytes)", seed, mb, shard, k, k*shard)
		}
	}
	if k := weightCopies(1, 3<<20); k != 1 {
		t.Errorf("1 MiB of 3 MiB copies: %d copies, want 1", k)
	}
}

// TestKernelOverrides: each kernel build or launch table set in the
// environment is named in the header lines and in the bench report's
// overrides, beside the receive mode; none set, none named.
func TestKernelOverrides(t *testing.T) {
	for _, e := range kernelEnvs {
		t.Setenv(e.env, "")
	}
	t.Setenv(tp.ReceiveModeEnv, "")
	if l, o := kernelOverrides(), benchOverrides(); len(l) != 0 || len(o) != 0 {
		t.Fatalf("nothing set: lines %q, overrides %v", l, o)
	}
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	want := map[string]string{}
	for _, env := range []string{kernel.FatbinEnv, kernel.ConfigTableEnv, kernel.StepTableEnv, kernel.BigmTableEnv, tp.ReceiveModeEnv} {
		want[env] = fmt.Sprintf("/tmp/x%d", rng.Int())
		t.Setenv(env, want[env])
	}
	if got := benchOverrides(); !maps.Equal(got, want) {
		t.Errorf("benchOverrides() = %v, want %v", got, want)
	}
	lines := kernelOverrides()
	if len(lines) != len(want)-1 {
		t.Errorf("header lines %q, want one per kernel override", lines)
	}
	for env, v := range want {
		named := slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, env+"="+v+", not the embedded") })
		if named != (env != tp.ReceiveModeEnv) {
			t.Errorf("%s=%s named in the header lines: %v (%q)", env, v, named, lines)
		}
	}
}
