package cuda

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda/cudatest"
)

// buildFake compiles testdata/fakecuda.c into a shared object and returns
// its path. The fake is what lets the CPU tests drive every trampoline.
func buildFake(t *testing.T, defines ...string) string {
	t.Helper()
	return cudatest.Build(t, t.TempDir(), defines...)
}

func openFake(t *testing.T, defines ...string) *Driver {
	t.Helper()
	d, err := OpenLibrary(buildFake(t, defines...))
	if err != nil {
		t.Fatalf("OpenLibrary(fake): %v", err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return d
}

func newRand(t *testing.T) *rand.Rand {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	return rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// ok and ok2 take a call's results and then the test: ok(d.DeviceCount())(t).
func ok[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func ok2[A, B any](a A, b B, err error) func(*testing.T) (A, B) {
	return func(t *testing.T) (A, B) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return a, b
	}
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// wantErr checks that err is code and that its text contains each part.
func wantErr(t *testing.T, err error, code error, parts ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want %v", code)
	}
	if !errors.Is(err, code) {
		t.Errorf("error %q is not %v", err, code)
	}
	for _, p := range parts {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error %q does not contain %q", err, p)
		}
	}
}

func TestFakeDevicesAndContexts(t *testing.T) {
	d := openFake(t)
	check(t, d.Init())
	if v := ok(d.DriverVersion())(t); v != 13000 {
		t.Errorf("DriverVersion = %d", v)
	}
	if n := ok(d.DeviceCount())(t); n != 2 {
		t.Errorf("DeviceCount = %d", n)
	}
	if dev := ok(d.DeviceGet(1))(t); dev != 1 {
		t.Errorf("DeviceGet(1) = %d", dev)
	}
	_, err := d.DeviceGet(5)
	// The fake has no name for 101: the built-in table fills in.
	wantErr(t, err, ErrInvalidDevice, "cuDeviceGet(ordinal=5)", "CUDA_ERROR_INVALID_DEVICE (101): invalid device ordinal")

	// The fake answers attr*10+device, which catches swapped arguments.
	tests := []struct {
		desc string
		dev  Device
		attr DeviceAttribute
	}{
		{"multicast on device 1", 1, AttrMulticastSupported},
		{"fabric on device 0", 0, AttrHandleTypeFabricSupported},
		{"SM count on device 1", 1, AttrMultiprocessorCount},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if v := ok(d.DeviceAttribute(tc.dev, tc.attr))(t); v != int(tc.attr)*10+int(tc.dev) {
				t.Errorf("DeviceAttribute = %d", v)
			}
		})
	}
	major, minor := ok2(d.ComputeCapability(1))(t)
	if major != 751 || minor != 761 {
		t.Errorf("ComputeCapability = %d.%d", major, minor)
	}
	if s := ok(d.DeviceName(1))(t); s != "Fake GPU 1" {
		t.Errorf("DeviceName = %q", s)
	}
	if s := ok(d.DevicePCIBusID(1))(t); s != "0000:11:00.0" {
		t.Errorf("DevicePCIBusID = %q", s)
	}
	u := ok(d.DeviceUUID(1))(t)
	for i, b := range u {
		if b != byte(i*16+1) {
			t.Fatalf("UUID = %x", u)
		}
	}
	if n := ok(d.DeviceTotalMem(1))(t); n != 2<<30 {
		t.Errorf("DeviceTotalMem = %d", n)
	}
	if ok := ok(d.DeviceCanAccessPeer(0, 1))(t); !ok {
		t.Error("CanAccessPeer(0, 1) = false")
	}
	if ok := ok(d.DeviceCanAccessPeer(1, 1))(t); ok {
		t.Error("CanAccessPeer(1, 1) = true")
	}

	ctx := ok(d.DevicePrimaryCtxRetain(1))(t)
	if ctx != 0x1001 {
		t.Errorf("DevicePrimaryCtxRetain = %#x", uintptr(ctx))
	}
	unbind, err := d.BindContext(ctx)
	check(t, err)
	if cur := ok(d.CtxGetCurrent())(t); cur != ctx {
		t.Errorf("CtxGetCurrent = %#x after BindContext(%#x)", uintptr(cur), uintptr(ctx))
	}
	check(t, d.CtxSynchronize())
	unbind()
	check(t, d.DevicePrimaryCtxRelease(1))
}

func TestFakeStreamsEventsMemory(t *testing.T) {
	d := openFake(t)
	r := newRand(t)

	s := ok(d.StreamCreate(StreamNonBlocking))(t)
	if s != 0x2001 {
		t.Errorf("StreamCreate(NonBlocking) = %#x", uintptr(s))
	}
	start := ok(d.EventCreate(EventDefault))(t)
	end := ok(d.EventCreate(EventBlockingSync))(t)
	check(t, d.EventRecord(start, s))
	check(t, d.EventRecord(end, s))
	check(t, d.EventSynchronize(end))
	check(t, d.StreamWaitEvent(s, end))
	if el := ok(d.EventElapsedTime(start, end))(t); el != 1500*time.Microsecond {
		t.Errorf("EventElapsedTime = %v, want 1.5ms", el)
	}
	check(t, d.EventDestroy(start))
	check(t, d.EventDestroy(end))

	free, total := ok2(d.MemGetInfo())(t)
	if free != 1<<30 || total != 2<<30 {
		t.Errorf("MemGetInfo = %d, %d", free, total)
	}

	n := 1000 + r.IntN(3000)
	src := randBytes(r, n)
	a := ok(d.MemAlloc(uint64(n)))(t)
	b := ok(d.MemAlloc(uint64(n)))(t)
	check(t, d.MemsetD8(b, 0x5a, uint64(n)))
	check(t, d.MemcpyHtoD(a, src))
	got := bytes.Repeat([]byte{0xee}, n)
	check(t, d.MemcpyDtoH(got, a))
	if !bytes.Equal(got, src) {
		t.Fatal("HtoD/DtoH round trip differs")
	}

	check(t, d.MemcpyDtoD(b, a, uint64(n/2)))
	check(t, d.MemcpyDtoH(got, b))
	if !bytes.Equal(got[:n/2], src[:n/2]) || got[n/2] != 0x5a || got[n-1] != 0x5a {
		t.Error("MemcpyDtoD copied the wrong range")
	}

	word := r.Uint32() | 1
	check(t, d.MemsetD32(a, word, 3))
	v8 := byte(r.Uint32()) | 1
	check(t, d.MemsetD8Async(a+12, v8, 2, s))
	check(t, d.MemcpyDtoDAsync(b, a, 14, s))
	check(t, d.StreamSynchronize(s))
	check(t, d.MemcpyDtoH(got[:16], b))
	w := binary.LittleEndian
	if w.Uint32(got[0:]) != word || w.Uint32(got[8:]) != word || got[12] != v8 || got[13] != v8 || got[14] != src[14] {
		t.Errorf("memset results % x (word %#x, byte %#x)", got[:16], word, v8)
	}
	check(t, d.MemsetD32Async(b, word^0xffffffff, 1, s))
	check(t, d.MemcpyDtoH(got[:4], b))
	if w.Uint32(got) != word^0xffffffff {
		t.Errorf("MemsetD32Async wrote %#x", w.Uint32(got))
	}
	check(t, d.MemFree(a))
	check(t, d.MemFree(b))

	host := ok(d.MemHostAlloc(4096, HostAllocDeviceMap|HostAllocPortable))(t)
	if len(host) != 4096 {
		t.Fatalf("MemHostAlloc len %d", len(host))
	}
	copy(host, src)
	dp := ok(d.MemHostGetDevicePointer(host))(t)
	check(t, d.MemcpyDtoH(got[:64], dp)) // the fake's device address is the host address
	if !bytes.Equal(got[:64], src[:64]) {
		t.Error("MemHostGetDevicePointer does not address the host buffer")
	}
	check(t, d.MemFreeHost(host))
	_, err := d.MemHostAlloc(0, 0)
	wantErr(t, err, ErrInvalidValue, "size=0")

	check(t, d.StreamDestroy(s))
}

func TestFakeModulesAndLaunch(t *testing.T) {
	d := openFake(t)
	r := newRand(t)

	_, err := d.ModuleLoadData([]byte("not a fatbin"))
	wantErr(t, err, ErrInvalidImage, "cuModuleLoadData(bytes=12)")
	// No trailing NUL here: ModuleLoadData must add one (the fake checks).
	m := ok(d.ModuleLoadData([]byte("FAKEBIN v1")))(t)

	_, err = d.ModuleGetFunction(m, "missing")
	wantErr(t, err, ErrNotFound, `name="missing"`, "CUDA_ERROR_NOT_FOUND (500): fake: named symbol not found")

	rec := ok(d.MemAlloc(4096))(t)
	sizes := []int{4, 8, 24, 1}
	f := ok(d.ModuleGetFunction(m, fmt.Sprintf("record@%x:4,8,24,1", uint64(rec))))(t)

	err = d.FuncSetAttribute(f, FuncAttrMaxDynamicSharedSizeBytes, 300000)
	if !IsNotPermitted(err) {
		t.Errorf("FuncSetAttribute(300000) = %v, want not permitted", err)
	}
	wantErr(t, err, ErrNotPermitted, "cuFuncSetAttribute(", "value=300000", "CUDA_ERROR_NOT_PERMITTED (800): fake: operation not permitted")
	err = d.FuncSetAttribute(f, FuncAttrMaxDynamicSharedSizeBytes, -917)
	wantErr(t, err, Result(917), "CUresult (917)")
	check(t, d.FuncSetAttribute(f, FuncAttrMaxDynamicSharedSizeBytes, 200000))
	if v := ok(d.FuncGetAttribute(f, FuncAttrNumRegs))(t); v != 104 {
		t.Errorf("FuncGetAttribute(NumRegs) = %d", v)
	}

	tests := []struct {
		desc      string
		cfg       LaunchConfig
		wantGrid  [3]uint32
		wantBlock [3]uint32
		wantAttrs [][4]uint32
	}{
		{
			desc:      "plain launch, zero Y/Z become 1",
			cfg:       LaunchConfig{Grid: [3]uint32{7}, Block: [3]uint32{128, 2}, SharedMem: 1234, Stream: 0x2000},
			wantGrid:  [3]uint32{7, 1, 1},
			wantBlock: [3]uint32{128, 2, 1},
		},
		{
			desc:      "programmatic serialization",
			cfg:       LaunchConfig{Grid: [3]uint32{132, 1, 1}, Block: [3]uint32{256, 1, 1}, Stream: 0x2001, ProgrammaticSerialization: true},
			wantGrid:  [3]uint32{132, 1, 1},
			wantBlock: [3]uint32{256, 1, 1},
			wantAttrs: [][4]uint32{{6, 1, 0, 0}},
		},
		{
			desc:      "programmatic serialization and cluster",
			cfg:       LaunchConfig{Grid: [3]uint32{8, 3, 2}, Block: [3]uint32{64, 1, 1}, SharedMem: 65536, ProgrammaticSerialization: true, ClusterDim: [3]uint32{2, 0, 0}},
			wantGrid:  [3]uint32{8, 3, 2},
			wantBlock: [3]uint32{64, 1, 1},
			wantAttrs: [][4]uint32{{6, 1, 0, 0}, {4, 2, 1, 1}},
		},
		{
			desc: "cluster with the load-balancing scheduling policy",
			cfg: LaunchConfig{Grid: [3]uint32{16, 1, 1}, Block: [3]uint32{128, 1, 1}, ProgrammaticSerialization: true,
				ClusterDim: [3]uint32{4, 1, 1}, ClusterPolicy: ClusterPolicyLoadBalancing},
			wantGrid:  [3]uint32{16, 1, 1},
			wantBlock: [3]uint32{128, 1, 1},
			wantAttrs: [][4]uint32{{6, 1, 0, 0}, {4, 4, 1, 1}, {5, 2, 0, 0}},
		},
		{
			desc: "cluster, policy and a shared memory carveout of 80 %",
			cfg: LaunchConfig{Grid: [3]uint32{16, 1, 1}, Block: [3]uint32{128, 1, 1}, ProgrammaticSerialization: true,
				ClusterDim: [3]uint32{2, 1, 1}, ClusterPolicy: ClusterPolicySpread, SharedCarveout: Carveout(80)},
			wantGrid:  [3]uint32{16, 1, 1},
			wantBlock: [3]uint32{128, 1, 1},
			wantAttrs: [][4]uint32{{6, 1, 0, 0}, {4, 2, 1, 1}, {5, 1, 0, 0}, {14, 80, 0, 0}},
		},
		{
			desc:      "a carveout of 0 % (the most L1) alone",
			cfg:       LaunchConfig{Grid: [3]uint32{3, 1, 1}, Block: [3]uint32{32, 1, 1}, SharedCarveout: Carveout(0)},
			wantGrid:  [3]uint32{3, 1, 1},
			wantBlock: [3]uint32{32, 1, 1},
			wantAttrs: [][4]uint32{{14, 0, 0, 0}},
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			params := make([][]byte, len(sizes))
			for i, n := range sizes {
				params[i] = randBytes(r, n)
			}
			check(t, d.MemsetD8(rec, 0xab, 4096))
			check(t, d.LaunchKernelEx(tc.cfg, f, params...))
			got := make([]byte, 4096)
			check(t, d.MemcpyDtoH(got, rec))
			le := binary.LittleEndian
			u := func(i int) uint32 { return le.Uint32(got[4*i:]) }
			if g := [3]uint32{u(0), u(1), u(2)}; g != tc.wantGrid {
				t.Errorf("grid %v, want %v", g, tc.wantGrid)
			}
			if b := [3]uint32{u(3), u(4), u(5)}; b != tc.wantBlock {
				t.Errorf("block %v, want %v", b, tc.wantBlock)
			}
			if u(6) != tc.cfg.SharedMem {
				t.Errorf("sharedMem %d, want %d", u(6), tc.cfg.SharedMem)
			}
			if int(u(7)) != len(tc.wantAttrs) {
				t.Fatalf("numAttrs %d, want %d", u(7), len(tc.wantAttrs))
			}
			for i, want := range tc.wantAttrs {
				if a := [4]uint32{u(8 + 4*i), u(9 + 4*i), u(10 + 4*i), u(11 + 4*i)}; a != want {
					t.Errorf("attr %d = %v, want %v", i, a, want)
				}
			}
			off := 4 * 24
			if s := le.Uint64(got[off:]); s != uint64(tc.cfg.Stream) {
				t.Errorf("stream %#x, want %#x", s, uint64(tc.cfg.Stream))
			}
			off += 8
			if le.Uint32(got[off:]) != uint32(len(sizes)) || le.Uint32(got[off+4:]) != 1 {
				t.Errorf("nparams/extraIsNull = %d/%d", le.Uint32(got[off:]), le.Uint32(got[off+4:]))
			}
			off += 8
			for i, p := range params {
				if !bytes.Equal(got[off:off+len(p)], p) {
					t.Errorf("param %d = % x, want % x", i, got[off:off+len(p)], p)
				}
				off += len(p)
			}
		})
	}

	// One struct by value, the way the kernel package launches.
	var p Params
	p.Ptr(DevicePtr(r.Uint64())).U32(r.Uint32()).U32(r.Uint32())
	blob := p.Bytes()
	g := ok(d.ModuleGetFunction(m, fmt.Sprintf("record@%x:%d", uint64(rec), len(blob))))(t)
	check(t, d.LaunchKernelEx(LaunchConfig{Grid: [3]uint32{1}, Block: [3]uint32{32}}, g, blob))
	got := make([]byte, 4096)
	check(t, d.MemcpyDtoH(got, rec))
	if !bytes.Equal(got[4*24+16:4*24+16+len(blob)], blob) {
		t.Error("blob parameter arrived changed")
	}

	err = d.LaunchKernelEx(LaunchConfig{Grid: [3]uint32{1}, Block: [3]uint32{1}, ClusterPolicy: 3}, f, []byte{1})
	wantErr(t, err, ErrInvalidValue, "cluster scheduling policy 3")
	err = d.LaunchKernelEx(LaunchConfig{Grid: [3]uint32{1}, Block: [3]uint32{1}, ClusterPolicy: ClusterPolicySpread}, f, []byte{1})
	wantErr(t, err, ErrInvalidValue, "without a cluster dimension")
	for _, c := range []int{-1, 102, Carveout(-1), Carveout(101)} {
		err = d.LaunchKernelEx(LaunchConfig{Grid: [3]uint32{1}, Block: [3]uint32{1}, SharedCarveout: c}, f, []byte{1})
		wantErr(t, err, ErrInvalidValue, "shared memory carveout")
	}
	err = d.LaunchKernelEx(LaunchConfig{Grid: [3]uint32{1}, Block: [3]uint32{1}}, f, []byte{1}, nil)
	wantErr(t, err, ErrInvalidValue, "parameter 1 is empty")
	err = d.LaunchKernelEx(LaunchConfig{}, f, make([][]byte, MaxKernelParams+1)...)
	wantErr(t, err, ErrInvalidValue, "parameters")

	check(t, d.MemFree(rec))
	check(t, d.ModuleUnload(m))
}

func TestFakeCaptureAndGraphs(t *testing.T) {
	d := openFake(t)
	s := ok(d.StreamCreate(StreamDefault))(t)
	buf := ok(d.MemAlloc(64))(t)

	_, err := d.StreamEndCapture(s)
	wantErr(t, err, ErrInvalidValue, "cuStreamEndCapture")

	check(t, d.StreamBeginCapture(s, CaptureModeRelaxed))
	check(t, d.MemsetD32Async(buf, 7, 16, s))
	g := ok(d.StreamEndCapture(s))(t)
	if g != 0x3002 {
		t.Errorf("graph %#x: capture mode did not arrive as RELAXED", uintptr(g))
	}
	e := ok(d.GraphInstantiate(g, GraphInstantiateAutoFreeOnLaunch))(t)
	if e != GraphExec(0x3002+0x100+0x10000) {
		t.Errorf("exec %#x: flags did not arrive", uintptr(e))
	}
	check(t, d.GraphUpload(e, s))
	check(t, d.GraphLaunch(e, s))
	dot := filepath.Join(t.TempDir(), "g.dot")
	check(t, d.GraphDebugDotPrint(g, dot, 1))
	if b, err := os.ReadFile(dot); err != nil || !strings.HasPrefix(string(b), "digraph") {
		t.Errorf("GraphDebugDotPrint wrote %q (%v), want a DOT digraph", b, err)
	}
	wantErr(t, d.GraphDebugDotPrint(0, dot, 1), ErrInvalidValue, "cuGraphDebugDotPrint(graph=0x0")
	check(t, d.GraphExecDestroy(e))
	check(t, d.GraphDestroy(g))
	wantErr(t, d.GraphLaunch(0, s), ErrInvalidHandle, "cuGraphLaunch(exec=0x0")
	check(t, d.MemFree(buf))
	check(t, d.StreamDestroy(s))
}

func TestFakeVMM(t *testing.T) {
	d := openFake(t)
	r := newRand(t)
	prop := AllocationProp{Device: 1, HandleTypes: HandleTypePOSIXFD}

	gran := ok(d.MemGetAllocationGranularity(prop, GranularityRecommended))(t)
	if gran != 2<<20 {
		t.Errorf("recommended granularity %d", gran)
	}
	if g := ok(d.MemGetAllocationGranularity(prop, GranularityMinimum))(t); g != 1<<16 {
		t.Errorf("minimum granularity %d", g)
	}

	_, err := d.MemCreate(gran, AllocationProp{Device: 1, HandleTypes: HandleTypeFabric})
	if !IsNotPermitted(err) {
		t.Errorf("FABRIC MemCreate: %v, want not permitted", err)
	}
	wantErr(t, err, ErrNotPermitted, "cuMemCreate(size=2097152, device=1, handleTypes=FABRIC)")
	_, err = d.MemCreate(gran+1, prop)
	wantErr(t, err, ErrInvalidValue, "size=2097153")

	h := ok(d.MemCreate(gran, prop))(t)
	fd := ok(d.MemExportPOSIXFD(h))(t)
	var st syscall.Stat_t
	if fd < 3 || syscall.Fstat(fd, &st) != nil {
		t.Fatalf("exported fd %d is not open", fd)
	}
	h2 := ok(d.MemImportPOSIXFD(fd))(t)
	check(t, syscall.Close(fd)) // the caller owns the exported fd

	_, err = d.MemExportFabric(h)
	wantErr(t, err, ErrInvalidValue, "type=FABRIC")
	var fh FabricHandle
	fh[0], fh[63] = 'F', 'Z'
	_, err = d.MemImportFabric(fh)
	wantErr(t, err, ErrNotPermitted, "type=FABRIC")

	va := ok(d.MemAddressReserve(2*gran, gran))(t)
	check(t, d.MemMap(va, gran, 0, h))
	check(t, d.MemMap(va+DevicePtr(gran), gran, 0, h2))
	err = d.MemSetAccess(va, 2*gran, Access{Device: 0, Flags: AccessRead})
	wantErr(t, err, ErrInvalidValue, "cuMemSetAccess")
	wantErr(t, d.MemSetAccess(va, 2*gran), ErrInvalidValue, "no access descriptors")
	check(t, d.MemSetAccess(va, 2*gran, Access{Device: 0, Flags: AccessReadWrite}, Access{Device: 1, Flags: AccessReadWrite}))

	// The import maps the same memory: a write through one mapping is read
	// back through the other.
	data := randBytes(r, 8192)
	off := DevicePtr(r.IntN(int(gran) - len(data)))
	check(t, d.MemcpyHtoD(va+off, data))
	got := bytes.Repeat([]byte{0xcd}, len(data))
	check(t, d.MemcpyDtoH(got, va+DevicePtr(gran)+off))
	if !bytes.Equal(got, data) {
		t.Error("imported mapping does not show the exporter's bytes")
	}

	check(t, d.MemUnmap(va, gran))
	check(t, d.MemUnmap(va+DevicePtr(gran), gran))
	check(t, d.MemAddressFree(va, 2*gran))
	check(t, d.MemRelease(h2))
	check(t, d.MemRelease(h))
}

func TestFakeMulticast(t *testing.T) {
	d := openFake(t)
	if !d.HasMulticast() {
		t.Fatal("HasMulticast = false with every multicast symbol present")
	}
	mp := MulticastProp{NumDevices: 2, Size: 4 << 20, HandleTypes: HandleTypePOSIXFD}
	if g := ok(d.MulticastGetGranularity(mp, GranularityRecommended))(t); g != 4<<20 {
		t.Errorf("multicast recommended granularity %d", g)
	}
	if g := ok(d.MulticastGetGranularity(mp, GranularityMinimum))(t); g != 2<<20 {
		t.Errorf("multicast minimum granularity %d", g)
	}
	_, err := d.MulticastCreate(MulticastProp{NumDevices: 2, Size: 4 << 20, HandleTypes: 0x40})
	wantErr(t, err, ErrInvalidValue, "cuMulticastCreate(numDevices=2, size=4194304, handleTypes=0x40)")

	mc := ok(d.MulticastCreate(mp))(t)
	mem := ok(d.MemCreate(2<<20, AllocationProp{Device: 0, HandleTypes: HandleTypePOSIXFD}))(t)
	check(t, d.MulticastAddDevice(mc, 0))
	// The fake refuses to bind before every device was added.
	err = d.MulticastBindMem(mc, 0, mem, 0, 2<<20)
	wantErr(t, err, ErrInvalidValue, "cuMulticastBindMem(")
	check(t, d.MulticastAddDevice(mc, 1))
	check(t, d.MulticastBindMem(mc, 2<<20, mem, 0, 2<<20))
	wantErr(t, d.MulticastBindMem(mc, 4<<20, mem, 0, 2<<20), ErrInvalidValue, "mcOffset=4194304")
	check(t, d.MulticastUnbind(mc, 0, 2<<20, 2<<20))
	wantErr(t, d.MulticastUnbind(mc, 0, 2<<20, 2<<20), ErrInvalidValue, "cuMulticastUnbind(")
	check(t, d.MemRelease(mem))
	check(t, d.MemRelease(mc))
}

func TestFakeClose(t *testing.T) {
	d, err := OpenLibrary(buildFake(t))
	check(t, err)
	check(t, d.Close())
	check(t, d.Close())
	if err := d.Init(); !errors.Is(err, ErrClosed) {
		t.Errorf("Init after Close: %v", err)
	}
	if _, err := d.MemCreate(1, AllocationProp{}); !errors.Is(err, ErrClosed) {
		t.Errorf("MemCreate after Close: %v", err)
	}
	if d.HasMulticast() {
		t.Error("HasMulticast after Close")
	}
}

// An older driver without the multicast API opens, and only the
// multicast calls fail, naming the missing function.
func TestFakeWithoutMulticast(t *testing.T) {
	d := openFake(t, "-DFAKE_NO_MULTICAST")
	if d.HasMulticast() {
		t.Fatal("HasMulticast = true without the symbols")
	}
	_, err := d.MulticastCreate(MulticastProp{NumDevices: 2, Size: 2 << 20})
	wantErr(t, err, ErrMissingSymbol, "cuMulticastCreate")
	err = d.MulticastUnbind(1, 0, 0, 2<<20)
	wantErr(t, err, ErrMissingSymbol, "cuMulticastUnbind")
	if _, err := d.MemGetAllocationGranularity(AllocationProp{Device: 0}, GranularityMinimum); err != nil {
		t.Errorf("VMM without multicast: %v", err)
	}
}

func TestFakeMissingRequiredSymbol(t *testing.T) {
	_, err := OpenLibrary(buildFake(t, "-DFAKE_NO_LAUNCH"))
	wantErr(t, err, ErrMissingSymbol, "cuLaunchKernelEx")
	if errors.Is(err, ErrNoDriver) {
		t.Error("a missing function is reported as a missing driver")
	}
	var se *SymbolError
	if !errors.As(err, &se) || se.Symbol != "cuLaunchKernelEx" {
		t.Errorf("SymbolError = %+v", se)
	}
}
