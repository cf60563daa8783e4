// Command benchplot draws tprun's bench results as PNG plots of µs per step
// against M: from a kernel bench (scripts/bench-kernel's
// bench/kernel-h200-<date>.txt) one panel per shard with tprun's kernel,
// PyTorch mm+add and the HBM floor; from a step bench (scripts/bench-step's
// bench/step-h200x<N>-<date>.txt) the fused step with PyTorch
// mm+add+all_gather_into_tensor, the NCCL all-gather alone and the floor;
// from a larger-M sweep (scripts/bigm-sweep's
// bench/bigm-sweep-h200-<date>.txt) its comparison table, one panel per
// shard with tprun's step at M 16..128, PyTorch mm+add and the HBM floor,
// a "-" in the report left as a gap.
//
//	go run . -kernel ../../bench/kernel-h200-2026-11-30-1.txt -kernel-out ../../docs/perf-kernel.png \
//	         -step ../../bench/step-h200x2-2026-11-30-1.txt -step-out ../../docs/perf-step.png \
//	         -bigm ../../bench/bigm-sweep-h200-<date>.txt -bigm-out ../../docs/perf-bigm.png
//
// It lives in a module of its own so that the plotting library is no
// dependency of tprun itself.
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

func main() {
	if err := run(os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "benchplot:", err)
		os.Exit(1)
	}
}

func run(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("benchplot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	kernelIn := fs.String("kernel", "", "a kernel bench `file` (scripts/bench-kernel's Markdown table)")
	kernelOut := fs.String("kernel-out", "perf-kernel.png", "the kernel plot's PNG `file`")
	latent := fs.Int("latent", 3584, "the latent dimension whose shards the kernel plot shows")
	stepIn := fs.String("step", "", "a step bench `file` (scripts/bench-step's table)")
	stepOut := fs.String("step-out", "perf-step.png", "the step plot's PNG `file`")
	bigmIn := fs.String("bigm", "", "a larger-M sweep `file` (scripts/bigm-sweep's report)")
	bigmOut := fs.String("bigm-out", "perf-bigm.png", "the larger-M plot's PNG `file`")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q (the inputs are -kernel, -step and -bigm)", fs.Arg(0))
	}
	if *kernelIn == "" && *stepIn == "" && *bigmIn == "" {
		return errors.New("nothing to draw: give any of -kernel FILE, -step FILE and -bigm FILE")
	}
	if *kernelIn != "" {
		if err := drawKernel(*kernelIn, *kernelOut, *latent); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "benchplot: %s from %s\n", *kernelOut, *kernelIn)
	}
	if *stepIn != "" {
		if err := drawStep(*stepIn, *stepOut); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "benchplot: %s from %s\n", *stepOut, *stepIn)
	}
	if *bigmIn != "" {
		if err := drawBigm(*bigmIn, *bigmOut); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "benchplot: %s from %s\n", *bigmOut, *bigmIn)
	}
	return nil
}

func drawKernel(in, out string, latent int) error {
	return drawFile("kernel", in, out, ParseKernel, func(w io.Writer, rows []KernelRow, m Meta, source string) error {
		title := fmt.Sprintf("Kernel alone, latent %d: µs per launch against M (%s, %s)", latent, m.GPU, m.Date)
		return KernelFigure(w, rows, latent, title, source)
	})
}

func drawStep(in, out string) error {
	return drawFile("step", in, out, ParseStep, func(w io.Writer, rows []StepRow, m Meta, source string) error {
		title := fmt.Sprintf("Fused step, tp %s, shard %s: µs per step against M (%d × %s, %s)", m.TP, m.Shard, m.GPUs, m.GPU, m.Date)
		return StepFigure(w, rows, title, source)
	})
}

func drawBigm(in, out string) error {
	return drawFile("bigm", in, out, ParseBigm, func(w io.Writer, rows []BigmRow, m Meta, source string) error {
		title := fmt.Sprintf("Larger M, tp %s, latent %s: µs per step against M (%s, %s)", m.TP, m.Latent, m.GPU, m.Date)
		return BigmFigure(w, rows, title, source)
	})
}

// drawFile reads the bench file in (given with -flag), parses its rows
// and writes the PNG out that figure draws from them, the file's Meta and
// its benchName.
func drawFile[T any](flag, in, out string, parse func(io.Reader) ([]T, error),
	figure func(w io.Writer, rows []T, m Meta, source string) error) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return fmt.Errorf("-%s: %w", flag, err)
	}
	rows, err := parse(bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("-%s %s: %w", flag, in, err)
	}
	m := ReadMeta(b)
	return writeFile(out, func(w io.Writer) error { return figure(w, rows, m, benchName(in)) })
}

// benchName is how a key names an input: from its bench/ folder on, if it
// lies in one, else its base name.
func benchName(path string) string {
	slash := filepath.ToSlash(path)
	if i := strings.LastIndex(slash, "bench/"); i >= 0 {
		return slash[i:]
	}
	return filepath.Base(path)
}

// writeFile writes through a temporary file, so a failed draw leaves no
// half-written PNG behind.
func writeFile(path string, write func(io.Writer) error) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".benchplot-*.png")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil { // CreateTemp makes it 0600
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Meta is what the plot titles take from a bench file's header.
type Meta struct {
	Date      string // YYYY-MM-DD of the "date:" line
	GPU       string // the first GPU's name, e.g. "NVIDIA H200"
	GPUs      int    // GPUs listed under "machine:"
	TP, Shard string // from "tp N" in the first line and "shard N" in the shape line (step benches)
	Latent    string // from the first "--latent N" (the commands of step benches and larger-M sweeps)
}

var (
	dateRe   = regexp.MustCompile(`(?m)^date: (\d{4}-\d{2}-\d{2})`)
	gpuRe    = regexp.MustCompile(`GPU \d+: (NVIDIA [^(]+?) \(UUID`)
	tpRe     = regexp.MustCompile(`\btp (\d+)\b`)
	shardRe  = regexp.MustCompile(`(?m)^shape:.*\bshard (\d+)`)
	latentRe = regexp.MustCompile(`--latent (\d+)\b`)
)

// ReadMeta reads the header fields a bench file has; missing ones read "?".
func ReadMeta(b []byte) Meta {
	m := Meta{Date: "?", GPU: "?", TP: "?", Shard: "?", Latent: "?"}
	if s := dateRe.FindSubmatch(b); s != nil {
		m.Date = string(s[1])
	}
	gpus := gpuRe.FindAllSubmatch(b, -1)
	if len(gpus) > 0 {
		m.GPU = strings.TrimSpace(string(gpus[0][1]))
	}
	m.GPUs = len(gpus)
	first, _, _ := bytes.Cut(b, []byte("\n"))
	if s := tpRe.FindSubmatch(first); s != nil {
		m.TP = string(s[1])
	}
	if s := shardRe.FindSubmatch(b); s != nil {
		m.Shard = string(s[1])
	}
	if s := latentRe.FindSubmatch(b); s != nil {
		m.Latent = string(s[1])
	}
	return m
}
