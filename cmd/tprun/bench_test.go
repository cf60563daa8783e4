package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/cmd/tprun/internal/job"
)

// benchWorker writes a shell script that stands for `tprun __bench` on a
// machine without a GPU: every rank prints its arguments on stderr and a
// line on stdout; rank 0 copies report (when not "") to the --json-out
// file; then each exits with status.
func benchWorker(t *testing.T, report string, status int) []string {
	t.Helper()
	script := filepath.Join(t.TempDir(), "worker")
	text := fmt.Sprintf(`#!/bin/sh
echo "args: $*" >&2
echo "# table of rank $TPRUN_RANK"
out=
for a; do case $a in --json-out=*) out=${a#--json-out=} ;; esac; done
if [ "$TPRUN_RANK" = 0 ] && [ -n "$out" ] && [ -n %q ]; then cp %q "$out.part" && mv "$out.part" "$out" || exit 9; fi
# As the benchmark's last barrier: no rank ends before rank 0 wrote.
if [ "$TPRUN_RANK" != 0 ] && [ -n "$out" ] && [ -n %q ]; then
	i=0; while [ ! -s "$out" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
fi
exit %d
`, report, report, report, status)
	if err := os.WriteFile(script, []byte(text), 0o755); err != nil {
		t.Fatal(err)
	}
	return []string{script}
}

// randomReport is a report with random rows, as rank 0 would write it.
func randomReport(t *testing.T, ok bool) (*job.BenchReport, string) {
	t.Helper()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 13))
	r := &job.BenchReport{Schema: job.BenchSchema, Version: "tprun test", Host: "h", Driver: "13.0",
		GPUs:    []job.BenchGPU{{Rank: 0, Device: 0, Name: "GPU", CopyTBps: 3 + rng.Float64()}, {Rank: 1, Device: 1, Name: "GPU", CopyTBps: 3 + rng.Float64()}},
		Shape:   job.BenchShape{TP: 2, Hidden: 7168, Latent: 3584, Shard: 3584, WeightShardBytes: 3584 * 3584 * 2},
		Backend: "cuda", Mailbox: "unicast", Overrides: map[string]string{}, OK: ok}
	for m := 1; m <= 8; m++ {
		med := 5 + 3*rng.Float64()
		r.Rows = append(r.Rows, job.BenchRow{M: m, MedianUS: med, P10US: med - rng.Float64(), P90US: med + rng.Float64(),
			FloorUS: 6, Ratio: med / 6, WeightGBps: 25690112 / med / 1e3, Replays: 200, ErrTol: rng.Float64(), Identical: true})
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "report.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return r, path
}

// TestBenchCommand: `tprun bench` starts the worker on every rank with the
// bench flags (not the launcher's); with --json, stdout holds rank 0's
// document and nothing else, the ranks' lines go to stderr, and --json-out
// gets a copy; without, the ranks' lines are on stdout.
func TestBenchCommand(t *testing.T) {
	want, report := randomReport(t, true)
	failed, failedReport := randomReport(t, false)
	copyTo := filepath.Join(t.TempDir(), "copy.json")
	tests := []struct {
		desc        string
		args        []string
		report      string
		status      int
		wantStatus  int
		wantDoc     *job.BenchReport // nil: stdout has no document
		wantStdout  string           // with wantDoc nil: a line stdout must hold
		wantErrLine string
	}{
		{"json", []string{"--json"}, report, 0, 0, want, "", "[rank 1] # table of rank 1"},
		{"json and json-out", []string{"--json", "--json-out", copyTo}, report, 0, 0, want, "", "[rank 0] # table of rank 0"},
		{"json, checks failed", []string{"--json"}, failedReport, 1, 1, failed, "", "tprun: rank "},
		{"json, no report, rank failed", []string{"--json"}, "", 1, 1, nil, "", "tprun: rank "},
		{"json, no report, ranks succeeded", []string{"--json"}, "", 0, exitInternal, nil, "", "tprun: the benchmark's JSON report: "},
		{"table", nil, "", 0, 0, nil, "[rank 0] # table of rank 0", "args: --m=1,8 --replays=7"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			worker := benchWorker(t, tc.report, tc.status)
			tmp := shortTempDir(t)
			t.Setenv("TMPDIR", tmp) // the hub's directory, and the JSON report's
			args := append([]string{"--tp", "2", "--skip-topology-check", "--grace", "1s", "--m", "1,8", "--replays", "7"}, tc.args...)
			var stdout, stderr bytes.Buffer
			status := runBenchCommand(args, &stdout, &stderr, worker)
			if status != tc.wantStatus {
				t.Errorf("status %d, want %d; stderr:\n%s", status, tc.wantStatus, stderr.String())
			}
			if !strings.Contains(stderr.String(), tc.wantErrLine) {
				t.Errorf("stderr lacks %q:\n%s", tc.wantErrLine, stderr.String())
			}
			// The ranks get the bench flags only, --json-out with --json.
			for _, line := range strings.Split(stderr.String(), "\n") {
				if !strings.Contains(line, "args: ") {
					continue
				}
				if strings.Contains(line, "--tp") || strings.Contains(line, "--grace") || strings.Contains(line, "--json ") ||
					!strings.Contains(line, "--m=1,8 --replays=7") || strings.Contains(line, "--json-out=") != (len(tc.args) > 0) {
					t.Errorf("a rank got %q", line)
				}
			}
			if tc.wantDoc == nil {
				if strings.Contains(stdout.String(), "{") || !strings.Contains(stdout.String(), tc.wantStdout) {
					t.Errorf("stdout %q, want no document and %q", stdout.String(), tc.wantStdout)
				}
				assertEmptyDir(t, tmp)
				return
			}
			var got job.BenchReport
			if err := json.Unmarshal(stdout.Bytes(), &got); err != nil {
				t.Fatalf("stdout is not one JSON document: %v\n%s", err, stdout.String())
			}
			if !reflect.DeepEqual(&got, tc.wantDoc) || len(got.Rows) != 8 {
				t.Errorf("document %+v, want %+v", got, *tc.wantDoc)
			}
			if slices.Contains(tc.args, "--json-out") {
				b, err := os.ReadFile(copyTo)
				if err != nil || !bytes.Equal(b, stdout.Bytes()) {
					t.Errorf("--json-out holds %q, %v; want stdout's document", b, err)
				}
			}
			assertEmptyDir(t, tmp)
		})
	}
}
