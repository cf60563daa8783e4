package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"strconv"
	"syscall"
	"testing"
)

// These tests run for real on a GPU machine (build the binary here with
// `go test -c`, run it there) and skip on machines without a driver.

// openGPU opens the real driver, initializes it and binds the test's
// goroutine to the primary context of the device named by
// TPRUN_TEST_DEVICE (default 0).
func openGPU(t *testing.T) (*Driver, Device) {
	t.Helper()
	d, err := Open()
	if errors.Is(err, ErrNoDriver) {
		t.Skipf("no CUDA driver (libcuda.so.1 not loadable): %v", err)
	}
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	if err := d.Init(); err != nil {
		if IsNoDevice(err) {
			t.Skipf("CUDA driver present but no device: %v", err)
		}
		t.Fatalf("Init: %v", err)
	}
	n := ok(d.DeviceCount())(t)
	ordinal := 0
	if s := os.Getenv("TPRUN_TEST_DEVICE"); s != "" {
		ordinal = ok(strconv.Atoi(s))(t)
	}
	if ordinal >= n {
		t.Skipf("device %d requested, %d present", ordinal, n)
	}
	dev := ok(d.DeviceGet(ordinal))(t)
	ctx := ok(d.DevicePrimaryCtxRetain(dev))(t)
	unbind, err := d.BindContext(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unbind()
		if err := d.DevicePrimaryCtxRelease(dev); err != nil {
			t.Errorf("DevicePrimaryCtxRelease: %v", err)
		}
	})
	return d, dev
}

func TestGPUDeviceInfo(t *testing.T) {
	d, dev := openGPU(t)
	v := ok(d.DriverVersion())(t)
	name := ok(d.DeviceName(dev))(t)
	bus := ok(d.DevicePCIBusID(dev))(t)
	uuid := ok(d.DeviceUUID(dev))(t)
	major, minor := ok2(d.ComputeCapability(dev))(t)
	total := ok(d.DeviceTotalMem(dev))(t)
	t.Logf("driver %d, device %d: %s, %s, %s, cc %d.%d, %d MiB", v, dev, name, bus, uuid, major, minor, total>>20)
	if v < 12000 || name == "" || bus == "" || uuid == (UUID{}) || major < 3 || total == 0 {
		t.Errorf("implausible device info")
	}
	for _, a := range []struct {
		name string
		attr DeviceAttribute
	}{
		{"SMs", AttrMultiprocessorCount},
		{"L2 bytes", AttrL2CacheSize},
		{"smem optin", AttrMaxSharedMemoryPerBlockOptin},
		{"VMM", AttrVirtualMemoryManagementSupported},
		{"POSIX FD", AttrHandleTypePOSIXFDSupported},
		{"FABRIC", AttrHandleTypeFabricSupported},
		{"multicast", AttrMulticastSupported},
	} {
		t.Logf("  %s: %d", a.name, ok(d.DeviceAttribute(dev, a.attr))(t))
	}
	t.Logf("  driver exports multicast API: %v (never created by tests)", d.HasMulticast())
}

func TestGPUMemory(t *testing.T) {
	d, _ := openGPU(t)
	r := newRand(t)
	free, total := ok2(d.MemGetInfo())(t)
	if free == 0 || free > total {
		t.Errorf("MemGetInfo free %d total %d", free, total)
	}

	const n = 1 << 20
	buf := ok(d.MemAlloc(n))(t)
	t.Cleanup(func() { check(t, d.MemFree(buf)) })
	src := randBytes(r, n)
	check(t, d.MemcpyHtoD(buf, src))
	got := bytes.Repeat([]byte{0xee}, n)
	check(t, d.MemcpyDtoH(got, buf))
	if !bytes.Equal(got, src) {
		t.Fatal("HtoD/DtoH round trip differs")
	}

	// The mailbox sentinel over the first half, one byte value over 16 bytes.
	check(t, d.MemsetD32(buf, 0x80000000, n/8))
	v8 := byte(r.Uint32()) | 1
	check(t, d.MemsetD8(buf+n/2, v8, 16))
	check(t, d.CtxSynchronize())
	check(t, d.MemcpyDtoH(got, buf))
	for i := 0; i < n/2; i += 4 {
		if w := binary.LittleEndian.Uint32(got[i:]); w != 0x80000000 {
			t.Fatalf("word %d = %#x after MemsetD32", i/4, w)
		}
	}
	if got[n/2] != v8 || got[n/2+15] != v8 || got[n/2+16] != src[n/2+16] {
		t.Error("MemsetD8 wrote the wrong range")
	}

	// Mapped pinned host memory, written by a device copy.
	host := ok(d.MemHostAlloc(4096, HostAllocDeviceMap))(t)
	t.Cleanup(func() { check(t, d.MemFreeHost(host)) })
	for i := range host {
		host[i] = 0xee
	}
	hp := ok(d.MemHostGetDevicePointer(host))(t)
	check(t, d.MemcpyDtoD(hp, buf+n/2+16, 4096))
	check(t, d.CtxSynchronize())
	if !bytes.Equal(host, src[n/2+16:n/2+16+4096]) {
		t.Error("device copy into mapped host memory differs")
	}
}

// One device: create, export as POSIX FD, import, map both handles, write
// through one mapping and read through the other.
func TestGPUVMMPosixFD(t *testing.T) {
	d, dev := openGPU(t)
	r := newRand(t)
	if v := ok(d.DeviceAttribute(dev, AttrVirtualMemoryManagementSupported))(t); v == 0 {
		t.Skip("device without VMM")
	}
	prop := AllocationProp{Device: dev, HandleTypes: HandleTypePOSIXFD}
	g := ok(d.MemGetAllocationGranularity(prop, GranularityRecommended))(t)
	t.Logf("granularity %d", g)

	h := ok(d.MemCreate(g, prop))(t)
	t.Cleanup(func() { check(t, d.MemRelease(h)) })
	fd := ok(d.MemExportPOSIXFD(h))(t)
	h2, err := d.MemImportPOSIXFD(fd)
	if cerr := syscall.Close(fd); cerr != nil {
		t.Errorf("close exported fd: %v", cerr)
	}
	check(t, err)
	t.Cleanup(func() { check(t, d.MemRelease(h2)) })

	va := ok(d.MemAddressReserve(2*g, g))(t)
	t.Cleanup(func() { check(t, d.MemAddressFree(va, 2*g)) })
	check(t, d.MemMap(va, g, 0, h))
	t.Cleanup(func() { check(t, d.MemUnmap(va, g)) })
	check(t, d.MemMap(va+DevicePtr(g), g, 0, h2))
	t.Cleanup(func() { check(t, d.MemUnmap(va+DevicePtr(g), g)) })
	check(t, d.MemSetAccess(va, 2*g, Access{Device: dev, Flags: AccessReadWrite}))

	data := randBytes(r, 64<<10)
	off := DevicePtr(r.IntN(int(g)-len(data)) &^ 15)
	check(t, d.MemcpyHtoD(va+off, data))
	got := bytes.Repeat([]byte{0xcd}, len(data))
	check(t, d.MemcpyDtoH(got, va+DevicePtr(g)+off))
	if !bytes.Equal(got, data) {
		t.Error("the imported mapping does not show the exporter's bytes")
	}
}

// FABRIC handles need an IMEX channel; where there is none, MemCreate
// says CUDA_ERROR_NOT_PERMITTED, which callers treat as "use POSIX FD".
func TestGPUVMMFabric(t *testing.T) {
	d, dev := openGPU(t)
	if v := ok(d.DeviceAttribute(dev, AttrHandleTypeFabricSupported))(t); v == 0 {
		t.Skip("device reports no FABRIC handle support")
	}
	prop := AllocationProp{Device: dev, HandleTypes: HandleTypeFabric}
	g := ok(d.MemGetAllocationGranularity(prop, GranularityRecommended))(t)
	h, err := d.MemCreate(g, prop)
	if IsNotPermitted(err) || IsNotSupported(err) {
		t.Skipf("FABRIC not available here: %v", err)
	}
	check(t, err)
	t.Cleanup(func() { check(t, d.MemRelease(h)) })
	fh := ok(d.MemExportFabric(h))(t)
	if fh == (FabricHandle{}) {
		t.Error("exported fabric handle is all zero")
	}
	h2 := ok(d.MemImportFabric(fh))(t)
	check(t, d.MemRelease(h2))
}

// A hand-written PTX module (JIT-compiled by the driver): tp_fill takes one
// struct {u32 *p; u32 v; u32 n} by value, tp_fill2 the same as three
// parameters. Each sets p[i] = v + i for i < n.
const testPTX = `
.version 7.0
.target sm_70
.address_size 64

.visible .entry tp_fill(
	.param .align 8 .b8 tp_fill_param_0[16]
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<5>;

	ld.param.u64 %rd1, [tp_fill_param_0];
	ld.param.u32 %r1, [tp_fill_param_0+8];
	ld.param.u32 %r2, [tp_fill_param_0+12];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r6, %r3, %r4, %r5;
	setp.ge.u32 %p1, %r6, %r2;
	@%p1 bra $L__done;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r6, 4;
	add.s64 %rd4, %rd2, %rd3;
	add.s32 %r7, %r6, %r1;
	st.global.u32 [%rd4], %r7;
$L__done:
	ret;
}

.visible .entry tp_fill2(
	.param .u64 tp_fill2_param_0,
	.param .u32 tp_fill2_param_1,
	.param .u32 tp_fill2_param_2
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<5>;

	ld.param.u64 %rd1, [tp_fill2_param_0];
	ld.param.u32 %r1, [tp_fill2_param_1];
	ld.param.u32 %r2, [tp_fill2_param_2];
	mov.u32 %r3, %ctaid.x;
	mov.u32 %r4, %ntid.x;
	mov.u32 %r5, %tid.x;
	mad.lo.s32 %r6, %r3, %r4, %r5;
	setp.ge.u32 %p1, %r6, %r2;
	@%p1 bra $L__done2;
	cvta.to.global.u64 %rd2, %rd1;
	mul.wide.u32 %rd3, %r6, 4;
	add.s64 %rd4, %rd2, %rd3;
	add.s32 %r7, %r6, %r1;
	st.global.u32 [%rd4], %r7;
$L__done2:
	ret;
}
`

func checkFill(t *testing.T, d *Driver, buf DevicePtr, words int, v, n uint32) {
	t.Helper()
	got := make([]byte, 4*words)
	check(t, d.MemcpyDtoH(got, buf))
	for i := 0; i < words; i++ {
		w := binary.LittleEndian.Uint32(got[4*i:])
		want := uint32(0x80000000)
		if uint32(i) < n {
			want = v + uint32(i)
		}
		if w != want {
			t.Fatalf("word %d = %#x, want %#x", i, w, want)
		}
	}
}

// Launch through cuLaunchKernelEx (by-value struct, and separate
// parameters), then capture memset + kernel into a graph and replay it.
func TestGPULaunchAndGraph(t *testing.T) {
	d, dev := openGPU(t)
	r := newRand(t)
	major, _ := ok2(d.ComputeCapability(dev))(t)

	m := ok(d.ModuleLoadData([]byte(testPTX)))(t)
	t.Cleanup(func() { check(t, d.ModuleUnload(m)) })
	_, err := d.ModuleGetFunction(m, "no_such_kernel")
	wantErr(t, err, ErrNotFound, `name="no_such_kernel"`)
	fill := ok(d.ModuleGetFunction(m, "tp_fill"))(t)
	fill2 := ok(d.ModuleGetFunction(m, "tp_fill2"))(t)

	s := ok(d.StreamCreate(StreamNonBlocking))(t)
	t.Cleanup(func() { check(t, d.StreamDestroy(s)) })
	const words = 5000
	buf := ok(d.MemAlloc(4 * words))(t)
	t.Cleanup(func() { check(t, d.MemFree(buf)) })

	cfg := LaunchConfig{Grid: [3]uint32{(words + 255) / 256}, Block: [3]uint32{256}, Stream: s,
		ProgrammaticSerialization: major >= 9}

	// Direct launches, the output poisoned before each.
	v, n := r.Uint32(), uint32(1+r.IntN(words-1))
	check(t, d.MemsetD32Async(buf, 0x80000000, words, s))
	var p Params
	check(t, d.LaunchKernelEx(cfg, fill, p.Ptr(buf).U32(v).U32(n).Bytes()))
	check(t, d.StreamSynchronize(s))
	checkFill(t, d, buf, words, v, n)

	v, n = r.Uint32(), uint32(1+r.IntN(words-1))
	check(t, d.MemsetD32Async(buf, 0x80000000, words, s))
	var a, b, c Params
	check(t, d.LaunchKernelEx(cfg, fill2, a.Ptr(buf).Bytes(), b.U32(v).Bytes(), c.U32(n).Bytes()))
	check(t, d.StreamSynchronize(s))
	checkFill(t, d, buf, words, v, n)

	// Capture: poison, then fill; replay and time it.
	v, n = r.Uint32(), uint32(1+r.IntN(words-1))
	check(t, d.StreamBeginCapture(s, CaptureModeThreadLocal))
	check(t, d.MemsetD32Async(buf, 0x80000000, words, s))
	var q Params
	if err := d.LaunchKernelEx(cfg, fill, q.Ptr(buf).U32(v).U32(n).Bytes()); err != nil {
		_, _ = d.StreamEndCapture(s)
		t.Fatal(err)
	}
	g := ok(d.StreamEndCapture(s))(t)
	t.Cleanup(func() { check(t, d.GraphDestroy(g)) })
	e := ok(d.GraphInstantiate(g, 0))(t)
	t.Cleanup(func() { check(t, d.GraphExecDestroy(e)) })
	check(t, d.GraphUpload(e, s))

	// Nothing ran during capture: the buffer still holds the last fill.
	check(t, d.MemsetD32(buf, 0x12345678, words))
	check(t, d.CtxSynchronize())
	start := ok(d.EventCreate(EventDefault))(t)
	t.Cleanup(func() { check(t, d.EventDestroy(start)) })
	end := ok(d.EventCreate(EventDefault))(t)
	t.Cleanup(func() { check(t, d.EventDestroy(end)) })
	const replays = 20
	check(t, d.EventRecord(start, s))
	for i := 0; i < replays; i++ {
		check(t, d.GraphLaunch(e, s))
	}
	check(t, d.EventRecord(end, s))
	check(t, d.EventSynchronize(end))
	el := ok(d.EventElapsedTime(start, end))(t)
	t.Logf("%d replays of memset+kernel: %v (%v each)", replays, el, el/replays)
	if el <= 0 {
		t.Errorf("elapsed %v", el)
	}
	checkFill(t, d, buf, words, v, n)
}
