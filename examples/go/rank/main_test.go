package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/devtest"
)

// TestRankUnderTprun builds tprun and this program and runs the program
// as a user would, `tprun --tp N -- ./rank`: every rank must check every
// block and exit 0. Where there is no Go toolchain (a GPU machine),
// TPRUN_BIN and TPRUN_EXAMPLE_RANK_BIN name prebuilt binaries. The ranks
// run on whatever is there: the CPU, or the GPUs, shared where there are
// fewer than ranks.
func TestRankUnderTprun(t *testing.T) {
	tprun, rank := os.Getenv("TPRUN_BIN"), os.Getenv("TPRUN_EXAMPLE_RANK_BIN")
	if tprun == "" || rank == "" {
		if _, err := exec.LookPath("go"); err != nil {
			t.Skipf("no Go toolchain to build tprun and this program, and TPRUN_BIN, TPRUN_EXAMPLE_RANK_BIN unset: %v", err)
		}
		dir := t.TempDir()
		tprun, rank = filepath.Join(dir, "tprun"), filepath.Join(dir, "rank")
		for _, b := range []struct{ out, pkg string }{{tprun, "github.com/tprun/tprun/cmd/tprun"}, {rank, "github.com/tprun/tprun/examples/go/rank"}} {
			if out, err := exec.Command("go", "build", "-o", b.out, b.pkg).CombinedOutput(); err != nil {
				t.Fatalf("building %s: %v\n%s", b.pkg, err, out)
			}
		}
	}
	for _, tc := range []struct {
		desc  string
		ranks int
		args  []string
	}{
		{"two ranks", 2, []string{"--", rank, "--steps", "12"}},
		{"three ranks, every M", 3, []string{"--", rank, "--hidden", "384", "--latent", "256", "--m", "8", "--steps", "16"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			devices, _ := devtest.SharedDevices(t, tc.ranks)
			args := append(append([]string{"--tp", strconv.Itoa(tc.ranks)}, devices...), tc.args...)
			cmd := exec.CommandContext(ctx, tprun, args...)
			// A GPU machine's auto choice must not reach a multicast object.
			cmd.Env = append(os.Environ(), "TPRUN_MULTICAST=0")
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			if err := cmd.Run(); err != nil {
				t.Fatalf("tprun %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), err, &stdout, &stderr)
			}
			n := strings.Count(stdout.String(), "every block within tolerance of the float64 reference")
			if n != tc.ranks {
				t.Errorf("%d ranks reported every block right, want %d:\n%s", n, tc.ranks, &stdout)
			}
		})
	}
}
