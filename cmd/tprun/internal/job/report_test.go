package job

import (
	"bytes"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestTableUnitsAndLegend: the first row's p50 picks the unit of the time
// columns (ms from 1 ms up, µs below), the header and the legend say it,
// every row keeps it, and the legend explains every column that is not
// self-evident.
func TestTableUnitsAndLegend(t *testing.T) {
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 5))
	tests := []struct {
		desc     string
		p50      time.Duration // of the first row
		unit     string
		perUnit  float64 // nanoseconds per unit
		decimals int
	}{
		{"CPU-like steps", time.Duration(1e6 + rng.Int64N(40e6)), "ms", 1e6, 2},
		{"exactly 1 ms", time.Millisecond, "ms", 1e6, 2},
		{"GPU-like steps", time.Duration(2000 + rng.Int64N(90000)), "µs", 1e3, 1},
		{"just under 1 ms", time.Millisecond - time.Microsecond, "µs", 1e3, 1},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			var b bytes.Buffer
			p := &printer{w: &b, on: true}
			p.columns()
			if b.String() != StepsStarted+"\n" {
				t.Fatalf("before the first row: %q, want only the line that the steps started", b.String())
			}
			rows := []tableRow{{m: 1, p50: tc.p50, p99: tc.p50 * 3}}
			// A later row far off the first keeps the first's unit.
			rows = append(rows, tableRow{m: 2, p50: tc.p50 * 40, p99: tc.p50 * 41}, tableRow{m: 4, p50: tc.p50 / 7, p99: tc.p50})
			for _, r := range rows {
				r.hidden, r.latent, r.shard, r.tp, r.backend, r.mailbox, r.iters = 64, 32, 32, 2, "cpu", "host", 5
				p.row(r)
			}
			out := b.String()
			for _, w := range []string{"p50 " + tc.unit, "p99 " + tc.unit, "in " + tc.unit,
				"# p50, p99 ", "# weight GB/s ", "# err/tol ", "# #wrong ", "# identical "} {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			if strings.Count(out, "p50 ") != 1 {
				t.Errorf("the header came more than once:\n%s", out)
			}
			var got []string
			for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
				if !strings.HasPrefix(line, "#") {
					got = append(got, line)
				}
			}
			if len(got) != len(rows) {
				t.Fatalf("%d rows, want %d:\n%s", len(got), len(rows), out)
			}
			for i, line := range got {
				f := strings.Fields(line)
				want50 := strconv.FormatFloat(float64(rows[i].p50)/tc.perUnit, 'f', tc.decimals, 64)
				want99 := strconv.FormatFloat(float64(rows[i].p99)/tc.perUnit, 'f', tc.decimals, 64)
				if len(f) != 14 || f[8] != want50 || f[9] != want99 {
					t.Errorf("row %q: want p50 %s and p99 %s %s", line, want50, want99, tc.unit)
				}
			}
		})
	}
}

// TestPrinterOff: ranks other than 0 print nothing, legend included.
func TestPrinterOff(t *testing.T) {
	var b bytes.Buffer
	p := &printer{w: &b}
	p.columns()
	p.row(tableRow{m: 1, p50: time.Millisecond})
	p.printf("%s", "x")
	if b.Len() != 0 {
		t.Errorf("printed %q", b.String())
	}
}
