package tp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// DeviceInputs are one step's operands in device memory, raw bf16,
// row-major but for a weight passed with the step, which must be packed
// (WeightPacked), every pointer 16-byte aligned (the operation is written
// out in package kernel's documentation).
type DeviceInputs struct {
	M int // rows this step, 1..the maxM given to NewUpProjection
	// Latent is [M, latent_dim], row stride latent_dim, the same on every rank.
	Latent DevicePtr
	// Weight is [shard, latent_dim]: this rank's rows of the full weight
	// in the kernels' packed layout (PackWeight, PackedWeightLen
	// elements), with WeightPacked set to say so. Zero uses the op's own
	// copy (SetWeight, SetWeightDevice), the usual way: the op packs it
	// once. A row-major weight here (WeightPacked false) is refused with
	// ErrArgument before anything runs: the kernels read only the packed
	// layout and there is no packing kernel, so give a row-major device
	// weight once with SetWeightDevice instead.
	Weight       DevicePtr
	WeightPacked bool
	// Shared holds element (m, n) of this rank's [M, shard] slice at
	// element m*SharedStride + n; SharedStride is a multiple of 8 and at
	// least shard (hidden_dim when Shared points at column rank*shard of
	// the full [M, hidden_dim] tensor).
	Shared       DevicePtr
	SharedStride int
}

// DeviceStep is one step of a captured sequence: its operands and where
// the whole [M, hidden_dim] block goes (16-byte aligned device memory that
// does not overlap the operands, nor any later step's Weight: see
// Capture).
type DeviceStep struct {
	In  DeviceInputs
	Out DevicePtr
}

// WithDevice sets the CUDA device ordinal of this rank. The default is the
// group's Device() when the Exchanger has that method (a *Group does),
// else 0.
func WithDevice(ordinal int) UpOption {
	return func(c *upConfig) { c.device, c.deviceSet = ordinal, true }
}

// withCUDADriver makes the op use drv instead of the process's driver; the
// caller closes it after the op. Tests that bring their own driver use it.
func withCUDADriver(drv *cuda.Driver) UpOption {
	return func(c *upConfig) { c.drv = drv }
}

// gpuProbe is one rank's view of its device, all-gathered by
// ResolveMailbox.
type gpuProbe struct {
	usable bool
	why    string // when not usable
	facts  mailbox.DeviceFacts
	peers  uint64 // bit d: this rank's device can map device d's memory
	// mcBlockedBy is "NAME=value" when a variable of the multicast safety
	// rule is set in this rank's environment, else "". It travels so that
	// every rank applies every rank's rule and all pick the same backend.
	mcBlockedBy string
}

const (
	probeMagic     = 0x54504750 // "TPGP"
	probeFixed     = 4 + 1 + 4 + 1 + 8
	maxProbeText   = 512
	maxBlockedText = 255 // its length travels in one byte
)

func (p gpuProbe) encode() []byte {
	b := binary.LittleEndian.AppendUint32(nil, probeMagic)
	var flags byte
	for i, f := range []bool{p.usable, p.facts.VMM, p.facts.POSIXFD, p.facts.Fabric, p.facts.Multicast} {
		if f {
			flags |= 1 << i
		}
	}
	b = append(b, flags)
	b = binary.LittleEndian.AppendUint32(b, uint32(int32(p.facts.Device)))
	blocked := p.mcBlockedBy
	if len(blocked) > maxBlockedText {
		blocked = blocked[:maxBlockedText]
	}
	b = append(b, byte(len(blocked)))
	b = binary.LittleEndian.AppendUint64(b, p.peers)
	b = append(b, blocked...)
	why := p.why
	if len(why) > maxProbeText {
		why = why[:maxProbeText]
	}
	return append(b, why...)
}

func decodeProbe(b []byte) (gpuProbe, error) {
	if len(b) < probeFixed || binary.LittleEndian.Uint32(b) != probeMagic {
		return gpuProbe{}, fmt.Errorf("GPU probe of %d bytes without its header", len(b))
	}
	nb := int(b[9])
	if len(b) < probeFixed+nb {
		return gpuProbe{}, fmt.Errorf("GPU probe of %d bytes cut short in its %d-byte safety variable", len(b), nb)
	}
	if len(b) > probeFixed+nb+maxProbeText {
		return gpuProbe{}, fmt.Errorf("GPU probe of %d bytes, at most %d allowed", len(b), probeFixed+nb+maxProbeText)
	}
	flags := b[4]
	bit := func(i int) bool { return flags&(1<<i) != 0 }
	p := gpuProbe{usable: bit(0), facts: mailbox.DeviceFacts{
		Device: int(int32(binary.LittleEndian.Uint32(b[5:]))),
		VMM:    bit(1), POSIXFD: bit(2), Fabric: bit(3), Multicast: bit(4),
	}}
	p.peers = binary.LittleEndian.Uint64(b[10:])
	p.mcBlockedBy = string(b[probeFixed : probeFixed+nb])
	p.why = string(b[probeFixed+nb:])
	if p.usable && (p.facts.Device < 0 || p.facts.Device > 63) {
		return gpuProbe{}, fmt.Errorf("GPU probe names device %d, want 0..63", p.facts.Device)
	}
	return p, nil
}

// minComputeMajor is the oldest compute capability (major) the kernels
// run on: the fatbin's oldest SASS is sm_90.
const minComputeMajor = 9

// probeGPU reads what Resolve needs about device ordinal on this rank.
// drv nil means no driver here; noDrv says why. A GPU older than
// minComputeMajor is no GPU for the op.
func probeGPU(drv *cuda.Driver, noDrv error, ordinal int) gpuProbe {
	if drv == nil {
		why := "no CUDA driver"
		if noDrv != nil {
			why = noDrv.Error()
		}
		return gpuProbe{why: why}
	}
	fail := func(err error) gpuProbe { return gpuProbe{why: fmt.Sprintf("device %d: %v", ordinal, err)} }
	n, err := drv.DeviceCount()
	if err != nil {
		return fail(err)
	}
	if ordinal < 0 || ordinal >= n || ordinal > 63 {
		return fail(fmt.Errorf("no such device (the driver sees %d)", n))
	}
	dev, err := drv.DeviceGet(ordinal)
	if err != nil {
		return fail(err)
	}
	// The kernels are built for sm_90 and sm_100 (and PTX for newer): an
	// older GPU (an A100, compute capability 8.0) cannot load them, so it
	// counts as no GPU, with the reason, before any setup.
	major, minor, err := drv.ComputeCapability(dev)
	if err != nil {
		return fail(err)
	}
	if major < minComputeMajor {
		name, err := drv.DeviceName(dev)
		if err != nil {
			name = "the GPU"
		}
		return fail(fmt.Errorf("%s has compute capability %d.%d, and tprun's kernels need %d.0 or newer (Hopper, Blackwell)",
			name, major, minor, minComputeMajor))
	}
	facts, err := mailbox.ProbeDevice(drv, dev)
	if err != nil {
		return fail(err)
	}
	facts.Device = ordinal
	facts.Multicast = facts.Multicast && drv.HasMulticast()
	p := gpuProbe{usable: true, facts: facts}
	for d := range min(n, 64) {
		if d == ordinal {
			p.peers |= 1 << d
			continue
		}
		other, err := drv.DeviceGet(d)
		if err != nil {
			return fail(err)
		}
		ok, err := drv.DeviceCanAccessPeer(dev, other)
		if err != nil {
			return fail(fmt.Errorf("peer access to device %d: %w", d, err))
		}
		if ok {
			p.peers |= 1 << d
		}
	}
	return p
}

// NoDevice, as ResolveMailbox's device, stands for a rank that runs
// without a GPU: its probe reports none, whatever the machine has.
const NoDevice = -1

// ResolveMailbox picks the mailbox backend for kind from every rank's
// device and every rank's environment, as NewUpProjection does: a
// collective, so every rank gets the same answer, even when the multicast
// safety rule's variables are set on some ranks only (multicast is then
// refused, or not picked, on all of them). A program calls it to learn the
// backend before it makes the op (to prepare host or device operands); the
// op made afterwards with WithBackend(the result) agrees with it.
//
// device is this rank's CUDA device ordinal, or NoDevice. A rank without
// a usable GPU makes the group GPU-less: auto gives host, unicast and
// multicast are refused. The reason is a line a person can read; errors
// wrap ErrBackendUnavailable (and ErrMulticastDisabled, naming the
// variable).
func ResolveMailbox(ctx context.Context, ex Exchanger, kind BackendKind, device int) (BackendKind, string, error) {
	var drv *cuda.Driver
	noDrv := errors.New("this rank runs without a GPU")
	if device != NoDevice && (kind != BackendMulticast || mailbox.CheckMulticastAllowed(os.Getenv) == nil) {
		drv, noDrv = processGPU()
	}
	got, reason, _, err := resolveMailbox(ctx, ex, kind, probeGPU(drv, noDrv, device), os.Getenv)
	return got, reason, err
}

// resolveMailbox is ResolveMailbox from this rank's probe and environment
// (getenv) that also returns every rank's device ordinal (nil unless every
// rank has a usable GPU).
func resolveMailbox(ctx context.Context, ex mailbox.Exchanger, kind mailbox.Kind, local gpuProbe, getenv func(string) string) (mailbox.Kind, string, []int, error) {
	if kind == mailbox.KindHost {
		return mailbox.KindHost, "host asked for", nil, nil
	}
	if name, blocked := mailbox.MulticastBlockedBy(getenv); blocked {
		local.mcBlockedBy = name + "=" + strings.TrimSpace(getenv(name))
	}
	all, err := ex.AllGather(ctx, local.encode())
	if err != nil {
		return mailbox.KindHost, "", nil, fmt.Errorf("tp: rank %d: all-gather of the GPU probes: %w", ex.Rank(), err)
	}
	if len(all) != ex.Size() {
		return mailbox.KindHost, "", nil, fmt.Errorf("tp: rank %d: GPU probe all-gather returned %d entries for %d ranks", ex.Rank(), len(all), ex.Size())
	}
	probes := make([]gpuProbe, len(all))
	blockedRank := -1              // the first rank whose environment forbids multicast
	var whys []string              // distinct reasons, in rank order
	whyRanks := map[string][]int{} // reason -> ranks
	for r, b := range all {
		p, err := decodeProbe(b)
		if err != nil {
			return mailbox.KindHost, "", nil, fmt.Errorf("tp: rank %d: rank %d's %w", ex.Rank(), r, err)
		}
		probes[r] = p
		if p.mcBlockedBy != "" && blockedRank < 0 {
			blockedRank = r
		}
		if !p.usable {
			if whyRanks[p.why] == nil {
				whys = append(whys, p.why)
			}
			whyRanks[p.why] = append(whyRanks[p.why], r)
		}
	}
	// One line however many ranks: ranks with the same reason share it.
	var noGPU []string
	for _, why := range whys {
		rs := whyRanks[why]
		who := fmt.Sprintf("rank %d", rs[0])
		switch {
		case len(rs) == len(all) && len(rs) > 1:
			who = "every rank"
		case len(rs) > 1:
			who = fmt.Sprintf("ranks %s", strings.Trim(strings.Join(strings.Fields(fmt.Sprint(rs)), ","), "[]"))
		}
		noGPU = append(noGPU, who+": "+why)
	}
	// The safety rule as the first rank that has a variable of it set
	// reads it: Resolve then refuses or skips multicast on every rank, and
	// names the variable.
	groupEnv := func(string) string { return "" }
	where := ""
	if blockedRank >= 0 {
		name, value, _ := strings.Cut(probes[blockedRank].mcBlockedBy, "=")
		groupEnv = func(v string) string {
			if v == name {
				return value
			}
			return ""
		}
		if blockedRank != ex.Rank() {
			where = fmt.Sprintf(" (set on rank %d)", blockedRank)
		}
	}
	facts := mailbox.Facts{Getenv: groupEnv, PeerAccess: true, Nodes: rankNodes(ex)}
	var devices []int
	if len(noGPU) == 0 {
		for r, p := range probes {
			facts.Devices = append(facts.Devices, p.facts)
			devices = append(devices, p.facts.Device)
			for q, o := range probes {
				if q != r && o.facts.Device != p.facts.Device && sameNode(facts.Nodes, q, r) && p.peers&(1<<o.facts.Device) == 0 {
					facts.PeerAccess = false
				}
			}
		}
	}
	got, reason, err := mailbox.Resolve(kind, facts)
	if err != nil {
		// A refusal by the safety rule stands on its own: a rank that
		// asked for multicast under it did not even open its driver.
		if errors.Is(err, mailbox.ErrMulticastDisabled) {
			err = fmt.Errorf("%w%s", err, where)
		} else if len(noGPU) > 0 {
			err = fmt.Errorf("%w (%s)", err, strings.Join(noGPU, "; "))
		}
		return got, "", nil, fmt.Errorf("%w: %w", ErrBackendUnavailable, err)
	}
	if where != "" && strings.Contains(reason, probes[blockedRank].mcBlockedBy) {
		reason += where
	}
	if len(noGPU) > 0 {
		reason = fmt.Sprintf("%s (%s)", reason, strings.Join(noGPU, "; "))
	}
	return got, reason, devices, nil
}

// loadStepKernels loads the embedded kernels into the current context.
func loadStepKernels(drv engineDriver) (stepKernels, error) {
	k, err := kernel.Load(drv)
	if err != nil {
		return nil, err
	}
	return &loadedKernels{k: k}, nil
}

// loadedKernels adapts *kernel.Kernels to the engine.
type loadedKernels struct{ k *kernel.Kernels }

var _ stepKernels = (*loadedKernels)(nil)

func (l *loadedKernels) launchSkinny(s cuda.Stream, a skinnyLaunch, pdl bool) error {
	args := kernel.SkinnyArgs{Shape: a.shape, Rank: a.rank, Latent: a.latent, Weight: a.weight, WeightPacked: a.weightPacked,
		Shared: a.shared, SharedStride: a.sharedStride, Dst: a.dst, Rotation: a.rotation}
	if r := a.receive; r != nil {
		args.Receive = &kernel.ReceiveArgs{M: r.m, Hidden: r.hidden, Shard: r.shard, Slot: r.slot, Out: r.out,
			Status: r.status, Timeout: r.timeout, Abortable: r.abortable, SkipSlice: r.skip, SkipRank: r.skipRank,
			Rotation: r.rotation}
	}
	return l.k.LaunchSkinny(s, args, pdl)
}

// launchReceive always allows programmatic dependent launch: the receive
// waits for the skinny kernel before it touches memory.
func (l *loadedKernels) launchReceive(s cuda.Stream, a receiveLaunch) error {
	return l.k.LaunchReceive(s, kernel.ReceiveArgs{M: a.m, Hidden: a.hidden, Shard: a.shard, Slot: a.slot, Out: a.out,
		Status: a.status, Timeout: a.timeout, Abortable: a.abortable, SkipSlice: a.skip, SkipRank: a.skipRank,
		Rotation: a.rotation}, true)
}

func (l *loadedKernels) unload() error { return l.k.Close() }
