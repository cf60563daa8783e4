package mailbox

import (
	"errors"
	"strings"
	"testing"

	"github.com/tprun/tprun/internal/cuda"
)

func TestResolve(t *testing.T) {
	full := DeviceFacts{VMM: true, POSIXFD: true, Multicast: true}
	devs := func(n int, f DeviceFacts, edit func(i int, d *DeviceFacts)) []DeviceFacts {
		out := make([]DeviceFacts, n)
		for i := range out {
			out[i] = f
			out[i].Device = i
			if edit != nil {
				edit(i, &out[i])
			}
		}
		return out
	}
	checkResolve(t, []resolveCase{
		{"auto, NVSwitch node: multicast", KindAuto, Facts{Devices: devs(8, full, nil), PeerAccess: true}, KindMulticast, "multicast", nil},
		{"auto, no GPU: host", KindAuto, Facts{}, KindHost, "no GPU", nil},
		{"auto, one device lacks multicast: unicast", KindAuto,
			Facts{Devices: devs(4, full, func(i int, d *DeviceFacts) { d.Multicast = i != 3 }), PeerAccess: true},
			KindUnicast, "device 3 does not support NVLink multicast", nil},
		{"auto, NCCL_NVLS_ENABLE=0: unicast, and says why", KindAuto,
			Facts{Devices: devs(8, full, nil), PeerAccess: true, Getenv: envOf("NCCL_NVLS_ENABLE", "0")},
			KindUnicast, "NCCL_NVLS_ENABLE=0", nil},
		{"auto, TPRUN_MULTICAST=0: unicast", KindAuto,
			Facts{Devices: devs(2, full, nil), PeerAccess: true, Getenv: envOf("TPRUN_MULTICAST", "0")},
			KindUnicast, "TPRUN_MULTICAST=0", nil},
		{"auto, ranks share one GPU: unicast without P2P", KindAuto,
			Facts{Devices: devs(4, full, func(i int, d *DeviceFacts) { d.Device = 0 })},
			KindUnicast, "distinct device", nil},
		{"auto, no P2P between distinct GPUs: host", KindAuto,
			Facts{Devices: devs(2, full, nil)}, KindHost, "P2P", nil},
		{"auto, no VMM: host", KindAuto,
			Facts{Devices: devs(2, full, func(i int, d *DeviceFacts) { d.VMM = i == 0 }), PeerAccess: true},
			KindHost, "device 1 lacks virtual memory management", nil},
		{"auto, fabric handles only: unicast", KindAuto,
			Facts{Devices: devs(2, DeviceFacts{VMM: true, Fabric: true}, nil), PeerAccess: true}, KindUnicast, "peer to peer", nil},
		{"auto, a single GPU: unicast", KindAuto, Facts{Devices: devs(1, full, nil)}, KindUnicast, "at least two", nil},
		{"multicast asked for, allowed", KindMulticast, Facts{Devices: devs(4, full, nil), PeerAccess: true}, KindMulticast, "asked for", nil},
		{"multicast asked for under NVSHMEM_DISABLE_NVLS=1: refused by name", KindMulticast,
			Facts{Devices: devs(4, full, nil), PeerAccess: true, Getenv: envOf("NVSHMEM_DISABLE_NVLS", "1")},
			KindHost, "NVSHMEM_DISABLE_NVLS", ErrMulticastDisabled},
		{"multicast asked for under TORCH_SYMM_MEM_DISABLE_MULTICAST=1: refused even with no GPU", KindMulticast,
			Facts{Getenv: envOf("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")},
			KindHost, "TORCH_SYMM_MEM_DISABLE_MULTICAST", ErrMulticastDisabled},
		{"multicast asked for, unsupported device", KindMulticast,
			Facts{Devices: devs(2, full, func(i int, d *DeviceFacts) { d.Multicast = false }), PeerAccess: true},
			KindHost, "does not support NVLink multicast", ErrUnavailable},
		{"multicast asked for, ranks share a device", KindMulticast,
			Facts{Devices: devs(2, full, func(i int, d *DeviceFacts) { d.Device = 0 }), PeerAccess: true},
			KindHost, "distinct", ErrUnavailable},
		{"unicast asked for on an NVSwitch node", KindUnicast, Facts{Devices: devs(8, full, nil), PeerAccess: true}, KindUnicast, "asked for", nil},
		{"unicast asked for, no GPU", KindUnicast, Facts{}, KindHost, "no GPU", ErrUnavailable},
		{"unicast asked for, no P2P", KindUnicast, Facts{Devices: devs(2, full, nil)}, KindHost, "P2P", ErrUnavailable},
		{"host asked for on GPUs", KindHost, Facts{Devices: devs(8, full, nil), PeerAccess: true}, KindHost, "asked for", nil},
		{"unknown kind", Kind(42), Facts{}, KindHost, "Kind(42)", ErrUnknownKind},
	})
}

// resolveCase is one Resolve call and what it must give.
type resolveCase struct {
	desc   string
	kind   Kind
	facts  Facts
	want   Kind
	reason string // substring of the reason, or of the error
	is     error  // the error, nil: none
}

func checkResolve(t *testing.T, cases []resolveCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			got, reason, err := Resolve(tc.kind, tc.facts)
			if tc.is != nil {
				if !errors.Is(err, tc.is) || !strings.Contains(err.Error(), tc.reason) {
					t.Fatalf("Resolve: %v, want errors.Is %v mentioning %q", err, tc.is, tc.reason)
				}
				return
			}
			if err != nil {
				t.Fatalf("Resolve: %v", err)
			}
			if got != tc.want || !strings.Contains(reason, tc.reason) {
				t.Errorf("Resolve = %v, %q; want %v with a reason mentioning %q", got, reason, tc.want, tc.reason)
			}
		})
	}
}

// envOf is a Getenv that holds the pairs kv (name, value, ...).
func envOf(kv ...string) func(string) string {
	return func(k string) string {
		for i := 0; i+1 < len(kv); i += 2 {
			if kv[i] == k {
				return kv[i+1]
			}
		}
		return ""
	}
}

// The error for a refused explicit multicast is the typed one that names
// the variable, the same that NewMulticast returns.
func TestResolveRefusalIsTyped(t *testing.T) {
	_, _, err := Resolve(KindMulticast, Facts{Getenv: envOf("NCCL_NVLS_ENABLE", "0")})
	var de *MulticastDisabledError
	if !errors.As(err, &de) || de.Variable != "NCCL_NVLS_ENABLE" || de.Value != "0" {
		t.Fatalf("got %v, want a *MulticastDisabledError for NCCL_NVLS_ENABLE=0", err)
	}
}

func TestProbeDevice(t *testing.T) {
	sys := newFakeSys(fakeCfg{attr: func(dev cuda.Device, a cuda.DeviceAttribute) int {
		if dev == 1 && a == cuda.AttrMulticastSupported {
			return 0
		}
		return fabricAttr(dev, a)
	}})
	d := sys.driver(0, 0)
	for _, tc := range []struct {
		dev  cuda.Device
		want DeviceFacts
	}{
		{0, DeviceFacts{Device: 0, VMM: true, POSIXFD: true, Fabric: true, Multicast: true}},
		{1, DeviceFacts{Device: 1, VMM: true, POSIXFD: true, Fabric: true}},
	} {
		got, err := ProbeDevice(d, tc.dev)
		if err != nil || got != tc.want {
			t.Errorf("ProbeDevice(%d) = %+v, %v; want %+v", tc.dev, got, err, tc.want)
		}
	}
	d.setFailAt(len(d.callList()) + 2)
	if _, err := ProbeDevice(d, 0); err == nil || !strings.Contains(err.Error(), "injected") {
		t.Errorf("ProbeDevice with a failing driver: %v", err)
	}
}
