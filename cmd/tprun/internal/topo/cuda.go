package topo

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// GPUIdentity is what CUDA's device numbering depends on, for one NVML
// device.
type GPUIdentity struct {
	NVMLIndex int
	UUID      string // "GPU-…", as NVML reports it
	PCIBusID  string // as NVML reports it, e.g. "00000000:19:00.0"
	Name      string // model; FASTEST_FIRST ordering depends on it
}

// CUDAEnv holds the variables CUDA reads when it initializes to decide which
// GPUs a process sees and in which order.
type CUDAEnv struct {
	VisibleDevices string // CUDA_VISIBLE_DEVICES
	VisibleSet     bool   // whether CUDA_VISIBLE_DEVICES is set at all ("" hides every GPU)
	DeviceOrder    string // CUDA_DEVICE_ORDER; "" means CUDA's default, FASTEST_FIRST
}

// cudaEnvFrom reads the CUDA variables through lookup.
func cudaEnvFrom(lookup func(string) (string, bool)) CUDAEnv {
	vis, set := lookup("CUDA_VISIBLE_DEVICES")
	order, _ := lookup("CUDA_DEVICE_ORDER")
	return CUDAEnv{VisibleDevices: vis, VisibleSet: set, DeviceOrder: order}
}

// MapCUDAOrdinals returns the NVML index of every device CUDA will show a
// process started with env, in CUDA ordinal order (result[ordinal] = NVML
// index), and warnings about anything that makes the result doubtful or
// differ from what the user probably meant.
//
// The base order is PCI bus id order, which is exactly what CUDA uses with
// CUDA_DEVICE_ORDER=PCI_BUS_ID. Under the default FASTEST_FIRST CUDA puts
// the fastest device first and breaks ties by PCI bus id; this function
// cannot rank speeds, so it assumes PCI bus order, which is right when all
// devices are the same model and is flagged with a warning when they are
// not (set CUDA_DEVICE_ORDER=PCI_BUS_ID to remove the doubt).
//
// CUDA_VISIBLE_DEVICES is read the way CUDA documents it: a comma-separated
// list of indices into the base order or of GPU UUIDs ("GPU-" followed by
// enough leading characters to name one device); the devices appear in list
// order; the first invalid entry hides itself and every entry after it. An
// entry naming a device already listed is treated as invalid too. MIG
// instances ("MIG-…") are not supported by tprun and end the list.
func MapCUDAOrdinals(devs []GPUIdentity, env CUDAEnv) (nvmlByOrdinal []int, warnings []string) {
	base := slices.Clone(devs)
	slices.SortStableFunc(base, func(a, b GPUIdentity) int {
		return strings.Compare(normBusID(a.PCIBusID), normBusID(b.PCIBusID))
	})

	switch strings.TrimSpace(env.DeviceOrder) {
	case "PCI_BUS_ID":
	case "", "FASTEST_FIRST":
		if !sameNames(base) {
			warnings = append(warnings, "CUDA_DEVICE_ORDER is FASTEST_FIRST (the default) and the GPUs are not all the same model: "+
				"CUDA numbers the fastest first, tprun assumed PCI bus order; set CUDA_DEVICE_ORDER=PCI_BUS_ID to be sure")
		}
	default:
		warnings = append(warnings, fmt.Sprintf("CUDA_DEVICE_ORDER=%q is not PCI_BUS_ID or FASTEST_FIRST; assumed PCI bus order", env.DeviceOrder))
	}

	if !env.VisibleSet {
		for _, d := range base {
			nvmlByOrdinal = append(nvmlByOrdinal, d.NVMLIndex)
		}
		return nvmlByOrdinal, warnings
	}

	if strings.TrimSpace(env.VisibleDevices) == "" {
		return nil, append(warnings, "CUDA_VISIBLE_DEVICES is set but empty: CUDA sees no GPU")
	}
	entries := strings.Split(env.VisibleDevices, ",")
	seen := make(map[int]bool, len(entries))
	for i, raw := range entries {
		pos, why := resolveVisible(strings.TrimSpace(raw), base)
		if why == "" && seen[pos] {
			why = "names a GPU already listed"
		}
		if why != "" {
			hidden := len(entries) - i
			warnings = append(warnings, fmt.Sprintf("CUDA_VISIBLE_DEVICES entry %d (%q) %s: CUDA ignores it and the %d entr%s from it on",
				i+1, raw, why, hidden, plural(hidden, "y", "ies")))
			break
		}
		seen[pos] = true
		nvmlByOrdinal = append(nvmlByOrdinal, base[pos].NVMLIndex)
	}
	return nvmlByOrdinal, warnings
}

// resolveVisible finds one CUDA_VISIBLE_DEVICES entry in the base order and
// returns its position there, or a reason why CUDA will not accept it.
func resolveVisible(e string, base []GPUIdentity) (pos int, why string) {
	switch {
	case e == "":
		return 0, "is empty"
	case hasPrefixFold(e, "MIG-"):
		return 0, "is a MIG instance, which tprun does not support"
	case hasPrefixFold(e, "GPU-"):
		found := -1
		for i, d := range base {
			if hasPrefixFold(d.UUID, e) {
				if found >= 0 {
					return 0, "matches more than one GPU UUID"
				}
				found = i
			}
		}
		if found < 0 {
			return 0, "matches no GPU UUID"
		}
		return found, ""
	}
	n, err := strconv.Atoi(e)
	switch {
	case err != nil:
		return 0, "is neither an index nor a GPU UUID"
	case n < 0 || n >= len(base):
		return 0, fmt.Sprintf("is not an index of the %d GPUs", len(base))
	}
	return n, ""
}

// normBusID makes PCI bus ids comparable: lower case, 8-digit domain, so
// that string order is bus order.
func normBusID(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	parts := strings.Split(s, ":")
	if len(parts) == 3 && len(parts[0]) < 8 {
		parts[0] = strings.Repeat("0", 8-len(parts[0])) + parts[0]
	}
	return strings.Join(parts, ":")
}

func sameNames(devs []GPUIdentity) bool {
	for _, d := range devs {
		if d.Name != devs[0].Name {
			return false
		}
	}
	return true
}

func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

// maxOrdinal bounds --devices so that a typo like "0-99999999" cannot
// allocate a huge list; no node has this many GPUs.
const maxOrdinal = 1023

// ParseDevices reads a --devices value: CUDA ordinals separated by commas,
// each a number or an inclusive range ("0-3,6"). An empty value gives nil
// (the default selection). Negative numbers, inverted ranges and repeats
// are errors.
func ParseDevices(s string) ([]int, error) { return parseDevices(s, false) }

// ParseDeviceList reads tprun's own --devices: the same syntax, one entry
// per rank, so a GPU may appear more than once (those ranks share it).
func ParseDeviceList(s string) ([]int, error) { return parseDevices(s, true) }

func parseDevices(s string, repeats bool) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	seen := map[int]bool{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, errA := strconv.Atoi(strings.TrimSpace(lo))
		b, errB := a, error(nil)
		if isRange {
			b, errB = strconv.Atoi(strings.TrimSpace(hi))
		}
		if errA != nil || errB != nil || a < 0 || b < a {
			return nil, fmt.Errorf("--devices %q: entry %q is not a GPU number or an a-b range", s, part)
		}
		if b > maxOrdinal {
			return nil, fmt.Errorf("--devices %q: GPU %d is beyond %d", s, b, maxOrdinal)
		}
		for d := a; d <= b; d++ {
			if seen[d] && !repeats {
				return nil, fmt.Errorf("--devices %q: GPU %d is listed twice", s, d)
			}
			seen[d] = true
			out = append(out, d)
		}
	}
	return out, nil
}
