package mailbox

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Kind names a backend choice as a user states it.
type Kind int

// The backend choices. KindAuto lets the caller pick from the topology
// (multicast where allowed and available, else unicast, else host).
const (
	KindAuto Kind = iota
	KindMulticast
	KindUnicast
	KindHost
)

var kindNames = [...]string{KindAuto: "auto", KindMulticast: "multicast", KindUnicast: "unicast", KindHost: "host"}

func (k Kind) String() string {
	if k >= 0 && int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// ErrUnknownKind: ParseKind got a name it does not know.
var ErrUnknownKind = errors.New("unknown backend")

// ParseKind parses "auto", "multicast", "unicast" or "host" (case and
// surrounding space ignored; "" is "auto").
func ParseKind(s string) (Kind, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	if t == "" {
		return KindAuto, nil
	}
	for k, name := range kindNames {
		if t == name {
			return Kind(k), nil
		}
	}
	return KindAuto, fmt.Errorf("mailbox: %w %q: want one of auto, multicast, unicast, host", ErrUnknownKind, s)
}

// ErrMulticastDisabled: the environment forbids the multicast backend.
var ErrMulticastDisabled = errors.New("multicast disabled by the environment")

// MulticastDisabledError names the variable that forbids multicast.
type MulticastDisabledError struct {
	Variable string // e.g. "NCCL_NVLS_ENABLE"
	Value    string // its value, surrounding space trimmed
}

func (e *MulticastDisabledError) Error() string {
	return fmt.Sprintf("mailbox: multicast backend refused: %s=%s is set (NVLink multicast is disabled on this machine; use unicast)", e.Variable, e.Value)
}

// Is makes errors.Is(err, ErrMulticastDisabled) true.
func (e *MulticastDisabledError) Is(target error) bool { return target == ErrMulticastDisabled }

// multicastBlockers are the variables of the safety rule, in the order they
// are reported, and whether each blocks when it reads "off" (=0) or "on"
// (=1). They are the switches with which NCCL, PyTorch symmetric memory,
// NVSHMEM and tprun itself are told that NVLink multicast must not be used
// on a machine.
var multicastBlockers = [...]struct {
	name     string
	blocksOn bool // true: blocks when set to 1; false: blocks when set to 0
}{
	{"NCCL_NVLS_ENABLE", false},
	{"TORCH_SYMM_MEM_DISABLE_MULTICAST", true},
	{"NVSHMEM_DISABLE_NVLS", true},
	{"TPRUN_MULTICAST", false},
}

// MulticastBlockedBy reports the first variable of the safety rule that
// forbids the multicast backend: NCCL_NVLS_ENABLE=0,
// TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 or
// TPRUN_MULTICAST=0. getenv is os.Getenv in production.
//
// Values are read the way the owning libraries read them, leaning towards
// "blocked" when in doubt: integers compare by value ("00" is 0), and the
// words true/yes/on and false/no/off (any case) count as 1 and 0.
func MulticastBlockedBy(getenv func(string) string) (variable string, blocked bool) {
	for _, b := range multicastBlockers {
		v, ok := envBool(getenv(b.name))
		if ok && v == b.blocksOn {
			return b.name, true
		}
	}
	return "", false
}

// CheckMulticastAllowed returns a *MulticastDisabledError naming the
// variable when MulticastBlockedBy reports one, else nil. The multicast
// backend calls it before creating anything, even when multicast was asked
// for explicitly.
func CheckMulticastAllowed(getenv func(string) string) error {
	name, blocked := MulticastBlockedBy(getenv)
	if !blocked {
		return nil
	}
	return &MulticastDisabledError{Variable: name, Value: strings.TrimSpace(getenv(name))}
}

// envBool reads a switch: ok is false for unset or unreadable values.
func envBool(s string) (value, ok bool) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch t {
	case "":
		return false, false
	case "true", "yes", "y", "on":
		return true, true
	case "false", "no", "n", "off":
		return false, true
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil {
		return false, false
	}
	return n != 0, true
}
