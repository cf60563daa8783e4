package main

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"slices"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// series is one line of a panel.
type series struct {
	name  string
	ys    []float64 // indexed like the panel's ms
	color color.Color
	dash  []vg.Length
	glyph draw.GlyphDrawer
}

var (
	oursColor  = color.RGBA{R: 0x1f, G: 0x6f, B: 0xc5, A: 0xff} // blue
	torchColor = color.RGBA{R: 0xd6, G: 0x45, B: 0x1b, A: 0xff} // red
	ncclColor  = color.RGBA{R: 0xe8, G: 0x9f, B: 0x3a, A: 0xff} // orange
	floorColor = color.RGBA{R: 0x55, G: 0x55, B: 0x55, A: 0xff} // grey
)

// style returns the line and the points that draw s (also its legend key).
func style(s series, xys plotter.XYs) (*plotter.Line, *plotter.Scatter, error) {
	l, pts, err := plotter.NewLinePoints(xys)
	if err != nil {
		return nil, nil, err
	}
	l.Color = s.color
	l.Width = vg.Points(2)
	l.Dashes = s.dash
	pts.Color = s.color
	pts.Shape = s.glyph
	pts.Radius = vg.Points(2.5)
	return l, pts, nil
}

// niceTicks marks round values (1, 2 or 5 times a power of ten apart),
// about five to an axis, labelled without trailing zeros.
type niceTicks struct{}

func (niceTicks) Ticks(lo, hi float64) []plot.Tick {
	if !(hi > lo) {
		return nil
	}
	step := math.Pow(10, math.Floor(math.Log10((hi-lo)/5)))
	for _, f := range []float64{1, 2, 5, 10} {
		if (hi-lo)/(step*f) <= 6 {
			step *= f
			break
		}
	}
	var ticks []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+step*1e-9; v += step {
		ticks = append(ticks, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 4, 64)})
	}
	return ticks
}

// panel is one plot of µs against M; with legend false it has no key of
// its own (the figure draws one beside the panels). With logM the M axis
// is logarithmic, so that Ms that double from one to the next lie evenly
// apart. A NaN in a line's ys is a gap in it.
func panel(title string, ms []int, lines []series, legend, logM bool) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text = "M (rows per step)"
	p.Y.Label.Text = "µs"
	top := 0.0
	for _, s := range lines {
		for _, y := range s.ys {
			if y > top { // false for NaN
				top = y
			}
		}
	}
	if top == 0 {
		top = 1 // nothing to draw: an empty panel still has an axis
	}
	// From zero, so that the heights compare honestly; a legend in the
	// panel needs headroom above the highest line.
	p.Y.Min, p.Y.Max = 0, top*1.15
	if legend {
		p.Y.Max = top * 1.5
	}
	p.Y.Tick.Marker = niceTicks{}
	p.X.Min, p.X.Max = float64(ms[0])-0.5, float64(ms[len(ms)-1])+0.5
	if logM {
		p.X.Scale = plot.LogScale{}
		p.X.Min, p.X.Max = float64(ms[0])/1.25, float64(ms[len(ms)-1])*1.25
	}
	var ticks plot.ConstantTicks
	for _, m := range ms {
		ticks = append(ticks, plot.Tick{Value: float64(m), Label: strconv.Itoa(m)})
	}
	p.X.Tick.Marker = ticks
	p.Add(plotter.NewGrid())
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	for _, s := range lines {
		for _, xys := range segments(ms, s.ys) {
			l, pts, err := style(s, xys)
			if err != nil {
				return nil, fmt.Errorf("%s, %s: %w", title, s.name, err)
			}
			p.Add(l, pts)
		}
		if legend {
			l, pts, err := style(s, nil)
			if err != nil {
				return nil, fmt.Errorf("%s, %s: %w", title, s.name, err)
			}
			p.Legend.Add(s.name, l, pts)
		}
	}
	return p, nil
}

// segments splits a line's points (ys at ms) into runs of present values:
// a missing value (NaN) breaks the line, and is never drawn as a point.
func segments(ms []int, ys []float64) []plotter.XYs {
	var segs []plotter.XYs
	var cur plotter.XYs
	for i, m := range ms {
		if math.IsNaN(ys[i]) {
			if cur != nil {
				segs, cur = append(segs, cur), nil
			}
			continue
		}
		cur = append(cur, plotter.XY{X: float64(m), Y: ys[i]})
	}
	if cur != nil {
		segs = append(segs, cur)
	}
	return segs
}

// key is what a figure draws in its first empty tile: the lines' legend
// and notes on what they are.
type key struct {
	lines []series
	notes []string
}

// figure lays the panels out in a grid of cols columns under a title,
// draws k in the first empty tile (if there is one and k is not nil), and
// writes the PNG.
func figure(w io.Writer, title string, panels []*plot.Plot, cols int, tileW, tileH vg.Length, k *key) error {
	rows := (len(panels) + cols - 1) / cols
	titleH := vg.Points(34)
	img := vgimg.New(tileW*vg.Length(cols), tileH*vg.Length(rows)+titleH)
	dc := draw.New(img)

	dc.FillText(textStyle(15, draw.XCenter), vg.Point{X: (dc.Min.X + dc.Max.X) / 2, Y: dc.Max.Y - titleH/2}, title)

	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
		for c := range cols {
			if i := r*cols + c; i < len(panels) {
				grid[r][c] = panels[i]
			}
		}
	}
	tiles := draw.Tiles{Rows: rows, Cols: cols, PadTop: titleH, PadX: vg.Points(14), PadY: vg.Points(14),
		PadLeft: vg.Points(6), PadRight: vg.Points(10), PadBottom: vg.Points(6)}
	canvases := plot.Align(grid, tiles, dc)
	keyDrawn := k == nil
	for r := range grid {
		for c, p := range grid[r] {
			switch {
			case p != nil:
				p.Draw(canvases[r][c])
			case !keyDrawn:
				drawKey(tiles.At(dc, c, r), *k)
				keyDrawn = true
			}
		}
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w); err != nil {
		return fmt.Errorf("writing the PNG: %w", err)
	}
	return nil
}

func textStyle(size float64, align text.XAlignment) text.Style {
	return text.Style{
		Color:   color.Black,
		Font:    font.From(plot.DefaultFont, vg.Points(size)),
		XAlign:  align,
		YAlign:  draw.YCenter,
		Handler: plot.DefaultTextHandler,
	}
}

// drawKey draws a legend of k's lines at the top of c and its notes below,
// one line each.
func drawKey(c draw.Canvas, k key) {
	x := c.Min.X + vg.Points(24)
	y := c.Max.Y - vg.Points(36)
	sty := textStyle(13, draw.XLeft)
	for _, s := range k.lines {
		ls := draw.LineStyle{Color: s.color, Width: vg.Points(2), Dashes: s.dash}
		c.StrokeLine2(ls, x, y, x+vg.Points(44), y)
		c.DrawGlyph(draw.GlyphStyle{Color: s.color, Radius: vg.Points(3), Shape: s.glyph}, vg.Point{X: x + vg.Points(22), Y: y})
		c.FillText(sty, vg.Point{X: x + vg.Points(56), Y: y}, s.name)
		y -= vg.Points(22)
	}
	y -= vg.Points(10)
	sty = textStyle(11, draw.XLeft)
	for _, n := range k.notes {
		c.FillText(sty, vg.Point{X: x, Y: y}, n)
		y -= vg.Points(16)
	}
}

// KernelFigure draws one panel per shard of the given latent, largest shard
// first: tprun's kernel, PyTorch mm+add and the HBM floor against M.
// The key names source, the file the figures come from.
func KernelFigure(w io.Writer, rows []KernelRow, latent int, title, source string) error {
	byShard := map[int]map[int]shardPoint{}
	for _, r := range rows {
		if r.Latent != latent {
			continue
		}
		if byShard[r.Shard] == nil {
			byShard[r.Shard] = map[int]shardPoint{}
		}
		byShard[r.Shard][r.M] = shardPoint{ours: r.Ours, torch: r.Torch, floor: r.Floor}
	}
	if len(byShard) == 0 {
		return fmt.Errorf("kernel figure: %w: no rows at latent %d", ErrNoTable, latent)
	}
	return shardFigure(w, title, byShard, false, []string{
		"tprun: the skinny kernel with its",
		"    launch config from kernel/config_table.tsv",
		"PyTorch: torch.mm + add, bf16, in a CUDA graph",
		"HBM floor: weight bytes / copy bandwidth",
		"    measured in the same run",
		"Weights rotated through > 512 MiB; medians.",
		"",
		"From " + source,
	})
}

// BigmFigure draws one panel per shard of a larger-M sweep, largest shard
// first: tprun's step with the picked launch table, PyTorch mm+add and the
// HBM floor against M, on a logarithmic M axis. A missing figure is a gap
// in its line. The key names source, the file the figures come from.
func BigmFigure(w io.Writer, rows []BigmRow, title, source string) error {
	byShard := map[int]map[int]shardPoint{}
	for _, r := range rows {
		if byShard[r.Shard] == nil {
			byShard[r.Shard] = map[int]shardPoint{}
		}
		byShard[r.Shard][r.M] = shardPoint{ours: r.Ours, torch: r.Torch, floor: r.Floor}
	}
	if len(byShard) == 0 {
		return fmt.Errorf("larger-M figure: %w", ErrNoTable)
	}
	return shardFigure(w, title, byShard, true, []string{
		"tprun: the step at tp 1 (kernel, then the",
		"    receive) with the sweep's picked table",
		"PyTorch: torch.mm + add, bf16, in a CUDA graph",
		"HBM floor: (weight shard + latent + residual",
		"    + output) bytes / copy bandwidth",
		"    measured in the same run",
		"Weights rotated through >= 512 MiB; medians.",
		"A gap: the report has no figure there.",
		"",
		"From " + source,
	})
}

// shardPoint is what a shard panel draws at one M, in µs; NaN is missing.
type shardPoint struct{ ours, torch, floor float64 }

// shardFigure draws one panel per shard of byShard (shard -> M -> point),
// largest shard first, each with the lines of shardLines, and a key of
// those lines and notes.
func shardFigure(w io.Writer, title string, byShard map[int]map[int]shardPoint, logM bool, notes []string) error {
	shards := sortedKeys(byShard)
	slices.Reverse(shards)
	// Up to three panels a row; the key takes an empty tile where there is
	// one, else every panel carries its own legend.
	cols := min(len(shards), 3)
	keyTile := len(shards)%cols != 0
	var panels []*plot.Plot
	var lines []series
	for _, s := range shards {
		ms := sortedKeys(byShard[s])
		ours, torch, floor := make([]float64, len(ms)), make([]float64, len(ms)), make([]float64, len(ms))
		for i, m := range ms {
			pt := byShard[s][m]
			ours[i], torch[i], floor[i] = pt.ours, pt.torch, pt.floor
		}
		lines = shardLines(ours, torch, floor)
		p, err := panel(fmt.Sprintf("shard %d", s), ms, lines, !keyTile, logM)
		if err != nil {
			return err
		}
		panels = append(panels, p)
	}
	return figure(w, title, panels, cols, vg.Points(330), vg.Points(270), &key{lines: lines, notes: notes})
}

// StepFigure draws the fused step against M: tprun, PyTorch
// mm+add+all_gather_into_tensor, the NCCL all-gather alone and the HBM
// floor, with a key beside it that names source.
func StepFigure(w io.Writer, rows []StepRow, title, source string) error {
	byM := map[int]StepRow{}
	for _, r := range rows {
		byM[r.M] = r
	}
	if len(byM) == 0 {
		return fmt.Errorf("step figure: %w", ErrNoTable)
	}
	ms := sortedKeys(byM)
	ours, torch, ag, floor := make([]float64, len(ms)), make([]float64, len(ms)), make([]float64, len(ms)), make([]float64, len(ms))
	for i, m := range ms {
		r := byM[m]
		ours[i], torch[i], ag[i], floor[i] = r.Ours, r.Torch, r.AllGather, r.Floor
	}
	lines := []series{
		{name: "PyTorch mm+add+all_gather", ys: torch, color: torchColor, dash: []vg.Length{vg.Points(6), vg.Points(3)}, glyph: draw.SquareGlyph{}},
		{name: "NCCL all_gather alone", ys: ag, color: ncclColor, dash: []vg.Length{vg.Points(3), vg.Points(3)}, glyph: draw.PlusGlyph{}},
		{name: "tprun step", ys: ours, color: oursColor, glyph: draw.CircleGlyph{}},
		{name: "HBM floor", ys: floor, color: floorColor, dash: []vg.Length{vg.Points(2), vg.Points(2)}, glyph: draw.TriangleGlyph{}},
	}
	p, err := panel("", ms, lines, false, false)
	if err != nil {
		return err
	}
	k := &key{lines: lines, notes: []string{
		"tprun: skinny kernel, stores into every",
		"    rank's mailbox, fused receive, CUDA graphs",
		"PyTorch: torch.mm + add + NCCL",
		"    all_gather_into_tensor in a CUDA graph",
		"HBM floor: shard weight bytes / copy",
		"    bandwidth measured in the same run",
		"Weights rotated through > 512 MiB; the slowest",
		"    rank's median per M.",
		"",
		"From " + source,
	}}
	return figure(w, title, []*plot.Plot{p, nil}, 2, vg.Points(420), vg.Points(330), k)
}

// shardLines are the three lines of a shard panel, in legend order.
func shardLines(ours, torch, floor []float64) []series {
	return []series{
		{name: "PyTorch mm+add", ys: torch, color: torchColor, dash: []vg.Length{vg.Points(6), vg.Points(3)}, glyph: draw.SquareGlyph{}},
		{name: "tprun", ys: ours, color: oursColor, glyph: draw.CircleGlyph{}},
		{name: "HBM floor", ys: floor, color: floorColor, dash: []vg.Length{vg.Points(2), vg.Points(2)}, glyph: draw.TriangleGlyph{}},
	}
}

func sortedKeys[V any](m map[int]V) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}
