package job

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tprun/tprun/kernel"
)

// mResult is one rank's record of the steps of one M.
type mResult struct {
	times     []time.Duration // per step
	hashes    []uint64        // per step: the first 8 bytes of the block's SHA-256
	checked   int
	wrong     int
	worst     float64 // the largest |err|/tol among the good elements
	first     kernel.Mismatch
	firstStep int
}

func (r *mResult) add(c kernel.CheckResult, step int) {
	if c.Wrong > 0 && r.wrong == 0 {
		r.first, r.firstStep = c.First, step
	}
	r.checked += c.Checked
	r.wrong += c.Wrong
	r.worst = max(r.worst, c.Worst)
}

// percentile is the nearest-rank percentile q (0..1] of d; d is sorted in
// place.
func percentile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	slices.Sort(d)
	i := int(math.Ceil(q*float64(len(d)))) - 1
	return d[min(max(i, 0), len(d)-1)]
}

// rankResult is what each rank contributes to the all-gather after an M.
type rankResult struct {
	checked, wrong int
	worst          float64
	p50, p99       time.Duration
	hashes         []uint64
}

// The all-gathered record: a fixed header, then hashes. Hashes go in chunks
// so that a long run stays far below the hub's frame limit; every rank ran
// the same number of steps, so every rank makes the same number of calls.
const (
	recordMagic   = 0x5450524a // "TPRJ"
	recordHeader  = 4 + 8*5 + 4
	hashesPerCall = 4096
)

// gatherer is the one collective the results need.
type gatherer interface {
	Rank() int
	AllGather(ctx context.Context, b []byte) ([][]byte, error)
}

// gatherResults all-gathers every rank's result of one M; index = rank.
func gatherResults(ctx context.Context, g gatherer, r *mResult) ([]rankResult, error) {
	times := slices.Clone(r.times)
	own := rankResult{checked: r.checked, wrong: r.wrong, worst: r.worst,
		p50: percentile(times, 0.50), p99: percentile(times, 0.99), hashes: r.hashes}
	var all []rankResult
	for done := 0; done == 0 || done < len(r.hashes); {
		n := min(hashesPerCall, len(r.hashes)-done)
		var b []byte
		if done == 0 {
			b = binary.LittleEndian.AppendUint32(b, recordMagic)
			for _, v := range []uint64{uint64(own.checked), uint64(own.wrong), math.Float64bits(own.worst), uint64(own.p50), uint64(own.p99)} {
				b = binary.LittleEndian.AppendUint64(b, v)
			}
			b = binary.LittleEndian.AppendUint32(b, uint32(len(r.hashes)))
		}
		for _, h := range r.hashes[done : done+n] {
			b = binary.LittleEndian.AppendUint64(b, h)
		}
		got, err := g.AllGather(ctx, b)
		if err != nil {
			return nil, err
		}
		if done == 0 {
			all = make([]rankResult, len(got))
		}
		if len(got) != len(all) {
			return nil, fmt.Errorf("all-gather returned %d records, before %d", len(got), len(all))
		}
		for q, rec := range got {
			if err := all[q].decode(rec, done == 0, len(r.hashes), n); err != nil {
				return nil, fmt.Errorf("rank %d's result record: %w", q, err)
			}
		}
		done += n
		if len(r.hashes) == 0 {
			break
		}
	}
	return all, nil
}

var errRecord = errors.New("malformed record")

// decode reads one record of the all-gather: the header when first, then
// n hashes; steps is the number of steps this rank ran.
func (rr *rankResult) decode(b []byte, first bool, steps, n int) error {
	if first {
		if len(b) < recordHeader || binary.LittleEndian.Uint32(b) != recordMagic {
			return fmt.Errorf("%w: %d bytes without the header", errRecord, len(b))
		}
		u := func(i int) uint64 { return binary.LittleEndian.Uint64(b[4+8*i:]) }
		rr.checked, rr.wrong, rr.worst = int(u(0)), int(u(1)), math.Float64frombits(u(2))
		rr.p50, rr.p99 = time.Duration(u(3)), time.Duration(u(4))
		if got := int(binary.LittleEndian.Uint32(b[4+8*5:])); got != steps {
			return fmt.Errorf("%w: %d steps, this rank ran %d", errRecord, got, steps)
		}
		b = b[recordHeader:]
	}
	if len(b) != 8*n {
		return fmt.Errorf("%w: %d bytes of hashes, want %d", errRecord, len(b), 8*n)
	}
	for i := range n {
		rr.hashes = append(rr.hashes, binary.LittleEndian.Uint64(b[8*i:]))
	}
	return nil
}

// tableRow is one line of the results table.
type tableRow struct {
	m, hidden, latent, shard, tp int
	backend, mailbox             string
	iters                        int
	p50, p99                     time.Duration // the slowest rank's
	gbps                         float64       // weight shard bytes / p50
	worst                        float64
	wrong                        int
	wrongRanks                   []int
	differ                       string // "" when every rank got the same blocks
}

// summarize folds every rank's result of one M into a table row.
func summarize(p *plan, m int, mbName string, all []rankResult) tableRow {
	row := tableRow{m: m, hidden: p.cfg.Hidden, latent: p.cfg.Latent, shard: p.shape.Shard(), tp: p.size,
		backend: p.backend, mailbox: mbName, iters: p.cfg.Iters}
	for q, r := range all {
		row.p50, row.p99 = max(row.p50, r.p50), max(row.p99, r.p99)
		row.worst = max(row.worst, r.worst)
		if r.wrong > 0 {
			row.wrong += r.wrong
			row.wrongRanks = append(row.wrongRanks, q)
		}
	}
	if row.p50 > 0 {
		row.gbps = float64(row.shard*row.latent*2) / row.p50.Seconds() / 1e9
	}
	row.differ = firstDifference(all)
	return row
}

// firstDifference names the first step at which some rank's block hash
// differs from rank 0's, or returns "".
func firstDifference(all []rankResult) string {
	if len(all) == 0 {
		return ""
	}
	for i, h := range all[0].hashes {
		var ranks []int
		for q := 1; q < len(all); q++ {
			if all[q].hashes[i] != h {
				ranks = append(ranks, q)
			}
		}
		if len(ranks) > 0 {
			return fmt.Sprintf("blocks differ between ranks from step %d of this M on (ranks %s differ from rank 0)", i, intList(ranks))
		}
	}
	return ""
}

func intList(v []int) string {
	s := make([]string, len(v))
	for i, x := range v {
		s[i] = strconv.Itoa(x)
	}
	return strings.Join(s, ",")
}

// printer writes rank 0's report; on other ranks it prints nothing.
type printer struct {
	w  io.Writer
	on bool
	// The results table's header waits for its first row, whose p50
	// picks the unit of the time columns.
	pending bool
	unit    timeUnit
}

func (p *printer) printf(format string, args ...any) {
	if p.on {
		fmt.Fprintf(p.w, format, args...)
	}
}

// every prints note(time since the call) every d until the returned stop
// is called (which waits for the last note): word of a long step that
// prints nothing else. Nothing when the printer is off.
func (p *printer) every(d time.Duration, note func(time.Duration) string) (stop func()) {
	if !p.on {
		return func() {}
	}
	done, exited := make(chan struct{}), make(chan struct{})
	start := time.Now()
	go func() {
		defer close(exited)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				p.printf("%s", note(now.Sub(start)))
			}
		}
	}()
	return func() {
		close(done)
		<-exited
	}
}

func (p *printer) header(pl *plan) {
	c := pl.cfg
	p.printf("# tprun default job: tp %d, hidden %d, latent %d, shard %d, M %s, %d steps per M\n",
		pl.size, c.Hidden, c.Latent, pl.shape.Shard(), mList(c.M).String(), c.Iters)
	p.printf("# backend %s, mailbox %s (%d slots, receive deadline %v)\n", pl.backend, pl.mailbox, c.Slots, c.Deadline)
	if pl.backend == "cuda" {
		for _, l := range kernelOverrides() {
			p.printf("%s\n", l)
		}
	}
	p.printf("# every received block is checked against a float64 reference of the whole block, per element:\n#   %s\n",
		kernel.ToleranceFormula)
	p.printf("# and all ranks must receive bit-identical blocks (per-step SHA-256, all-gathered)\n")
}

// kernelEnvs are the environment variables that put a kernel build or a
// launch table in place of the embedded one, with what each replaces: the
// header lines (kernelOverrides) and the bench report (benchOverrides)
// name them.
var kernelEnvs = []struct{ env, what, embedded string }{
	{kernel.FatbinEnv, "kernels", "build"},
	{kernel.ConfigTableEnv, "launch table", "one"},
	{kernel.StepTableEnv, "step launch table", "one"},
	{kernel.BigmTableEnv, fmt.Sprintf("launch table for M above %d", kernel.MaxSkinnyM), "one"},
}

// kernelOverrides are the header lines that name each kernel build or
// launch table an environment variable puts in place of the embedded one.
func kernelOverrides() []string {
	var lines []string
	for _, o := range kernelEnvs {
		if f := os.Getenv(o.env); f != "" {
			lines = append(lines, fmt.Sprintf("# %s from %s=%s, not the embedded %s", o.what, o.env, f, o.embedded))
		}
	}
	return lines
}

const rowFormat = "%4v %7v %7v %6v %3v %8v %8v %6v %10v %10v %12v %7v %7v %9v\n"

// timeUnit is how the table prints times: one unit for a whole column.
type timeUnit struct {
	name   string
	size   time.Duration
	digits int
}

var (
	unitMicro = timeUnit{"µs", time.Microsecond, 1}
	unitMilli = timeUnit{"ms", time.Millisecond, 2}
)

// unitFor picks the unit for times like d: milliseconds from 1 ms up (a
// step on the CPU), microseconds below (a step on a GPU).
func unitFor(d time.Duration) timeUnit {
	if d >= time.Millisecond {
		return unitMilli
	}
	return unitMicro
}

func (u timeUnit) format(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/float64(u.size), 'f', u.digits, 64)
}

// columns announces the results table; its legend and header come with the
// first row.
func (p *printer) columns() {
	p.pending = true
	p.printf("%s\n", StepsStarted)
}

// StepsStarted is the line rank 0 prints when the timed steps begin.
const StepsStarted = "# steps running: a row per M once its steps are done"

// tableLegend says what the table's columns mean; %[1]s is the time unit.
const tableLegend = `#
# p50, p99     the median and 99th percentile of a rank's step times (the step alone, not the check
#              or copies), in %[1]s: the slowest rank's
# weight GB/s  the weight shard's bytes (shard x latent x 2) over p50
# err/tol      the largest |out - ref| / tolerance among the values within tolerance (at most 1)
# #wrong       values outside tolerance (or NaN, -0, never written) in the steps of that M, on all ranks
# identical    yes when every rank received bit-identical blocks at every step of that M
#
`

func (p *printer) tableHeader() {
	p.printf(tableLegend, p.unit.name)
	line := fmt.Sprintf(rowFormat, "M", "hidden", "latent", "shard", "tp", "backend", "mailbox", "iters",
		"p50 "+p.unit.name, "p99 "+p.unit.name, "weight GB/s", "err/tol", "#wrong", "identical")
	// rowFormat starts with padding, so "#" replaces a space.
	p.printf("#%s", line[1:])
}

func (p *printer) row(r tableRow) {
	if p.unit.size == 0 {
		p.unit = unitFor(r.p50)
	}
	if p.pending {
		p.pending = false
		p.tableHeader()
	}
	identical := "yes"
	if r.differ != "" {
		identical = "no"
	}
	p.printf(rowFormat, r.m, r.hidden, r.latent, r.shard, r.tp, r.backend, r.mailbox, r.iters,
		p.unit.format(r.p50), p.unit.format(r.p99), fmt.Sprintf("%.2f", r.gbps),
		fmt.Sprintf("%.2f", r.worst), r.wrong, identical)
}

func micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
