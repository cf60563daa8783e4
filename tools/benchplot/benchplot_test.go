package main

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
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
	want := Meta{Date: "2026-11-30", GPU: "NVIDIA H200", GPUs: 2, TP: "2", Shard: "3584"}
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

func TestParseErrors(t *testing.T) {
	kernelHead := "| latent | shard | M | ours µs | floor µs | torch µs |\n| --- | --- | --- | --- | --- | --- |\n"
	stepHead := "  M   ours µs  floor µs  torch µs  allgather µs\n"
	for _, tc := range []struct {
		desc, in string
		step     bool
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
	} {
		t.Run(tc.desc, func(t *testing.T) {
			var err error
			if tc.step {
				_, err = ParseStep(strings.NewReader(tc.in))
			} else {
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

// The command draws both committed benches into PNGs that decode, at the
// size the layout asks for, with every line's colour in them.
func TestRunDrawsBothFigures(t *testing.T) {
	dir := t.TempDir()
	kOut, sOut := filepath.Join(dir, "k.png"), filepath.Join(dir, "s.png")
	var log bytes.Buffer
	if err := run([]string{"-kernel", kernelBench, "-kernel-out", kOut, "-step", stepBench, "-step-out", sOut}, &log); err != nil {
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
	if len(entries) != 2 {
		t.Errorf("%d files in the output folder, want the two PNGs (no temporary file left)", len(entries))
	}
}

func TestRunRefuses(t *testing.T) {
	dir := t.TempDir()
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
