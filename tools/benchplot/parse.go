package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// ErrNoTable: the input holds no results table of the expected kind.
var ErrNoTable = errors.New("no results table")

// KernelRow is one row of a kernel bench (scripts/bench-kernel writes
// bench/kernel-h200-<date>.txt): the skinny kernel alone on one GPU against
// PyTorch mm+add, per (latent, shard, M).
type KernelRow struct {
	Latent, Shard, M int
	Config           string  // the launch config, as the bench writes it
	Ours             float64 // µs per launch, median
	Floor            float64 // µs: weight bytes / copy bandwidth of the same run
	Torch            float64 // µs: PyTorch mm+add, median
}

// StepRow is one row of a step bench (scripts/bench-step writes
// bench/step-h200x<N>-<date>.txt): the fused step across N GPUs against
// PyTorch mm+add+NCCL all_gather_into_tensor, per M.
type StepRow struct {
	M         int
	Ours      float64 // µs per step: the slowest rank's median
	Floor     float64 // µs: shard weight bytes / copy bandwidth of the same run
	Torch     float64 // µs: PyTorch mm+add+all_gather_into_tensor, median
	AllGather float64 // µs: the NCCL all-gather alone, median
}

// BigmRow is one row of a larger-M sweep's comparison (scripts/bigm-sweep
// writes bench/bigm-sweep-h200-<date>.txt): the step at tp 1 with the
// sweep's picked launch table against PyTorch mm+add and the HBM floor, per
// (shard, M). A figure the report gives as "-" (no run, a wrong block, no
// bandwidth measured) is NaN, so that a plot leaves a gap rather than a
// zero.
type BigmRow struct {
	Shard, M int
	Ours     float64 // µs per step, the picked table's run
	Torch    float64 // µs: PyTorch mm+add, median
	Floor    float64 // µs: (weight shard + latent + residual + output) bytes / copy bandwidth of the same run
}

// kernelColumns are the headers ParseKernel needs, as the bench writes them.
var kernelColumns = []string{"latent", "shard", "M", "ours µs", "floor µs", "torch µs"}

// ParseKernel reads the Markdown results table of a kernel bench: the first
// line whose cells include every column of kernelColumns is the header, the
// rows follow it (after the |---| line) up to the first line that is not a
// table row. The config column is the one whose header starts with
// "config", if there is one.
func ParseKernel(r io.Reader) ([]KernelRow, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	var col map[string]int
	var rows []KernelRow
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if !strings.HasPrefix(text, "|") {
			if col != nil {
				break // the table has ended
			}
			continue
		}
		cells := splitRow(text)
		if col == nil {
			col = kernelHeader(cells)
			continue
		}
		if isRule(cells) {
			continue
		}
		row, err := kernelRow(cells, col)
		if err != nil {
			return nil, fmt.Errorf("kernel bench line %d: %w", line, err)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("kernel bench: %w", err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("kernel bench: %w: want a Markdown table with columns %s", ErrNoTable, strings.Join(kernelColumns, ", "))
	}
	return rows, nil
}

// splitRow splits "| a | b |" into its trimmed cells.
func splitRow(text string) []string {
	text = strings.TrimSuffix(strings.TrimPrefix(text, "|"), "|")
	cells := strings.Split(text, "|")
	for i := range cells {
		cells[i] = strings.TrimSpace(cells[i])
	}
	return cells
}

// kernelHeader maps column names to cell indexes, or returns nil when cells
// is not the kernel table's header.
func kernelHeader(cells []string) map[string]int {
	col := map[string]int{}
	for i, c := range cells {
		if slices.Contains(kernelColumns, c) {
			col[c] = i
		}
		if strings.HasPrefix(c, "config") {
			col["config"] = i
		}
	}
	for _, c := range kernelColumns {
		if _, ok := col[c]; !ok {
			return nil
		}
	}
	return col
}

// isRule reports a Markdown header rule (| --- | ---: |).
func isRule(cells []string) bool {
	for _, c := range cells {
		if strings.Trim(c, "-: ") != "" {
			return false
		}
	}
	return true
}

func kernelRow(cells []string, col map[string]int) (KernelRow, error) {
	var row KernelRow
	rc := rowCells{cells, col}
	err := rc.fill([]intCol{{"latent", &row.Latent}, {"shard", &row.Shard}, {"M", &row.M}},
		[]floatCol{{"ours µs", &row.Ours}, {"floor µs", &row.Floor}, {"torch µs", &row.Torch}}, false)
	row.Config = rc.get("config")
	return row, err
}

// rowCells reads one table row's cells by column name.
type rowCells struct {
	cells []string
	col   map[string]int
}

func (r rowCells) get(name string) string {
	if i, ok := r.col[name]; ok && i < len(r.cells) {
		return r.cells[i]
	}
	return ""
}

type intCol struct {
	name string
	dst  *int
}

type floatCol struct {
	name string
	dst  *float64
}

// fill parses the named columns into their destinations: positive
// integers and positive numbers; with dashNaN a float cell "-" (no
// figure) reads NaN.
func (r rowCells) fill(ints []intCol, floats []floatCol, dashNaN bool) error {
	var err error
	for _, f := range ints {
		if *f.dst, err = positiveInt(f.name, r.get(f.name)); err != nil {
			return err
		}
	}
	for _, f := range floats {
		if dashNaN && r.get(f.name) == "-" {
			*f.dst = math.NaN()
			continue
		}
		if *f.dst, err = positiveFloat(f.name, r.get(f.name)); err != nil {
			return err
		}
	}
	return nil
}

func positiveInt(name, s string) (int, error) {
	v, err := strconv.Atoi(s)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("column %q: %q is not a positive integer", name, s)
	}
	return v, nil
}

func positiveFloat(name, s string) (float64, error) {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || !(v > 0) {
		return 0, fmt.Errorf("column %q: %q is not a positive number", name, s)
	}
	return v, nil
}

// stepColumns are the headers ParseStep needs, as the bench writes them
// (a unit "µs" is part of the column name before it).
var stepColumns = []string{"M", "ours µs", "floor µs", "torch µs", "allgather µs"}

// ParseStep reads the results table of a step bench: a header line of
// space-separated column names (a "µs" joins the name before it) that
// includes every column of stepColumns, then one row per M, up to the first
// blank or non-numeric line.
func ParseStep(r io.Reader) ([]StepRow, error) {
	rows, err := parseSpaced(r, "step bench", nil, stepColumns, stepRow)
	if errors.Is(err, ErrNoTable) {
		return nil, fmt.Errorf("step bench: %w: want a table with columns %s", ErrNoTable, strings.Join(stepColumns, ", "))
	}
	return rows, err
}

// parseSpaced reads a table of space-separated cells: once start accepts a
// line (from the first line when start is nil), a header line that names
// every column of columns, then one row per line, up to the first blank
// or non-numeric line. what names the table in errors; ErrNoTable when no
// row was read.
func parseSpaced[T any](r io.Reader, what string, start func(string) bool, columns []string,
	parse func([]string, map[string]int) (T, error)) ([]T, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	section := start == nil
	var col map[string]int
	var rows []T
	line := 0
	for sc.Scan() {
		line++
		if !section {
			section = start(sc.Text())
			continue
		}
		fields := strings.Fields(sc.Text())
		if col == nil {
			col = spacedHeader(fields, columns)
			continue
		}
		if len(fields) == 0 {
			break
		}
		if _, err := strconv.Atoi(fields[0]); err != nil {
			break
		}
		row, err := parse(fields, col)
		if err != nil {
			return nil, fmt.Errorf("%s line %d: %w", what, line, err)
		}
		rows = append(rows, row)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if len(rows) == 0 {
		return nil, ErrNoTable
	}
	return rows, nil
}

// spacedHeader maps the names of a header of space-separated column names
// (a "µs" joins the name before it) to field indexes, or returns nil when
// the header does not start with columns[0] or lacks one of columns.
func spacedHeader(fields, columns []string) map[string]int {
	if len(fields) == 0 || fields[0] != columns[0] {
		return nil
	}
	var names []string
	for _, f := range fields {
		if f == "µs" && len(names) > 0 {
			names[len(names)-1] += " µs"
			continue
		}
		names = append(names, f)
	}
	col := map[string]int{}
	for i, n := range names {
		col[n] = i
	}
	for _, c := range columns {
		if _, ok := col[c]; !ok {
			return nil
		}
	}
	return col
}

func stepRow(fields []string, col map[string]int) (StepRow, error) {
	var row StepRow
	err := rowCells{fields, col}.fill([]intCol{{"M", &row.M}},
		[]floatCol{{"ours µs", &row.Ours}, {"floor µs", &row.Floor}, {"torch µs", &row.Torch}, {"allgather µs", &row.AllGather}}, false)
	return row, err
}

// bigmHeading starts the line above a larger-M sweep's comparison table;
// the report's other tables (the sweep, the picked launch table) have
// shards and M columns of their own, so only this section is read.
const bigmHeading = "## the picked table against"

// bigmColumns are the headers ParseBigm needs, as the sweep writes them (a
// unit "µs" is part of the column name before it). They all precede the
// target column, whose cells hold spaces.
var bigmColumns = []string{"shard", "M", "tprun µs", "PyTorch µs", "floor µs"}

// ParseBigm reads the comparison table of a larger-M sweep report: after
// the line that starts with bigmHeading, a header line of space-separated
// column names that includes every column of bigmColumns, then one row per
// (shard, M), up to the first blank or non-numeric line. A "-" cell reads
// NaN.
func ParseBigm(r io.Reader) ([]BigmRow, error) {
	atHeading := func(line string) bool { return strings.HasPrefix(line, bigmHeading) }
	rows, err := parseSpaced(r, "larger-M sweep", atHeading, bigmColumns, bigmRow)
	if errors.Is(err, ErrNoTable) {
		return nil, fmt.Errorf("larger-M sweep: %w: want a line starting %q, then a table with columns %s",
			ErrNoTable, bigmHeading, strings.Join(bigmColumns, ", "))
	}
	return rows, err
}

func bigmRow(fields []string, col map[string]int) (BigmRow, error) {
	var row BigmRow
	err := rowCells{fields, col}.fill([]intCol{{"shard", &row.Shard}, {"M", &row.M}},
		[]floatCol{{"tprun µs", &row.Ours}, {"PyTorch µs", &row.Torch}, {"floor µs", &row.Floor}}, true)
	return row, err
}
