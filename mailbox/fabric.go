package mailbox

import (
	"errors"
	"fmt"

	"github.com/tprun/tprun/internal/cuda"
)

// NodeSpanner is what an Exchanger whose ranks may run on several nodes
// implements (tp.Group does). When SpansNodes is true the GPU backends
// share memory only through FABRIC handles (descriptors do not cross
// nodes), and a driver that refuses them fails setup with a *FabricError
// instead of falling back to POSIX descriptors.
type NodeSpanner interface {
	SpansNodes() bool
}

// spansNodes reports whether ex says its ranks run on several nodes.
func spansNodes(ex Exchanger) bool {
	s, ok := ex.(NodeSpanner)
	return ok && s.SpansNodes()
}

// ErrFabric: the ranks span nodes, so they need CUDA fabric handles, and
// the driver refused them on this rank's node (also ErrUnavailable).
var ErrFabric = errors.New("fabric handles unavailable")

// FabricError is a refusal of fabric handles in a job across nodes: what
// failed on which device, the driver's error, and in words what the
// administrator must provide.
type FabricError struct {
	Device int
	// Op is the driver call that failed, or the device attribute that
	// said no.
	Op  string
	Err error // the driver's error; nil when the attribute said no
}

// imexHint is what a node needs for fabric handles, in the words of the
// people who must provide it.
const imexHint = "this node has no IMEX channel that this user may open: the administrator must create one on every node " +
	"(/dev/nvidia-caps-imex-channels/channel0: mknod with the major number of nvidia-caps-imex-channels in /proc/devices, minor 0) " +
	"and run the nvidia-imex service across the NVLink domain"

// noFabricHint is what a node without any fabric handle support lacks.
const noFabricHint = "this GPU or driver offers no fabric handles: a job across nodes needs the GPUs of one multi-node NVLink domain " +
	"(GB200 or GB300 NVL72 and the like), a driver with fabric support, and the IMEX service"

func (e *FabricError) Error() string {
	what := fmt.Sprintf("which the device does not offer (%s is 0)", e.Op)
	hint := noFabricHint
	if e.Err != nil {
		what = fmt.Sprintf("which the driver refused (%v)", e.Err)
		switch {
		case cuda.IsNotPermitted(e.Err):
			hint = imexHint
		case !cuda.IsNotSupported(e.Err):
			hint = ""
		}
	}
	msg := fmt.Sprintf("device %d: this job's ranks span nodes and share GPU memory only through CUDA fabric handles, %s", e.Device, what)
	if hint != "" {
		msg += ": " + hint
	}
	return msg
}

func (e *FabricError) Unwrap() error { return e.Err }

// Is makes errors.Is true for ErrFabric and ErrUnavailable.
func (e *FabricError) Is(target error) bool { return target == ErrFabric || target == ErrUnavailable }

// fabricErr wraps a FABRIC step the driver refused (NOT_PERMITTED,
// NOT_SUPPORTED) in a job across nodes; any other error, and any error
// elsewhere, it returns unchanged.
func (o gpuOptions) fabricErr(dev cuda.Device, op string, err error) error {
	if !o.crossNode || err == nil || !fabricUnavailable(err) {
		return err
	}
	var fe *FabricError
	if errors.As(err, &fe) {
		return err
	}
	return &FabricError{Device: int(dev), Op: op, Err: err}
}

// noFabric is the refusal of a device whose attribute says it has no
// fabric handles, in a job across nodes.
func noFabric(dev cuda.Device) error {
	return &FabricError{Device: int(dev), Op: "CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED"}
}

// acrossNodes fixes the options of a GPU backend whose ranks span nodes:
// FABRIC handles only.
func acrossNodes(ex Exchanger, o *gpuOptions) error {
	if !spansNodes(ex) {
		return nil
	}
	if o.handleType == cuda.HandleTypePOSIXFD {
		return fmt.Errorf("%w: POSIX_FD handles were asked for, but this job's ranks span nodes, and descriptors do not cross nodes", ErrConfig)
	}
	o.handleType, o.crossNode = cuda.HandleTypeFabric, true
	return nil
}
