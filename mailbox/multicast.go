package mailbox

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/tprun/tprun/internal/cuda"
)

// Multicast is the "multicast" backend: an NVLink multicast object with
// every rank's local mailbox memory bound to it, so that one store through
// MulticastPtr reaches every rank's copy, and each rank's receive polls its
// own copy through Local.
//
// It is never created while the safety rule forbids multicast (see
// CheckMulticastAllowed), even when asked for by name. Like Unicast, it
// holds no stream; Close must not run while a kernel using its pointers is
// in flight.
type Multicast struct {
	gpuBase // Layout, Rank, Device, HandleType, HandleReason
	drv     MulticastVMM

	mu     sync.Mutex
	closed bool
	size   uint64 // bytes of the multicast object and of the memory bound to it
	align  uint64 // both granularities divide it

	mc       cuda.GenericAllocationHandle
	mcHeld   bool
	exportFD int               // the creator's export, kept until every rank has bound
	fabric   cuda.FabricHandle // the creator's fabric export
	mem      cuda.GenericAllocationHandle
	memHeld  bool
	bound    bool

	mcPtr, localPtr       cuda.DevicePtr
	mcResv, localResv     bool
	mcMapped, localMapped bool
}

var _ Backend = (*Multicast)(nil)

// NewMulticast sets up the multicast mailbox, a collective over ex that
// every rank calls with the same cfg and options. Before anything else it
// applies the safety rule (CheckMulticastAllowed with os.Getenv, or the
// WithGetenv function): when a variable forbids multicast this rank makes
// no driver call at all and returns the *MulticastDisabledError naming it
// (the others learn of it and fail too).
//
// Then, in the order the driver requires: rank 0 creates the multicast
// object (FABRIC handle where every device reports support and it works,
// else POSIX FD) and exports it; every rank imports it and adds its
// device; once all devices are added (a status exchange), every rank
// allocates its local memory, binds it, and maps both the multicast object
// and its local memory; once all have bound, rank 0 drops its export;
// every rank arms its slots; a last exchange makes sure all are armed.
// Any failure anywhere gives every rank an error and leaves nothing
// allocated, bound or mapped. The caller's goroutine must have dev's
// context current.
func NewMulticast(ctx context.Context, ex Exchanger, drv MulticastVMM, dev cuda.Device, cfg Config, opts ...GPUOption) (*Multicast, error) {
	rank, _, err := groupOf(ex)
	if err != nil {
		return nil, err
	}
	o := gpuDefaults(opts)
	m := &Multicast{gpuBase: newGPUBase(rank, dev, o), drv: drv, exportFD: -1}
	if err := m.setup(ctx, ex, cfg, o); err != nil {
		cerr := m.Close()
		var refused *MulticastDisabledError
		if cerr == nil && errors.As(err, &refused) {
			return nil, refused
		}
		return nil, fmt.Errorf("mailbox: rank %d: multicast setup on device %d: %w", rank, dev, errors.Join(err, cerr))
	}
	return m, nil
}

const (
	mHelloBytes = iota
	mHelloHidden
	mHelloCapacity
	mHelloSlots
	mHelloSize   // bytes of the multicast object (rounded to both granularities)
	mHelloFabric // 1: the device reports FABRIC handle support
	mHelloForced
	mHelloN
)

func (m *Multicast) setup(ctx context.Context, ex Exchanger, cfg Config, o gpuOptions) error {
	size := ex.Size()
	// The safety rule comes first: nothing below may touch the driver
	// when it forbids multicast.
	local := CheckMulticastAllowed(o.getenv)
	if local == nil {
		local = o.check()
	}
	if local == nil {
		local = acrossNodes(ex, &o)
	}
	if local == nil {
		m.layout, local = newLayout(cfg, size)
	}
	var fabric bool
	var reason string
	if local == nil {
		fabric, reason, local = m.prepare(size, o)
	}
	hello := make([]uint64, mHelloN)
	hello[mHelloBytes], hello[mHelloHidden] = uint64(m.layout.Bytes), uint64(m.layout.Hidden)
	hello[mHelloCapacity], hello[mHelloSlots] = uint64(m.layout.Capacity), uint64(m.layout.Slots)
	hello[mHelloSize], hello[mHelloFabric], hello[mHelloForced] = m.size, boolWord(fabric), uint64(o.handleType)
	msgs, err := exchange(ctx, ex, phaseHello, local, mHelloN, hello, []byte(reason))
	if err != nil {
		return err
	}
	if err := agreeHellos(msgs, []int{mHelloBytes, mHelloHidden, mHelloCapacity, mHelloSlots, mHelloSize, mHelloForced},
		"bytes, hidden, capacity, slots, multicast bytes, forced handle type"); err != nil {
		return err
	}
	want, why := chooseHandleType(msgs, mHelloFabric, o.handleType)
	if o.handleType == cuda.HandleTypeFabric && want != cuda.HandleTypeFabric {
		return fmt.Errorf("%w: FABRIC handles were asked for: %s", ErrUnavailable, why)
	}

	// Rank 0 creates and exports the multicast object.
	local = nil
	var blob []byte
	if m.rank == 0 {
		blob, local = m.create(size, want == cuda.HandleTypeFabric, o.handleType == cuda.HandleTypeFabric)
		local = o.fabricErr(m.dev, "cuMulticastCreate or its FABRIC export", local)
	}
	msgs, err = exchange(ctx, ex, phaseCreate, local, 1, []uint64{uint64(m.handleType)}, blob)
	if err != nil {
		return err
	}
	m.handleType = cuda.HandleType(msgs[0].vals[0])
	switch {
	case m.handleType == cuda.HandleTypeFabric:
		m.handleReason = ""
	case m.handleType == cuda.HandleTypePOSIXFD:
		m.handleReason = why
		if m.handleReason == "" { // every device could, but rank 0's attempt failed
			m.handleReason = "rank 0: " + string(msgs[0].blob) + "; using POSIX_FD"
		}
	default:
		return fmt.Errorf("%w: rank 0 created the multicast object with handle type %v", ErrPeer, m.handleType)
	}
	var fds []int
	if m.handleType == cuda.HandleTypePOSIXFD {
		var rootFDs []int
		if m.rank == 0 {
			rootFDs = []int{m.exportFD}
		}
		if fds, err = ex.BroadcastFDs(ctx, 0, rootFDs); err != nil {
			return fmt.Errorf("broadcast of the multicast descriptor: %w", err)
		}
	}

	// Every rank imports the object and adds its device; nobody binds
	// before all devices are in.
	local = o.fabricErr(m.dev, "cuMemImportFromShareableHandle(FABRIC) of the multicast object", m.addDevice(fds, msgs[0].blob)) // closes fds
	if _, err := exchange(ctx, ex, phaseAdd, local, 0, nil, nil); err != nil {
		return err
	}

	local = m.bindAndMap()
	if _, err := exchange(ctx, ex, phaseBind, local, 0, nil, nil); err != nil {
		return err
	}
	// Every rank has bound: the creator may drop its export now. A
	// failed close fails every rank, like a failed arm.
	local = errors.Join(m.dropExport(), armSlots(m.drv, m.localPtr, m.layout))
	_, err = exchange(ctx, ex, phaseArm, local, 0, nil, nil)
	return err
}

// prepare checks the device and works out the sizes. fabric reports the
// device's FABRIC handle support (reason says why not).
func (m *Multicast) prepare(size int, o gpuOptions) (fabric bool, reason string, err error) {
	if err := requireAttr(m.drv, m.dev, cuda.AttrMulticastSupported, "NVLink multicast"); err != nil {
		return false, "", err
	}
	if err := requireAttr(m.drv, m.dev, cuda.AttrVirtualMemoryManagementSupported, "virtual memory management"); err != nil {
		return false, "", err
	}
	switch o.handleType {
	case cuda.HandleTypePOSIXFD:
		reason = "POSIX_FD asked for"
	default:
		v, err := m.drv.DeviceAttribute(m.dev, cuda.AttrHandleTypeFabricSupported)
		if err != nil {
			return false, "", fmt.Errorf("device %d: query FABRIC handle support: %w", m.dev, err)
		}
		fabric = v != 0
		if !fabric && o.crossNode {
			return false, "", noFabric(m.dev)
		}
		if !fabric {
			reason = fmt.Sprintf("device %d reports no FABRIC handle support", m.dev)
		}
	}
	bytes := uint64(m.layout.Bytes)
	mcGran, err := m.drv.MulticastGetGranularity(cuda.MulticastProp{NumDevices: size, Size: bytes, HandleTypes: cuda.HandleTypePOSIXFD}, cuda.GranularityMinimum)
	if err != nil {
		return false, "", err
	}
	memGran, err := m.drv.MemGetAllocationGranularity(cuda.AllocationProp{Device: m.dev, HandleTypes: cuda.HandleTypePOSIXFD}, cuda.GranularityMinimum)
	if err != nil {
		return false, "", err
	}
	if mcGran == 0 || memGran == 0 {
		return false, "", fmt.Errorf("device %d: granularity reads 0 (multicast %d, allocation %d)", m.dev, mcGran, memGran)
	}
	m.align = mcGran / gcd(mcGran, memGran) * memGran
	m.size = roundUp(bytes, m.align)
	return fabric, reason, nil
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// create makes the multicast object for n devices on rank 0 and exports
// it. blob is the fabric handle, or with POSIX FD the reason fabric was
// not used.
func (m *Multicast) create(n int, tryFabric, forcedFabric bool) (blob []byte, err error) {
	prop := cuda.MulticastProp{NumDevices: n, Size: m.size, HandleTypes: cuda.HandleTypeFabric}
	reason := "not every device reports FABRIC handle support"
	if tryFabric {
		h, err := m.drv.MulticastCreate(prop)
		if err == nil {
			m.mc, m.mcHeld = h, true
			var fh cuda.FabricHandle
			if fh, err = m.drv.MemExportFabric(h); err == nil {
				m.fabric, m.handleType = fh, cuda.HandleTypeFabric
				return append([]byte(nil), fh[:]...), nil
			}
			if forcedFabric || !fabricUnavailable(err) {
				return nil, err
			}
			m.mcHeld = false
			if rerr := m.drv.MemRelease(h); rerr != nil {
				return nil, fmt.Errorf("release the fabric multicast object: %w", rerr)
			}
		} else if forcedFabric || !fabricUnavailable(err) {
			return nil, err
		}
		reason = err.Error()
	}
	prop.HandleTypes = cuda.HandleTypePOSIXFD
	h, err := m.drv.MulticastCreate(prop)
	if err != nil {
		return nil, err
	}
	m.mc, m.mcHeld = h, true
	fd, err := m.drv.MemExportPOSIXFD(h)
	if err != nil {
		return nil, err
	}
	m.exportFD, m.handleType = fd, cuda.HandleTypePOSIXFD
	return []byte(reason), nil
}

// addDevice imports the multicast object (rank 0 has it already) and
// adds this rank's device to it. It closes every descriptor in fds, on
// every path, and reports a close that fails.
func (m *Multicast) addDevice(fds []int, blob []byte) (err error) {
	defer func() {
		if cerr := m.closeFDs(fds...); cerr != nil {
			err = errors.Join(err, fmt.Errorf("the multicast descriptors from rank 0: %w", cerr))
		}
	}()
	if m.rank != 0 {
		var h cuda.GenericAllocationHandle
		if m.handleType == cuda.HandleTypePOSIXFD {
			if len(fds) != 1 {
				return fmt.Errorf("%w: the multicast broadcast brought %d descriptors, want 1", ErrPeer, len(fds))
			}
			h, err = m.drv.MemImportPOSIXFD(fds[0])
		} else {
			var fh cuda.FabricHandle
			if fh, err = fabricFromBlob(blob); err == nil {
				h, err = m.drv.MemImportFabric(fh)
			}
		}
		if err != nil {
			return fmt.Errorf("import the multicast object: %w", err)
		}
		m.mc, m.mcHeld = h, true
	}
	if err := m.drv.MulticastAddDevice(m.mc, m.dev); err != nil {
		return err
	}
	return nil
}

// bindAndMap allocates the local memory, binds it to the multicast object
// and maps both, each with read-write access for this device.
func (m *Multicast) bindAndMap() error {
	h, err := m.drv.MemCreate(m.size, cuda.AllocationProp{Device: m.dev, HandleTypes: m.handleType})
	if err != nil {
		return err
	}
	m.mem, m.memHeld = h, true
	if err := m.drv.MulticastBindMem(m.mc, 0, m.mem, 0, m.size); err != nil {
		return err
	}
	m.bound = true
	access := cuda.Access{Device: m.dev, Flags: cuda.AccessReadWrite}
	if m.mcPtr, err = m.drv.MemAddressReserve(m.size, m.align); err != nil {
		return err
	}
	m.mcResv = true
	if err := m.drv.MemMap(m.mcPtr, m.size, 0, m.mc); err != nil {
		return fmt.Errorf("map the multicast object: %w", err)
	}
	m.mcMapped = true
	if err := m.drv.MemSetAccess(m.mcPtr, m.size, access); err != nil {
		return err
	}
	if m.localPtr, err = m.drv.MemAddressReserve(m.size, m.align); err != nil {
		return err
	}
	m.localResv = true
	if err := m.drv.MemMap(m.localPtr, m.size, 0, m.mem); err != nil {
		return fmt.Errorf("map the local mailbox: %w", err)
	}
	m.localMapped = true
	return m.drv.MemSetAccess(m.localPtr, m.size, access)
}

// dropExport closes the creator's exported descriptor, once: it is
// forgotten even when the close fails (Linux frees it either way).
func (m *Multicast) dropExport() error {
	if m.exportFD < 0 {
		return nil
	}
	fd := m.exportFD
	m.exportFD = -1
	if err := m.closeFDs(fd); err != nil {
		return fmt.Errorf("drop the multicast export: %w", err)
	}
	return nil
}

// Name is "multicast".
func (m *Multicast) Name() string { return "multicast" }

// MulticastPtr is the mailbox as mapped through the multicast object: the
// destination of the kernel's stores, each of which reaches every rank's
// copy. 0 after Close.
func (m *Multicast) MulticastPtr() cuda.DevicePtr {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0
	}
	return m.mcPtr
}

// Local is this rank's own copy of the mailbox, which its receive polls.
// 0 after Close.
func (m *Multicast) Local() cuda.DevicePtr {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0
	}
	return m.localPtr
}

// Close tears down in the order the driver needs: the multicast mapping
// first, then the binding, then the local memory's mapping and the memory,
// and the multicast object last. It is idempotent. A step that fails does
// not stop the others, except those that depend on it (no unbind under a
// live multicast mapping, no unmap or release of memory that is still
// bound, no reservation freed under a live mapping): those are left as
// they are, a leak rather than a use of freed memory. Errors are joined.
func (m *Multicast) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	var errs []error
	// step runs f when *have is set and allowed is true, and reports
	// whether the resource is gone (or never existed).
	step := func(have *bool, allowed bool, what string, f func() error) bool {
		if !*have {
			return true
		}
		if !allowed {
			return false
		}
		*have = false
		if err := f(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
			return false
		}
		return true
	}
	mcUnmapped := step(&m.mcMapped, true, "unmap the multicast mapping", func() error { return m.drv.MemUnmap(m.mcPtr, m.size) })
	step(&m.mcResv, mcUnmapped, "free the multicast address range", func() error { return m.drv.MemAddressFree(m.mcPtr, m.size) })
	unbound := step(&m.bound, mcUnmapped, "unbind the local memory", func() error { return m.drv.MulticastUnbind(m.mc, m.dev, 0, m.size) })
	localUnmapped := step(&m.localMapped, unbound, "unmap the local mailbox", func() error { return m.drv.MemUnmap(m.localPtr, m.size) })
	step(&m.localResv, localUnmapped, "free the local address range", func() error { return m.drv.MemAddressFree(m.localPtr, m.size) })
	step(&m.memHeld, unbound && localUnmapped, "release the local memory", func() error { return m.drv.MemRelease(m.mem) })
	step(&m.mcHeld, unbound && mcUnmapped, "release the multicast object", func() error { return m.drv.MemRelease(m.mc) })
	if err := m.dropExport(); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mailbox: rank %d: close multicast: %w", m.rank, err)
	}
	return nil
}
