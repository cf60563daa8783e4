package topo

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
)

// A small builder of fake nodes on top of go-nvml's mock: describe GPUs and
// how pairs connect, get an nvml.Interface. Any NVML call the code makes
// that the fake does not describe panics inside the mock, so a test also
// catches calls that should not happen (for instance before Init).

type fakeLink struct {
	active     bool
	version    uint32
	remoteBus  string
	remoteType nvml.IntNvLinkDeviceType
	typeRet    nvml.Return // SUCCESS unless set
	remoteRet  nvml.Return
	versionRet nvml.Return
}

type fakeGPU struct {
	name        string
	cc          [2]int
	bus         string
	uuid        string
	migCur      int
	migPending  int
	migRet      nvml.Return
	computeMode nvml.ComputeMode
	computeRet  nvml.Return
	ccRet       nvml.Return
	links       []fakeLink  // nil: the GPU has no NVLink
	linkRet     nvml.Return // when set, every GetNvLinkState answers it
	fabric      nvml.GpuFabricInfo
	fabricRet   nvml.Return
}

type fakeNode struct {
	gpus []*fakeGPU // NVML order
	// p2p answers GetP2PStatus(from → to); nil means OK for read, write and
	// NVLink.
	p2p func(from, to int, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return)
	// ancestor answers GetTopologyCommonAncestor; nil means SYS.
	ancestor func(a, b int) (nvml.GpuTopologyLevel, nvml.Return)
	initRet  nvml.Return
	countRet nvml.Return
	driver   string
}

func pciInfo(bus string) nvml.PciInfo {
	var p nvml.PciInfo
	for i := 0; i < len(bus) && i < len(p.BusId)-1; i++ {
		p.BusId[i] = int8(bus[i])
	}
	var dom, b, dev uint32
	if _, err := fmt.Sscanf(bus, "%x:%x:%x.0", &dom, &b, &dev); err == nil {
		p.Domain, p.Bus, p.Device = dom, b, dev
	}
	return p
}

// lib builds the mock. It records nothing itself: the mock's *Calls()
// methods say what was called.
func (n *fakeNode) lib() (*mock.Interface, []*mock.Device) {
	devs := make([]*mock.Device, len(n.gpus))
	index := func(d nvml.Device) int {
		for i, m := range devs {
			if nvml.Device(m) == d {
				return i
			}
		}
		panic("unknown device handle")
	}
	for i, g := range n.gpus {
		devs[i] = &mock.Device{
			GetPciInfoFunc: func() (nvml.PciInfo, nvml.Return) { return pciInfo(g.bus), nvml.SUCCESS },
			GetUUIDFunc:    func() (string, nvml.Return) { return g.uuid, nvml.SUCCESS },
			GetNameFunc:    func() (string, nvml.Return) { return g.name, nvml.SUCCESS },
			GetCudaComputeCapabilityFunc: func() (int, int, nvml.Return) {
				if g.ccRet != nvml.SUCCESS {
					return 0, 0, g.ccRet
				}
				return g.cc[0], g.cc[1], nvml.SUCCESS
			},
			GetMigModeFunc: func() (int, int, nvml.Return) { return g.migCur, g.migPending, g.migRet },
			GetComputeModeFunc: func() (nvml.ComputeMode, nvml.Return) {
				return g.computeMode, g.computeRet
			},
			GetNvLinkStateFunc: func(l int) (nvml.EnableState, nvml.Return) {
				switch {
				case g.linkRet != nvml.SUCCESS:
					return 0, g.linkRet
				case l >= len(g.links):
					return 0, nvml.ERROR_NOT_SUPPORTED
				case g.links[l].active:
					return nvml.FEATURE_ENABLED, nvml.SUCCESS
				}
				return nvml.FEATURE_DISABLED, nvml.SUCCESS
			},
			GetNvLinkVersionFunc: func(l int) (uint32, nvml.Return) {
				return g.links[l].version, g.links[l].versionRet
			},
			GetNvLinkRemotePciInfoFunc: func(l int) (nvml.PciInfo, nvml.Return) {
				if g.links[l].remoteRet != nvml.SUCCESS {
					return nvml.PciInfo{}, g.links[l].remoteRet
				}
				return pciInfo(g.links[l].remoteBus), nvml.SUCCESS
			},
			GetNvLinkRemoteDeviceTypeFunc: func(l int) (nvml.IntNvLinkDeviceType, nvml.Return) {
				return g.links[l].remoteType, g.links[l].typeRet
			},
			GetGpuFabricInfoFunc: func() (nvml.GpuFabricInfo, nvml.Return) { return g.fabric, g.fabricRet },
		}
	}
	for i, d := range devs {
		d.GetP2PStatusFunc = func(peer nvml.Device, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
			j := index(peer)
			if i == j {
				panic("P2P status asked of a device with itself")
			}
			if n.p2p == nil {
				return nvml.P2P_STATUS_OK, nvml.SUCCESS
			}
			return n.p2p(i, j, idx)
		}
		d.GetTopologyCommonAncestorFunc = func(peer nvml.Device) (nvml.GpuTopologyLevel, nvml.Return) {
			j := index(peer)
			if n.ancestor == nil {
				return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
			}
			return n.ancestor(i, j)
		}
	}
	lib := &mock.Interface{
		InitFunc:                   func() nvml.Return { return n.initRet },
		ShutdownFunc:               func() nvml.Return { return nvml.SUCCESS },
		SystemGetDriverVersionFunc: func() (string, nvml.Return) { return n.driver, nvml.SUCCESS },
		SystemGetCudaDriverVersionFunc: func() (int, nvml.Return) {
			return 13000, nvml.SUCCESS
		},
		DeviceGetCountFunc: func() (int, nvml.Return) { return len(devs), n.countRet },
		DeviceGetHandleByIndexFunc: func(i int) (nvml.Device, nvml.Return) {
			if i < 0 || i >= len(devs) {
				return nil, nvml.ERROR_INVALID_ARGUMENT
			}
			return devs[i], nvml.SUCCESS
		},
	}
	return lib, devs
}

// hgxBuses are the PCI buses of the eight GPUs of an HGX H200 board.
var hgxBuses = [8]string{"19", "3b", "4c", "5d", "9b", "bb", "cb", "db"}

func randUUID(rng *rand.Rand) string {
	return fmt.Sprintf("GPU-%08x-%04x-%04x-%04x-%012x", rng.Uint32(), rng.Uint32()&0xffff, rng.Uint32()&0xffff,
		rng.Uint32()&0xffff, rng.Uint64()&0xffffffffffff)
}

func newRand(t *testing.T) *rand.Rand {
	t.Helper()
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

// hgxNode is n H200s on four NVSwitches with a completed fabric, P2P
// everywhere. NVML order is a random permutation of bus order so that
// CUDA numbering matters.
func hgxNode(t *testing.T, n int) *fakeNode {
	rng := newRand(t)
	var cluster [16]uint8
	for i := range cluster {
		cluster[i] = uint8(rng.UintN(256))
	}
	clique := rng.Uint32N(1000)
	node := &fakeNode{driver: "580.159"}
	for _, bi := range rng.Perm(n) {
		g := &fakeGPU{
			name: "NVIDIA H200", cc: [2]int{9, 0},
			bus: "00000000:" + hgxBuses[bi%8] + ":00.0", uuid: randUUID(rng),
			migRet: nvml.SUCCESS, computeRet: nvml.SUCCESS,
			fabric: nvml.GpuFabricInfo{ClusterUuid: cluster, CliqueId: clique, State: nvml.GPU_FABRIC_STATE_COMPLETED, Status: uint32(nvml.SUCCESS)},
		}
		for l := range 18 {
			g.links = append(g.links, fakeLink{active: true, version: uint32(nvml.NVLINK_VERSION_4_0),
				remoteBus: fmt.Sprintf("00000000:0%d:00.0", 5+l%4), remoteType: nvml.NVLINK_DEVICE_TYPE_SWITCH})
		}
		node.gpus = append(node.gpus, g)
	}
	node.ancestor = func(a, b int) (nvml.GpuTopologyLevel, nvml.Return) {
		if (node.gpus[a].bus < "00000000:80") == (node.gpus[b].bus < "00000000:80") {
			return nvml.TOPOLOGY_NODE, nvml.SUCCESS
		}
		return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
	}
	return node
}

// pcieNode is n L40S on PCIe switches, no NVLink, no fabric. With
// crossSocketP2P false, GPUs on different sockets (first and second half)
// cannot do P2P.
func pcieNode(t *testing.T, n int, crossSocketP2P bool) *fakeNode {
	rng := newRand(t)
	node := &fakeNode{driver: "580.159"}
	for i := range n {
		node.gpus = append(node.gpus, &fakeGPU{
			name: "NVIDIA L40S", cc: [2]int{8, 9},
			bus: fmt.Sprintf("00000000:%02x:00.0", 0x10+0x10*i), uuid: randUUID(rng),
			migRet: nvml.ERROR_NOT_SUPPORTED, computeRet: nvml.SUCCESS,
			fabricRet: nvml.ERROR_NOT_SUPPORTED,
		})
	}
	half := func(i int) bool { return i < n/2 }
	node.p2p = func(from, to int, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
		switch {
		case idx == nvml.P2P_CAPS_INDEX_NVLINK:
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		case !crossSocketP2P && half(from) != half(to):
			return nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED, nvml.SUCCESS
		}
		return nvml.P2P_STATUS_OK, nvml.SUCCESS
	}
	node.ancestor = func(a, b int) (nvml.GpuTopologyLevel, nvml.Return) {
		switch {
		case a/2 == b/2:
			return nvml.TOPOLOGY_SINGLE, nvml.SUCCESS
		case half(a) == half(b):
			return nvml.TOPOLOGY_MULTIPLE, nvml.SUCCESS
		}
		return nvml.TOPOLOGY_SYSTEM, nvml.SUCCESS
	}
	return node
}

// meshNode is n GPUs joined by direct NVLinks, one to every other GPU (no
// NVSwitch, no fabric). broken, when not nil, is a pair whose link is
// inactive on both ends and whose P2P NVML denies.
func meshNode(t *testing.T, n int, broken *[2]int) *fakeNode {
	rng := newRand(t)
	node := &fakeNode{driver: "580.159"}
	for i := range n {
		node.gpus = append(node.gpus, &fakeGPU{
			name: "NVIDIA H100 80GB HBM3", cc: [2]int{9, 0},
			bus: fmt.Sprintf("00000000:%02x:00.0", 0x18+0x20*i), uuid: randUUID(rng),
			migRet: nvml.SUCCESS, computeRet: nvml.SUCCESS, fabricRet: nvml.ERROR_NOT_SUPPORTED,
		})
	}
	isBroken := func(a, b int) bool {
		return broken != nil && (broken[0] == a && broken[1] == b || broken[0] == b && broken[1] == a)
	}
	for i, g := range node.gpus {
		for j, peer := range node.gpus {
			if i == j {
				continue
			}
			g.links = append(g.links, fakeLink{active: !isBroken(i, j), version: uint32(nvml.NVLINK_VERSION_4_0),
				remoteBus: peer.bus, remoteType: nvml.NVLINK_DEVICE_TYPE_GPU})
		}
	}
	node.p2p = func(from, to int, idx nvml.GpuP2PCapsIndex) (nvml.GpuP2PStatus, nvml.Return) {
		if isBroken(from, to) {
			return nvml.P2P_STATUS_NOT_SUPPORTED, nvml.SUCCESS
		}
		return nvml.P2P_STATUS_OK, nvml.SUCCESS
	}
	return node
}

// env returns a LookupEnv over a fixed map.
func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}
