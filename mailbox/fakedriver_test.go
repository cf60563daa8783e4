package mailbox

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/internal/cuda"
)

// fakeSys is an in-memory CUDA driver shared by the goroutine ranks of a
// test: the "system" holds the physical objects (memory and multicast
// objects), each rank has its own fakeDrv (its "process": handles,
// reservations, mappings). Exported handles are real memfds holding the
// object's id, so they travel through the fake hub like real descriptors
// and leaks show up in /proc/self/fd.
//
// Besides what the real driver refuses, it enforces this package's rules
// strictly: no bind before every device was added, no unmap of memory that
// is still bound, no unbind while the multicast mapping exists, no release
// of a handle that is mapped or bound, no double release, the creator's
// export kept open until every device has bound. Breaking one is recorded
// as a violation (tests fail on any) and returns an error.
type fakeSys struct {
	mu         sync.Mutex
	cfg        fakeCfg
	nextObj    uint64
	objs       map[uint64]*fakeObj
	seq        int
	log        []fakeEvent
	drivers    []*fakeDrv
	violations []string
}

// fakeCfg is the simulated hardware.
type fakeCfg struct {
	gran, mcGran uint64
	// attr answers DeviceAttribute; nil: VMM, POSIX FD and multicast
	// supported, fabric not.
	attr func(dev cuda.Device, a cuda.DeviceAttribute) int
	// fabricCreateErr is what MemCreate and MulticastCreate return for a
	// FABRIC request (0: they work); fabricExportErr likewise for
	// MemExportFabric.
	fabricCreateErr, fabricExportErr cuda.Result
}

func defaultAttr(_ cuda.Device, a cuda.DeviceAttribute) int {
	switch a {
	case cuda.AttrVirtualMemoryManagementSupported, cuda.AttrHandleTypePOSIXFDSupported, cuda.AttrMulticastSupported:
		return 1
	}
	return 0
}

func fabricAttr(_ cuda.Device, a cuda.DeviceAttribute) int {
	if a == cuda.AttrHandleTypeFabricSupported {
		return 1
	}
	return defaultAttr(0, a)
}

type fakeEvent struct {
	seq, rank int
	op        string
}

type fakeObj struct {
	id    uint64
	mc    bool
	size  uint64
	dev   cuda.Device // memory: where it lives
	types cuda.HandleType
	refs  int // handles in all drivers

	// memory
	boundTo uint64 // the multicast object it is bound to, 0 if none
	fill    uint32 // value of the last MemsetD32
	filled  uint64 // bytes it covered from offset 0

	// multicast
	numDevices int
	added      []cuda.Device
	bound      map[cuda.Device]uint64 // device -> memory object
	exportFD   int                    // the creator's first POSIX export, -1 if none
	exportIno  uint64
}

// fakeDrv is one rank's view of the driver.
type fakeDrv struct {
	sys     *fakeSys
	rank    int
	dev     cuda.Device
	handles map[cuda.GenericAllocationHandle]uint64 // -> object id
	nextH   cuda.GenericAllocationHandle
	resv    map[cuda.DevicePtr]*fakeResv
	maps    map[cuda.DevicePtr]*fakeMap
	nextVA  cuda.DevicePtr
	calls   []string
	failAt  int // fail the failAt-th call (1-based); 0: never
}

type fakeResv struct {
	size  uint64
	label string
}

type fakeMap struct {
	size   uint64
	h      cuda.GenericAllocationHandle
	obj    uint64
	access bool
}

var (
	_ VMM          = (*fakeDrv)(nil)
	_ MulticastVMM = (*fakeDrv)(nil)
)

func newFakeSys(cfg fakeCfg) *fakeSys {
	if cfg.gran == 0 {
		cfg.gran = 2 << 20
	}
	if cfg.mcGran == 0 {
		cfg.mcGran = 2 << 20
	}
	if cfg.attr == nil {
		cfg.attr = defaultAttr
	}
	return &fakeSys{cfg: cfg, objs: map[uint64]*fakeObj{}}
}

// driver makes rank's driver, on device dev.
func (s *fakeSys) driver(rank int, dev cuda.Device) *fakeDrv {
	s.mu.Lock()
	defer s.mu.Unlock()
	d := &fakeDrv{
		sys: s, rank: rank, dev: dev,
		handles: map[cuda.GenericAllocationHandle]uint64{},
		nextH:   cuda.GenericAllocationHandle(0x1000*(rank+1) + 1),
		resv:    map[cuda.DevicePtr]*fakeResv{},
		maps:    map[cuda.DevicePtr]*fakeMap{},
		nextVA:  cuda.DevicePtr(uint64(rank+1) << 40),
	}
	s.drivers = append(s.drivers, d)
	return d
}

// outstanding lists everything still allocated, held, reserved, mapped or
// bound, and every rule that was broken.
func (s *fakeSys) outstanding() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := slices.Clone(s.violations)
	for _, o := range s.objs {
		out = append(out, fmt.Sprintf("object %d (multicast %v, %d handles, bound %v) still exists", o.id, o.mc, o.refs, o.bound))
	}
	for _, d := range s.drivers {
		for h := range d.handles {
			out = append(out, fmt.Sprintf("rank %d holds handle %#x", d.rank, uint64(h)))
		}
		for p, r := range d.resv {
			out = append(out, fmt.Sprintf("rank %d has %d bytes reserved at %#x (%s)", d.rank, r.size, uint64(p), r.label))
		}
		for p, m := range d.maps {
			out = append(out, fmt.Sprintf("rank %d has %d bytes mapped at %#x", d.rank, m.size, uint64(p)))
		}
	}
	sort.Strings(out)
	return out
}

func (s *fakeSys) violationList() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.violations)
}

// events returns the global call log.
func (s *fakeSys) events() []fakeEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.log)
}

// callsOf returns a copy of rank's driver's call labels.
func (d *fakeDrv) callList() []string {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	return slices.Clone(d.calls)
}

func (d *fakeDrv) setFailAt(n int) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	d.failAt = n
}

// enter records a call (sys.mu held) and injects the configured failure.
func (d *fakeDrv) enter(op string) error {
	d.calls = append(d.calls, op)
	d.sys.seq++
	d.sys.log = append(d.sys.log, fakeEvent{seq: d.sys.seq, rank: d.rank, op: op})
	if len(d.calls) == d.failAt {
		return &cuda.Error{Op: op + " [injected failure]", Code: cuda.ErrUnknown}
	}
	return nil
}

// fail is a refusal the real driver would make too.
func fail(op string, code cuda.Result, format string, args ...any) error {
	return &cuda.Error{Op: op + ": " + fmt.Sprintf(format, args...), Code: code}
}

// violate is a broken rule: recorded, and refused.
func (d *fakeDrv) violate(op, format string, args ...any) error {
	msg := fmt.Sprintf("rank %d: %s: %s", d.rank, op, fmt.Sprintf(format, args...))
	d.sys.violations = append(d.sys.violations, msg)
	return &cuda.Error{Op: msg, Code: cuda.ErrIllegalState}
}

func (d *fakeDrv) obj(h cuda.GenericAllocationHandle) *fakeObj {
	id, ok := d.handles[h]
	if !ok {
		return nil
	}
	return d.sys.objs[id]
}

func kindOf(o *fakeObj) string {
	if o != nil && o.mc {
		return "mc"
	}
	return "mem"
}

func (d *fakeDrv) newHandle(o *fakeObj) cuda.GenericAllocationHandle {
	h := d.nextH
	d.nextH++
	d.handles[h] = o.id
	o.refs++
	return h
}

func (d *fakeDrv) newObj(o *fakeObj) *fakeObj {
	d.sys.nextObj++
	o.id = d.sys.nextObj
	o.exportFD = -1
	d.sys.objs[o.id] = o
	return o
}

func (d *fakeDrv) DeviceAttribute(dev cuda.Device, a cuda.DeviceAttribute) (int, error) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	if err := d.enter(fmt.Sprintf("DeviceAttribute(%d)", int(a))); err != nil {
		return 0, err
	}
	return d.sys.cfg.attr(dev, a), nil
}

func (d *fakeDrv) MemGetAllocationGranularity(prop cuda.AllocationProp, _ cuda.GranularityOption) (uint64, error) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	if err := d.enter("MemGetAllocationGranularity"); err != nil {
		return 0, err
	}
	return d.sys.cfg.gran, nil
}

func (d *fakeDrv) MulticastGetGranularity(prop cuda.MulticastProp, _ cuda.GranularityOption) (uint64, error) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	if err := d.enter("MulticastGetGranularity"); err != nil {
		return 0, err
	}
	if prop.NumDevices < 1 {
		return 0, fail("MulticastGetGranularity", cuda.ErrInvalidValue, "numDevices %d", prop.NumDevices)
	}
	return d.sys.cfg.mcGran, nil
}

func (d *fakeDrv) MemCreate(size uint64, prop cuda.AllocationProp) (cuda.GenericAllocationHandle, error) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	op := fmt.Sprintf("MemCreate(%v)", prop.HandleTypes)
	if err := d.enter(op); err != nil {
		return 0, err
	}
	if size == 0 || size%d.sys.cfg.gran != 0 || prop.Device != d.dev {
		return 0, fail(op, cuda.ErrInvalidValue, "size %d, device %d (driver of device %d)", size, prop.Device, d.dev)
	}
	if prop.HandleTypes&^(cuda.HandleTypePOSIXFD|cuda.HandleTypeFabric) != 0 {
		return 0, fail(op, cuda.ErrInvalidValue, "handle types %v", prop.HandleTypes)
	}
	if prop.HandleTypes&cuda.HandleTypeFabric != 0 && d.sys.cfg.fabricCreateErr != 0 {
		return 0, fail(op, d.sys.cfg.fabricCreateErr, "fabric")
	}
	o := d.newObj(&fakeObj{size: size, dev: prop.Device, types: prop.HandleTypes})
	return d.newHandle(o), nil
}

func (d *fakeDrv) MulticastCreate(prop cuda.MulticastProp) (cuda.GenericAllocationHandle, error) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	op := fmt.Sprintf("MulticastCreate(%v)", prop.HandleTypes)
	if err := d.enter(op); err != nil {
		return 0, err
	}
	if prop.Size == 0 || prop.Size%d.sys.cfg.mcGran != 0 || prop.NumDevices < 1 {
		return 0, fail(op, cuda.ErrInvalidValue, "size %d, numDevices %d", prop.Size, prop.NumDevices)
	}
	if prop.HandleTypes&cuda.HandleTypeFabric != 0 && d.sys.cfg.fabricCreateErr != 0 {
		return 0, fail(op, d.sys.cfg.fabricCreateErr, "fabric")
	}
	o := d.newObj(&fakeObj{mc: true, size: prop.Size, types: prop.HandleTypes, numDevices: prop.NumDevices, bound: map[cuda.Device]uint64{}})
	return d.newHandle(o), nil
}

func (d *fakeDrv) MemRelease(h cuda.GenericAllocationHandle) error {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	o := d.obj(h)
	op := "MemRelease(" + kindOf(o) + ")"
	if err := d.enter(op); err != nil {
		return err
	}
	if o == nil {
		return d.violate(op, "handle %#x is not held (double release?)", uint64(h))
	}
	for p, m := range d.maps {
		if m.h == h {
			return d.violate(op, "handle %#x is still mapped at %#x", uint64(h), uint64(p))
		}
	}
	if !o.mc && o.boundTo != 0 {
		return d.violate(op, "memory object %d is still bound to multicast object %d", o.id, o.boundTo)
	}
	if o.mc {
		if mem, ok := o.bound[d.dev]; ok {
			return d.violate(op, "multicast object %d still has memory object %d of device %d bound", o.id, mem, d.dev)
		}
	}
	delete(d.handles, h)
	o.refs--
	if o.refs == 0 {
		delete(d.sys.objs, o.id)
	}
	return nil
}

const fakeMagic = 0x6b61664b41445543 // "CUDAkfak"

func (d *fakeDrv) MemExportPOSIXFD(h cuda.GenericAllocationHandle) (int, error) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	o := d.obj(h)
	op := "MemExportPOSIXFD(" + kindOf(o) + ")"
	if err := d.enter(op); err != nil {
		return -1, err
	}
	if o == nil || o.types&cuda.HandleTypePOSIXFD == 0 {
		return -1, fail(op, cuda.ErrInvalidValue, "handle %#x not exportable as POSIX FD", uint64(h))
	}
	fd, err := unix.MemfdCreate("fakecuda-export", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, fail(op, cuda.ErrOperatingSystem, "memfd_create: %v", err)
	}
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:], fakeMagic)
	binary.LittleEndian.PutUint64(b[8:], o.id)
	var st unix.Stat_t
	if _, err := unix.Pwrite(fd, b[:], 0); err != nil || unix.Fstat(fd, &st) != nil {
		_ = unix.Close(fd)
		return -1, fail(op, cuda.ErrOperatingSystem, "write memfd: %v", err)
	}
	if o.mc && o.exportFD < 0 {
		o.exportFD, o.exportIno = fd, st.Ino
	}
	return fd, nil
}

func (d *fakeDrv) MemExportFabric(h cuda.GenericAllocationHandle) (cuda.FabricHandle, error) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	o := d.obj(h)
	op := "MemExportFabric(" + kindOf(o) + ")"
	if err := d.enter(op); err != nil {
		return cuda.FabricHandle{}, err
	}
	if o == nil || o.types&cuda.HandleTypeFabric == 0 {
		return cuda.FabricHandle{}, fail(op, cuda.ErrInvalidValue, "handle %#x not exportable as FABRIC", uint64(h))
	}
	if d.sys.cfg.fabricExportErr != 0 {
		return cuda.FabricHandle{}, fail(op, d.sys.cfg.fabricExportErr, "fabric export")
	}
	var fh cuda.FabricHandle
	binary.LittleEndian.PutUint64(fh[:], fakeMagic)
	binary.LittleEndian.PutUint64(fh[8:], o.id)
	return fh, nil
}

func (d *fakeDrv) importID(op string, magic, id uint64) (cuda.GenericAllocationHandle, error) {
	o := d.sys.objs[id]
	if magic != fakeMagic || o == nil {
		return 0, fail(op, cuda.ErrInvalidValue, "not a live exported object (magic %#x, id %d)", magic, id)
	}
	return d.newHandle(o), nil
}

func (d *fakeDrv) MemImportPOSIXFD(fd int) (cuda.GenericAllocationHandle, error) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	op := "MemImportPOSIXFD"
	if err := d.enter(op); err != nil {
		return 0, err
	}
	var b [16]byte
	if n, err := unix.Pread(fd, b[:], 0); err != nil || n != len(b) {
		return 0, fail(op, cuda.ErrInvalidValue, "fd %d: read %d bytes: %v", fd, n, err)
	}
	return d.importID(op, binary.LittleEndian.Uint64(b[:]), binary.LittleEndian.Uint64(b[8:]))
}

func (d *fakeDrv) MemImportFabric(fh cuda.FabricHandle) (cuda.GenericAllocationHandle, error) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	op := "MemImportFabric"
	if err := d.enter(op); err != nil {
		return 0, err
	}
	return d.importID(op, binary.LittleEndian.Uint64(fh[:]), binary.LittleEndian.Uint64(fh[8:]))
}

func (d *fakeDrv) MemAddressReserve(size, alignment uint64) (cuda.DevicePtr, error) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	op := "MemAddressReserve"
	if err := d.enter(op); err != nil {
		return 0, err
	}
	if alignment == 0 {
		alignment = d.sys.cfg.gran
	}
	if size == 0 || size%d.sys.cfg.gran != 0 || alignment%d.sys.cfg.gran != 0 {
		return 0, fail(op, cuda.ErrInvalidValue, "size %d, alignment %d", size, alignment)
	}
	p := cuda.DevicePtr(roundUp(uint64(d.nextVA), alignment))
	d.nextVA = p + cuda.DevicePtr(size) + cuda.DevicePtr(d.sys.cfg.gran) // a guard gap
	d.resv[p] = &fakeResv{size: size}
	return p, nil
}

func (d *fakeDrv) MemAddressFree(ptr cuda.DevicePtr, size uint64) error {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	r := d.resv[ptr]
	label := "?"
	if r != nil {
		label = r.label
	}
	op := "MemAddressFree(" + label + ")"
	if err := d.enter(op); err != nil {
		return err
	}
	if r == nil || r.size != size {
		return d.violate(op, "no reservation of %d bytes at %#x", size, uint64(ptr))
	}
	for p, m := range d.maps {
		if p >= ptr && p < ptr+cuda.DevicePtr(size) {
			return d.violate(op, "range still has %d bytes mapped at %#x", m.size, uint64(p))
		}
	}
	delete(d.resv, ptr)
	return nil
}

func (d *fakeDrv) MemMap(ptr cuda.DevicePtr, size, offset uint64, h cuda.GenericAllocationHandle) error {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	o := d.obj(h)
	op := "MemMap(" + kindOf(o) + ")"
	if err := d.enter(op); err != nil {
		return err
	}
	g := d.sys.cfg.gran
	if o == nil || size == 0 || size%g != 0 || offset%g != 0 || uint64(ptr)%g != 0 || offset+size > o.size {
		return fail(op, cuda.ErrInvalidValue, "ptr %#x size %d offset %d handle %#x", uint64(ptr), size, offset, uint64(h))
	}
	var in *fakeResv
	for p, r := range d.resv {
		if ptr >= p && ptr+cuda.DevicePtr(size) <= p+cuda.DevicePtr(r.size) {
			in = r
		}
	}
	if in == nil {
		return fail(op, cuda.ErrInvalidValue, "[%#x, +%d) is not inside a reservation", uint64(ptr), size)
	}
	for p, m := range d.maps {
		if ptr < p+cuda.DevicePtr(m.size) && p < ptr+cuda.DevicePtr(size) {
			return fail(op, cuda.ErrAlreadyMapped, "overlaps the mapping at %#x", uint64(p))
		}
	}
	if o.mc {
		if _, ok := o.bound[d.dev]; !ok {
			return d.violate(op, "multicast object %d mapped before device %d bound memory to it", o.id, d.dev)
		}
	}
	in.label = kindOf(o)
	d.maps[ptr] = &fakeMap{size: size, h: h, obj: o.id}
	return nil
}

func (d *fakeDrv) MemUnmap(ptr cuda.DevicePtr, size uint64) error {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	m, o := d.mappingLocked(ptr)
	op := "MemUnmap(" + kindOf(o) + ")"
	if err := d.enter(op); err != nil {
		return err
	}
	if m == nil || m.size != size {
		return d.violate(op, "no mapping of %d bytes at %#x", size, uint64(ptr))
	}
	if o != nil && !o.mc && o.boundTo != 0 {
		return d.violate(op, "memory object %d is still bound to multicast object %d", o.id, o.boundTo)
	}
	delete(d.maps, ptr)
	return nil
}

func (d *fakeDrv) MemSetAccess(ptr cuda.DevicePtr, size uint64, access ...cuda.Access) error {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	m, o := d.mappingLocked(ptr)
	op := "MemSetAccess(" + kindOf(o) + ")"
	if err := d.enter(op); err != nil {
		return err
	}
	if m == nil || m.size != size {
		return fail(op, cuda.ErrInvalidValue, "no mapping of %d bytes at %#x", size, uint64(ptr))
	}
	if len(access) != 1 || access[0].Device != d.dev || access[0].Flags != cuda.AccessReadWrite {
		return fail(op, cuda.ErrInvalidValue, "access %v, want read-write for device %d", access, d.dev)
	}
	m.access = true
	return nil
}

func (d *fakeDrv) MemsetD32(ptr cuda.DevicePtr, v uint32, n uint64) error {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	m, o := d.mappingLocked(ptr)
	op := "MemsetD32(" + kindOf(o) + ")"
	if err := d.enter(op); err != nil {
		return err
	}
	if m == nil || !m.access || 4*n > m.size || o == nil {
		return fail(op, cuda.ErrInvalidValue, "%d words at %#x: not inside an accessible mapping", n, uint64(ptr))
	}
	o.fill, o.filled = v, 4*n
	return nil
}

func (d *fakeDrv) CtxSynchronize() error {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	return d.enter("CtxSynchronize")
}

func (d *fakeDrv) MulticastAddDevice(mc cuda.GenericAllocationHandle, dev cuda.Device) error {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	op := "MulticastAddDevice"
	if err := d.enter(op); err != nil {
		return err
	}
	o := d.obj(mc)
	if o == nil || !o.mc {
		return fail(op, cuda.ErrInvalidValue, "handle %#x is not a multicast object", uint64(mc))
	}
	switch {
	case len(o.bound) > 0:
		return d.violate(op, "device %d added after memory was bound", dev)
	case slices.Contains(o.added, dev):
		return d.violate(op, "device %d added twice", dev)
	case len(o.added) >= o.numDevices:
		return d.violate(op, "device %d is one more than the %d the object was made for", dev, o.numDevices)
	}
	o.added = append(o.added, dev)
	return nil
}

func (d *fakeDrv) MulticastBindMem(mc cuda.GenericAllocationHandle, mcOffset uint64, mem cuda.GenericAllocationHandle, memOffset, size uint64) error {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	op := "MulticastBindMem"
	if err := d.enter(op); err != nil {
		return err
	}
	o, mo := d.obj(mc), d.obj(mem)
	if o == nil || !o.mc || mo == nil || mo.mc || mcOffset+size > o.size || memOffset+size > mo.size {
		return fail(op, cuda.ErrInvalidValue, "mc %#x offset %d, mem %#x offset %d, size %d", uint64(mc), mcOffset, uint64(mem), memOffset, size)
	}
	switch {
	case len(o.added) < o.numDevices:
		return d.violate(op, "bind while only %d of %d devices are added", len(o.added), o.numDevices)
	case !slices.Contains(o.added, mo.dev):
		return d.violate(op, "memory of device %d, which was not added", mo.dev)
	case o.bound[mo.dev] != 0:
		return d.violate(op, "device %d bound twice", mo.dev)
	case mo.boundTo != 0:
		return d.violate(op, "memory object %d is already bound", mo.id)
	}
	if o.exportFD >= 0 {
		var st unix.Stat_t
		if err := unix.Fstat(o.exportFD, &st); err != nil || st.Ino != o.exportIno {
			return d.violate(op, "the creator dropped its export (fd %d) before every device bound", o.exportFD)
		}
	}
	o.bound[mo.dev] = mo.id
	mo.boundTo = o.id
	return nil
}

func (d *fakeDrv) MulticastUnbind(mc cuda.GenericAllocationHandle, dev cuda.Device, mcOffset, size uint64) error {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	op := "MulticastUnbind"
	if err := d.enter(op); err != nil {
		return err
	}
	o := d.obj(mc)
	if o == nil || !o.mc {
		return fail(op, cuda.ErrInvalidValue, "handle %#x is not a multicast object", uint64(mc))
	}
	memID, ok := o.bound[dev]
	if !ok {
		return d.violate(op, "device %d has nothing bound", dev)
	}
	for p, m := range d.maps {
		if m.obj == o.id {
			return d.violate(op, "multicast object %d is still mapped at %#x", o.id, uint64(p))
		}
	}
	delete(o.bound, dev)
	if mo := d.sys.objs[memID]; mo != nil {
		mo.boundTo = 0
	}
	return nil
}

// mappingLocked returns the mapping at ptr and the object it maps, either
// nil when there is none. Call with d.sys.mu held.
func (d *fakeDrv) mappingLocked(ptr cuda.DevicePtr) (*fakeMap, *fakeObj) {
	m := d.maps[ptr]
	if m == nil {
		return nil, nil
	}
	return m, d.sys.objs[m.obj]
}

// mappedObj returns the object mapped at ptr in this driver.
func (d *fakeDrv) mappedObj(ptr cuda.DevicePtr) (fakeObj, bool) {
	d.sys.mu.Lock()
	defer d.sys.mu.Unlock()
	_, o := d.mappingLocked(ptr)
	if o == nil {
		return fakeObj{}, false
	}
	return *o, true
}
