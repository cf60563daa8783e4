package topo

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// noDriverError is ErrNoDriver with the NVML code that led to it.
type noDriverError struct {
	detail string
	ret    nvml.Return
}

func (e *noDriverError) Error() string {
	return fmt.Sprintf("no NVIDIA driver found (%s)", e.detail)
}

func (e *noDriverError) Is(target error) bool { return target == ErrNoDriver }
func (e *noDriverError) Unwrap() error        { return e.ret }

// Preflight checks the GPUs the job described by opts will use and decides
// the mailbox backend. It calls lib.Init first and, when Init succeeded,
// lib.Shutdown before it returns; NVML counts Init calls, so a caller that
// holds its own Init keeps its session.
//
// Results:
//   - (report, nil): the job may run; report.Verdict.Backend says how.
//   - (report, *CheckError): the check ran and refused; errors.Is(err,
//     ErrRefused). The report says why in full.
//   - (nil, err with ErrNoDriver): no NVML library or no kernel driver.
//   - (nil, *NVMLError or ctx error): NVML failed where the check could not
//     go on, or ctx ended between NVML calls.
func Preflight(ctx context.Context, lib nvml.Interface, opts Options) (*Report, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("topology check: %w", err)
	}
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return nil, &noDriverError{detail: "libnvidia-ml.so.1 not loadable", ret: ret}
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, &noDriverError{detail: "the NVIDIA kernel driver is not loaded", ret: ret}
	default:
		return nil, &NVMLError{Op: "Init", Device: -1, Ret: ret}
	}
	r, err := collect(ctx, lib, opts, lookup)
	if ret := lib.Shutdown(); ret != nvml.SUCCESS && r != nil {
		r.Warnings = append(r.Warnings, "nvml Shutdown: "+retName(ret))
	}
	if err != nil {
		return nil, err
	}
	judge(r, opts, lookup)
	if !r.Verdict.OK {
		return r, &CheckError{Problems: slices.Clone(r.Verdict.Problems)}
	}
	return r, nil
}

// collect reads everything from NVML; judging happens after Shutdown.
func collect(ctx context.Context, lib nvml.Interface, opts Options, lookup func(string) (string, bool)) (*Report, error) {
	r := &Report{
		Schema:   Schema,
		TP:       opts.TP,
		Ranks:    []int{},
		Devices:  []Device{},
		Pairs:    []Pair{},
		Warnings: []string{},
		Verdict:  Verdict{MulticastBlockers: []string{}, Problems: []string{}},
	}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		r.DriverVersion = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS {
		r.CUDADriverVersion = fmt.Sprintf("%d.%d", v/1000, v%1000/10)
	}
	n, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, &NVMLError{Op: "DeviceGetCount", Device: -1, Ret: ret}
	}
	r.NVMLDevices = n

	handles := make([]nvml.Device, n)
	ids := make([]GPUIdentity, n)
	for i := range n {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("topology check: %w", err)
		}
		h, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, &NVMLError{Op: "DeviceGetHandleByIndex", Device: i, Ret: ret}
		}
		pci, ret := h.GetPciInfo()
		if ret != nvml.SUCCESS {
			// Without the bus id CUDA ordinals cannot be matched to NVML
			// devices, and every later finding could be about the wrong GPU.
			return nil, &NVMLError{Op: "DeviceGetPciInfo", Device: i, Ret: ret}
		}
		handles[i] = h
		ids[i] = GPUIdentity{NVMLIndex: i, PCIBusID: busID(pci)}
		if u, ret := h.GetUUID(); ret == nvml.SUCCESS {
			ids[i].UUID = u
		} else {
			r.Warnings = append(r.Warnings, fmt.Sprintf("nvml device %d: UUID not reported (%s)", i, retName(ret)))
		}
		if name, ret := h.GetName(); ret == nvml.SUCCESS {
			ids[i].Name = name
		} else {
			r.Warnings = append(r.Warnings, fmt.Sprintf("nvml device %d: name not reported (%s)", i, retName(ret)))
		}
	}

	env := cudaEnvFrom(lookup)
	nvmlByOrdinal, warns := MapCUDAOrdinals(ids, env)
	r.Warnings = append(r.Warnings, warns...)
	r.CUDA = CUDA{DeviceOrder: env.DeviceOrder, NVMLIndex: append([]int{}, nvmlByOrdinal...)}
	if env.VisibleSet {
		r.CUDA.VisibleDevices = &env.VisibleDevices
	}

	ranks, problems := selectRanks(opts, len(nvmlByOrdinal))
	r.Ranks = ranks
	r.Verdict.Problems = append(r.Verdict.Problems, problems...)

	perDevice := map[int]int{}
	for _, ord := range ranks {
		perDevice[ord]++
	}
	distinct := slices.Sorted(maps.Keys(perDevice))
	gpuBus := make(map[string]bool, n)
	for _, id := range ids {
		gpuBus[normBusID(id.PCIBusID)] = true
	}

	used := make([]nvml.Device, 0, len(distinct))
	for _, ord := range distinct {
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("topology check: %w", err)
		}
		idx := nvmlByOrdinal[ord]
		d := readDevice(handles[idx], ids[idx], ord, perDevice[ord], gpuBus, &r.Warnings)
		r.Devices = append(r.Devices, d)
		used = append(used, handles[idx])
	}
	for i := range r.Devices {
		for j := i + 1; j < len(r.Devices); j++ {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("topology check: %w", err)
			}
			r.Pairs = append(r.Pairs, readPair(used[i], used[j], &r.Devices[i], &r.Devices[j], &r.Warnings))
		}
	}
	dir := opts.IMEXDir
	if dir == "" {
		dir = DefaultIMEXDir
	}
	r.CrossNode = judgeCrossNode(r.Devices, dir)
	return r, nil
}

// selectRanks turns opts into the CUDA ordinal of every rank, given how
// many devices CUDA sees, and lists what is wrong with the request.
func selectRanks(opts Options, visible int) (ranks []int, problems []string) {
	ranks = []int{}
	sel := opts.Devices
	switch {
	case opts.TP < 0:
		return ranks, []string{fmt.Sprintf("tp %d: must be at least 1", opts.TP)}
	case opts.TP > 0 && sel == nil:
		if visible < opts.TP {
			problems = append(problems, fmt.Sprintf("tp %d needs %d GPUs but CUDA sees %d", opts.TP, opts.TP, visible))
		}
		for i := range min(opts.TP, visible) {
			sel = append(sel, i)
		}
	case opts.TP > 0:
		if len(sel) < opts.TP {
			problems = append(problems, fmt.Sprintf("tp %d needs %d GPUs but --devices lists %d", opts.TP, opts.TP, len(sel)))
		} else {
			sel = sel[:opts.TP]
		}
	case sel == nil:
		for i := range visible {
			sel = append(sel, i)
		}
	}
	if visible == 0 {
		problems = append(problems, "CUDA sees no GPU")
	}
	for _, ord := range sel {
		if ord < 0 || ord >= visible {
			problems = append(problems, fmt.Sprintf("GPU %d: CUDA sees only %d GPU%s", ord, visible, plural(visible, "", "s")))
			continue
		}
		ranks = append(ranks, ord)
	}
	return ranks, problems
}

// readDevice reads one device's own properties. Failures to answer become
// warnings; absences normal for the hardware (no MIG, no NVLink, no fabric)
// do not.
func readDevice(h nvml.Device, id GPUIdentity, ord, ranks int, gpuBus map[string]bool, warnings *[]string) Device {
	d := Device{
		CUDAOrdinal: ord,
		NVMLIndex:   id.NVMLIndex,
		Ranks:       ranks,
		UUID:        id.UUID,
		Name:        id.Name,
		PCIBusID:    id.PCIBusID,
		ccMajor:     -1,
		ccMinor:     -1,
		computeMode: -1,
	}
	label := gpuLabel(ord, id.NVMLIndex)
	warn := func(format string, args ...any) {
		*warnings = append(*warnings, label+": "+fmt.Sprintf(format, args...))
	}

	if major, minor, ret := h.GetCudaComputeCapability(); ret == nvml.SUCCESS {
		d.ccMajor, d.ccMinor = major, minor
		d.ComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	} else {
		warn("compute capability not reported (%s)", retName(ret))
	}

	switch cur, pending, ret := h.GetMigMode(); ret {
	case nvml.SUCCESS:
		d.migEnabled = cur == nvml.DEVICE_MIG_ENABLE
		d.migPending = pending == nvml.DEVICE_MIG_ENABLE && !d.migEnabled
		d.MIG = map[bool]string{true: "enabled", false: "disabled"}[d.migEnabled]
		if pending != cur {
			d.MIG += map[bool]string{true: ", enabled after reset", false: ", disabled after reset"}[pending == nvml.DEVICE_MIG_ENABLE]
		}
	case nvml.ERROR_NOT_SUPPORTED:
		d.MIG = "not supported" // a GPU without MIG: nothing to warn about
	default:
		d.MIG = "not reported"
		warn("MIG mode not reported (%s)", retName(ret))
	}

	if cm, ret := h.GetComputeMode(); ret == nvml.SUCCESS {
		d.computeMode = int(cm)
		d.ComputeMode = computeModeName(cm)
	} else {
		d.ComputeMode = "not reported"
		warn("compute mode not reported (%s)", retName(ret))
	}

	d.NVLink = readLinks(h, gpuBus, warn)
	d.Fabric, d.fabricCompleted = readFabric(h, d.NVLink, warn)
	return d
}

// readLinks walks every possible NVLink of a device. NVML answers
// NOT_SUPPORTED or INVALID_ARGUMENT for links the GPU does not have, which
// on a PCIe-only GPU is every one of them.
func readLinks(h nvml.Device, gpuBus map[string]bool, warn func(string, ...any)) NVLink {
	nl := NVLink{Links: []Link{}}
	var stateErr, versionErr, remoteErr nvml.Return = nvml.SUCCESS, nvml.SUCCESS, nvml.SUCCESS
	var inactive []string
	for l := range nvml.NVLINK_MAX_LINKS {
		state, ret := h.GetNvLinkState(l)
		if ret == nvml.ERROR_NOT_SUPPORTED || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue
		}
		if ret != nvml.SUCCESS {
			stateErr = ret
			break
		}
		link := Link{Link: l, Active: state == nvml.FEATURE_ENABLED, Remote: "unknown"}
		if !link.Active {
			nl.Inactive++
			inactive = append(inactive, fmt.Sprint(l))
			nl.Links = append(nl.Links, link)
			continue
		}
		nl.Active++
		if v, ret := h.GetNvLinkVersion(l); ret == nvml.SUCCESS {
			link.Version, link.VersionName = v, nvlinkVersionName(v)
		} else if versionErr == nvml.SUCCESS {
			versionErr = ret
		}
		if pci, ret := h.GetNvLinkRemotePciInfo(l); ret == nvml.SUCCESS {
			link.RemotePCIBusID = busID(pci)
		} else if remoteErr == nvml.SUCCESS {
			remoteErr = ret
		}
		if t, ret := h.GetNvLinkRemoteDeviceType(l); ret == nvml.SUCCESS {
			switch t {
			case nvml.NVLINK_DEVICE_TYPE_GPU:
				link.Remote = "gpu"
			case nvml.NVLINK_DEVICE_TYPE_SWITCH:
				link.Remote = "nvswitch"
			default:
				link.Remote = "other"
			}
		} else if link.RemotePCIBusID != "" {
			// Older drivers lack the remote type. The far end of an NVLink
			// is a GPU or an NVSwitch; NVML lists every GPU of the node,
			// so a bus id that is not one of them is a switch.
			link.Remote = map[bool]string{true: "gpu", false: "nvswitch"}[gpuBus[normBusID(link.RemotePCIBusID)]]
		}
		if link.Remote == "nvswitch" {
			nl.ToNVSwitch++
		}
		nl.Links = append(nl.Links, link)
	}

	switch {
	case stateErr != nvml.SUCCESS && len(nl.Links) == 0:
		nl.Status = "not reported"
		warn("NVLink state not reported (%s)", retName(stateErr))
	case stateErr != nvml.SUCCESS:
		nl.Status = "reported"
		warn("NVLink state of links after %d not reported (%s)", nl.Links[len(nl.Links)-1].Link, retName(stateErr))
	case len(nl.Links) == 0:
		nl.Status = "none"
	default:
		nl.Status = "reported"
	}
	if nl.Inactive > 0 {
		total := nl.Active + nl.Inactive
		if nl.Active == 0 {
			warn("NVLink down: all %d links inactive", total)
		} else {
			warn("NVLink degraded: %d of %d links inactive (link%s %s)", nl.Inactive, total, plural(nl.Inactive, "", "s"), strings.Join(inactive, ", "))
		}
	}
	if versionErr != nvml.SUCCESS {
		warn("NVLink version not reported (%s)", retName(versionErr))
	}
	if remoteErr != nvml.SUCCESS {
		warn("NVLink far end not reported (%s)", retName(remoteErr))
	}
	return nl
}

// readFabric reads the GPU fabric registration. It reports completed only
// when the fabric manager finished and the registration itself succeeded.
func readFabric(h nvml.Device, nl NVLink, warn func(string, ...any)) (Fabric, bool) {
	// GetGpuFabricInfoV returns a handler whose device field only the real
	// library can fill, so mocks cannot serve it; v1 has the state and
	// clique the verdict needs and exists on every driver that has v2+.
	info, ret := h.GetGpuFabricInfo()
	switch {
	case ret == nvml.ERROR_NOT_SUPPORTED:
		if nl.ToNVSwitch > 0 {
			warn("GPU fabric state not reported although its NVLinks reach an NVSwitch (%s)", retName(ret))
		}
		return Fabric{State: "not reported"}, false
	case ret != nvml.SUCCESS:
		warn("GPU fabric state not reported (%s)", retName(ret))
		return Fabric{State: "not reported"}, false
	}
	f := Fabric{Clique: info.CliqueId, ClusterUUID: uuidString(info.ClusterUuid)}
	switch info.State {
	case nvml.GPU_FABRIC_STATE_COMPLETED:
		f.State = "completed"
		f.Status = retName(nvml.Return(info.Status))
	case nvml.GPU_FABRIC_STATE_IN_PROGRESS:
		f.State = "in progress"
	case nvml.GPU_FABRIC_STATE_NOT_STARTED:
		f.State = "not started"
	case nvml.GPU_FABRIC_STATE_NOT_SUPPORTED:
		f.State = "not supported"
	default:
		f.State = fmt.Sprintf("unknown (%d)", info.State)
	}
	return f, info.State == nvml.GPU_FABRIC_STATE_COMPLETED && nvml.Return(info.Status) == nvml.SUCCESS
}

// readPair reads what joins two devices, both directions.
func readPair(ha, hb nvml.Device, a, b *Device, warnings *[]string) Pair {
	la, lb := gpuLabel(a.CUDAOrdinal, a.NVMLIndex), gpuLabel(b.CUDAOrdinal, b.NVMLIndex)
	p := Pair{
		A:      a.CUDAOrdinal,
		B:      b.CUDAOrdinal,
		Read:   p2pStatus(ha, hb, la, lb, nvml.P2P_CAPS_INDEX_READ),
		Write:  p2pStatus(ha, hb, la, lb, nvml.P2P_CAPS_INDEX_WRITE),
		NVLink: p2pStatus(ha, hb, la, lb, nvml.P2P_CAPS_INDEX_NVLINK),
	}

	code := "?"
	if lvl, ret := ha.GetTopologyCommonAncestor(hb); ret == nvml.SUCCESS {
		p.PCIe, code = levelWords(lvl)
	} else {
		p.PCIe = "not reported"
		*warnings = append(*warnings, fmt.Sprintf("%s ↔ %s: PCIe common ancestor not reported (%s)", la, lb, retName(ret)))
	}
	p.NVLinks = nvlinksBetween(a, b)
	switch {
	case p.NVLinks > 0:
		p.Cell, p.Path = fmt.Sprintf("NV%d", p.NVLinks), "NVLink"
	case p.NVLink.OK:
		p.Cell, p.Path = "NV", "NVLink" // NVML says NVLink P2P works but not over how many links
	default:
		p.Cell, p.Path = code, p.PCIe
	}
	return p
}

// p2pStatus asks NVML for one P2P capability both ways. OK needs both
// directions to say OK: unicast writes go both ways.
func p2pStatus(ha, hb nvml.Device, la, lb string, idx nvml.GpuP2PCapsIndex) P2P {
	res := P2P{OK: true, Reported: true}
	var why []string
	for _, dir := range []struct {
		from, to nvml.Device
		lf, lt   string
	}{{ha, hb, la, lb}, {hb, ha, lb, la}} {
		s, ret := dir.from.GetP2PStatus(dir.to, idx)
		switch {
		case ret != nvml.SUCCESS:
			res.OK, res.Reported = false, false
			why = append(why, fmt.Sprintf("%s → %s: not reported (%s)", dir.lf, dir.lt, retName(ret)))
		case s != nvml.P2P_STATUS_OK:
			res.OK, res.denied = false, true
			why = append(why, fmt.Sprintf("%s → %s: %s", dir.lf, dir.lt, p2pWords(s)))
		}
	}
	res.Status = "ok"
	if len(why) > 0 {
		res.Status = strings.Join(why, "; ")
	}
	return res
}

// nvlinksBetween counts the links joining a and b: direct links from a to
// b, plus, when both reach NVSwitches, the smaller of their switch link
// counts (every GPU on an HGX board reaches every NVSwitch, which is how
// nvidia-smi shows NV18 for every pair).
func nvlinksBetween(a, b *Device) int {
	direct := 0
	for _, l := range a.NVLink.Links {
		if l.Active && l.RemotePCIBusID != "" && normBusID(l.RemotePCIBusID) == normBusID(b.PCIBusID) {
			direct++
		}
	}
	return direct + min(a.NVLink.ToNVSwitch, b.NVLink.ToNVSwitch)
}

// levelWords names an NVML PCIe topology level the way people and
// `nvidia-smi topo -m` do.
func levelWords(l nvml.GpuTopologyLevel) (words, code string) {
	switch l {
	case nvml.TOPOLOGY_INTERNAL:
		return "the same board", "BRD"
	case nvml.TOPOLOGY_SINGLE:
		return "a single PCIe switch", "PIX"
	case nvml.TOPOLOGY_MULTIPLE:
		return "several PCIe switches", "PXB"
	case nvml.TOPOLOGY_HOSTBRIDGE:
		return "a PCIe host bridge", "PHB"
	case nvml.TOPOLOGY_NODE:
		return "the CPU (host bridges of one NUMA node)", "NODE"
	case nvml.TOPOLOGY_SYSTEM:
		return "the CPU interconnect between NUMA nodes", "SYS"
	}
	return fmt.Sprintf("unknown PCIe level %d", l), "?"
}

func p2pWords(s nvml.GpuP2PStatus) string {
	switch s {
	case nvml.P2P_STATUS_OK:
		return "ok"
	case nvml.P2P_STATUS_CHIPSET_NOT_SUPPORTED:
		return "not supported by the chipset"
	case nvml.P2P_STATUS_GPU_NOT_SUPPORTED:
		return "not supported by the GPU"
	case nvml.P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED:
		return "not supported across this PCIe topology (IOH)"
	case nvml.P2P_STATUS_DISABLED_BY_REGKEY:
		return "disabled by a driver registry key"
	case nvml.P2P_STATUS_NOT_SUPPORTED:
		return "not supported"
	case nvml.P2P_STATUS_UNKNOWN:
		return "unknown"
	}
	return fmt.Sprintf("status %d", s)
}

func computeModeName(cm nvml.ComputeMode) string {
	switch cm {
	case nvml.COMPUTEMODE_DEFAULT:
		return "default"
	case nvml.COMPUTEMODE_EXCLUSIVE_THREAD:
		return "exclusive-thread"
	case nvml.COMPUTEMODE_PROHIBITED:
		return "prohibited"
	case nvml.COMPUTEMODE_EXCLUSIVE_PROCESS:
		return "exclusive-process"
	}
	return fmt.Sprintf("unknown (%d)", cm)
}

func nvlinkVersionName(v uint32) string {
	names := [...]string{"invalid", "1.0", "2.0", "2.2", "3.0", "3.1", "4.0", "5.0", "6.0"}
	if int(v) < len(names) {
		return names[v]
	}
	return fmt.Sprintf("unknown (%d)", v)
}

// retName names an NVML result the same way whether or not the real
// library is loaded (its own strings differ from go-nvml's fallback), so
// reports and JSON are stable.
func retName(r nvml.Return) string {
	switch r {
	case nvml.SUCCESS:
		return "SUCCESS"
	case nvml.ERROR_UNINITIALIZED:
		return "UNINITIALIZED"
	case nvml.ERROR_INVALID_ARGUMENT:
		return "INVALID_ARGUMENT"
	case nvml.ERROR_NOT_SUPPORTED:
		return "NOT_SUPPORTED"
	case nvml.ERROR_NO_PERMISSION:
		return "NO_PERMISSION"
	case nvml.ERROR_NOT_FOUND:
		return "NOT_FOUND"
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return "DRIVER_NOT_LOADED"
	case nvml.ERROR_TIMEOUT:
		return "TIMEOUT"
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return "LIBRARY_NOT_FOUND"
	case nvml.ERROR_FUNCTION_NOT_FOUND:
		return "FUNCTION_NOT_FOUND"
	case nvml.ERROR_GPU_IS_LOST:
		return "GPU_IS_LOST"
	case nvml.ERROR_RESET_REQUIRED:
		return "RESET_REQUIRED"
	case nvml.ERROR_IN_USE:
		return "IN_USE"
	case nvml.ERROR_NO_DATA:
		return "NO_DATA"
	case nvml.ERROR_ARGUMENT_VERSION_MISMATCH:
		return "ARGUMENT_VERSION_MISMATCH"
	case nvml.ERROR_UNKNOWN:
		return "UNKNOWN"
	}
	return fmt.Sprintf("NVML error %d", int32(r))
}

// busID reads the bus id string NVML filled in, falling back to the
// numeric fields when it is empty.
func busID(p nvml.PciInfo) string {
	var b strings.Builder
	for _, c := range p.BusId {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	if b.Len() > 0 {
		return b.String()
	}
	return fmt.Sprintf("%08x:%02x:%02x.0", p.Domain, p.Bus, p.Device)
}

func uuidString(u [16]uint8) string {
	if u == [16]uint8{} {
		return ""
	}
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// gpuLabel names a device by CUDA ordinal, which is what ranks and
// --devices use, adding NVML's index (nvidia-smi's) when they differ.
func gpuLabel(ord, nvmlIndex int) string {
	if ord == nvmlIndex {
		return fmt.Sprintf("GPU %d", ord)
	}
	return fmt.Sprintf("GPU %d (nvidia-smi %d)", ord, nvmlIndex)
}
