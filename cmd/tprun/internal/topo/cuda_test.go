package topo

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

func TestMapCUDAOrdinals(t *testing.T) {
	// NVML order deliberately differs from bus order: by bus the order is
	// nvml 1 (0x19), nvml 0 (0x3b), nvml 2 (0x5d), nvml 3 (0x9b). Bus ids
	// come in both the 8- and the 4-digit domain form.
	devs := []GPUIdentity{
		{NVMLIndex: 0, UUID: "GPU-3b3b3b3b-aaaa", PCIBusID: "00000000:3B:00.0", Name: "NVIDIA H200"},
		{NVMLIndex: 1, UUID: "GPU-1919aaaa-bbbb", PCIBusID: "0000:19:00.0", Name: "NVIDIA H200"},
		{NVMLIndex: 2, UUID: "GPU-5d5d5d5d-cccc", PCIBusID: "00000000:5d:00.0", Name: "NVIDIA H200"},
		{NVMLIndex: 3, UUID: "GPU-1919bbbb-dddd", PCIBusID: "00000000:9b:00.0", Name: "NVIDIA H200"},
	}
	mixed := slices.Clone(devs)
	mixed[2].Name = "NVIDIA H100 80GB HBM3"

	tests := []struct {
		desc     string
		devs     []GPUIdentity
		env      CUDAEnv
		want     []int
		warnings []string // substrings, in order; nil means none
	}{
		{"unset: every GPU in bus order", devs, CUDAEnv{}, []int{1, 0, 2, 3}, nil},
		{"PCI_BUS_ID order, unset", devs, CUDAEnv{DeviceOrder: "PCI_BUS_ID"}, []int{1, 0, 2, 3}, nil},
		{"indices reorder and hide", devs, CUDAEnv{VisibleDevices: "2,0", VisibleSet: true}, []int{2, 1}, nil},
		{"spaces around entries", devs, CUDAEnv{VisibleDevices: " 3 , 1", VisibleSet: true}, []int{3, 0}, nil},
		{"invalid index hides the rest (CUDA's own example)", devs, CUDAEnv{VisibleDevices: "0,2,-1,1", VisibleSet: true},
			[]int{1, 2}, []string{`entry 3 ("-1") is not an index of the 4 GPUs: CUDA ignores it and the 2 entries from it on`}},
		{"index out of range", devs, CUDAEnv{VisibleDevices: "1,4", VisibleSet: true}, []int{0}, []string{`entry 2 ("4")`}},
		{"full UUID", devs, CUDAEnv{VisibleDevices: "GPU-5d5d5d5d-cccc", VisibleSet: true}, []int{2}, nil},
		{"UUID prefix, any case", devs, CUDAEnv{VisibleDevices: "gpu-3B3B,0", VisibleSet: true}, []int{0, 1}, nil},
		{"ambiguous UUID prefix", devs, CUDAEnv{VisibleDevices: "3,GPU-1919", VisibleSet: true}, []int{3},
			[]string{"matches more than one GPU UUID"}},
		{"unknown UUID", devs, CUDAEnv{VisibleDevices: "GPU-ffff", VisibleSet: true}, nil, []string{"matches no GPU UUID"}},
		{"repeat", devs, CUDAEnv{VisibleDevices: "1,GPU-3b3b,2", VisibleSet: true}, []int{0},
			[]string{`entry 2 ("GPU-3b3b") names a GPU already listed: CUDA ignores it and the 2 entries`}},
		{"MIG instance", devs, CUDAEnv{VisibleDevices: "0,MIG-abcd", VisibleSet: true}, []int{1}, []string{"MIG instance"}},
		{"garbage", devs, CUDAEnv{VisibleDevices: "0x1", VisibleSet: true}, nil, []string{"neither an index nor a GPU UUID: CUDA ignores it and the 1 entry from it on"}},
		{"trailing comma", devs, CUDAEnv{VisibleDevices: "0,", VisibleSet: true}, []int{1}, []string{"is empty"}},
		{"set but empty: no GPU", devs, CUDAEnv{VisibleDevices: "", VisibleSet: true}, nil, []string{"set but empty"}},
		{"mixed models under FASTEST_FIRST: doubt", mixed, CUDAEnv{}, []int{1, 0, 2, 3}, []string{"FASTEST_FIRST"}},
		{"mixed models under PCI_BUS_ID: no doubt", mixed, CUDAEnv{DeviceOrder: "PCI_BUS_ID"}, []int{1, 0, 2, 3}, nil},
		{"unknown order", devs, CUDAEnv{DeviceOrder: "SLOWEST_FIRST"}, []int{1, 0, 2, 3}, []string{`"SLOWEST_FIRST"`}},
		{"no GPU at all", nil, CUDAEnv{}, nil, nil},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			got, warns := MapCUDAOrdinals(tc.devs, tc.env)
			if !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
			if len(warns) != len(tc.warnings) {
				t.Fatalf("warnings %q, want %d like %q", warns, len(tc.warnings), tc.warnings)
			}
			for i, w := range tc.warnings {
				if !strings.Contains(warns[i], w) {
					t.Errorf("warning %q lacks %q", warns[i], w)
				}
			}
		})
	}
}

// TestMapCUDAOrdinalsRandom checks the mapping against a direct model on
// random nodes: base order = bus order; visible indices pick from it.
func TestMapCUDAOrdinalsRandom(t *testing.T) {
	rng := newRand(t)
	for round := range 200 {
		n := 1 + rng.IntN(16)
		buses := rng.Perm(256)[:n]
		devs := make([]GPUIdentity, n)
		for i := range devs {
			devs[i] = GPUIdentity{NVMLIndex: i, PCIBusID: fmt.Sprintf("%08x:%02x:00.0", rng.IntN(2), buses[i]), UUID: randUUID(rng), Name: "G"}
		}
		base := slices.Clone(devs)
		slices.SortFunc(base, func(a, b GPUIdentity) int { return strings.Compare(normBusID(a.PCIBusID), normBusID(b.PCIBusID)) })

		all, warns := MapCUDAOrdinals(devs, CUDAEnv{})
		for k := range base {
			if all[k] != base[k].NVMLIndex || len(warns) != 0 {
				t.Fatalf("round %d: ordinal %d → nvml %d, want %d (%q)", round, k, all[k], base[k].NVMLIndex, warns)
			}
		}

		pick := rng.Perm(n)[:1+rng.IntN(n)]
		entries := make([]string, len(pick))
		for i, k := range pick {
			entries[i] = fmt.Sprint(k)
			if rng.IntN(2) == 0 {
				entries[i] = base[k].UUID // full UUIDs are unique
			}
		}
		got, warns := MapCUDAOrdinals(devs, CUDAEnv{VisibleDevices: strings.Join(entries, ","), VisibleSet: true})
		if len(got) != len(pick) || len(warns) != 0 {
			t.Fatalf("round %d: CUDA_VISIBLE_DEVICES=%s gave %v, %q", round, strings.Join(entries, ","), got, warns)
		}
		for i, k := range pick {
			if got[i] != base[k].NVMLIndex {
				t.Fatalf("round %d: ordinal %d → nvml %d, want %d", round, i, got[i], base[k].NVMLIndex)
			}
		}
	}
}

func TestParseDevices(t *testing.T) {
	tests := []struct {
		desc, in string
		want     []int
		err      string
		repeats  bool // ParseDeviceList, tprun's --devices
	}{
		{desc: "empty is the default", in: "  ", want: nil, err: ""},
		{desc: "list", in: "0,1, 3", want: []int{0, 1, 3}, err: ""},
		{desc: "range and single", in: "4-6,0", want: []int{4, 5, 6, 0}, err: ""},
		{desc: "one-element range", in: "2-2", want: []int{2}, err: ""},
		{desc: "negative", in: "-1", want: nil, err: "not a GPU number"},
		{desc: "inverted range", in: "3-1", want: nil, err: "not a GPU number"},
		{desc: "word", in: "all", want: nil, err: "not a GPU number"},
		{desc: "empty entry", in: "0,,1", want: nil, err: "not a GPU number"},
		{desc: "repeat through range", in: "1,0-2", want: nil, err: "GPU 1 is listed twice"},
		{desc: "absurd range", in: "0-99999999", want: nil, err: "beyond"},
		{desc: "absurd single", in: "5000", want: nil, err: "beyond"},
		{desc: "tprun --devices: repeats", in: "0-1,0-1,1", want: []int{0, 1, 0, 1, 1}, err: "", repeats: true},
		{desc: "tprun --devices: still checked", in: "0,x", want: nil, err: `entry "x" is not a GPU number`, repeats: true},
		{desc: "tprun --devices: empty", in: "", want: nil, err: "", repeats: true},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			parse := ParseDevices
			if tc.repeats {
				parse = ParseDeviceList
			}
			got, err := parse(tc.in)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Errorf("err %v, want one containing %q", err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("got %v, %v; want %v", got, err, tc.want)
			}
		})
	}
}
