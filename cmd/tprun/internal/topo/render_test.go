package topo

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json from the current output")

// fixedTwoH200 is a deterministic two-GPU NVSwitch node (like the lab's
// two-H200 machine) for golden output.
func fixedTwoH200() *fakeNode {
	node := &fakeNode{driver: "580.159"}
	for i, bus := range []string{"00000000:19:00.0", "00000000:3b:00.0"} {
		g := &fakeGPU{
			name: "NVIDIA H200", cc: [2]int{9, 0}, bus: bus,
			uuid:   []string{"GPU-0a1b2c3d-0000-1111-2222-333344445555", "GPU-9f8e7d6c-0000-1111-2222-333344445555"}[i],
			migRet: nvml.SUCCESS, computeRet: nvml.SUCCESS,
			fabric: nvml.GpuFabricInfo{ClusterUuid: [16]uint8{0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12},
				State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.SUCCESS)},
		}
		for range 2 {
			g.links = append(g.links, fakeLink{active: true, version: uint32(nvml.NVLINK_VERSION_4_0),
				remoteBus: "00000000:05:00.0", remoteType: nvml.NVLINK_DEVICE_TYPE_SWITCH})
		}
		node.gpus = append(node.gpus, g)
	}
	node.ancestor = func(_, _ int) (nvml.GpuTopologyLevel, nvml.Return) { return nvml.TOPOLOGY_NODE, nvml.SUCCESS }
	return node
}

func TestJSONGolden(t *testing.T) {
	for _, tc := range []struct {
		desc, file string
		env        []string
	}{
		{"two H200, multicast", "two_h200_multicast.json", nil},
		{"two H200, NCCL_NVLS_ENABLE=0", "two_h200_unicast.json", []string{"NCCL_NVLS_ENABLE", "0", "CUDA_VISIBLE_DEVICES", "1,0"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			lib, _ := fixedTwoH200().lib()
			// A fixed place without channels, whatever this machine has.
			r, err := Preflight(context.Background(), lib, Options{LookupEnv: env(tc.env...), IMEXDir: "/nonexistent/nvidia-caps-imex-channels"})
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := r.WriteJSON(&got); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join("testdata", tc.file)
			if *update {
				if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test -update once to create it)", err)
			}
			if !bytes.Equal(got.Bytes(), want) {
				t.Errorf("JSON differs from %s:\n%s", path, got.String())
			}
		})
	}
}

// TestJSONShape checks what consumers rely on without a golden file: the
// top-level keys, no null arrays, and a round trip.
func TestJSONShape(t *testing.T) {
	for _, tc := range []struct {
		desc string
		node func(t *testing.T) *fakeNode
		ok   bool
	}{
		{"NVSwitch", func(t *testing.T) *fakeNode { return hgxNode(t, 8) }, true},
		{"PCIe refused", func(t *testing.T) *fakeNode { return pcieNode(t, 4, false) }, false},
		{"no GPU", func(t *testing.T) *fakeNode { return &fakeNode{} }, false},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			lib, _ := tc.node(t).lib()
			r, _ := Preflight(context.Background(), lib, Options{LookupEnv: env()})
			var buf bytes.Buffer
			if err := r.WriteJSON(&buf); err != nil {
				t.Fatal(err)
			}
			var doc map[string]any
			if err := json.Unmarshal(buf.Bytes(), &doc); err != nil {
				t.Fatal(err)
			}
			keys := make([]string, 0, len(doc))
			for k := range doc {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			wantKeys := []string{"cross_node", "cuda", "cuda_driver_version", "devices", "driver_version", "nvml_devices", "pairs", "ranks", "schema", "tp", "verdict", "warnings"}
			if !slices.Equal(keys, wantKeys) {
				t.Errorf("keys %v, want %v", keys, wantKeys)
			}
			if doc["schema"] != Schema {
				t.Errorf("schema %v", doc["schema"])
			}
			for _, k := range []string{"devices", "pairs", "warnings", "ranks"} {
				if _, isList := doc[k].([]any); !isList {
					t.Errorf("%s is %T, want a list (never null)", k, doc[k])
				}
			}
			v := doc["verdict"].(map[string]any)
			for _, k := range []string{"multicast_blockers", "problems"} {
				if _, isList := v[k].([]any); !isList {
					t.Errorf("verdict.%s is %T, want a list", k, v[k])
				}
			}
			if v["ok"] != tc.ok {
				t.Errorf("verdict.ok %v, want %v", v["ok"], tc.ok)
			}
			var back Report
			if err := json.Unmarshal(buf.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			if back.Verdict.Reason != r.Verdict.Reason || len(back.Devices) != len(r.Devices) || len(back.Pairs) != len(r.Pairs) {
				t.Errorf("round trip lost data: %+v vs %+v", back.Verdict, r.Verdict)
			}
		})
	}
}

func TestWriteText(t *testing.T) {
	t.Run("NVSwitch node", func(t *testing.T) {
		lib, _ := hgxNode(t, 8).lib()
		r, err := Preflight(context.Background(), lib, Options{TP: 8, LookupEnv: env()})
		if err != nil {
			t.Fatal(err)
		}
		text := renderText(t, r)
		matrix := matrixLines(t, text, 8)
		if got := strings.Fields(matrix[0]); !slices.Equal(got, []string{"GPU0", "GPU1", "GPU2", "GPU3", "GPU4", "GPU5", "GPU6", "GPU7"}) {
			t.Errorf("header %q", got)
		}
		for i, line := range matrix[1:] {
			f := strings.Fields(line)
			if len(f) != 9 || f[0] != "GPU"+string(rune('0'+i)) || f[i+1] != "X" {
				t.Errorf("row %d %q: want GPU%d then 8 cells with X on the diagonal", i, line, i)
			}
			for j, c := range f[1:] {
				if j != i && c != "NV18" {
					t.Errorf("row %d cell %d %q, want NV18", i, j, c)
				}
			}
		}
		for _, s := range []string{"Legend:", "tp 8: rank → GPU 0,1,2,3,4,5,6,7", "NVLink 18/18 active (v4.0, 18 to NVSwitch)",
			"fabric completed, clique", "all 28 pairs: P2P read and write ok", "Verdict: mailbox multicast", "CUDA_VISIBLE_DEVICES unset"} {
			if !strings.Contains(text, s) {
				t.Errorf("text lacks %q:\n%s", s, text)
			}
		}
		if strings.Contains(text, "Warnings:") {
			t.Errorf("text has a warnings section without warnings:\n%s", text)
		}
		if s := r.Summary(); !strings.HasPrefix(s, "topology: 8 × NVIDIA H200 (cc 9.0); mailbox multicast: all 8 GPUs") || strings.Contains(s, "warning") {
			t.Errorf("summary %q", s)
		}
	})
	t.Run("refused PCIe node", func(t *testing.T) {
		lib, _ := pcieNode(t, 4, false).lib()
		r, err := Preflight(context.Background(), lib, Options{TP: 4, LookupEnv: env()})
		if err == nil {
			t.Fatal("want a refusal")
		}
		text := renderText(t, r)
		matrix := matrixLines(t, text, 4)
		if f := strings.Fields(matrix[1]); !slices.Equal(f, []string{"GPU0", "X", "PIX", "SYS!", "SYS!"}) {
			t.Errorf("row 0 %q, want X PIX SYS! SYS!", f)
		}
		for _, s := range []string{"Verdict: refused", "  - GPU 0 ↔ GPU 2: no P2P read (GPU 0 → GPU 2: not supported by the chipset; GPU 2 → GPU 0: not supported by the chipset)",
			"the other 2 pairs: P2P read and write ok", "NVLink none, fabric not reported"} {
			if !strings.Contains(text, s) {
				t.Errorf("text lacks %q:\n%s", s, text)
			}
		}
		if s := r.Summary(); !strings.HasPrefix(s, "topology: 4 × NVIDIA L40S (cc 8.9); refused: GPU 0 ↔ GPU 2: no P2P read") {
			t.Errorf("summary %q", s)
		}
	})
	t.Run("unicast with several multicast blockers and warnings", func(t *testing.T) {
		node := hgxNode(t, 4)
		node.gpus[0].fabric.State = nvml.GPU_FABRIC_STATE_NOT_STARTED
		node.gpus[1].links[3].active = false
		lib, _ := node.lib()
		r, err := Preflight(context.Background(), lib, Options{TP: 4, LookupEnv: env("NVSHMEM_DISABLE_NVLS", "1")})
		if err != nil {
			t.Fatal(err)
		}
		text := renderText(t, r)
		for _, s := range []string{"Verdict: mailbox unicast", "multicast is off because:", "  - NVSHMEM_DISABLE_NVLS=1 is set",
			"fabric state is not started", "Warnings:\n  - GPU ", "NVLink degraded: 1 of 18 links inactive (link 3)"} {
			if !strings.Contains(text, s) {
				t.Errorf("text lacks %q:\n%s", s, text)
			}
		}
		if s := r.Summary(); !strings.Contains(s, "mailbox unicast") || !strings.HasSuffix(s, "; 1 warning (tprun topo shows them)") {
			t.Errorf("summary %q", s)
		}
	})
}

func renderText(t *testing.T, r *Report) string {
	t.Helper()
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// matrixLines returns the header and n rows of the matrix.
func matrixLines(t *testing.T, text string, n int) []string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "GPU0") && strings.HasPrefix(l, " ") {
			if i+n >= len(lines) {
				break
			}
			return lines[i : i+n+1]
		}
	}
	t.Fatalf("no matrix in:\n%s", text)
	return nil
}
