package main

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The committed benches the docs plot (docs/performance.md).
const (
	kernelBench = "../../bench/kernel-h200-2026-11-30-1.txt"
	stepBench   = "../../bench/step-h200x2-2026-11-30-1.txt"
)

func readBench(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type shapeKey struct{ latent, shard, m int }

func TestParseKernelBench(t *testing.T) {
	rows, err := ParseKernel(bytes.NewReader(readBench(t, kernelBench)))
	if err != nil {
		t.Fatal(err)
	}
	got := map[shapeKey]KernelRow{}
	for _, r := range rows {
		k := shapeKey{r.Latent, r.Shard, r.M}
		if _, dup := got[k]; dup {
			t.Errorf("row %+v appears twice", k)
		}
		got[k] = r
	}
	// Seven shapes (five shards at latent 3584, shard 1024 at latents 1024
	// and 2048), M 1..8 each.
	if len(rows) != 56 {
		t.Errorf("%d rows, want 56", len(rows))
	}
	for _, s := range []struct{ latent, shard int }{{3584, 7168}, {3584, 3584}, {3584, 1792}, {3584, 896}, {3584, 448}, {1024, 1024}, {2048, 1024}} {
		for m := 1; m <= 8; m++ {
			if _, ok := got[shapeKey{s.latent, s.shard, m}]; !ok {
				t.Errorf("no row for latent %d shard %d M %d", s.latent, s.shard, m)
			}
		}
	}
	// Figures read off the file by eye.
	for _, want := range []KernelRow{
		{Latent: 3584, Shard: 896, M: 1, Config: "16/8/l/16/1/p/co65", Ours: 2.28, Floor: 1.52, Torch: 9.65},
		{Latent: 3584, Shard: 896, M: 5, Config: "32/4/w/16/2/p/co80", Ours: 2.39, Floor: 1.52, Torch: 10.45},
		{Latent: 3584, Shard: 3584, M: 8, Config: "32/4/g/4/4/pf48.8l/p/lb", Ours: 6.22, Floor: 6.07, Torch: 14.36},
		{Latent: 3584, Shard: 7168, M: 1, Config: "32/4/g/4/4/p/lb", Ours: 12.31, Floor: 12.13, Torch: 18.10},
		{Latent: 2048, Shard: 1024, M: 8, Config: "32/4/g/4/4/p", Ours: 2.09, Floor: 0.99, Torch: 8.30},
	} {
		if r := got[shapeKey{want.Latent, want.Shard, want.M}]; r != want {
			t.Errorf("latent %d shard %d M %d:\n got %+v\nwant %+v", want.Latent, want.Shard, want.M, r, want)
		}
	}
}

func TestParseStepBench(t *testing.T) {
	b := readBench(t, stepBench)
	rows, err := ParseStep(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8: %+v", len(rows), rows)
	}
	for i, r := range rows {
		if r.M != i+1 {
			t.Errorf("row %d has M %d", i, r.M)
		}
	}
	for _, want := range []StepRow{
		{M: 1, Ours: 7.16, Floor: 6.05, Torch: 20.65, AllGather: 12.48},
		{M: 7, Ours: 7.59, Floor: 6.05, Torch: 21.34, AllGather: 12.63},
		{M: 8, Ours: 7.63, Floor: 6.05, Torch: 20.57, AllGather: 12.19},
	} {
		if r := rows[want.M-1]; r != want {
			t.Errorf("M %d:\n got %+v\nwant %+v", want.M, r, want)
		}
	}
	want := Meta{Date: "2026-11-30", GPU: "NVIDIA H200", GPUs: 2, TP: "2", Shard: "3584", Latent: "3584"}
	if m := ReadMeta(b); m != want {
		t.Errorf("meta %+v, want %+v", m, want)
	}
}

// A table written the way scripts/kernel-harness/report.py writes one, from
// fresh random values, reads back as those values.
func TestParseKernelRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	var want []KernelRow
	var sb strings.Builder
	sb.WriteString("# header\nmachine: GPU 0: NVIDIA H200 (UUID: x)\n\n")
	sb.WriteString("| latent | shard | M | config (rows/...) | ours µs | floor µs | ours/floor | no-PDL µs | torch µs | speedup | target |\n")
	sb.WriteString("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |\n")
	for range 1 + rng.IntN(40) {
		r := KernelRow{
			Latent: 8 * (1 + rng.IntN(1000)), Shard: 8 * (1 + rng.IntN(2000)), M: 1 + rng.IntN(8),
			Config: fmt.Sprintf("%d/%d/g/%d/%d/p", 16*(1+rng.IntN(2)), 4*(1+rng.IntN(2)), 1+rng.IntN(16), 1+rng.IntN(8)),
			Ours:   float64(1+rng.IntN(99999)) / 100, Floor: float64(1+rng.IntN(99999)) / 100, Torch: float64(1+rng.IntN(99999)) / 100,
		}
		want = append(want, r)
		fmt.Fprintf(&sb, "| %d | %d | %d | %s | %.2f | %.2f | %.2f | %.2f | %.2f | %.2f× |  |\n",
			r.Latent, r.Shard, r.M, r.Config, r.Ours, r.Floor, r.Ours/r.Floor, r.Ours+1, r.Torch, r.Torch/r.Ours)
	}
	sb.WriteString("\nAll targets met.\n| a | b |\n")
	got, err := ParseKernel(strings.NewReader(sb.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
}

// bigmSample is a larger-M sweep report written the way scripts/bigm-sweep
// writes one (its header, the sweep, the picked table, the comparison),
// from fresh random figures, and the comparison rows it holds. One shard
// has no run of the picked table (no tprun figure, no floor), one row a
// wrong block (no tprun figure) and one row no PyTorch figure.
type bigmSample struct {
	text         string
	rows         []BigmRow
	date, latent string
}

func newBigmSample(rng *rand.Rand) bigmSample {
	shards, ms := []int{7168, 3584, 896, 448}, []int{16, 32, 64, 128}
	latent := []int{3584, 2048, 7168}[rng.IntN(3)]
	date := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).AddDate(0, 0, rng.IntN(700))
	noRun := shards[rng.IntN(len(shards))]
	var others []int
	for i := range shards {
		if shards[i] != noRun {
			others = append(others, i)
		}
	}
	wrong := [2]int{others[rng.IntN(len(others))], rng.IntN(len(ms))}
	noTorch := [2]int{rng.IntN(len(shards)), rng.IntN(len(ms))}
	bw := 3.8 + rng.Float64()
	cell := func(v float64, f string) string {
		if math.IsNaN(v) {
			return "-"
		}
		return fmt.Sprintf(f, v)
	}

	var sb strings.Builder
	fmt.Fprintf(&sb, "# tprun larger-M sweep (M 16..128, kernel/bigm.cu) and the comparison with PyTorch, tp 1 on one GPU\n")
	fmt.Fprintf(&sb, "date: %s %02d:%02d UTC\n", date.Format("2006-01-02"), rng.IntN(24), rng.IntN(60))
	fmt.Fprintf(&sb, "command: scripts/bigm-sweep --rounds 2 --latent %d\n", latent)
	fmt.Fprintf(&sb, "  each run: TPRUN_KERNELS_BIGM_TABLE=<candidate> bin/tprun bench --tp 1 --hidden SHARD --latent %d --m <its legal MTs> --json-out ...\n", latent)
	fmt.Fprintf(&sb, "  PyTorch:  scripts/bench-step-torch.py --tp 1 --hidden 7168,3584,896,448 --latent %d --m 16,32,64,128\n", latent)
	fmt.Fprintf(&sb, "machine:\n  GPU 0: NVIDIA H200 (UUID: GPU-%08x-%04x)\n", rng.Uint32(), rng.IntN(1<<16))
	fmt.Fprintf(&sb, "driver: ['580.%d.04']\ntorch: 2.11.0+cu130 CUDA 13.0\nfatbin: the one embedded in bin/tprun\n", rng.IntN(200))
	fmt.Fprintf(&sb, "copy bandwidth (tprun bench, read + write): %.2f TB/s\n", bw)
	sb.WriteString("2 interleaved rounds; cell = median over rounds of the run's step median (µs, the kernel then the receive,\n" +
		"CUDA graphs, weights rotated through >= 512 MiB); 'wrong': a block outside tolerance; 'illegal': the config cannot\n" +
		"serve that MT; 'refused'/'failed': the run said why (bigm-sweep.tsv). Elapsed 287 s.\n\n## the sweep\n")
	for _, shard := range shards {
		fmt.Fprintf(&sb, "shard %d:\n  %-14s", shard, "config")
		for _, m := range ms {
			fmt.Fprintf(&sb, "%12s", "MT "+strconv.Itoa(m))
		}
		for _, c := range []string{"tc/8/1/4", "tc/8/2/2", "tc/4/4/8/np"} {
			fmt.Fprintf(&sb, "\n  %-14s", c)
			for range ms {
				fmt.Fprintf(&sb, "%12s", []string{fmt.Sprintf("%.3f", 2+30*rng.Float64()), "illegal", "wrong", "-"}[rng.IntN(4)])
			}
		}
		sb.WriteString("\n")
	}
	sb.WriteString("\n## picked table (/out/bigm_table.tsv)\nlatent\tshard\tmt\tfamily\twarps\tksplit\tcluster\tl2_prefetch\tmedian_us\n")
	for _, shard := range shards {
		for _, m := range ms {
			fmt.Fprintf(&sb, "%d\t%d\t%d\ttc\t8\t1\t4\t16777216\t%.3f\n", latent, shard, m, 2+30*rng.Float64())
		}
	}
	sb.WriteString("\n## the picked table against PyTorch mm + add and the HBM floor\n" +
		"tprun: one run of the picked table per shard; PyTorch: mm + add (bf16) in a CUDA graph over the same weight\n" +
		"rotation; floor: (weight shard + latent + residual + output) bytes / copy bandwidth. Targets (decode batches\n" +
		"up to 128): shards 7168 and 3584 within 1.15 x the floor, shards 896 and 448 at least 3 x faster than PyTorch.\n")
	const format = "%6v %4v %9v %10v %9v %12v %13v %16v %4v\n"
	fmt.Fprintf(&sb, format, "shard", "M", "tprun µs", "PyTorch µs", "floor µs", "tprun/floor", "PyTorch/tprun", "target", "met")
	var rows []BigmRow
	for si, shard := range shards {
		for mi, m := range ms {
			// Hundredths, so that the printed figure is the figure.
			floor := math.Round(2*float64(shard*latent+m*latent+2*m*shard)/(bw*1e12)*1e6*100) / 100
			r := BigmRow{Shard: shard, M: m, Floor: floor,
				Ours:  math.Round(floor*(1+rng.Float64())*100) / 100,
				Torch: math.Round((floor+5+20*rng.Float64())*100) / 100}
			met := ""
			if shard == noRun {
				r.Ours, r.Floor = math.NaN(), math.NaN()
			} else if [2]int{si, mi} == wrong {
				r.Ours, met = math.NaN(), "WRONG"
			}
			if [2]int{si, mi} == noTorch {
				r.Torch = math.NaN()
			}
			ratio, speed := r.Ours/r.Floor, r.Torch/r.Ours
			target, ok := ">= 3 x PyTorch", speed >= 3
			if shard >= 3584 {
				target, ok = "<= 1.15 x floor", ratio <= 1.15
			}
			switch {
			case met != "":
			case ok:
				met = "yes"
			case !math.IsNaN(r.Ours):
				met = "no"
			default:
				met = "-"
			}
			fmt.Fprintf(&sb, format, shard, m, cell(r.Ours, "%.2f"), cell(r.Torch, "%.2f"), cell(r.Floor, "%.2f"),
				cell(ratio, "%.3f"), cell(speed, "%.2f"), target, met)
			rows = append(rows, r)
		}
	}
	sb.WriteString("\nevery target met: no\n")
	return bigmSample{text: sb.String(), rows: rows, date: date.Format("2006-01-02"), latent: strconv.Itoa(latent)}
}

// sameFigure: equal, or both missing.
func sameFigure(a, b float64) bool { return a == b || math.IsNaN(a) && math.IsNaN(b) }

func sameBigmRow(a, b BigmRow) bool {
	return a.Shard == b.Shard && a.M == b.M && sameFigure(a.Ours, b.Ours) && sameFigure(a.Torch, b.Torch) && sameFigure(a.Floor, b.Floor)
}

// A larger-M sweep report reads back as the comparison's figures, a "-"
// as NaN, whatever the sections before it hold; its header gives the
// title's GPU, date and latent.
func TestParseBigmReport(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for range 20 {
		sample := newBigmSample(rng)
		got, err := ParseBigm(strings.NewReader(sample.text))
		if err != nil {
			t.Fatalf("%v\n%s", err, sample.text)
		}
		if len(got) != len(sample.rows) {
			t.Fatalf("%d rows, want %d:\n%s", len(got), len(sample.rows), sample.text)
		}
		missing := 0
		for i, want := range sample.rows {
			if !sameBigmRow(got[i], want) {
				t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], want)
			}
			for _, v := range []float64{got[i].Ours, got[i].Torch, got[i].Floor} {
				if math.IsNaN(v) {
					missing++
				} else if !(v > 0) {
					t.Errorf("row %d: figure %v", i, v)
				}
			}
		}
		// A shard without its run (4 tprun, 4 floor), a wrong row on
		// another shard, a row without PyTorch.
		if missing != 10 {
			t.Errorf("%d missing figures, want 10", missing)
		}
		want := Meta{Date: sample.date, GPU: "NVIDIA H200", GPUs: 1, TP: "1", Shard: "?", Latent: sample.latent}
		if m := ReadMeta([]byte(sample.text)); m != want {
			t.Errorf("meta %+v, want %+v", m, want)
		}
		if t.Failed() {
			t.Fatalf("the report:\n%s", sample.text)
		}
	}
}

// A missing figure breaks its line and is no point at all, never one at
// zero.
func TestSegmentsLeaveGaps(t *testing.T) {
	nan := math.NaN()
	ms := []int{16, 32, 64, 128}
	for _, tc := range []struct {
		desc string
		ys   []float64
		want [][]int // the Ms of each segment
	}{
		{"all present", []float64{3, 4, 5, 6}, [][]int{{16, 32, 64, 128}}},
		{"a gap inside", []float64{3, nan, 5, 6}, [][]int{{16}, {64, 128}}},
		{"gaps at both ends", []float64{nan, 4, 5, nan}, [][]int{{32, 64}}},
		{"every other", []float64{3, nan, 5, nan}, [][]int{{16}, {64}}},
		{"none", []float64{nan, nan, nan, nan}, nil},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			segs := segments(ms, tc.ys)
			if len(segs) != len(tc.want) {
				t.Fatalf("%d segments %v, want %v", len(segs), segs, tc.want)
			}
			for i, seg := range segs {
				if len(seg) != len(tc.want[i]) {
					t.Fatalf("segment %d is %v, want Ms %v", i, seg, tc.want[i])
				}
				for j, xy := range seg {
					k := slices.Index(ms, tc.want[i][j])
					if xy.X != float64(tc.want[i][j]) || xy.Y != tc.ys[k] {
						t.Errorf("segment %d point %d is %v, want (%d, %v)", i, j, xy, tc.want[i][j], tc.ys[k])
					}
				}
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	kernelHead := "| latent | shard | M | ours µs | floor µs | torch µs |\n| --- | --- | --- | --- | --- | --- |\n"
	stepHead := "  M   ours µs  floor µs  torch µs  allgather µs\n"
	bigmHead := "## the picked table against PyTorch mm + add and the HBM floor\nprose\n" +
		" shard    M  tprun µs PyTorch µs  floor µs  tprun/floor PyTorch/tprun           target  met\n"
	for _, tc := range []struct {
		desc, in string
		step     bool
		bigm     bool
		want     string // in the error
		noTable  bool   // errors.Is(err, ErrNoTable)
	}{
		{desc: "kernel: empty", in: "", want: "no results table", noTable: true},
		{desc: "kernel: a table without the torch column", in: "| latent | shard | M | ours µs | floor µs |\n| --- |\n| 1 | 8 | 1 | 2 | 3 |\n", noTable: true, want: "torch µs"},
		{desc: "kernel: a header without rows", in: kernelHead + "\ntext\n", noTable: true, want: "no results table"},
		{desc: "kernel: a word for a time", in: kernelHead + "| 3584 | 896 | 1 | fast | 1.52 | 9.65 |\n", want: `column "ours µs": "fast"`},
		{desc: "kernel: M zero", in: kernelHead + "| 3584 | 896 | 0 | 2.2 | 1.52 | 9.65 |\n", want: `column "M": "0"`},
		{desc: "kernel: a short row", in: kernelHead + "| 3584 | 896 | 1 | 2.2 |\n", want: `column "floor µs": ""`},
		{desc: "step: empty", in: "", step: true, noTable: true, want: "no results table"},
		{desc: "step: no allgather column", in: "  M   ours µs  floor µs  torch µs\n  1  7.1  6.0  20.1\n", step: true, noTable: true, want: "allgather µs"},
		{desc: "step: a negative time", in: stepHead + "  1  -7.1  6.0  20.1  12.0\n", step: true, want: `column "ours µs": "-7.1"`},
		{desc: "step: a short row", in: stepHead + "  1  7.1  6.0\n", step: true, want: `column "torch µs": ""`},
		{desc: "bigm: empty", in: "", bigm: true, noTable: true, want: "the picked table against"},
		{desc: "bigm: the table without its heading", in: strings.SplitN(bigmHead, "\n", 3)[2] + "  7168   16  12.40  18.20  12.13  1.022  1.47  <= 1.15 x floor  yes\n",
			bigm: true, noTable: true, want: "the picked table against"},
		{desc: "bigm: the heading without rows", in: bigmHead + "\nevery target met: no\n", bigm: true, noTable: true, want: "tprun µs, PyTorch µs, floor µs"},
		{desc: "bigm: no floor column", in: strings.Replace(bigmHead, "floor µs", "bound µs", 1) + "  7168   16  12.40  18.20  12.13  1.022  1.47  <= 1.15 x floor  yes\n",
			bigm: true, noTable: true, want: "floor µs"},
		{desc: "bigm: a word for a time", in: bigmHead + "  7168   16  fast  18.20  12.13  -  -  <= 1.15 x floor  -\n", bigm: true, want: `line 4: column "tprun µs": "fast"`},
		{desc: "bigm: a missing M", in: bigmHead + "  7168    -  12.40  18.20  12.13  1.022  1.47  <= 1.15 x floor  yes\n", bigm: true, want: `column "M": "-"`},
		{desc: "bigm: a zero floor", in: bigmHead + "  448  128  4.40  18.20  0.00  -  4.14  >= 3 x PyTorch  yes\n", bigm: true, want: `column "floor µs": "0.00"`},
		{desc: "bigm: a short row", in: bigmHead + "  448  128  4.40\n", bigm: true, want: `column "PyTorch µs": ""`},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			var err error
			switch {
			case tc.step:
				_, err = ParseStep(strings.NewReader(tc.in))
			case tc.bigm:
				_, err = ParseBigm(strings.NewReader(tc.in))
			default:
				_, err = ParseKernel(strings.NewReader(tc.in))
			}
			if err == nil {
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if errors.Is(err, ErrNoTable) != tc.noTable {
				t.Errorf("errors.Is(%q, ErrNoTable) = %v, want %v", err, !tc.noTable, tc.noTable)
			}
		})
	}
}

// hasColor reports whether img has a pixel within a few steps of c.
func hasColor(img image.Image, c color.RGBA) bool {
	near := func(a uint32, b uint8) bool { d := int(a>>8) - int(b); return d > -8 && d < 8 }
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			r, g, bl, _ := img.At(x, y).RGBA()
			if near(r, c.R) && near(g, c.G) && near(bl, c.B) {
				return true
			}
		}
	}
	return false
}

// writeBigmSample writes a fresh larger-M sweep report into a folder of
// its own and returns its path.
func writeBigmSample(t *testing.T) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "bigm-sweep-h200-x.txt")
	sample := newBigmSample(rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())))
	if err := os.WriteFile(path, []byte(sample.text), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// The command draws both committed benches and a larger-M sweep report
// into PNGs that decode, at the size the layout asks for, with every
// line's colour in them.
func TestRunDrawsEveryFigure(t *testing.T) {
	dir := t.TempDir()
	kOut, sOut, bOut := filepath.Join(dir, "k.png"), filepath.Join(dir, "s.png"), filepath.Join(dir, "b.png")
	var log bytes.Buffer
	if err := run([]string{"-kernel", kernelBench, "-kernel-out", kOut, "-step", stepBench, "-step-out", sOut,
		"-bigm", writeBigmSample(t), "-bigm-out", bOut}, &log); err != nil {
		t.Fatalf("%v\n%s", err, &log)
	}
	for _, tc := range []struct {
		path   string
		w, h   int
		colors []color.RGBA
	}{
		// Kernel: five shards in 3 × 2 tiles of 330 × 270 pt under a 34 pt title, at 96 dpi.
		{kOut, 1320, 765, []color.RGBA{oursColor, torchColor, floorColor}},
		// Step: the panel and its key, 2 × 420 pt by 330 + 34 pt.
		{sOut, 1120, 485, []color.RGBA{oursColor, torchColor, ncclColor, floorColor}},
		// Larger M: four shards in 3 × 2 tiles, as the kernel plot.
		{bOut, 1320, 765, []color.RGBA{oursColor, torchColor, floorColor}},
	} {
		f, err := os.Open(tc.path)
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", tc.path, err)
		}
		if b := img.Bounds(); b.Dx() != tc.w || b.Dy() != tc.h {
			t.Errorf("%s is %d × %d, want %d × %d", tc.path, b.Dx(), b.Dy(), tc.w, tc.h)
		}
		for _, c := range tc.colors {
			if !hasColor(img, c) {
				t.Errorf("%s has no pixel of colour %v", tc.path, c)
			}
		}
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 3 {
		t.Errorf("%d files in the output folder, want the three PNGs (no temporary file left)", len(entries))
	}
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
	// A report of a sweep cut short before its comparison.
	cut := filepath.Join(t.TempDir(), "bigm-sweep-h200-cut.txt")
	text, _, _ := strings.Cut(newBigmSample(rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))).text, "\n## the picked table against")
	if err := os.WriteFile(cut, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		desc string
		args []string
		want string
	}{
		{"nothing to draw", nil, "nothing to draw"},
		{"a stray argument", []string{"-kernel", kernelBench, "x.txt"}, `unexpected argument "x.txt"`},
		{"a missing file", []string{"-step", filepath.Join(dir, "none.txt")}, "-step: open"},
		{"a step file as the kernel bench", []string{"-kernel", stepBench, "-kernel-out", filepath.Join(dir, "k.png")}, "no results table"},
		{"a latent the bench lacks", []string{"-kernel", kernelBench, "-latent", "999", "-kernel-out", filepath.Join(dir, "k.png")}, "no rows at latent 999"},
		{"a report without the comparison", []string{"-bigm", cut, "-bigm-out", filepath.Join(dir, "b.png")},
			"-bigm " + cut + ": larger-M sweep: no results table: want a line starting \"## the picked table against\""},
		{"a kernel bench as the larger-M report", []string{"-bigm", kernelBench, "-bigm-out", filepath.Join(dir, "b.png")}, "-bigm " + kernelBench + ": larger-M sweep: no results table"},
		{"a missing larger-M report", []string{"-bigm", filepath.Join(dir, "none.txt")}, "-bigm: open"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			var log bytes.Buffer
			err := run(tc.args, &log)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("run(%q) = %v, want an error containing %q", tc.args, err, tc.want)
			}
		})
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("failed runs left %d files behind", len(entries))
	}
}
