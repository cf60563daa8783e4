package topo

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestMain_(t *testing.T) {
	tests := []struct {
		desc       string
		node       func(t *testing.T) *fakeNode
		flags      Flags
		env        []string
		status     int
		stdout     []string // substrings
		stderr     string   // exact, when set
		stderrHas  string
		wantJSON   bool
		emptyStdio bool
	}{
		{desc: "no driver: one line, status 3",
			node:   func(t *testing.T) *fakeNode { return &fakeNode{initRet: nvml.ERROR_LIBRARY_NOT_FOUND} },
			status: ExitNoDriver, stderr: "tprun topo: no NVIDIA driver found (libnvidia-ml.so.1 not loadable)\n", emptyStdio: true},
		{desc: "no driver with --json: same line, status 3, and a document saying so",
			node:  func(t *testing.T) *fakeNode { return &fakeNode{initRet: nvml.ERROR_LIBRARY_NOT_FOUND} },
			flags: Flags{JSON: true}, status: ExitNoDriver, stderr: "tprun topo: no NVIDIA driver found (libnvidia-ml.so.1 not loadable)\n",
			wantJSON: true, stdout: []string{`"ok": false`, `"devices": []`, `"problems": [
      "no NVIDIA driver found (libnvidia-ml.so.1 not loadable)"`}},
		{desc: "NVSwitch node, text",
			node:   func(t *testing.T) *fakeNode { return hgxNode(t, 8) },
			status: ExitOK, stdout: []string{"NV18", "Verdict: mailbox multicast"}, stderr: ""},
		{desc: "NVSwitch node, --json --devices 1,3",
			node:  func(t *testing.T) *fakeNode { return hgxNode(t, 8) },
			flags: Flags{JSON: true, Devices: []int{1, 3}}, status: ExitOK, wantJSON: true, stdout: []string{`"cuda_ordinal": 3`}},
		{desc: "refused: status 1, report on stdout",
			node:   func(t *testing.T) *fakeNode { return pcieNode(t, 4, false) },
			status: ExitRefused, stdout: []string{"Verdict: refused", "GPU 0 ↔ GPU 2"}},
		{desc: "--strict with a warning: status 1",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 2)
				n.gpus[0].links[0].active = false
				return n
			},
			flags: Flags{Strict: true}, status: ExitRefused, stdout: []string{"warning (strict)"}},
		{desc: "same without --strict: status 0",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 2)
				n.gpus[0].links[0].active = false
				return n
			},
			status: ExitOK, stdout: []string{"Warnings:"}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			lib, _ := tc.node(t).lib()
			var out, errOut bytes.Buffer
			status := Main(context.Background(), tc.flags, &out, &errOut, lib, env(tc.env...))
			if status != tc.status {
				t.Errorf("status %d, want %d; stderr %q", status, tc.status, errOut.String())
			}
			for _, s := range tc.stdout {
				if !strings.Contains(out.String(), s) {
					t.Errorf("stdout lacks %q:\n%s", s, out.String())
				}
			}
			if tc.stderr != "" || (tc.stderrHas == "" && tc.status == ExitOK) {
				if errOut.String() != tc.stderr {
					t.Errorf("stderr %q, want %q", errOut.String(), tc.stderr)
				}
			}
			if tc.stderrHas != "" && !strings.Contains(errOut.String(), tc.stderrHas) {
				t.Errorf("stderr %q lacks %q", errOut.String(), tc.stderrHas)
			}
			if tc.emptyStdio && out.Len() != 0 {
				t.Errorf("stdout should be empty, got %q", out.String())
			}
			if tc.wantJSON {
				var r Report
				if err := json.Unmarshal(out.Bytes(), &r); err != nil || r.Schema != Schema {
					t.Errorf("stdout is not a report: %v\n%s", err, out.String())
				}
			}
		})
	}
}

// TestRealNVML runs the check against whatever this machine has: here, no
// driver (ErrNoDriver, exit 3); on a GPU machine, a real report.
func TestRealNVML(t *testing.T) {
	lib := nvml.New()
	r, err := Preflight(context.Background(), lib, Options{LookupEnv: os.LookupEnv})
	if errors.Is(err, ErrNoDriver) {
		var out, errOut bytes.Buffer
		status := Main(context.Background(), Flags{}, &out, &errOut, nvml.New(), os.LookupEnv)
		if status != ExitNoDriver || out.Len() != 0 || !strings.HasPrefix(errOut.String(), "tprun topo: no NVIDIA driver found (") ||
			strings.Count(errOut.String(), "\n") != 1 {
			t.Errorf("no driver: status %d stdout %q stderr %q", status, out.String(), errOut.String())
		}
		t.Logf("no driver here: %v", err)
		return
	}
	if r == nil {
		t.Fatalf("real NVML: %v", err)
	}
	var b strings.Builder
	if werr := r.WriteText(&b); werr != nil {
		t.Fatal(werr)
	}
	t.Logf("real NVML (err %v):\n%s", err, b.String())
	if len(r.Devices) == 0 || r.Devices[0].PCIBusID == "" || r.Devices[0].UUID == "" {
		t.Errorf("real report has no usable device: %+v", r.Devices)
	}
}
