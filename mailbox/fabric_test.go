package mailbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tprun/tprun/internal/cuda"
)

// crossRank is a rank of a group that spans nodes: it says so, and it
// cannot pass descriptors, as a TCP hub cannot.
type crossRank struct{ Exchanger }

func (crossRank) SpansNodes() bool { return true }

func (c crossRank) AllGatherFDs(context.Context, int) ([]int, error) {
	return nil, errors.New("crossRank: descriptors do not cross nodes")
}

func (c crossRank) BroadcastFDs(context.Context, int, []int) ([]int, error) {
	return nil, errors.New("crossRank: descriptors do not cross nodes")
}

var _ NodeSpanner = crossRank{}

// TestGPUAcrossNodes: ranks that span nodes share their mailboxes through
// fabric handles only. Where the driver gives them, setup works without
// a descriptor; where it refuses them (no IMEX channel, no support), every
// rank fails before any step, the refusing rank with a *FabricError that
// names the cause and what the administrator must provide, the others
// naming that rank, and nothing is left allocated.
func TestGPUAcrossNodes(t *testing.T) {
	rng := newRng(t)
	for _, tc := range []struct {
		desc      string
		multicast bool
		cfg       fakeCfg
		opts      []GPUOption
		wantErr   string // "" : setup works with FABRIC handles
		fabric    bool   // the refusing rank's error is a *FabricError
	}{
		{desc: "unicast, fabric works", cfg: fakeCfg{attr: fabricAttr}},
		{desc: "multicast, fabric works", multicast: true, cfg: fakeCfg{attr: fabricAttr}},
		{desc: "unicast, no IMEX channel", cfg: fakeCfg{attr: fabricAttr, fabricCreateErr: cuda.ErrNotPermitted},
			wantErr: "/dev/nvidia-caps-imex-channels/channel0", fabric: true},
		{desc: "unicast, export not supported", cfg: fakeCfg{attr: fabricAttr, fabricExportErr: cuda.ErrNotSupported},
			wantErr: "multi-node NVLink domain", fabric: true},
		{desc: "unicast, device without fabric", cfg: fakeCfg{},
			wantErr: "which the device does not offer (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED is 0): this GPU or driver offers no fabric handles", fabric: true},
		{desc: "multicast, no IMEX channel", multicast: true, cfg: fakeCfg{attr: fabricAttr, fabricCreateErr: cuda.ErrNotPermitted},
			wantErr: "nvidia-imex service", fabric: true},
		{desc: "multicast, device without fabric", multicast: true, cfg: fakeCfg{}, wantErr: "offers no fabric handles", fabric: true},
		{desc: "POSIX FD asked for", cfg: fakeCfg{attr: fabricAttr}, opts: []GPUOption{WithHandleType(cuda.HandleTypePOSIXFD)},
			wantErr: "descriptors do not cross nodes"},
	} {
		for _, size := range []int{2, 4} {
			t.Run(fmt.Sprintf("%s/tp%d", tc.desc, size), func(t *testing.T) {
				fds := countFDs(t)
				c := gpuCase{size: size, multicast: tc.multicast, cfg: tc.cfg, opts: tc.opts, crossNode: true}
				run := c.run(t, rng, nil)
				if tc.wantErr == "" {
					run.mustSucceed(t)
					for r, b := range run.backends {
						var ht cuda.HandleType
						switch b := b.(type) {
						case *Unicast:
							ht = b.HandleType()
						case *Multicast:
							ht = b.HandleType()
						}
						if ht != cuda.HandleTypeFabric {
							t.Errorf("rank %d: handle type %v", r, ht)
						}
						for _, call := range run.drvs[r].callList() {
							if strings.Contains(call, "POSIX") {
								t.Errorf("rank %d called %s", r, call)
							}
						}
					}
					if !tc.multicast {
						checkUnicast(t, run, c)
					}
					if err := errors.Join(run.closeAll(t)...); err != nil {
						t.Fatal(err)
					}
					expectNothingLeft(t, run.sys, fds, "after Close")
					return
				}
				for r, err := range run.errs {
					if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
						t.Errorf("rank %d: got %v, want an error saying %q", r, err, tc.wantErr)
					}
				}
				if tc.fabric {
					// The ranks that met the refusal themselves hold a
					// *FabricError; the others name them.
					var own int
					for r, err := range run.errs {
						var fe *FabricError
						if errors.As(err, &fe) {
							own++
							if !errors.Is(err, ErrFabric) || !errors.Is(err, ErrUnavailable) {
								t.Errorf("rank %d: %v does not match ErrFabric and ErrUnavailable", r, err)
							}
						} else if !errors.Is(err, ErrPeer) {
							t.Errorf("rank %d: %v is neither a *FabricError nor ErrPeer", r, err)
						}
					}
					if own == 0 {
						t.Errorf("no rank holds the *FabricError: %v", run.errs)
					}
				}
				t.Logf("rank 0: %v", run.errs[0])
				expectNothingLeft(t, run.sys, fds, "after the failed setup")
			})
		}
	}
}

func TestResolveAcrossNodes(t *testing.T) {
	full := DeviceFacts{VMM: true, POSIXFD: true, Fabric: true, Multicast: true}
	// Two nodes of two GPUs each: ordinals 0,1 on each.
	devs := []DeviceFacts{full, full, full, full}
	for i := range devs {
		devs[i].Device = i % 2
	}
	nodes := []string{"a", "a", "b", "b"}
	noMC := envOf("NCCL_NVLS_ENABLE", "0")
	checkResolve(t, []resolveCase{
		{"auto, safety rule unset: multicast, devices told apart by node", KindAuto,
			Facts{Devices: devs, Nodes: nodes, PeerAccess: true}, KindMulticast, "devices a:0,a:1,b:0,b:1 all support NVLink multicast and no variable forbids it (across 2 nodes, through fabric handles)", nil},
		{"auto under NCCL_NVLS_ENABLE=0: unicast over fabric handles", KindAuto,
			Facts{Devices: devs, Nodes: nodes, PeerAccess: true, Getenv: noMC}, KindUnicast, "NCCL_NVLS_ENABLE=0; devices a:0,a:1,b:0,b:1 share VMM memory peer to peer (across 2 nodes, through fabric handles)", nil},
		{"the same ordinals on one node are one device", KindMulticast,
			Facts{Devices: devs, PeerAccess: true}, KindHost, "distinct", ErrUnavailable},
		{"host asked for across nodes", KindHost, Facts{Devices: devs, Nodes: nodes}, KindHost, "do not cross nodes, and the ranks run on 2 nodes", ErrUnavailable},
		{"auto without GPUs across nodes", KindAuto, Facts{Nodes: nodes}, KindHost, "no GPU, and the host backend", ErrUnavailable},
		{"auto, unicast blocked across nodes: no host fallback", KindAuto,
			Facts{Devices: devs, Nodes: nodes, Getenv: noMC}, KindHost, "no unicast: the devices cannot access each other", ErrUnavailable},
		{"one node named: still one node", KindHost, Facts{Nodes: []string{"a", "a"}}, KindHost, "asked for", nil},
	})
}
