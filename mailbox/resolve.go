package mailbox

import (
	"errors"
	"fmt"
	"strings"
)

// ErrUnavailable: the backend asked for cannot work with these devices.
var ErrUnavailable = errors.New("backend unavailable")

// DeviceFacts is what Resolve needs to know about one rank's device (read
// with ProbeDevice, or from NVML).
type DeviceFacts struct {
	Device    int  // ordinal, for messages
	VMM       bool // virtual memory management (cuMemCreate and friends)
	POSIXFD   bool // allocations exportable as POSIX file descriptors
	Fabric    bool // allocations exportable as FABRIC handles
	Multicast bool // NVLink multicast objects (and a driver that has the calls)
}

// shareable: the device can hand its allocations to other processes.
func (d DeviceFacts) shareable() bool { return d.VMM && (d.POSIXFD || d.Fabric) }

// Facts describe the group's devices for Resolve.
type Facts struct {
	// Devices holds one entry per rank (index = rank); empty means no GPU.
	// Ranks may share a device.
	Devices []DeviceFacts
	// PeerAccess: every rank's device can access every other rank's
	// device (P2P). Ranks that share one device need nothing more.
	PeerAccess bool
	// Getenv reads the environment for the multicast safety rule
	// (os.Getenv in production; nil reads as nothing set).
	Getenv func(string) string
	// Nodes names each rank's node (index = rank) when the ranks span
	// nodes; empty means one node. Devices are then told apart by node and
	// ordinal, PeerAccess speaks of the ranks of one node (across nodes
	// the fabric handles are the access), and the host backend, which
	// shares descriptors, is unavailable.
	Nodes []string
}

// nodeCount is how many distinct nodes f's ranks run on (1 when Nodes is
// empty).
func (f Facts) nodeCount() int {
	seen := map[string]bool{}
	for _, n := range f.Nodes {
		seen[n] = true
	}
	return max(len(seen), 1)
}

// hostBlocker says why the host backend cannot work ("" when it can).
func hostBlocker(f Facts) string {
	if n := f.nodeCount(); n > 1 {
		return fmt.Sprintf("the host backend shares memory through file descriptors, which do not cross nodes, and the ranks run on %d nodes", n)
	}
	return ""
}

// Resolve turns the backend asked for into the one to use, with a reason a
// person can read. It is pure: everything it looks at is in facts.
//
// auto picks multicast only where there are at least two distinct
// devices, every one of them supports multicast and shareable VMM memory,
// they can access each other, and no variable of the safety rule is set;
// else unicast where every device supports shareable VMM memory and they
// can access each other; else host. A backend asked for by name is
// checked the same way and refused with an error (ErrUnavailable, or the
// *MulticastDisabledError that names the variable) instead of being
// replaced by another.
func Resolve(kind Kind, facts Facts) (Kind, string, error) {
	getenv := facts.Getenv
	if getenv == nil {
		getenv = func(string) string { return "" }
	}
	switch kind {
	case KindHost:
		if why := hostBlocker(facts); why != "" {
			return KindHost, "", fmt.Errorf("mailbox: host backend: %w: %s", ErrUnavailable, why)
		}
		return KindHost, "host asked for", nil
	case KindUnicast:
		if why := unicastBlocker(facts); why != "" {
			return KindHost, "", fmt.Errorf("mailbox: unicast backend: %w: %s", ErrUnavailable, why)
		}
		return KindUnicast, "unicast asked for", nil
	case KindMulticast:
		if err := CheckMulticastAllowed(getenv); err != nil {
			return KindHost, "", err
		}
		if why := multicastBlocker(facts); why != "" {
			return KindHost, "", fmt.Errorf("mailbox: multicast backend: %w: %s", ErrUnavailable, why)
		}
		return KindMulticast, "multicast asked for", nil
	case KindAuto:
	default:
		return KindHost, "", fmt.Errorf("mailbox: %w: %v", ErrUnknownKind, kind)
	}
	if len(facts.Devices) == 0 {
		if why := hostBlocker(facts); why != "" {
			return KindHost, "", fmt.Errorf("mailbox: auto: %w: no GPU, and %s", ErrUnavailable, why)
		}
		return KindHost, "auto: no GPU", nil
	}
	var notMC string
	if name, blocked := MulticastBlockedBy(getenv); blocked {
		notMC = fmt.Sprintf("multicast is disabled by %s=%s", name, strings.TrimSpace(getenv(name)))
	} else if why := multicastBlocker(facts); why != "" {
		notMC = "no multicast: " + why
	} else {
		return KindMulticast, fmt.Sprintf("auto: devices %s all support NVLink multicast and no variable forbids it%s", deviceList(facts), fabricWords(facts)), nil
	}
	if why := unicastBlocker(facts); why != "" {
		if hb := hostBlocker(facts); hb != "" {
			return KindHost, "", fmt.Errorf("mailbox: auto: %w: %s; no unicast: %s; and %s", ErrUnavailable, notMC, why, hb)
		}
		return KindHost, fmt.Sprintf("auto: %s; no unicast: %s", notMC, why), nil
	}
	return KindUnicast, fmt.Sprintf("auto: %s; devices %s share VMM memory peer to peer%s", notMC, deviceList(facts), fabricWords(facts)), nil
}

// fabricWords adds, for ranks on several nodes, how they share memory.
func fabricWords(f Facts) string {
	if n := f.nodeCount(); n > 1 {
		return fmt.Sprintf(" (across %d nodes, through fabric handles)", n)
	}
	return ""
}

// unicastBlocker says why unicast cannot work ("" when it can).
func unicastBlocker(f Facts) string {
	if len(f.Devices) == 0 {
		return "no GPU"
	}
	for r, d := range f.Devices {
		if !d.shareable() {
			return fmt.Sprintf("rank %d's device %d lacks virtual memory management with shareable handles", r, d.Device)
		}
	}
	if !f.PeerAccess && distinct(f) > 1 {
		return "the devices cannot access each other (no P2P)"
	}
	return ""
}

// multicastBlocker says why multicast cannot work ("" when it can),
// leaving the safety rule to the caller.
func multicastBlocker(f Facts) string {
	if why := unicastBlocker(f); why != "" {
		return why
	}
	if n := distinct(f); n < 2 || n != len(f.Devices) {
		return fmt.Sprintf("it needs one distinct device per rank, at least two (devices %s)", deviceList(f))
	}
	for r, d := range f.Devices {
		if !d.Multicast {
			return fmt.Sprintf("rank %d's device %d does not support NVLink multicast", r, d.Device)
		}
	}
	return ""
}

// distinct counts the distinct devices: by ordinal on one node, by node
// and ordinal across nodes.
func distinct(f Facts) int {
	type key struct {
		node string
		dev  int
	}
	seen := map[key]bool{}
	for r, d := range f.Devices {
		k := key{dev: d.Device}
		if r < len(f.Nodes) {
			k.node = f.Nodes[r]
		}
		seen[k] = true
	}
	return len(seen)
}

func deviceList(f Facts) string {
	s := make([]string, len(f.Devices))
	for i, d := range f.Devices {
		s[i] = fmt.Sprint(d.Device)
		if f.nodeCount() > 1 && i < len(f.Nodes) {
			s[i] = f.Nodes[i] + ":" + s[i]
		}
	}
	return strings.Join(s, ",")
}
