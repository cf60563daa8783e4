package mailbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/internal/cuda"
)

// VMM is the part of the CUDA driver that the unicast backend calls: CUDA
// virtual memory management, the device attributes that say which handle
// types work, and a memset with a synchronize to arm the slots. The
// methods have *cuda.Driver's signatures, so the real driver and the
// test fake are interchangeable.
//
// The caller's goroutine must have the device's context current
// (cuda.Driver.BindContext) while a constructor or Close runs: the memset
// and the synchronize act on the current context.
type VMM interface {
	DeviceAttribute(dev cuda.Device, attr cuda.DeviceAttribute) (int, error)
	MemGetAllocationGranularity(prop cuda.AllocationProp, opt cuda.GranularityOption) (uint64, error)
	MemCreate(size uint64, prop cuda.AllocationProp) (cuda.GenericAllocationHandle, error)
	MemRelease(h cuda.GenericAllocationHandle) error
	MemExportPOSIXFD(h cuda.GenericAllocationHandle) (int, error)
	MemExportFabric(h cuda.GenericAllocationHandle) (cuda.FabricHandle, error)
	MemImportPOSIXFD(fd int) (cuda.GenericAllocationHandle, error)
	MemImportFabric(fh cuda.FabricHandle) (cuda.GenericAllocationHandle, error)
	MemAddressReserve(size, alignment uint64) (cuda.DevicePtr, error)
	MemAddressFree(ptr cuda.DevicePtr, size uint64) error
	MemMap(ptr cuda.DevicePtr, size, offset uint64, h cuda.GenericAllocationHandle) error
	MemUnmap(ptr cuda.DevicePtr, size uint64) error
	MemSetAccess(ptr cuda.DevicePtr, size uint64, access ...cuda.Access) error
	MemsetD32(ptr cuda.DevicePtr, v uint32, n uint64) error
	CtxSynchronize() error
}

// MulticastVMM is VMM plus the NVLink multicast object calls, what the
// multicast backend needs.
type MulticastVMM interface {
	VMM
	MulticastGetGranularity(prop cuda.MulticastProp, opt cuda.GranularityOption) (uint64, error)
	MulticastCreate(prop cuda.MulticastProp) (cuda.GenericAllocationHandle, error)
	MulticastAddDevice(mc cuda.GenericAllocationHandle, dev cuda.Device) error
	MulticastBindMem(mc cuda.GenericAllocationHandle, mcOffset uint64, mem cuda.GenericAllocationHandle, memOffset, size uint64) error
	MulticastUnbind(mc cuda.GenericAllocationHandle, dev cuda.Device, mcOffset, size uint64) error
}

var (
	_ VMM          = (*cuda.Driver)(nil)
	_ MulticastVMM = (*cuda.Driver)(nil)
)

// GPUOption adjusts NewUnicast and NewMulticast.
type GPUOption func(*gpuOptions)

type gpuOptions struct {
	getenv     func(string) string
	handleType cuda.HandleType // 0: fabric where every rank can, else POSIX FD
	closeFD    func(fd int) error
	// crossNode: the ranks span nodes (NodeSpanner); FABRIC only, and its
	// refusals are *FabricError.
	crossNode bool
}

func gpuDefaults(opts []GPUOption) gpuOptions {
	o := gpuOptions{getenv: os.Getenv, closeFD: unix.Close}
	for _, opt := range opts {
		opt(&o)
	}
	if o.getenv == nil {
		o.getenv = os.Getenv
	}
	if o.closeFD == nil {
		o.closeFD = unix.Close
	}
	return o
}

// withCloseFD replaces unix.Close for the descriptors a GPU backend owns,
// so that tests can make a close fail (the real one fails too rarely to
// test, and closing a descriptor twice on purpose would race with other
// goroutines reusing its number).
func withCloseFD(closeFD func(fd int) error) GPUOption {
	return func(o *gpuOptions) { o.closeFD = closeFD }
}

// WithGetenv replaces os.Getenv for the multicast safety rule (tests).
func WithGetenv(getenv func(string) string) GPUOption {
	return func(o *gpuOptions) { o.getenv = getenv }
}

// WithHandleType forces the handle type (cuda.HandleTypePOSIXFD or
// cuda.HandleTypeFabric) instead of trying fabric first. Every rank must
// pass the same one. Forced fabric that fails is an error, not a fallback.
func WithHandleType(t cuda.HandleType) GPUOption {
	return func(o *gpuOptions) { o.handleType = t }
}

func (o gpuOptions) check() error {
	switch o.handleType {
	case cuda.HandleTypeNone, cuda.HandleTypePOSIXFD, cuda.HandleTypeFabric:
		return nil
	}
	return fmt.Errorf("%w: handle type %v: want POSIX_FD or FABRIC", ErrConfig, o.handleType)
}

// fabricUnavailable reports the driver's ways of saying "no fabric
// handles here": NOT_PERMITTED where the node has no IMEX channel (the
// attribute still reads 1 there), NOT_SUPPORTED elsewhere.
func fabricUnavailable(err error) bool {
	return cuda.IsNotPermitted(err) || cuda.IsNotSupported(err)
}

// roundUp rounds n up to a multiple of unit (unit > 0).
func roundUp(n, unit uint64) uint64 { return (n + unit - 1) / unit * unit }

// phase names a setup step; it travels in every status message so that a
// rank that got out of step is caught instead of misread.
type phase byte

const (
	phaseHello phase = iota + 1
	phaseExport
	phaseMap
	phaseCreate
	phaseAdd
	phaseBind
	phaseArm
)

var phaseNames = map[phase]string{
	phaseHello:  "hello",
	phaseExport: "export",
	phaseMap:    "import and map",
	phaseCreate: "multicast create",
	phaseAdd:    "multicast add device",
	phaseBind:   "bind and map",
	phaseArm:    "arm",
}

func (p phase) String() string {
	if s, ok := phaseNames[p]; ok {
		return s
	}
	return fmt.Sprintf("phase(%d)", byte(p))
}

// gpuMsg is what a rank all-gathers at the end of every setup phase: its
// local error ("" when fine) and the phase's numbers and bytes.
type gpuMsg struct {
	phase phase
	err   string
	vals  []uint64
	blob  []byte
}

var gpuMagic = [4]byte{'T', 'P', 'G', 'M'}

const (
	gpuVersion = 1
	maxVals    = 16
	maxBlob    = 512
)

func (m gpuMsg) encode() []byte {
	errText := truncate([]byte(m.err))
	blob := m.blob
	if len(blob) > maxBlob {
		blob = blob[:maxBlob]
	}
	b := make([]byte, 0, 4+3+8*len(m.vals)+4+len(errText)+len(blob))
	b = append(b, gpuMagic[:]...)
	b = append(b, gpuVersion, byte(m.phase), byte(len(m.vals)))
	for _, v := range m.vals {
		b = binary.LittleEndian.AppendUint64(b, v)
	}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(errText)))
	b = append(b, errText...)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(blob)))
	return append(b, blob...)
}

// decodeGPUMsg parses a peer's bytes; anything malformed is an error,
// never a panic.
func decodeGPUMsg(b []byte) (gpuMsg, error) {
	const fixed = 4 + 3
	if len(b) < fixed {
		return gpuMsg{}, fmt.Errorf("status is %d bytes, want at least %d", len(b), fixed)
	}
	if !bytes.Equal(b[:4], gpuMagic[:]) {
		return gpuMsg{}, fmt.Errorf("status has magic %q, want %q", b[:4], gpuMagic[:])
	}
	if b[4] != gpuVersion {
		return gpuMsg{}, fmt.Errorf("status version %d, want %d", b[4], gpuVersion)
	}
	m := gpuMsg{phase: phase(b[5])}
	n := int(b[6])
	if n > maxVals {
		return gpuMsg{}, fmt.Errorf("status has %d numbers, at most %d allowed", n, maxVals)
	}
	rest := b[fixed:]
	if len(rest) < 8*n {
		return gpuMsg{}, fmt.Errorf("status truncated in its %d numbers", n)
	}
	m.vals = make([]uint64, n)
	for i := range m.vals {
		m.vals[i] = binary.LittleEndian.Uint64(rest[8*i:])
	}
	rest = rest[8*n:]
	field := func(name string, limit int) ([]byte, error) {
		if len(rest) < 2 {
			return nil, fmt.Errorf("status truncated before its %s", name)
		}
		l := int(binary.LittleEndian.Uint16(rest))
		if l > limit || len(rest)-2 < l {
			return nil, fmt.Errorf("status %s of %d bytes does not fit (limit %d, %d left)", name, l, limit, len(rest)-2)
		}
		f := rest[2 : 2+l]
		rest = rest[2+l:]
		return f, nil
	}
	e, err := field("error text", maxErrText)
	if err != nil {
		return gpuMsg{}, err
	}
	m.err = string(e)
	blob, err := field("payload", maxBlob)
	if err != nil {
		return gpuMsg{}, err
	}
	m.blob = append([]byte(nil), blob...)
	if len(rest) != 0 {
		return gpuMsg{}, fmt.Errorf("status has %d trailing bytes", len(rest))
	}
	return m, nil
}

// exchange all-gathers this rank's status for ph and returns every rank's
// message. It fails alike on every rank when any rank reported an error,
// sent something malformed, is in another phase or sent fewer than want
// numbers: every rank sees the same messages, so every rank takes the same
// decision, and the next collective call is made by all ranks or by none.
// That is what turns a local failure into an error everywhere instead of a
// hang. The own error, when there is one, is returned as is.
func exchange(ctx context.Context, ex Exchanger, ph phase, local error, want int, vals []uint64, blob []byte) ([]gpuMsg, error) {
	msg := gpuMsg{phase: ph, vals: vals, blob: blob}
	if local != nil {
		msg.err = local.Error()
		if msg.err == "" {
			msg.err = "failed"
		}
	}
	all, err := ex.AllGather(ctx, msg.encode())
	if err != nil {
		return nil, errors.Join(local, fmt.Errorf("%s: all-gather of setup status: %w", ph, err))
	}
	if len(all) != ex.Size() {
		return nil, errors.Join(local, fmt.Errorf("%w: %s: status all-gather returned %d entries for %d ranks", ErrPeer, ph, len(all), ex.Size()))
	}
	msgs := make([]gpuMsg, len(all))
	var failed []string
	for r, b := range all {
		m, derr := decodeGPUMsg(b)
		switch {
		case derr != nil:
			failed = append(failed, fmt.Sprintf("rank %d: malformed status: %v", r, derr))
		case m.phase != ph:
			failed = append(failed, fmt.Sprintf("rank %d is in setup phase %q", r, m.phase))
		case m.err != "":
			if r != ex.Rank() {
				failed = append(failed, fmt.Sprintf("rank %d: %s", r, m.err))
			}
		case len(m.vals) < want:
			failed = append(failed, fmt.Sprintf("rank %d sent %d numbers, want %d", r, len(m.vals), want))
		}
		msgs[r] = m
	}
	if local != nil {
		return nil, local
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("%w: %s failed on %s", ErrPeer, ph, strings.Join(failed, "; "))
	}
	return msgs, nil
}

// groupOf checks ex and returns rank and size.
func groupOf(ex Exchanger) (rank, size int, err error) {
	rank, size = ex.Rank(), ex.Size()
	if size < 1 || rank < 0 || rank >= size {
		return rank, size, fmt.Errorf("mailbox: %w: rank %d of a group of %d", ErrConfig, rank, size)
	}
	return rank, size, nil
}

// gpuBase is what both GPU backends hold once their ranks have agreed,
// with the accessors that read the same for both, and how they close the
// descriptors they own. Name and Local differ and stay with each backend.
type gpuBase struct {
	layout Layout
	rank   int
	dev    cuda.Device

	handleType   cuda.HandleType
	handleReason string

	closeFD func(fd int) error // unix.Close outside tests
}

func newGPUBase(rank int, dev cuda.Device, o gpuOptions) gpuBase {
	return gpuBase{rank: rank, dev: dev, closeFD: o.closeFD}
}

// Layout is the geometry every rank agreed on.
func (b *gpuBase) Layout() Layout { return b.layout }

// Rank is this rank.
func (b *gpuBase) Rank() int { return b.rank }

// Device is this rank's device, where its mailbox memory lives.
func (b *gpuBase) Device() cuda.Device { return b.dev }

// HandleType is the handle type every rank used to share the mailbox
// memory (for multicast, the multicast object): cuda.HandleTypeFabric or
// cuda.HandleTypePOSIXFD.
func (b *gpuBase) HandleType() cuda.HandleType { return b.handleType }

// HandleReason says why POSIX descriptors were used instead of fabric
// handles ("" when fabric handles were used).
func (b *gpuBase) HandleReason() string { return b.handleReason }

// closeFDs closes descriptors this backend owns (negative ones are
// skipped). It closes every one even when one fails and joins the errors,
// each naming its descriptor. Linux frees a descriptor even when close
// reports an error, so the caller must not close a failed one again.
func (b *gpuBase) closeFDs(fds ...int) error {
	closeFD := b.closeFD
	if closeFD == nil {
		closeFD = unix.Close
	}
	var errs []error
	for _, fd := range fds {
		if fd < 0 {
			continue
		}
		if err := closeFD(fd); err != nil {
			errs = append(errs, fmt.Errorf("close descriptor %d: %w", fd, err))
		}
	}
	return errors.Join(errs...)
}

// requireAttr fails unless attr reads nonzero on dev.
func requireAttr(drv VMM, dev cuda.Device, attr cuda.DeviceAttribute, what string) error {
	v, err := drv.DeviceAttribute(dev, attr)
	if err != nil {
		return fmt.Errorf("device %d: query %s support: %w", dev, what, err)
	}
	if v == 0 {
		return fmt.Errorf("%w: device %d does not support %s", ErrUnavailable, dev, what)
	}
	return nil
}

// fabricFromBlob reads a fabric handle from a status payload.
func fabricFromBlob(b []byte) (cuda.FabricHandle, error) {
	var fh cuda.FabricHandle
	if len(b) != len(fh) {
		return fh, fmt.Errorf("%w: fabric handle of %d bytes, want %d", ErrPeer, len(b), len(fh))
	}
	copy(fh[:], b)
	return fh, nil
}

// ProbeDevice reads the attributes that Resolve needs for dev through drv.
// A driver without the multicast functions should report Multicast false;
// the caller (which has the *cuda.Driver) can clear it with HasMulticast.
func ProbeDevice(drv VMM, dev cuda.Device) (DeviceFacts, error) {
	f := DeviceFacts{Device: int(dev)}
	for _, a := range []struct {
		attr cuda.DeviceAttribute
		dst  *bool
	}{
		{cuda.AttrVirtualMemoryManagementSupported, &f.VMM},
		{cuda.AttrHandleTypePOSIXFDSupported, &f.POSIXFD},
		{cuda.AttrHandleTypeFabricSupported, &f.Fabric},
		{cuda.AttrMulticastSupported, &f.Multicast},
	} {
		v, err := drv.DeviceAttribute(dev, a.attr)
		if err != nil {
			return DeviceFacts{}, fmt.Errorf("mailbox: probe device %d: attribute %d: %w", dev, int(a.attr), err)
		}
		*a.dst = v != 0
	}
	return f, nil
}
