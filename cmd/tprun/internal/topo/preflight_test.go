package topo

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

type want struct {
	ok           bool
	backend      string
	reason       []string // substrings of Verdict.Reason
	problems     []string // substrings each found in some problem
	warnings     []string // substrings each found in some warning
	noWarnings   bool
	blockers     []string // substrings each found in some multicast blocker
	safetyVar    string
	pairs        int
	devices      int
	problemCount int // when > 0, exact count
}

func TestPreflightVerdicts(t *testing.T) {
	tests := []struct {
		desc  string
		node  func(t *testing.T) *fakeNode
		opts  Options
		env   []string
		want  want
		check func(t *testing.T, r *Report)
	}{
		{
			desc: "8 H200 on NVSwitch, fabric complete, no safety variable: multicast",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 8) },
			opts: Options{TP: 8},
			want: want{ok: true, backend: BackendMulticast, reason: []string{"all 8 GPUs", "completed NVSwitch fabric"},
				noWarnings: true, pairs: 28, devices: 8},
			check: func(t *testing.T, r *Report) {
				for _, p := range r.Pairs {
					if p.Cell != "NV18" || p.Path != "NVLink" || !p.Read.OK || !p.Write.OK {
						t.Errorf("pair %d-%d: cell %q path %q read %v write %v, want NV18 over NVLink with P2P", p.A, p.B, p.Cell, p.Path, p.Read, p.Write)
					}
				}
				for _, d := range r.Devices {
					if d.NVLink.Active != 18 || d.NVLink.ToNVSwitch != 18 || d.NVLink.Links[0].VersionName != "4.0" {
						t.Errorf("GPU %d NVLink %+v, want 18 active links to NVSwitch, version 4.0", d.CUDAOrdinal, d.NVLink)
					}
					if d.Fabric.State != "completed" || d.Fabric.Status != "SUCCESS" || d.ComputeCapability != "9.0" {
						t.Errorf("GPU %d fabric %+v cc %q", d.CUDAOrdinal, d.Fabric, d.ComputeCapability)
					}
				}
			},
		},
		{
			desc: "8 H200 on NVSwitch with NCCL_NVLS_ENABLE=0: unicast, naming the variable",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 8) },
			opts: Options{TP: 8},
			env:  []string{"NCCL_NVLS_ENABLE", "0"},
			want: want{ok: true, backend: BackendUnicast, reason: []string{"NCCL_NVLS_ENABLE=0", "P2P read and write work"},
				safetyVar: "NCCL_NVLS_ENABLE=0", blockers: []string{"NCCL_NVLS_ENABLE=0 is set"}},
		},
		{
			desc: "NCCL_NVLS_ENABLE=1 is not a safety setting: multicast",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 8) },
			opts: Options{TP: 8},
			env:  []string{"NCCL_NVLS_ENABLE", "1", "TPRUN_MULTICAST", "1"},
			want: want{ok: true, backend: BackendMulticast},
		},
		{
			desc: "explicit --mailbox multicast with TORCH_SYMM_MEM_DISABLE_MULTICAST=1: refused, naming it",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 8) },
			opts: Options{TP: 8, Mailbox: BackendMulticast},
			env:  []string{"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
			want: want{ok: false, problems: []string{"TORCH_SYMM_MEM_DISABLE_MULTICAST=1 is set", "safety rule"},
				safetyVar: "TORCH_SYMM_MEM_DISABLE_MULTICAST=1"},
		},
		{
			desc: "explicit --mailbox unicast on NVSwitch: unicast",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 8) },
			opts: Options{TP: 8, Mailbox: BackendUnicast},
			want: want{ok: true, backend: BackendUnicast, reason: []string{"asked for"}},
		},
		{
			desc: "tp 2 of an 8-GPU NVSwitch node: multicast over the first two CUDA devices",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 8) },
			opts: Options{TP: 2},
			want: want{ok: true, backend: BackendMulticast, pairs: 1, devices: 2},
		},
		{
			desc: "tp 1: unicast, nothing to reach",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 8) },
			opts: Options{TP: 1},
			want: want{ok: true, backend: BackendUnicast, reason: []string{"one GPU"}, blockers: []string{"only one GPU"}, pairs: 0, devices: 1},
		},
		{
			desc: "8 GPUs on PCIe only, P2P ok: unicast",
			node: func(t *testing.T) *fakeNode { return pcieNode(t, 8, true) },
			opts: Options{TP: 8},
			want: want{ok: true, backend: BackendUnicast, reason: []string{"every pair of the 8 GPUs", "not on an NVSwitch fabric"},
				noWarnings: true, pairs: 28},
			check: func(t *testing.T, r *Report) {
				cells := map[string]int{}
				for _, p := range r.Pairs {
					cells[p.Cell]++
				}
				// 4 pairs share a switch, 8 share a socket, 16 cross sockets.
				if cells["PIX"] != 4 || cells["PXB"] != 8 || cells["SYS"] != 16 {
					t.Errorf("cells %v, want PIX 4, PXB 8, SYS 16", cells)
				}
				for _, d := range r.Devices {
					if d.NVLink.Status != "none" || d.MIG != "not supported" || d.Fabric.State != "not reported" {
						t.Errorf("GPU %d: nvlink %q mig %q fabric %q", d.CUDAOrdinal, d.NVLink.Status, d.MIG, d.Fabric.State)
					}
				}
			},
		},
		{
			desc: "8 GPUs on PCIe without P2P across sockets: refused, naming the pair",
			node: func(t *testing.T) *fakeNode { return pcieNode(t, 8, false) },
			opts: Options{TP: 8},
			want: want{ok: false, problems: []string{"GPU 0 ↔ GPU 4: no P2P read", "GPU 0 → GPU 4: not supported by the chipset", "GPU 3 ↔ GPU 7: no P2P write"},
				reason: []string{"refused: GPU 0 ↔ GPU 4", "more"}, problemCount: 32},
		},
		{
			desc: "PCIe without P2P across sockets, but only one socket used: unicast",
			node: func(t *testing.T) *fakeNode { return pcieNode(t, 8, false) },
			opts: Options{TP: 4},
			want: want{ok: true, backend: BackendUnicast, pairs: 6},
		},
		{
			desc: "8 GPUs with one broken NVLink pair: degraded warnings, refused naming the pair",
			node: func(t *testing.T) *fakeNode { return meshNode(t, 8, &[2]int{2, 5}) },
			opts: Options{TP: 8},
			// GPU i's links go to every other GPU in order, skipping itself.
			want: want{ok: false, problems: []string{"GPU 2 ↔ GPU 5: no P2P read", "GPU 2 → GPU 5: not supported"}, problemCount: 2,
				warnings: []string{"GPU 2: NVLink degraded: 1 of 7 links inactive (link 4)", "GPU 5: NVLink degraded: 1 of 7 links inactive (link 2)"}},
			check: func(t *testing.T, r *Report) {
				for _, p := range r.Pairs {
					want := "NV1"
					if p.A == 2 && p.B == 5 {
						want = "SYS"
					}
					if p.Cell != want {
						t.Errorf("pair %d-%d cell %q, want %q", p.A, p.B, p.Cell, want)
					}
				}
			},
		},
		{
			desc: "NVLink mesh without fabric, all links fine: unicast, multicast off for want of a fabric",
			node: func(t *testing.T) *fakeNode { return meshNode(t, 4, nil) },
			opts: Options{TP: 4},
			want: want{ok: true, backend: BackendUnicast, noWarnings: true, blockers: []string{"GPU 0 is not on an NVSwitch fabric"}},
		},
		{
			desc: "MIG enabled on one GPU: error",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 8)
				n.gpus[3].migCur, n.gpus[3].migPending = nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE
				return n
			},
			opts: Options{TP: 8},
			want: want{ok: false, problems: []string{"MIG is enabled"}, problemCount: 1},
			check: func(t *testing.T, r *Report) {
				var on []Device
				for _, d := range r.Devices {
					if d.MIG == "enabled" {
						on = append(on, d)
					}
				}
				if len(on) != 1 || !strings.Contains(r.Verdict.Problems[0], devLabel(on[0])) {
					t.Errorf("MIG devices %v, problem %q should name the one", on, r.Verdict.Problems)
				}
			},
		},
		{
			desc: "MIG pending enable: warning only",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 2)
				n.gpus[1].migPending = nvml.DEVICE_MIG_ENABLE
				return n
			},
			opts: Options{TP: 2},
			want: want{ok: true, backend: BackendMulticast, warnings: []string{"MIG will be enabled at the next GPU reset"}},
		},
		{
			desc: "fabric still in progress on one GPU: unicast, with the reason",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 8)
				n.gpus[6].fabric.State = nvml.GPU_FABRIC_STATE_IN_PROGRESS
				return n
			},
			opts: Options{TP: 8},
			want: want{ok: true, backend: BackendUnicast, reason: []string{"NVSwitch fabric state is in progress, not completed"}},
		},
		{
			desc: "fabric completed with an error status: unicast",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 4)
				n.gpus[0].fabric.Status = uint32(nvml.ERROR_UNKNOWN)
				return n
			},
			opts: Options{TP: 4},
			want: want{ok: true, backend: BackendUnicast, reason: []string{"registration completed with UNKNOWN"}},
		},
		{
			desc: "GPUs in two fabric cliques: unicast",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 8)
				n.gpus[5].fabric.CliqueId++
				return n
			},
			opts: Options{TP: 8},
			want: want{ok: true, backend: BackendUnicast, reason: []string{"different NVSwitch fabric cliques"}},
		},
		{
			desc: "A100 on NVSwitch (cc 8.0): unicast, multicast needs 9.0",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 8)
				for _, g := range n.gpus {
					g.name, g.cc = "NVIDIA A100-SXM4-80GB", [2]int{8, 0}
				}
				return n
			},
			opts: Options{TP: 8},
			want: want{ok: true, backend: BackendUnicast, reason: []string{"compute capability 8.0", "9.0 or newer"}},
		},
		{
			desc: "mixed models: error",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 8)
				n.gpus[4].name = "NVIDIA H100 80GB HBM3"
				return n
			},
			opts: Options{TP: 8},
			want: want{ok: false, problems: []string{"mixed models", "NVIDIA H100 80GB HBM3", "NVIDIA H200"}, problemCount: 1},
		},
		{
			desc: "fewer GPUs than tp: error",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 2) },
			opts: Options{TP: 8},
			want: want{ok: false, problems: []string{"tp 8 needs 8 GPUs but CUDA sees 2"}, problemCount: 1, devices: 2},
		},
		{
			desc: "--devices shorter than tp: error",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 8) },
			opts: Options{TP: 4, Devices: []int{0, 1}},
			want: want{ok: false, problems: []string{"--devices lists 2"}},
		},
		{
			desc: "--devices beyond what CUDA sees: error",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 4) },
			opts: Options{TP: 2, Devices: []int{1, 6}},
			want: want{ok: false, problems: []string{"GPU 6: CUDA sees only 4 GPUs"}, devices: 1},
		},
		{
			desc: "compute mode prohibited: error",
			node: func(t *testing.T) *fakeNode {
				n := pcieNode(t, 4, true)
				n.gpus[2].computeMode = nvml.COMPUTEMODE_PROHIBITED
				return n
			},
			opts: Options{TP: 4},
			want: want{ok: false, problems: []string{"GPU 2: compute mode is prohibited"}, problemCount: 1},
		},
		{
			desc: "exclusive-process with one rank per GPU: fine",
			node: func(t *testing.T) *fakeNode {
				n := pcieNode(t, 4, true)
				for _, g := range n.gpus {
					g.computeMode = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS
				}
				return n
			},
			opts: Options{TP: 4},
			want: want{ok: true, backend: BackendUnicast, noWarnings: true},
		},
		{
			desc: "exclusive-process with two ranks on one GPU: error",
			node: func(t *testing.T) *fakeNode {
				n := pcieNode(t, 2, true)
				n.gpus[1].computeMode = nvml.COMPUTEMODE_EXCLUSIVE_PROCESS
				return n
			},
			opts: Options{TP: 3, Devices: []int{0, 1, 1}},
			want: want{ok: false, problems: []string{"GPU 1: compute mode is exclusive-process", "2 ranks"}, problemCount: 1},
		},
		{
			desc: "two ranks on one GPU of an NVSwitch node: unicast, multicast takes each GPU once",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 2) },
			opts: Options{TP: 3, Devices: []int{0, 1, 1}},
			want: want{ok: true, backend: BackendUnicast, reason: []string{"runs 2 ranks", "takes each GPU once"}, pairs: 1},
		},
		{
			desc: "NVML answers NOT_SUPPORTED to every optional query: warnings, still runs",
			node: func(t *testing.T) *fakeNode {
				n := pcieNode(t, 4, true)
				for _, g := range n.gpus {
					g.ccRet, g.migRet, g.computeRet, g.linkRet, g.fabricRet =
						nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED
				}
				n.p2p = func(_, _ int, _ nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
					return 0, nvml.ERROR_NOT_SUPPORTED
				}
				n.ancestor = func(_, _ int) (nvml.GpuTopologyLevel, nvml.Return) { return 0, nvml.ERROR_NOT_SUPPORTED }
				return n
			},
			opts: Options{TP: 4},
			want: want{ok: true, backend: BackendUnicast, warnings: []string{
				"GPU 0: compute capability not reported (NOT_SUPPORTED)",
				"GPU 3: compute mode not reported (NOT_SUPPORTED)",
				"GPU 1 ↔ GPU 2: P2P read/write not confirmed by NVML",
				"GPU 0 ↔ GPU 3: PCIe common ancestor not reported (NOT_SUPPORTED)",
			}},
			check: func(t *testing.T, r *Report) {
				for _, p := range r.Pairs {
					if p.Cell != "?" || p.Read.Reported || p.Read.OK {
						t.Errorf("pair %d-%d: cell %q read %+v, want ? and not reported", p.A, p.B, p.Cell, p.Read)
					}
				}
			},
		},
		{
			desc: "NVLink queries beyond the state NOT_SUPPORTED on NVSwitch: warnings, fabric still decides",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 4)
				for _, g := range n.gpus {
					for l := range g.links {
						g.links[l].versionRet, g.links[l].remoteRet, g.links[l].typeRet =
							nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED, nvml.ERROR_NOT_SUPPORTED
					}
				}
				return n
			},
			opts: Options{TP: 4},
			want: want{ok: true, backend: BackendMulticast, warnings: []string{"NVLink version not reported", "NVLink far end not reported"}},
			check: func(t *testing.T, r *Report) {
				if r.Pairs[0].Cell != "NV" {
					t.Errorf("cell %q, want NV (NVLink P2P ok, link count unknown)", r.Pairs[0].Cell)
				}
			},
		},
		{
			desc: "remote device type unsupported: far end found by bus id",
			node: func(t *testing.T) *fakeNode {
				n := meshNode(t, 3, nil)
				for _, g := range n.gpus {
					for l := range g.links {
						g.links[l].typeRet = nvml.ERROR_FUNCTION_NOT_FOUND
					}
				}
				return n
			},
			opts: Options{TP: 3},
			want: want{ok: true, backend: BackendUnicast, noWarnings: true},
			check: func(t *testing.T, r *Report) {
				for _, p := range r.Pairs {
					if p.Cell != "NV1" {
						t.Errorf("pair %d-%d cell %q, want NV1", p.A, p.B, p.Cell)
					}
				}
				for _, l := range r.Devices[0].NVLink.Links {
					if l.Remote != "gpu" {
						t.Errorf("link %d remote %q, want gpu", l.Link, l.Remote)
					}
				}
			},
		},
		{
			desc: "strict: a degraded link becomes a refusal",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 4)
				n.gpus[2].links[11].active = false
				return n
			},
			opts: Options{TP: 4, Strict: true},
			want: want{ok: false, problems: []string{"warning (strict):", "NVLink degraded: 1 of 18 links inactive (link 11)"}},
		},
		{
			desc: "not strict: the same degraded link is a warning",
			node: func(t *testing.T) *fakeNode {
				n := hgxNode(t, 4)
				n.gpus[2].links[11].active = false
				return n
			},
			opts: Options{TP: 4},
			want: want{ok: true, backend: BackendMulticast, warnings: []string{"1 of 18 links inactive (link 11)"}},
		},
		{
			desc: "unknown --mailbox value: refused",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 2) },
			opts: Options{TP: 2, Mailbox: "nvls"},
			want: want{ok: false, problems: []string{`--mailbox "nvls"`}},
		},
		{
			desc: "topo mode (tp 0) with CUDA_VISIBLE_DEVICES hiding all: refused",
			node: func(t *testing.T) *fakeNode { return hgxNode(t, 4) },
			env:  []string{"CUDA_VISIBLE_DEVICES", ""},
			want: want{ok: false, problems: []string{"CUDA sees no GPU"}, warnings: []string{"set but empty"}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			node := tc.node(t)
			lib, _ := node.lib()
			opts := tc.opts
			opts.LookupEnv = env(tc.env...)
			r, err := Preflight(context.Background(), lib, opts)
			if r == nil {
				t.Fatalf("Preflight: no report, err %v", err)
			}
			if n := len(lib.ShutdownCalls()); n != 1 {
				t.Errorf("Shutdown called %d times, want 1", n)
			}
			checkWant(t, r, err, tc.want)
			if tc.check != nil {
				tc.check(t, r)
			}
			if t.Failed() {
				var b strings.Builder
				if werr := r.WriteText(&b); werr != nil {
					t.Errorf("WriteText: %v", werr)
				}
				t.Logf("report:\n%s", b.String())
			}
		})
	}
}

func checkWant(t *testing.T, r *Report, err error, w want) {
	t.Helper()
	v := r.Verdict
	if v.OK != w.ok || (err == nil) != w.ok {
		t.Errorf("ok %v err %v, want ok %v; problems %q", v.OK, err, w.ok, v.Problems)
	}
	if !w.ok {
		var ce *CheckError
		if !errors.Is(err, ErrRefused) || !errors.As(err, &ce) || len(ce.Problems) != len(v.Problems) {
			t.Errorf("err %v: want a *CheckError matching ErrRefused with the verdict's problems", err)
		}
		if v.Backend != "" || !strings.HasPrefix(v.Reason, "refused: ") {
			t.Errorf("refused verdict has backend %q reason %q", v.Backend, v.Reason)
		}
	}
	if v.Backend != w.backend {
		t.Errorf("backend %q, want %q (reason %q)", v.Backend, w.backend, v.Reason)
	}
	for _, s := range w.reason {
		if !strings.Contains(v.Reason, s) {
			t.Errorf("reason %q lacks %q", v.Reason, s)
		}
	}
	for _, s := range w.problems {
		if !containsSub(v.Problems, s) {
			t.Errorf("problems %q lack %q", v.Problems, s)
		}
	}
	if w.problemCount > 0 && len(v.Problems) != w.problemCount {
		t.Errorf("%d problems, want %d: %q", len(v.Problems), w.problemCount, v.Problems)
	}
	for _, s := range w.warnings {
		if !containsSub(r.Warnings, s) {
			t.Errorf("warnings %q lack %q", r.Warnings, s)
		}
	}
	if w.noWarnings && len(r.Warnings) > 0 {
		t.Errorf("unexpected warnings %q", r.Warnings)
	}
	for _, s := range w.blockers {
		if !containsSub(v.MulticastBlockers, s) {
			t.Errorf("multicast blockers %q lack %q", v.MulticastBlockers, s)
		}
	}
	if v.SafetyVariable != w.safetyVar {
		t.Errorf("safety variable %q, want %q", v.SafetyVariable, w.safetyVar)
	}
	if w.pairs > 0 && len(r.Pairs) != w.pairs {
		t.Errorf("%d pairs, want %d", len(r.Pairs), w.pairs)
	}
	if w.devices > 0 && len(r.Devices) != w.devices {
		t.Errorf("%d devices, want %d", len(r.Devices), w.devices)
	}
	if v.Backend == BackendMulticast && len(v.MulticastBlockers) != 0 {
		t.Errorf("multicast chosen despite blockers %q", v.MulticastBlockers)
	}
}

func containsSub(list []string, sub string) bool {
	for _, s := range list {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

func TestEverySafetyVariableBlocksMulticast(t *testing.T) {
	for _, kv := range [][2]string{
		{"NCCL_NVLS_ENABLE", "0"},
		{"TORCH_SYMM_MEM_DISABLE_MULTICAST", "1"},
		{"NVSHMEM_DISABLE_NVLS", "1"},
		{"TPRUN_MULTICAST", "0"},
		{"TPRUN_MULTICAST", " 0 "},
		{"NCCL_NVLS_ENABLE", "false"}, // read the way the mailbox reads it
	} {
		t.Run(kv[0]+"="+kv[1], func(t *testing.T) {
			lib, _ := hgxNode(t, 8).lib()
			r, err := Preflight(context.Background(), lib, Options{TP: 8, LookupEnv: env(kv[0], kv[1])})
			if err != nil {
				t.Fatal(err)
			}
			name := kv[0] + "=" + strings.TrimSpace(kv[1])
			if r.Verdict.Backend != BackendUnicast || r.Verdict.SafetyVariable != name || !strings.Contains(r.Verdict.Reason, name) {
				t.Errorf("verdict %+v, want unicast naming %s", r.Verdict, name)
			}
			if s := r.Summary(); !strings.Contains(s, name) || !strings.Contains(s, "mailbox unicast") {
				t.Errorf("summary %q should name the backend and %s", s, name)
			}
		})
	}
}

func TestNoDriver(t *testing.T) {
	for _, tc := range []struct {
		desc string
		ret  nvml.Return
		msg  string
	}{
		{"library missing", nvml.ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver found (libnvidia-ml.so.1 not loadable)"},
		{"kernel module not loaded", nvml.ERROR_DRIVER_NOT_LOADED, "no NVIDIA driver found (the NVIDIA kernel driver is not loaded)"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			// Only Init is mocked: any other NVML call panics in the mock,
			// which is how "never call NVML before Init succeeded" is tested.
			lib := &fakeNode{initRet: tc.ret}
			m, _ := lib.lib()
			m.ShutdownFunc = nil
			m.DeviceGetCountFunc = nil
			m.SystemGetDriverVersionFunc = nil
			m.SystemGetCudaDriverVersionFunc = nil
			r, err := Preflight(context.Background(), m, Options{TP: 2, LookupEnv: env()})
			if r != nil || !errors.Is(err, ErrNoDriver) || errors.Is(err, ErrRefused) {
				t.Fatalf("got %v, %v; want nil report and ErrNoDriver", r, err)
			}
			if !errors.Is(err, tc.ret) || err.Error() != tc.msg {
				t.Errorf("err %q, want %q wrapping %v", err, tc.msg, tc.ret)
			}
			if len(m.InitCalls()) != 1 {
				t.Errorf("Init called %d times", len(m.InitCalls()))
			}
		})
	}
}

func TestNVMLFailures(t *testing.T) {
	t.Run("other Init failure is not ErrNoDriver", func(t *testing.T) {
		m, _ := (&fakeNode{initRet: nvml.ERROR_LIB_RM_VERSION_MISMATCH}).lib()
		m.ShutdownFunc = nil
		_, err := Preflight(context.Background(), m, Options{LookupEnv: env()})
		var ne *NVMLError
		if errors.Is(err, ErrNoDriver) || !errors.As(err, &ne) || ne.Op != "Init" || !errors.Is(err, nvml.ERROR_LIB_RM_VERSION_MISMATCH) {
			t.Errorf("err %v, want *NVMLError for Init", err)
		}
	})
	t.Run("device count failure shuts NVML down", func(t *testing.T) {
		node := hgxNode(t, 2)
		node.countRet = nvml.ERROR_UNKNOWN
		m, _ := node.lib()
		r, err := Preflight(context.Background(), m, Options{LookupEnv: env()})
		var ne *NVMLError
		if r != nil || !errors.As(err, &ne) || ne.Op != "DeviceGetCount" || !errors.Is(err, nvml.ERROR_UNKNOWN) {
			t.Errorf("got %v, %v; want *NVMLError for DeviceGetCount", r, err)
		}
		if len(m.ShutdownCalls()) != 1 {
			t.Errorf("Shutdown called %d times, want 1", len(m.ShutdownCalls()))
		}
	})
	t.Run("PCI info failure names the device", func(t *testing.T) {
		m, devs := hgxNode(t, 4).lib()
		devs[3].GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) { return nvml.PciInfo{}, nvml.ERROR_GPU_IS_LOST }
		_, err := Preflight(context.Background(), m, Options{LookupEnv: env()})
		var ne *NVMLError
		if !errors.As(err, &ne) || ne.Device != 3 || !strings.Contains(err.Error(), "nvml device 3") {
			t.Errorf("err %v, want *NVMLError naming nvml device 3", err)
		}
	})
	t.Run("cancelled context: no NVML call at all", func(t *testing.T) {
		m, _ := hgxNode(t, 2).lib()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := Preflight(ctx, m, Options{LookupEnv: env()})
		if !errors.Is(err, context.Canceled) || len(m.InitCalls()) != 0 {
			t.Errorf("err %v, Init calls %d; want context.Canceled and no Init", err, len(m.InitCalls()))
		}
	})
}

func TestPreflightHonoursCUDAVisibleDevices(t *testing.T) {
	node := hgxNode(t, 8)
	m, _ := node.lib()
	// CUDA ordinal k of the base order is the GPU with the k-th smallest
	// bus id; the node's NVML order is shuffled.
	byBus := map[string]int{}
	for i, g := range node.gpus {
		byBus[g.bus] = i
	}
	nvmlOfBusRank := func(k int) int { return byBus["00000000:"+hgxBuses[k]+":00.0"] }
	uuid6 := node.gpus[nvmlOfBusRank(6)].uuid

	r, err := Preflight(context.Background(), m, Options{TP: 3, LookupEnv: env(
		"CUDA_VISIBLE_DEVICES", "5, 2,"+uuid6[:12], "CUDA_DEVICE_ORDER", "PCI_BUS_ID")})
	if err != nil {
		t.Fatal(err)
	}
	wantNVML := []int{nvmlOfBusRank(5), nvmlOfBusRank(2), nvmlOfBusRank(6)}
	for ord, d := range r.Devices {
		if d.CUDAOrdinal != ord || d.NVMLIndex != wantNVML[ord] || d.UUID != node.gpus[wantNVML[ord]].uuid {
			t.Errorf("device %d: CUDA %d NVML %d uuid %s, want CUDA %d NVML %d", ord, d.CUDAOrdinal, d.NVMLIndex, d.UUID, ord, wantNVML[ord])
		}
	}
	if r.CUDA.VisibleDevices == nil || len(r.CUDA.NVMLIndex) != 3 {
		t.Errorf("CUDA record %+v", r.CUDA)
	}
}
