package mailbox

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/tprun/tprun/internal/cuda"
)

// Unicast is the "unicast" backend: every rank allocates its mailbox on
// its own device with cuMemCreate, the handles are exchanged, and every
// rank maps every rank's mailbox into its address space, so the skinny
// kernel stores its slice into each peer's memory directly (over NVLink or
// PCIe, or locally when ranks share a device).
//
// A Unicast holds no stream and launches nothing; Close must not run while
// a kernel that uses its pointers is in flight.
type Unicast struct {
	gpuBase // Layout, Rank, Device, HandleType, HandleReason
	drv     VMM

	mu     sync.Mutex
	closed bool
	gran   uint64       // allocation granularity of this rank's device
	mems   []unicastMem // index = rank; mems[rank] is this rank's own
	fabric cuda.FabricHandle
	resv   cuda.DevicePtr // one reservation holding every rank's mapping
	resvSz uint64
}

// unicastMem is one rank's mailbox as seen from this process.
type unicastMem struct {
	handle cuda.GenericAllocationHandle
	held   bool // handle must be released
	typ    cuda.HandleType
	size   uint64 // bytes of the allocation (a multiple of the granularity)
	ptr    cuda.DevicePtr
	mapped bool
}

var _ Backend = (*Unicast)(nil)

// NewUnicast creates this rank's mailbox on dev, exchanges handles through
// ex and maps every rank's mailbox with read-write access for dev. It is a
// collective: every rank of ex calls it with the same cfg and options.
//
// Handles are FABRIC where every rank's device reports support and
// creating and exporting one works; the driver's NOT_PERMITTED (no IMEX
// channel) or NOT_SUPPORTED makes every rank use POSIX file descriptors
// instead (HandleType and HandleReason tell which, and why). Each rank
// arms its own slots with the Sentinel, and no rank returns before every
// rank has, so no store can be overwritten by a late arm.
//
// When any step fails on any rank, every rank returns an error (naming the
// failed ranks) and has released everything it had created, mapped or
// received. The caller's goroutine must have dev's context current.
func NewUnicast(ctx context.Context, ex Exchanger, drv VMM, dev cuda.Device, cfg Config, opts ...GPUOption) (*Unicast, error) {
	rank, size, err := groupOf(ex)
	if err != nil {
		return nil, err
	}
	o := gpuDefaults(opts)
	u := &Unicast{gpuBase: newGPUBase(rank, dev, o), drv: drv, mems: make([]unicastMem, size)}
	if err := u.setup(ctx, ex, cfg, o); err != nil {
		return nil, fmt.Errorf("mailbox: rank %d: unicast setup on device %d: %w", rank, dev, errors.Join(err, u.Close()))
	}
	return u, nil
}

// Hello numbers: the layout every rank must agree on, and what this rank
// can do.
const (
	uHelloBytes = iota
	uHelloHidden
	uHelloCapacity
	uHelloSlots
	uHelloFabric // 1: this rank created and exported a fabric handle
	uHelloForced // the WithHandleType option
	uHelloN
)

func (u *Unicast) setup(ctx context.Context, ex Exchanger, cfg Config, o gpuOptions) (err error) {
	size := len(u.mems)
	local := o.check()
	if local == nil {
		local = acrossNodes(ex, &o)
	}
	if local == nil {
		u.layout, local = newLayout(cfg, size)
	}
	var reason string
	if local == nil {
		reason, local = u.prepare(o)
	}
	hello := make([]uint64, uHelloN)
	hello[uHelloBytes], hello[uHelloHidden] = uint64(u.layout.Bytes), uint64(u.layout.Hidden)
	hello[uHelloCapacity], hello[uHelloSlots] = uint64(u.layout.Capacity), uint64(u.layout.Slots)
	own := u.mems[u.rank]
	hello[uHelloFabric], hello[uHelloForced] = boolWord(own.held && own.typ == cuda.HandleTypeFabric), uint64(o.handleType)
	msgs, err := exchange(ctx, ex, phaseHello, local, uHelloN, hello, []byte(reason))
	if err != nil {
		return err
	}
	if err := agreeHellos(msgs, []int{uHelloBytes, uHelloHidden, uHelloCapacity, uHelloSlots, uHelloForced}, "bytes, hidden, capacity, slots, forced handle type"); err != nil {
		return err
	}
	u.handleType, u.handleReason = chooseHandleType(msgs, uHelloFabric, o.handleType)
	if o.handleType == cuda.HandleTypeFabric && u.handleType != cuda.HandleTypeFabric {
		return fmt.Errorf("%w: FABRIC handles were asked for: %s", ErrUnavailable, u.handleReason)
	}

	// Export, in the agreed type. A rank that made a fabric allocation
	// while a peer could not swaps it for a POSIX one.
	//
	// The exchanger hands out copies of our descriptor; ours is only lent
	// to it. An early return closes it here; otherwise it is closed
	// before the last exchange, so that a failed close fails every rank.
	fd := -1
	defer func() {
		if cerr := u.closeFDs(fd); cerr != nil {
			err = errors.Join(err, fmt.Errorf("own mailbox export: %w", cerr))
		}
	}()
	var blob []byte
	fd, blob, local = u.export()
	msgs, err = exchange(ctx, ex, phaseExport, local, 1, []uint64{u.mems[u.rank].size}, blob)
	if err != nil {
		return err
	}
	var fds []int
	if u.handleType == cuda.HandleTypePOSIXFD {
		fds, err = ex.AllGatherFDs(ctx, fd)
		if err != nil {
			return fmt.Errorf("all-gather of mailbox descriptors: %w", err)
		}
	}
	local = o.fabricErr(u.dev, "cuMemImportFromShareableHandle(FABRIC)", u.mapAll(msgs, fds)) // closes fds
	if cerr := u.closeFDs(fd); cerr != nil {
		local = errors.Join(local, fmt.Errorf("own mailbox export: %w", cerr))
	}
	fd = -1
	_, err = exchange(ctx, ex, phaseMap, local, 0, nil, nil)
	return err
}

// prepare checks the device and, where fabric handles may work, creates
// and exports this rank's mailbox with one. reason says why not, when not.
func (u *Unicast) prepare(o gpuOptions) (reason string, err error) {
	if err := requireAttr(u.drv, u.dev, cuda.AttrVirtualMemoryManagementSupported, "virtual memory management"); err != nil {
		return "", err
	}
	if o.handleType == cuda.HandleTypePOSIXFD {
		return "POSIX_FD asked for", nil
	}
	fab, err := u.drv.DeviceAttribute(u.dev, cuda.AttrHandleTypeFabricSupported)
	if err != nil {
		return "", fmt.Errorf("device %d: query FABRIC handle support: %w", u.dev, err)
	}
	if fab == 0 {
		if o.crossNode {
			return "", noFabric(u.dev)
		}
		return fmt.Sprintf("device %d reports no FABRIC handle support", u.dev), nil
	}
	mem, err := createMem(u.drv, u.dev, uint64(u.layout.Bytes), cuda.HandleTypeFabric)
	if err != nil {
		if o.handleType == cuda.HandleTypeNone && fabricUnavailable(err) {
			return fmt.Sprintf("device %d: %v", u.dev, err), nil
		}
		return "", o.fabricErr(u.dev, "cuMemCreate(FABRIC)", err)
	}
	u.mems[u.rank] = mem
	fh, err := u.drv.MemExportFabric(mem.handle)
	if err != nil {
		if o.handleType == cuda.HandleTypeNone && fabricUnavailable(err) {
			return fmt.Sprintf("device %d: %v", u.dev, err), u.releaseOwn()
		}
		return "", o.fabricErr(u.dev, "cuMemExportToShareableHandle(FABRIC)", err)
	}
	u.fabric = fh
	return "", nil
}

// createMem allocates at least bytes of dev's memory exportable as typ,
// rounded up to the allocation granularity.
func createMem(drv VMM, dev cuda.Device, bytes uint64, typ cuda.HandleType) (unicastMem, error) {
	prop := cuda.AllocationProp{Device: dev, HandleTypes: typ}
	gran, err := drv.MemGetAllocationGranularity(prop, cuda.GranularityMinimum)
	if err != nil {
		return unicastMem{}, err
	}
	if gran == 0 {
		return unicastMem{}, fmt.Errorf("device %d: allocation granularity reads 0", dev)
	}
	size := roundUp(bytes, gran)
	h, err := drv.MemCreate(size, prop)
	if err != nil {
		return unicastMem{}, err
	}
	return unicastMem{handle: h, held: true, typ: typ, size: size}, nil
}

// releaseOwn drops this rank's allocation (before any mapping exists).
func (u *Unicast) releaseOwn() error {
	own := &u.mems[u.rank]
	if !own.held {
		return nil
	}
	h := own.handle
	*own = unicastMem{}
	if err := u.drv.MemRelease(h); err != nil {
		return fmt.Errorf("release own allocation: %w", err)
	}
	return nil
}

// export makes this rank's allocation in the agreed type (when it does
// not have one yet) and exports it: a descriptor for POSIX, the fabric
// handle's bytes for FABRIC.
func (u *Unicast) export() (fd int, blob []byte, err error) {
	own := &u.mems[u.rank]
	if own.held && own.typ != u.handleType {
		if err := u.releaseOwn(); err != nil {
			return -1, nil, err
		}
	}
	if !own.held {
		mem, err := createMem(u.drv, u.dev, uint64(u.layout.Bytes), u.handleType)
		if err != nil {
			return -1, nil, err
		}
		*own = mem
	}
	gran, err := u.drv.MemGetAllocationGranularity(cuda.AllocationProp{Device: u.dev, HandleTypes: u.handleType}, cuda.GranularityMinimum)
	if err != nil {
		return -1, nil, err
	}
	u.gran = gran
	if u.handleType == cuda.HandleTypeFabric {
		return -1, append([]byte(nil), u.fabric[:]...), nil
	}
	fd, err = u.drv.MemExportPOSIXFD(own.handle)
	if err != nil {
		return -1, nil, err
	}
	return fd, nil, nil
}

// mapAll imports every peer's allocation, reserves one range for all of
// them, maps each with read-write access for this device and arms this
// rank's own slots. It closes every descriptor in fds, on every path; a
// close that fails does not stop the mapping, but mapAll reports it.
func (u *Unicast) mapAll(msgs []gpuMsg, fds []int) (err error) {
	var closeErrs []error
	defer func() {
		if cerr := u.closeFDs(fds...); cerr != nil { // those not spent on an import
			closeErrs = append(closeErrs, fmt.Errorf("mailbox descriptors: %w", cerr))
		}
		err = errors.Join(err, errors.Join(closeErrs...))
	}()
	size := len(u.mems)
	if u.handleType == cuda.HandleTypePOSIXFD && len(fds) != size {
		return fmt.Errorf("%w: descriptor all-gather returned %d descriptors for %d ranks", ErrPeer, len(fds), size)
	}
	var total uint64
	for r, m := range msgs {
		sz := m.vals[0]
		if sz < uint64(u.layout.Bytes) || sz%u.gran != 0 || sz > 2*maxRegionBytes {
			return fmt.Errorf("%w: rank %d's mailbox allocation is %d bytes; need at least %d, a multiple of the granularity %d", ErrPeer, r, sz, u.layout.Bytes, u.gran)
		}
		total += sz
	}
	for r := range size {
		if r == u.rank {
			continue
		}
		var h cuda.GenericAllocationHandle
		if u.handleType == cuda.HandleTypePOSIXFD {
			h, err = u.drv.MemImportPOSIXFD(fds[r])
			// The handle keeps the memory; the descriptor is spent.
			if cerr := u.closeFDs(fds[r]); cerr != nil {
				closeErrs = append(closeErrs, fmt.Errorf("rank %d's mailbox descriptor: %w", r, cerr))
			}
			fds[r] = -1
		} else {
			var fh cuda.FabricHandle
			if fh, err = fabricFromBlob(msgs[r].blob); err == nil {
				h, err = u.drv.MemImportFabric(fh)
			}
		}
		if err != nil {
			return fmt.Errorf("import rank %d's mailbox: %w", r, err)
		}
		u.mems[r] = unicastMem{handle: h, held: true, typ: u.handleType, size: msgs[r].vals[0]}
	}
	base, err := u.drv.MemAddressReserve(total, u.gran)
	if err != nil {
		return err
	}
	u.resv, u.resvSz = base, total
	off := uint64(0)
	for r := range u.mems {
		m := &u.mems[r]
		ptr := base + cuda.DevicePtr(off)
		if err := u.drv.MemMap(ptr, m.size, 0, m.handle); err != nil {
			return fmt.Errorf("map rank %d's mailbox: %w", r, err)
		}
		m.ptr, m.mapped = ptr, true
		if err := u.drv.MemSetAccess(ptr, m.size, cuda.Access{Device: u.dev, Flags: cuda.AccessReadWrite}); err != nil {
			return fmt.Errorf("grant device %d access to rank %d's mailbox: %w", u.dev, r, err)
		}
		off += m.size
	}
	return armSlots(u.drv, u.mems[u.rank].ptr, u.layout)
}

// armSlots stores the Sentinel into every word of a mailbox and waits for
// it: a memset of device memory may return before it is done, and a peer
// that is told "armed" must not have its store overwritten by it.
func armSlots(drv VMM, ptr cuda.DevicePtr, l Layout) error {
	if err := drv.MemsetD32(ptr, Sentinel, uint64(l.Bytes/4)); err != nil {
		return fmt.Errorf("arm slots: %w", err)
	}
	if err := drv.CtxSynchronize(); err != nil {
		return fmt.Errorf("arm slots: synchronize: %w", err)
	}
	return nil
}

// Name is "unicast".
func (u *Unicast) Name() string { return "unicast" }

// Peers is the base address of every rank's mailbox as mapped in this
// process (index = rank); the kernel stores rank r's slice into each. Nil
// after Close.
func (u *Unicast) Peers() []cuda.DevicePtr {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil
	}
	ptrs := make([]cuda.DevicePtr, len(u.mems))
	for r, m := range u.mems {
		ptrs[r] = m.ptr
	}
	return ptrs
}

// Local is this rank's own mailbox (Peers()[Rank()]), which its receive
// polls. 0 after Close.
func (u *Unicast) Local() cuda.DevicePtr {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return 0
	}
	return u.mems[u.rank].ptr
}

// Close unmaps every mailbox, frees the address range and releases every
// handle, in the reverse order of setup. It is idempotent. A step that
// fails does not stop the others, except those that depend on it: a range
// whose unmap failed keeps its handle and its reservation (releasing them
// under a live mapping would be worse than the leak). Errors are joined.
func (u *Unicast) Close() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.closed {
		return nil
	}
	u.closed = true
	var errs []error
	stuck := make([]bool, len(u.mems))
	anyStuck := false
	for r := len(u.mems) - 1; r >= 0; r-- {
		m := &u.mems[r]
		if m.mapped {
			m.mapped = false
			if err := u.drv.MemUnmap(m.ptr, m.size); err != nil {
				errs = append(errs, fmt.Errorf("unmap rank %d's mailbox: %w", r, err))
				stuck[r], anyStuck = true, true
			}
		}
	}
	if u.resvSz != 0 && !anyStuck {
		if err := u.drv.MemAddressFree(u.resv, u.resvSz); err != nil {
			errs = append(errs, fmt.Errorf("free mailbox address range: %w", err))
		}
	}
	u.resvSz = 0
	for r := len(u.mems) - 1; r >= 0; r-- {
		m := &u.mems[r]
		if m.held && !stuck[r] {
			if err := u.drv.MemRelease(m.handle); err != nil {
				errs = append(errs, fmt.Errorf("release rank %d's mailbox handle: %w", r, err))
			}
		}
		m.held = false
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("mailbox: rank %d: close unicast: %w", u.rank, err)
	}
	return nil
}

// agreeHellos checks that every rank sent the same values at the indices
// in same; the error names the ranks that differ and what (names the
// fields) they differ in.
func agreeHellos(msgs []gpuMsg, same []int, what string) error {
	var differ []string
	for r, m := range msgs {
		for _, i := range same {
			if m.vals[i] != msgs[0].vals[i] {
				differ = append(differ, fmt.Sprintf("rank %d has %v, rank 0 has %v", r, pick(m.vals, same), pick(msgs[0].vals, same)))
				break
			}
		}
	}
	if len(differ) > 0 {
		return fmt.Errorf("%w: ranks disagree about the mailbox (%s): %s", ErrConfig, what, strings.Join(differ, "; "))
	}
	return nil
}

func pick(vals []uint64, idx []int) []uint64 {
	out := make([]uint64, len(idx))
	for i, j := range idx {
		out[i] = vals[j]
	}
	return out
}

// chooseHandleType picks FABRIC when every rank says it can (vals[at] is
// 1), else POSIX FD, with the first rank's reason for not using fabric.
// Every rank computes it from the same messages, so all agree.
func chooseHandleType(msgs []gpuMsg, at int, forced cuda.HandleType) (cuda.HandleType, string) {
	if forced == cuda.HandleTypePOSIXFD {
		return cuda.HandleTypePOSIXFD, "POSIX_FD asked for"
	}
	for r, m := range msgs {
		if m.vals[at] != 1 {
			why := string(m.blob)
			if why == "" {
				why = "fabric handles unavailable"
			}
			return cuda.HandleTypePOSIXFD, fmt.Sprintf("rank %d: %s; using POSIX_FD", r, why)
		}
	}
	return cuda.HandleTypeFabric, ""
}

func boolWord(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
