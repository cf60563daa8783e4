package kernel

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda"
)

// The GPU tests run the compiled kernels for real. Go is not installed on
// the GPU machines: scripts/build-gpu-tests builds this package's test
// binary here and scripts/gpu-test runs it there. Without a driver they
// skip. The same test bodies also run on the CPU against an emulated
// device (TestHarnessOnEmulator in launch_test.go), so that a mistake in
// the harness itself shows up before the GPU run, not during it.

// device is what the tests need from the driver: *cuda.Driver, or the
// emulator of launch_test.go.
type device interface {
	KernelDriver
	MemAlloc(size uint64) (cuda.DevicePtr, error)
	MemFree(ptr cuda.DevicePtr) error
	MemcpyHtoD(dst cuda.DevicePtr, src []byte) error
	MemcpyDtoH(dst []byte, src cuda.DevicePtr) error
	MemsetD32Async(ptr cuda.DevicePtr, v uint32, n uint64, s cuda.Stream) error
	StreamCreate(flags cuda.StreamFlags) (cuda.Stream, error)
	StreamDestroy(s cuda.Stream) error
	StreamSynchronize(s cuda.Stream) error
	CtxSynchronize() error
	StreamBeginCapture(s cuda.Stream, mode cuda.CaptureMode) error
	StreamEndCapture(s cuda.Stream) (cuda.Graph, error)
	GraphInstantiate(g cuda.Graph, flags cuda.GraphInstantiateFlags) (cuda.GraphExec, error)
	GraphUpload(e cuda.GraphExec, s cuda.Stream) error
	GraphLaunch(e cuda.GraphExec, s cuda.Stream) error
	GraphExecDestroy(e cuda.GraphExec) error
	GraphDestroy(g cuda.Graph) error
}

var _ device = (*cuda.Driver)(nil)

// env is one test's device, loaded kernels and stream.
type env struct {
	t        testing.TB
	dev      device
	k        *Kernels
	stream   cuda.Stream
	emulated bool
	// bindThread makes the context current on the calling goroutine's
	// thread until t ends: subtests run on goroutines of their own, and
	// CUDA's current context belongs to a thread. Nil for the emulator.
	bindThread func(t testing.TB)
}

// Words written before a run to show which elements it did not write: a
// NaN no kernel produces (its own NaNs would be the canonical 0x7FC0).
const (
	poison     BF16   = 0x7FC1
	poisonWord uint32 = 0x7FC17FC1
)

const noDriverMsg = "no CUDA driver: GPU kernel tests run on a GPU machine (see scripts/gpu-test)"

// openGPU opens the real driver on device TPRUN_TEST_DEVICE (default 0),
// binds the test's goroutine to its primary context, loads the kernels and
// creates a stream; everything is released in Cleanup.
func openGPU(t *testing.T) *env {
	t.Helper()
	drv, err := cuda.Open()
	if errors.Is(err, cuda.ErrNoDriver) {
		t.Skipf("%s (%v)", noDriverMsg, err)
	}
	if err != nil {
		t.Fatalf("cuda.Open: %v", err)
	}
	t.Cleanup(func() {
		if err := drv.Close(); err != nil {
			t.Errorf("closing the CUDA driver: %v", err)
		}
	})
	if err := drv.Init(); err != nil {
		if cuda.IsNoDevice(err) {
			t.Skipf("no CUDA device: GPU kernel tests run on a GPU machine (see scripts/gpu-test): %v", err)
		}
		t.Fatalf("cuInit: %v", err)
	}
	n, err := drv.DeviceCount()
	if err != nil {
		t.Fatalf("DeviceCount: %v", err)
	}
	ordinal := 0
	if s := os.Getenv("TPRUN_TEST_DEVICE"); s != "" {
		if ordinal, err = strconv.Atoi(s); err != nil {
			t.Fatalf("TPRUN_TEST_DEVICE=%q: %v", s, err)
		}
	}
	if ordinal >= n {
		t.Skipf("no CUDA device %d (%d present): GPU kernel tests run on a GPU machine (see scripts/gpu-test)", ordinal, n)
	}
	dev, err := drv.DeviceGet(ordinal)
	if err != nil {
		t.Fatalf("DeviceGet(%d): %v", ordinal, err)
	}
	major, minor, err := drv.ComputeCapability(dev)
	if err != nil {
		t.Fatalf("ComputeCapability(device %d): %v", ordinal, err)
	}
	name, err := drv.DeviceName(dev)
	if err != nil {
		t.Fatalf("DeviceName(device %d): %v", ordinal, err)
	}
	if major < 9 {
		t.Skipf("device %d (%s) is cc %d.%d; the kernels need cc 9.0 or newer (clusters, griddepcontrol)", ordinal, name, major, minor)
	}
	ctx, err := drv.DevicePrimaryCtxRetain(dev)
	if err != nil {
		t.Fatalf("DevicePrimaryCtxRetain(device %d): %v", ordinal, err)
	}
	unbind, err := drv.BindContext(ctx)
	if err != nil {
		t.Fatalf("BindContext(device %d): %v", ordinal, err)
	}
	t.Cleanup(func() {
		unbind()
		if err := drv.DevicePrimaryCtxRelease(dev); err != nil {
			t.Errorf("DevicePrimaryCtxRelease(device %d): %v", ordinal, err)
		}
	})
	t.Logf("device %d: %s, cc %d.%d", ordinal, name, major, minor)
	e := newEnv(t, drv, false)
	e.bindThread = func(t testing.TB) {
		t.Helper()
		unbind, err := drv.BindContext(ctx)
		if err != nil {
			t.Fatalf("BindContext(device %d) for a subtest: %v", ordinal, err)
		}
		t.Cleanup(unbind)
	}
	return e
}

// newEnv loads the kernels and makes a stream on dev (current context).
func newEnv(t testing.TB, dev device, emulated bool) *env {
	t.Helper()
	k, err := Load(dev)
	if err != nil {
		t.Fatalf("kernel.Load: %v", err)
	}
	t.Cleanup(func() {
		if err := k.Close(); err != nil {
			t.Errorf("Kernels.Close: %v", err)
		}
	})
	s, err := dev.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		t.Fatalf("StreamCreate: %v", err)
	}
	t.Cleanup(func() {
		if err := dev.StreamDestroy(s); err != nil {
			t.Errorf("StreamDestroy: %v", err)
		}
	})
	return &env{t: t, dev: dev, k: k, stream: s, emulated: emulated}
}

func (e *env) must(err error, format string, args ...any) {
	e.t.Helper()
	if err != nil {
		e.t.Fatalf("%s: %v", fmt.Sprintf(format, args...), err)
	}
}

// endCapture ends the stream capture of what (cerr: the error of the
// launches captured), instantiates the graph and uploads it; the graph and
// its executable are freed in Cleanup.
func (e *env) endCapture(cerr error, what string) cuda.GraphExec {
	e.t.Helper()
	g, err := e.dev.StreamEndCapture(e.stream)
	e.must(errors.Join(cerr, err), "capturing %s", what)
	e.t.Cleanup(func() {
		if err := e.dev.GraphDestroy(g); err != nil {
			e.t.Errorf("GraphDestroy: %v", err)
		}
	})
	x, err := e.dev.GraphInstantiate(g, 0)
	e.must(err, "GraphInstantiate")
	e.t.Cleanup(func() {
		if err := e.dev.GraphExecDestroy(x); err != nil {
			e.t.Errorf("GraphExecDestroy: %v", err)
		}
	})
	e.must(e.dev.GraphUpload(x, e.stream), "GraphUpload")
	return x
}

// alloc returns n bytes of device memory, freed in Cleanup.
func (e *env) alloc(n int, what string) cuda.DevicePtr {
	e.t.Helper()
	p, err := e.dev.MemAlloc(uint64(n))
	e.must(err, "MemAlloc(%d) for %s", n, what)
	e.t.Cleanup(func() {
		if err := e.dev.MemFree(p); err != nil {
			e.t.Errorf("MemFree(%s): %v", what, err)
		}
	})
	return p
}

// sync waits for the stream; a kernel fault surfaces here.
func (e *env) sync(format string, args ...any) {
	e.t.Helper()
	e.must(e.dev.StreamSynchronize(e.stream), "StreamSynchronize after %s", fmt.Sprintf(format, args...))
}

// The host copies run on the legacy stream, which our non-blocking stream
// is not ordered against: an upload waits for the stream before, and for
// the whole context after (a copy from pageable memory may return before
// its DMA has landed); a download waits for the stream before.
func (e *env) upload(dst cuda.DevicePtr, src []byte, what string) {
	e.t.Helper()
	e.sync("before uploading %s", what)
	e.must(e.dev.MemcpyHtoD(dst, src), "MemcpyHtoD(%s, %d bytes)", what, len(src))
	e.must(e.dev.CtxSynchronize(), "CtxSynchronize after uploading %s", what)
}

func (e *env) download(dst []byte, src cuda.DevicePtr, what string) {
	e.t.Helper()
	e.sync("before downloading %s", what)
	e.must(e.dev.MemcpyDtoH(dst, src), "MemcpyDtoH(%s, %d bytes)", what, len(dst))
}

// fill queues setting words 32-bit words at p to w.
func (e *env) fill(p cuda.DevicePtr, w uint32, words int, what string) {
	e.t.Helper()
	e.must(e.dev.MemsetD32Async(p, w, uint64(words), e.stream), "MemsetD32Async(%s, %#x, %d words)", what, w, words)
}

func (e *env) skinny(a SkinnyArgs, pdl bool) {
	e.t.Helper()
	e.must(e.k.LaunchSkinny(e.stream, a, pdl), "LaunchSkinny")
}

func (e *env) receive(a ReceiveArgs, pdl bool) {
	e.t.Helper()
	e.must(e.k.LaunchReceive(e.stream, a, pdl), "LaunchReceive")
}

// status reads and decodes the receive status words at p.
func (e *env) status(p cuda.DevicePtr) (timedOut bool, missing []int) {
	e.t.Helper()
	var w [ReceiveStatusWords]uint32
	e.download(cuda.AsBytes(w[:]), p, "receive status")
	for i, v := range w {
		if v > 1 {
			e.t.Errorf("receive status word %d = %#x: the kernel only writes 0 or 1", i, v)
		}
	}
	return DecodeReceiveStatus(w)
}

// parallel runs f(0..n-1) on all cores and joins the errors.
func parallel(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	sem := make(chan struct{}, runtime.GOMAXPROCS(0))
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = f(i)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// fillRandom is FillRandom split over the cores, each part with its own
// generator seeded from rng.
func fillRandom(rng *rand.Rand, dst []BF16, scale float32) {
	const part = 1 << 18
	n := (len(dst) + part - 1) / part
	seeds := make([]uint64, n)
	for i := range seeds {
		seeds[i] = rng.Uint64()
	}
	_ = parallel(n, func(i int) error {
		FillRandom(NewRand(seeds[i]), dst[i*part:min(len(dst), (i+1)*part)], scale)
		return nil
	})
}

// sliceReference computes, for the rank's slice of a [rows, hidden] block,
// the float64 yardstick and the CPU kernel's output ([rows, shard], row
// stride shard), split by columns over the cores: every output column
// depends only on its weight row and shared column.
func sliceReference(s Shape, rank int, latent, weight, shared []BF16) (*Expected, []BF16, error) {
	shard, K := s.Shard(), s.Latent
	exp := &Expected{Shape: Shape{M: s.M, Hidden: shard, Latent: K, TP: 1},
		Ideal: make([]float64, s.M*shard), Tol: make([]float64, s.M*shard)}
	cpu := make([]BF16, s.M*shard)
	units := shard / ShardAlign
	parts := min(units, 4*runtime.GOMAXPROCS(0))
	err := parallel(parts, func(i int) error {
		n0 := units * i / parts * ShardAlign
		n1 := units * (i + 1) / parts * ShardAlign
		sub := Shape{M: s.M, Hidden: n1 - n0, Latent: K, TP: 1}
		w := weight[n0*K : n1*K]
		sh := shared[rank*shard+n0:]
		e, err := Expect(sub, latent, w, sh, s.Hidden)
		if err != nil {
			return err
		}
		for m := range s.M {
			copy(exp.Ideal[m*shard+n0:m*shard+n1], e.Ideal[m*sub.Hidden:(m+1)*sub.Hidden])
			copy(exp.Tol[m*shard+n0:m*shard+n1], e.Tol[m*sub.Hidden:(m+1)*sub.Hidden])
		}
		var c CPU
		return c.UpProject(sub, latent, w, sh, s.Hidden, cpu[n0:], shard)
	})
	return exp, cpu, err
}

// rows is the first M rows of an Expected of the same columns.
func (e *Expected) rows(M int) *Expected {
	n := e.Shape.Shard()
	s := e.Shape
	s.M = M
	return &Expected{Shape: s, Ideal: e.Ideal[:M*n], Tol: e.Tol[:M*n]}
}

// ordered maps bf16 bits to integers in the order of their values, so
// that a difference counts units in the last place.
func ordered(b BF16) int {
	if b&0x8000 != 0 {
		return -int(b & 0x7FFF)
	}
	return int(b)
}

// blockProblems checks a downloaded [rows, hidden] destination: the
// elements of columns col0 .. col0+width of the first M rows must all have
// been written (no poison left), and every other element must still be
// poison. It describes the first few problems.
func blockProblems(out []BF16, hidden, M, col0, width int) []string {
	var probs []string
	for i, v := range out {
		m, c := i/hidden, i%hidden
		inside := m < M && c >= col0 && c < col0+width
		switch {
		case inside && v == poison:
			probs = append(probs, fmt.Sprintf("element (%d, %d) of the slice not written", m, c-col0))
		case !inside && v != poison:
			probs = append(probs, fmt.Sprintf("element (%d, %d) outside the slice (columns %d..%d, %d rows) overwritten with %#04x", m, c, col0, col0+width-1, M, uint16(v)))
		}
		if len(probs) == 3 {
			return append(probs, "...")
		}
	}
	return probs
}

// matrixSpec is the set of shapes runSkinnyMatrix covers.
type matrixSpec struct {
	ms, shards, latents []int
}

// The shapes of the GPU check.
var fullMatrix = matrixSpec{
	ms:      []int{1, 2, 3, 4, 5, 6, 7, 8},
	shards:  []int{448, 896, 1024, 1792, 3584, 7168},
	latents: []int{512, 1024, 2048, 3584, 3600},
}

// tpFor is the TP used for a shard size: hidden = shard*tp near the
// reference hidden size, at least 2 ranks so the rank offset matters.
func tpFor(shard int) int { return max(2, min(MaxTP, 7168/shard)) }

func TestGPUSkinnyMatrix(t *testing.T) {
	e := openGPU(t)
	runSkinnyMatrix(e, testRand(t), fullMatrix)
}

// largeMatrix is the GPU check of the kernel for M above MaxSkinnyM
// (bigm.cu): powers of two, odd counts and the limit, across every code
// size, at the shard classes of the launch table, a shard that is no
// multiple of 32 rows per warp (960, tp 7) and a latent that is no
// multiple of 32 (720).
var largeMatrix = matrixSpec{
	ms:      []int{9, 16, 31, 32, 64, 100, MaxM},
	shards:  []int{448, 896, 960, 3584, 7168},
	latents: []int{720, 3584},
}

// TestGPULargeMMatrix is runSkinnyMatrix over largeMatrix: the float64
// tolerance, the slice and nothing else written, three destinations and
// reruns (one with PDL) bit-identical, no negative zero.
func TestGPULargeMMatrix(t *testing.T) {
	e := openGPU(t)
	for _, s := range []Shape{{M: 9, Hidden: 7168, Latent: 3584, TP: 1}, {M: 128, Hidden: 448, Latent: 720, TP: 1}} {
		t.Logf("M %d shard %d latent %d: config %s", s.M, s.Shard(), s.Latent, configString(s))
	}
	runSkinnyMatrix(e, testRand(t), largeMatrix)
}

// runSkinnyMatrix runs every (M, shard, latent) of spec with a rank other
// than 0, three destinations and poisoned outputs, with the row-major and
// the packed weight (runM), and checks: within the float64 tolerance, the
// CPU kernel within it too (and how many ulps apart the two are), every
// element of the slice written and nothing else, the three destinations
// and the reruns bit-identical, and the two layouts bit-identical where
// their entry points add in the same order. Check also fails any stored
// negative zero.
func runSkinnyMatrix(e *env, rng *rand.Rand, spec matrixSpec) {
	maxShard, maxLatent, maxHidden := slices.Max(spec.shards), slices.Max(spec.latents), 0
	for _, sh := range spec.shards {
		maxHidden = max(maxHidden, sh*tpFor(sh))
	}
	x := &matrix{env: e, rng: rng, spec: spec, maxM: slices.Max(spec.ms)}
	blockLen := x.maxM * maxHidden
	x.dLat = e.alloc(2*x.maxM*maxLatent, "latent")
	x.dWp = e.alloc(2*PackedWeightLen(maxShard, maxLatent), "packed weight")
	x.hWp = make([]BF16, PackedWeightLen(maxShard, maxLatent))
	x.dShared = e.alloc(2*blockLen, "shared")
	for i := range x.dDst {
		x.dDst[i] = e.alloc(2*blockLen, fmt.Sprintf("destination %d", i))
	}
	x.hLat = make([]BF16, x.maxM*maxLatent)
	x.hW = make([]BF16, maxShard*maxLatent)
	x.hShared = make([]BF16, blockLen)
	x.first = make([]BF16, blockLen)
	x.other = make([]BF16, blockLen)
	x.outs = make([][]BF16, x.maxM+1)
	start := time.Now()
	for _, shard := range spec.shards {
		for _, K := range spec.latents {
			x.pair(shard, K)
		}
	}
	e.t.Logf("%d shapes in %v; GPU and CPU kernels at most %d bf16 ulp apart",
		len(spec.ms)*len(spec.shards)*len(spec.latents), time.Since(start).Round(time.Millisecond), x.worstULP)
}

// matrix is the state of runSkinnyMatrix: buffers sized for the largest
// shape, reused by every shape.
type matrix struct {
	*env
	rng                *rand.Rand
	spec               matrixSpec
	maxM               int
	dLat, dShared      cuda.DevicePtr
	dWp                cuda.DevicePtr // the weight in the packed layout (PackWeight)
	dDst               [3]cuda.DevicePtr
	hLat, hW, hShared  []BF16
	hWp                []BF16
	first, other       []BF16   // downloads: run 0 destination 0, and the rest
	outs               [][]BF16 // outs[M]: run 0 destination 0 for M rows
	failures, worstULP int
}

func (x *matrix) fail(format string, args ...any) {
	x.t.Helper()
	x.t.Errorf(format, args...)
	if x.failures++; x.failures >= 20 {
		x.t.Fatalf("stopping after %d failures", x.failures)
	}
}

// pair runs every M of the spec for one (shard, latent) on fresh inputs,
// computing the references on the CPU cores meanwhile.
func (x *matrix) pair(shard, K int) {
	t := x.t
	tp := tpFor(shard)
	hidden := shard * tp
	rank := 1 + x.rng.IntN(tp-1)
	n := hidden * x.maxM
	lat, w, shared := x.hLat[:x.maxM*K], x.hW[:shard*K], x.hShared[:n]
	fillRandom(x.rng, lat, 1)
	fillRandom(x.rng, w, float32(1/math.Sqrt(float64(K))))
	fillRandom(x.rng, shared, 1)
	x.upload(x.dLat, cuda.AsBytes(lat), "latent")
	wp := x.hWp[:PackedWeightLen(shard, K)]
	if err := PackWeight(wp, w, shard, K); err != nil {
		t.Fatal(err)
	}
	x.upload(x.dWp, cuda.AsBytes(wp), "packed weight")
	x.upload(x.dShared, cuda.AsBytes(shared), "shared")

	// The yardstick for maxM rows serves every M: a row's result does not
	// depend on the rows below it.
	big := Shape{M: x.maxM, Hidden: hidden, Latent: K, TP: tp}
	var (
		exp *Expected
		cpu []BF16
		err error
		wg  sync.WaitGroup
	)
	wg.Go(func() { exp, cpu, err = sliceReference(big, rank, lat, w, shared) })
	defer wg.Wait() // on a Fatal below

	for _, M := range x.spec.ms {
		x.runM(Shape{M: M, Hidden: hidden, Latent: K, TP: tp}, rank)
	}

	wg.Wait()
	if err != nil {
		t.Fatalf("%v rank %d: reference: %v", big, rank, err)
	}
	cpuRes, err := exp.Check(cpu, shard)
	if err != nil {
		t.Fatalf("%v: Check(CPU): %v", big, err)
	}
	if cpuRes.Wrong > 0 {
		x.fail("%v rank %d: the CPU kernel is outside the float64 tolerance at %d elements, first %v", big, rank, cpuRes.Wrong, cpuRes.First)
	}
	worst, pairULP := 0.0, 0
	for _, M := range x.spec.ms {
		s := Shape{M: M, Hidden: hidden, Latent: K, TP: tp}
		out := x.outs[M][rank*shard:]
		res, err := exp.rows(M).Check(out, hidden)
		if err != nil {
			t.Fatalf("%v: Check: %v", s, err)
		}
		if res.Wrong > 0 {
			x.fail("%v rank %d (config %s): %d of %d elements outside the float64 tolerance, first %v",
				s, rank, configString(s), res.Wrong, res.Checked, res.First)
		}
		worst = max(worst, res.Worst)
		for m := range M {
			for c := range shard {
				d := ordered(out[m*hidden+c]) - ordered(cpu[m*shard+c])
				pairULP = max(pairULP, d, -d)
			}
		}
	}
	x.worstULP = max(x.worstULP, pairULP)
	t.Logf("shard %4d latent %4d tp %2d rank %2d: M %v ok; worst error %.2f of tolerance (CPU kernel %.2f), GPU vs CPU at most %d ulp",
		shard, K, tp, rank, x.spec.ms, worst, cpuRes.Worst, pairULP)
}

// runM runs shape s into the three poisoned destinations twice: run 1
// with the destinations in another order and with PDL. Every destination
// of both runs must be bit-identical to run 0's destination 0, which is
// kept in x.outs[s.M] for the tolerance check in pair.
func (x *matrix) runM(s Shape, rank int) {
	shard, hidden := s.Shard(), s.Hidden
	n := x.maxM * hidden
	a := SkinnyArgs{Shape: s, Rank: rank, Latent: x.dLat, Weight: x.dWp, WeightPacked: true,
		Shared: x.dShared + cuda.DevicePtr(2*rank*shard), SharedStride: hidden, Dst: x.dDst[:]}
	where := fmt.Sprintf("%v rank %d (config %s)", s, rank, configString(s))
	for run := range 2 {
		for i, d := range x.dDst {
			x.fill(d, poisonWord, n/2, fmt.Sprintf("destination %d", i))
		}
		a.Dst = x.dDst[:]
		if run == 1 {
			a.Dst = []cuda.DevicePtr{x.dDst[2], x.dDst[0], x.dDst[1]}
		}
		x.skinny(a, run == 1)
		for i, d := range x.dDst {
			if run == 0 && i == 0 {
				x.download(cuda.AsBytes(x.first[:n]), d, where+" destination 0")
				if probs := blockProblems(x.first[:n], hidden, s.M, rank*shard, shard); len(probs) > 0 {
					x.fail("%s: run %d: %v", where, run, probs)
				}
				continue
			}
			x.download(cuda.AsBytes(x.other[:n]), d, fmt.Sprintf("%s destination %d", where, i))
			if j := firstDiff(x.other[:n], x.first[:n]); j >= 0 {
				x.fail("%s: run %d destination %d differs from run 0 destination 0 at element (%d, %d): %#04x vs %#04x",
					where, run, i, j/hidden, j%hidden, uint16(x.other[j]), uint16(x.first[j]))
			}
		}
	}
	x.outs[s.M] = append(x.outs[s.M][:0], x.first[:n]...)
}

func firstDiff(a, b []BF16) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

// configString names the config runM launches.
func configString(s Shape) string {
	c := ConfigFor(s.M, s.Shard(), s.Latent)
	return fmt.Sprintf("%s %dw c%d grid %d smem %d", c.Function, c.Warps, c.Cluster, c.GridX, c.SharedBytes)
}

// uploadPacked packs w, a row-major [shard][latent] weight, and uploads it
// to new device memory (the only layout the kernels read).
func (e *env) uploadPacked(w []BF16, shard, latent int, what string) cuda.DevicePtr {
	e.t.Helper()
	p := make([]BF16, PackedWeightLen(shard, latent))
	e.must(PackWeight(p, w, shard, latent), "PackWeight(%s)", what)
	d := e.alloc(2*len(p), what)
	e.upload(d, cuda.AsBytes(p), what)
	return d
}

// randomWords returns n mailbox words holding random bf16 pairs, none of
// them the sentinel (PackWords sanitizes).
func randomWords(rng *rand.Rand, n int) []uint32 {
	b := make([]BF16, 2*n)
	fillRandom(rng, b, 1)
	w := make([]uint32, n)
	PackWords(w, b)
	return w
}

func TestGPUReceive(t *testing.T) {
	e := openGPU(t)
	rng := testRand(t)
	for _, M := range []int{1, 5, 8} {
		t.Run(fmt.Sprintf("full slot M=%d", M), func(t *testing.T) {
			runReceiveFull(e.sub(t), rng, M, 7168, 896)
		})
	}
	for _, rank := range []int{0, 3, 7} {
		t.Run(fmt.Sprintf("skip rank %d", rank), func(t *testing.T) {
			runReceiveSkip(e.sub(t), rng, 5, 7168, 896, rank)
		})
	}
	runReceiveTimeouts(t, e, rng, 100*time.Millisecond)
}

// sub is e for a subtest, called on the subtest's goroutine: failures
// and cleanups go to t, and the context is made current there.
func (e *env) sub(t testing.TB) *env {
	t.Helper()
	c := *e
	c.t = t
	if c.bindThread != nil {
		c.bindThread(t)
	}
	return &c
}

// runReceiveFull receives a slot whose first M rows are complete: they
// must be copied out exactly and re-armed, the row below untouched in
// both buffers, and the status clear.
func runReceiveFull(e *env, rng *rand.Rand, M, hidden, shard int) {
	runReceiveComplete(e, rng, M, hidden, shard, -1)
}

// runReceiveSkip is runReceiveFull with ReceiveArgs.SkipSlice of rank
// skip: that rank's columns must also stay as they were in both buffers
// (out poisoned, slot holding its data).
func runReceiveSkip(e *env, rng *rand.Rand, M, hidden, shard, skip int) {
	runReceiveComplete(e, rng, M, hidden, shard, skip)
}

// runReceiveComplete is runReceiveFull, skipping rank skip's columns when
// skip >= 0.
func runReceiveComplete(e *env, rng *rand.Rand, M, hidden, shard, skip int) {
	t := e.t
	rows := M + 1
	words := rows * hidden / 2
	dSlot := e.alloc(4*words, "slot")
	dOut := e.alloc(4*words, "out")
	dStatus := e.alloc(4*ReceiveStatusWords, "status")
	data := randomWords(rng, words)
	e.upload(dSlot, cuda.AsBytes(data), "slot")
	e.fill(dOut, poisonWord, words, "out")
	e.fill(dStatus, 0, ReceiveStatusWords, "status")
	e.receive(ReceiveArgs{M: M, Hidden: hidden, Shard: shard, Slot: dSlot, Out: dOut, Status: dStatus,
		Timeout: 5 * time.Second, SkipSlice: skip >= 0, SkipRank: max(skip, 0)}, false)
	out := make([]uint32, words)
	slot := make([]uint32, words)
	e.download(cuda.AsBytes(out), dOut, "out")
	e.download(cuda.AsBytes(slot), dSlot, "slot")
	if timedOut, missing := e.status(dStatus); timedOut || len(missing) > 0 {
		t.Errorf("M=%d hidden=%d skip %d: complete slot reported timed out %v, missing ranks %v", M, hidden, skip, timedOut, missing)
	}
	bad := 0
	for i := range words {
		wantOut, wantSlot := poisonWord, data[i]
		if i < M*hidden/2 && (2*i%hidden)/shard != skip {
			wantOut, wantSlot = data[i], Sentinel
		}
		if out[i] != wantOut || slot[i] != wantSlot {
			if bad++; bad <= 3 {
				t.Errorf("M=%d hidden=%d skip %d word %d (row %d, rank %d): out %#08x slot %#08x, want %#08x and %#08x",
					M, hidden, skip, i, 2*i/hidden, (2*i%hidden)/shard, out[i], slot[i], wantOut, wantSlot)
			}
		}
	}
	if bad > 3 {
		t.Errorf("... %d words wrong in all", bad)
	}
}

// receiveTimeoutCase is a slot with some words never written; with skip,
// rank skipRank's columns are left to its kernel (ReceiveArgs.SkipSlice).
type receiveTimeoutCase struct {
	desc     string
	lost     func(word, hidden, shard, M int) bool
	missing  []int
	skip     bool
	skipRank int
}

var receiveTimeoutCases = []receiveTimeoutCase{
	{"rank 2's slice in every row", func(w, hidden, shard, M int) bool {
		return w < M*hidden/2 && (2*w%hidden)/shard == 2
	}, []int{2}, false, 0},
	{"one word of the last rank in the last row", func(w, hidden, shard, M int) bool {
		return w == M*hidden/2-1
	}, []int{timeoutTP - 1}, false, 0},
	{"ranks 0 and 1 in the first row", func(w, hidden, shard, M int) bool {
		return w < hidden/2 && 2*w < 2*shard
	}, []int{0, 1}, false, 0},
	// The vectors are numbered past the skipped rank: the blame must still
	// name the rank of the slot's column.
	{"rank 2's slice, rank 0 skipped", func(w, hidden, shard, M int) bool {
		return w < M*hidden/2 && (2*w%hidden)/shard == 2
	}, []int{2}, true, 0},
}

// timeoutTP is the number of ranks of the timeout cases.
const timeoutTP = 4

func runReceiveTimeouts(t *testing.T, e *env, rng *rand.Rand, timeout time.Duration) {
	for _, tc := range receiveTimeoutCases {
		t.Run("timeout/"+tc.desc, func(t *testing.T) {
			runReceiveTimeout(e.sub(t), rng, tc, 4, 448, timeout)
		})
	}
}

// runReceiveTimeout: with words missing, the receive must give up after
// about timeout, name exactly the ranks they belong to, and still copy
// and re-arm every 16-byte vector that did arrive.
func runReceiveTimeout(e *env, rng *rand.Rand, tc receiveTimeoutCase, M, shard int, timeout time.Duration) {
	t := e.t
	hidden := timeoutTP * shard
	rows := M + 1
	words := rows * hidden / 2
	dSlot := e.alloc(4*words, "slot")
	dOut := e.alloc(4*words, "out")
	dStatus := e.alloc(4*ReceiveStatusWords, "status")
	data := randomWords(rng, words)
	orig := slices.Clone(data)
	for i := range M * hidden / 2 {
		if tc.lost(i, hidden, shard, M) {
			orig[i] = Sentinel
		}
	}
	e.upload(dSlot, cuda.AsBytes(orig), "slot")
	e.fill(dOut, poisonWord, words, "out")
	e.fill(dStatus, 0, ReceiveStatusWords, "status")
	e.sync("preparing the slot")
	t0 := time.Now()
	e.receive(ReceiveArgs{M: M, Hidden: hidden, Shard: shard, Slot: dSlot, Out: dOut, Status: dStatus, Timeout: timeout,
		SkipSlice: tc.skip, SkipRank: tc.skipRank}, false)
	e.sync("receive with a deadline of %v", timeout)
	elapsed := time.Since(t0)
	timedOut, missing := e.status(dStatus)
	t.Logf("%s: gave up after %v (deadline %v), missing ranks %v", tc.desc, elapsed.Round(time.Microsecond), timeout, missing)
	if !timedOut || !slices.Equal(missing, tc.missing) {
		t.Errorf("status: timed out %v, missing ranks %v; want true, %v", timedOut, missing, tc.missing)
	}
	if elapsed < timeout*9/10 || elapsed > timeout+10*time.Second {
		t.Errorf("receive returned after %v with a deadline of %v", elapsed, timeout)
	}
	out := make([]uint32, words)
	slot := make([]uint32, words)
	e.download(cuda.AsBytes(out), dOut, "out")
	e.download(cuda.AsBytes(slot), dSlot, "slot")
	bad := 0
	report := func(format string, args ...any) {
		if bad++; bad <= 3 {
			t.Errorf(format, args...)
		}
	}
	for i := range words {
		arrived := orig[i] != Sentinel
		switch {
		case i >= M*hidden/2:
			if out[i] != poisonWord || slot[i] != data[i] {
				report("word %d below the received rows touched: out %#08x slot %#08x", i, out[i], slot[i])
			}
		case tc.skip && (2*i%hidden)/shard == tc.skipRank:
			if out[i] != poisonWord || slot[i] != orig[i] {
				report("word %d of skipped rank %d touched: out %#08x slot %#08x", i, tc.skipRank, out[i], slot[i])
			}
		case !arrived:
			if out[i] != poisonWord || slot[i] != Sentinel {
				report("word %d never arrived but out %#08x slot %#08x (want poison and sentinel)", i, out[i], slot[i])
			}
		default:
			// An arrived word is copied and re-armed; one that shares its
			// 16-byte vector with a missing word may be left alone instead.
			vec := i &^ 3
			partial := false
			for j := vec; j < vec+4; j++ {
				partial = partial || orig[j] == Sentinel
			}
			copied := out[i] == data[i] && slot[i] == Sentinel
			left := out[i] == poisonWord && slot[i] == data[i]
			if !copied && !(partial && left) {
				report("word %d arrived (%#08x) but out %#08x slot %#08x", i, data[i], out[i], slot[i])
			}
		}
	}
	if bad > 3 {
		t.Errorf("... %d words wrong in all", bad)
	}
}

func TestGPUStepInGraph(t *testing.T) {
	e := openGPU(t)
	rng := testRand(t)
	for _, mode := range []stepReceive{receiveKernel, receiveFused, receiveFusedSkip} {
		t.Run(mode.String(), func(t *testing.T) {
			runStepInGraph(e.sub(t), rng, Shape{M: 3, Hidden: 7168, Latent: 3584, TP: 8}, 3, mode)
		})
	}
	// M above MaxSkinnyM: the kernel for it, then the receive kernel.
	for _, m := range []int{16, 100} {
		t.Run(fmt.Sprintf("tp 8 M %d %v", m, receiveKernel), func(t *testing.T) {
			runStepInGraph(e.sub(t), rng, Shape{M: m, Hidden: 7168, Latent: 3584, TP: 8}, 3, receiveKernel)
		})
	}
	// tp 2, shard 3584: the fused rank runs the step table's config
	// (StepConfigFor).
	for _, m := range []int{1, 5, 8} {
		for _, mode := range []stepReceive{receiveFused, receiveFusedSkip} {
			s := Shape{M: m, Hidden: 7168, Latent: 3584, TP: 2}
			t.Run(fmt.Sprintf("tp 2 M %d %v", m, mode), func(t *testing.T) {
				c := StepConfigFor(m, s.Shard(), s.Latent)
				t.Logf("fused rank's config: %s, %d warps, cluster %d, carveout %d", c.Function, c.Warps, c.Cluster, c.Carveout)
				runStepInGraph(e.sub(t), rng, s, 3, mode)
			})
		}
	}
}

// stepReceive is how runStepInGraph receives the block.
type stepReceive int

const (
	receiveKernel     stepReceive = iota // a receive kernel after the skinny kernels
	receiveFused                         // the last rank's skinny kernel (SkinnyArgs.Receive)
	receiveFusedSkip                     // the same, its slice stored straight into Out (ReceiveArgs.SkipSlice)
	receiveKernelSkip                    // receive kernels, one rank's slice stored straight into its Out (runRotation only)
)

func (m stepReceive) String() string {
	return [...]string{"receive kernel", "fused receive", "fused receive, own slice into out", "receive kernel, own slice into out"}[m]
}

// runStepInGraph plays a whole step of s.TP ranks on one GPU, captured in
// a CUDA graph: every rank's skinny kernel writes its slice into one slot
// (PDL between them), then the receive (PDL) copies the slot out and
// re-arms it. Each replay gets fresh inputs and a poisoned output, and
// must give the whole [M, hidden] block within tolerance. With a fused
// mode, the last rank's skinny kernel does the receive (SkinnyArgs.Receive)
// and no receive kernel is launched; with receiveFusedSkip that rank also
// stores its slice into Out instead of the slot, and its receive skips it.
func runStepInGraph(e *env, rng *rand.Rand, s Shape, replays int, mode stepReceive) {
	t := e.t
	shard, K, block := s.Shard(), s.Latent, s.M*s.Hidden
	dLat := e.alloc(2*s.M*K, "latent")
	dShared := e.alloc(2*block, "shared")
	dSlot := e.alloc(2*block, "slot")
	dOut := e.alloc(2*block, "out")
	dStatus := e.alloc(4*ReceiveStatusWords, "status")
	lat, w, shared := make([]BF16, s.M*K), make([]BF16, s.Hidden*K), make([]BF16, block)
	fillRandom(rng, w, float32(1/math.Sqrt(float64(K))))
	dW := make([]cuda.DevicePtr, s.TP) // each rank's slice, packed
	for r := range s.TP {
		dW[r] = e.uploadPacked(w[r*shard*K:(r+1)*shard*K], shard, K, fmt.Sprintf("rank %d's weight", r))
	}
	e.fill(dSlot, Sentinel, block/2, "slot")
	e.fill(dStatus, 0, ReceiveStatusWords, "status")
	e.sync("preparing the step")

	e.must(e.dev.StreamBeginCapture(e.stream, cuda.CaptureModeThreadLocal), "StreamBeginCapture")
	capture := func() error {
		recv := ReceiveArgs{M: s.M, Hidden: s.Hidden, Shard: shard, Slot: dSlot, Out: dOut,
			Status: dStatus, Timeout: 5 * time.Second}
		// The rank whose kernel receives is launched last; with its own
		// slice into out, a middle rank, so the receive's numbering has to
		// step over a slice between two others.
		fr := s.TP - 1
		if mode == receiveFusedSkip {
			fr = s.TP / 2
		}
		var order []int
		for r := range s.TP {
			if r != fr {
				order = append(order, r)
			}
		}
		order = append(order, fr)
		for i, r := range order {
			a := SkinnyArgs{Shape: s, Rank: r, Latent: dLat, Weight: dW[r], WeightPacked: true,
				Shared: dShared + cuda.DevicePtr(2*r*shard), SharedStride: s.Hidden, Dst: []cuda.DevicePtr{dSlot}}
			if mode != receiveKernel && r == fr {
				a.Receive = &recv
				if mode == receiveFusedSkip {
					recv.SkipSlice, recv.SkipRank = true, r
					a.Dst = []cuda.DevicePtr{dOut}
				}
			}
			if err := e.k.LaunchSkinny(e.stream, a, i > 0); err != nil {
				return err
			}
		}
		if mode != receiveKernel {
			return nil
		}
		return e.k.LaunchReceive(e.stream, recv, true)
	}
	x := e.endCapture(capture(), fmt.Sprintf("%d skinny launches and a receive", s.TP))

	out, slot := make([]BF16, block), make([]uint32, block/2)
	full := Shape{M: s.M, Hidden: s.Hidden, Latent: K, TP: 1}
	for i := range replays {
		fillRandom(rng, lat, 1)
		fillRandom(rng, shared, 1)
		e.upload(dLat, cuda.AsBytes(lat), "latent")
		e.upload(dShared, cuda.AsBytes(shared), "shared")
		e.fill(dOut, poisonWord, block/2, "out")
		e.must(e.dev.GraphLaunch(x, e.stream), "GraphLaunch #%d", i)
		e.download(cuda.AsBytes(out), dOut, "out")
		e.download(cuda.AsBytes(slot), dSlot, "slot")
		if timedOut, missing := e.status(dStatus); timedOut || len(missing) > 0 {
			t.Fatalf("replay %d: receive timed out %v, missing ranks %v", i, timedOut, missing)
		}
		if j := slices.IndexFunc(slot, func(w uint32) bool { return w != Sentinel }); j >= 0 {
			t.Errorf("replay %d: slot word %d = %#08x after the receive, want it re-armed", i, j, slot[j])
		}
		exp, err := Expect(full, lat, w, shared, s.Hidden)
		e.must(err, "Expect(%v)", full)
		res, err := exp.Check(out, s.Hidden)
		e.must(err, "Check(%v)", full)
		if res.Wrong > 0 {
			t.Errorf("replay %d of %v: %d of %d elements wrong, first %v (rank %d's slice)", i, s, res.Wrong, res.Checked, res.First, res.First.N/shard)
		} else {
			t.Logf("replay %d of %v: %d elements, worst error %.2f of tolerance", i, s, res.Checked, res.Worst)
		}
	}
}

func TestGPUPDLChain(t *testing.T) {
	e := openGPU(t)
	rng := testRand(t)
	runPDLChain(e, rng, Shape{M: 8, Hidden: 7168, Latent: 3584, TP: 1}, 896, 20)
	t.Run("M 128", func(t *testing.T) {
		runPDLChain(e.sub(t), rng, Shape{M: MaxM, Hidden: 7168, Latent: 3584, TP: 1}, 896, 20)
	})
}

// runPDLChain launches two skinny kernels back to back with programmatic
// dependent launch, the second reading the first's output as its latent:
// the second may stream its weights early but must read the latent only
// after the first finished. Both outputs are poisoned before every pair,
// so a second kernel that read too early computes from NaNs.
func runPDLChain(e *env, rng *rand.Rand, s1 Shape, shard2, iters int) {
	t := e.t
	s2 := Shape{M: s1.M, Hidden: shard2, Latent: s1.Hidden, TP: 1}
	n1, n2 := s1.M*s1.Hidden, s2.M*s2.Hidden
	dLat := e.alloc(2*s1.M*s1.Latent, "latent")
	dSh1 := e.alloc(2*n1, "shared 1")
	dSh2 := e.alloc(2*n2, "shared 2")
	dMid := e.alloc(2*n1, "first output")
	dOut := e.alloc(2*n2, "second output")
	lat, w1, w2 := make([]BF16, s1.M*s1.Latent), make([]BF16, s1.Hidden*s1.Latent), make([]BF16, s2.Hidden*s2.Latent)
	sh1, sh2 := make([]BF16, n1), make([]BF16, n2)
	fillRandom(rng, lat, 1)
	fillRandom(rng, w1, float32(1/math.Sqrt(float64(s1.Latent))))
	fillRandom(rng, w2, float32(1/math.Sqrt(float64(s2.Latent))))
	fillRandom(rng, sh1, 1)
	fillRandom(rng, sh2, 1)
	for _, u := range []struct {
		p cuda.DevicePtr
		b []BF16
		n string
	}{{dLat, lat, "latent"}, {dSh1, sh1, "shared 1"}, {dSh2, sh2, "shared 2"}} {
		e.upload(u.p, cuda.AsBytes(u.b), u.n)
	}
	dW1 := e.uploadPacked(w1, s1.Hidden, s1.Latent, "weight 1")
	dW2 := e.uploadPacked(w2, s2.Hidden, s2.Latent, "weight 2")
	a1 := SkinnyArgs{Shape: s1, Latent: dLat, Weight: dW1, WeightPacked: true, Shared: dSh1, SharedStride: s1.Hidden, Dst: []cuda.DevicePtr{dMid}}
	a2 := SkinnyArgs{Shape: s2, Latent: dMid, Weight: dW2, WeightPacked: true, Shared: dSh2, SharedStride: s2.Hidden, Dst: []cuda.DevicePtr{dOut}}
	mid, out := make([]BF16, n1), make([]BF16, n2)
	mid0, out0 := make([]BF16, n1), make([]BF16, n2)
	for i := range iters {
		e.fill(dMid, poisonWord, n1/2, "first output")
		e.fill(dOut, poisonWord, n2/2, "second output")
		e.skinny(a1, true)
		e.skinny(a2, true)
		e.download(cuda.AsBytes(mid), dMid, "first output")
		e.download(cuda.AsBytes(out), dOut, "second output")
		if i == 0 {
			exp1, err := Expect(s1, lat, w1, sh1, s1.Hidden)
			e.must(err, "Expect(%v)", s1)
			exp2, err := Expect(s2, mid, w2, sh2, s2.Hidden)
			e.must(err, "Expect(%v)", s2)
			for _, c := range []struct {
				name string
				exp  *Expected
				out  []BF16
			}{{"first", exp1, mid}, {"second", exp2, out}} {
				res, err := c.exp.Check(c.out, c.exp.Shape.Hidden)
				e.must(err, "Check")
				if res.Wrong > 0 {
					t.Fatalf("%s kernel (%v): %d of %d elements wrong, first %v", c.name, c.exp.Shape, res.Wrong, res.Checked, res.First)
				}
			}
			copy(mid0, mid)
			copy(out0, out)
			continue
		}
		if j := firstDiff(mid, mid0); j >= 0 {
			t.Fatalf("pair %d: first output differs from pair 0 at %d: %#04x vs %#04x", i, j, uint16(mid[j]), uint16(mid0[j]))
		}
		if j := firstDiff(out, out0); j >= 0 {
			t.Fatalf("pair %d: second output differs from pair 0 at %d: %#04x vs %#04x (did it read its latent before the first kernel finished?)", i, j, uint16(out[j]), uint16(out0[j]))
		}
	}
	t.Logf("%d PDL pairs %v -> %v, all bit-identical and within tolerance", iters, s1, s2)
}

// runNegativeZero feeds the kernel results that are -0 before the
// epilogue's fix-up: latent row 0 and the even weight rows are ±2^-70, so
// S = -latent_dim*2^-140 (or 0 where products flush), which bf16 rounds to
// -0, and shared row 0 is -0: -0 + -0 = -0, which must be stored as +0.
func runNegativeZero(e *env, rng *rand.Rand) {
	t := e.t
	s := Shape{M: 2, Hidden: 128, Latent: 64, TP: 2}
	const rank = 1
	shard, K := s.Shard(), s.Latent
	lat, w, shared := make([]BF16, s.M*K), make([]BF16, shard*K), make([]BF16, s.M*s.Hidden)
	fillRandom(rng, lat, 1)
	fillRandom(rng, w, 0.125)
	fillRandom(rng, shared, 1)
	tiny := BF16FromFloat64(0x1p-70)
	for k := range K {
		lat[k] = tiny | NegZero
		for n := 0; n < shard; n += 2 {
			w[n*K+k] = tiny
		}
	}
	for n := range s.Hidden {
		shared[n] = NegZero
	}
	dLat, dShared := e.alloc(2*len(lat), "latent"), e.alloc(2*len(shared), "shared")
	dW := e.uploadPacked(w, shard, K, "weight")
	dDst := e.alloc(2*len(shared), "destination")
	e.upload(dLat, cuda.AsBytes(lat), "latent")
	e.upload(dShared, cuda.AsBytes(shared), "shared")
	e.fill(dDst, poisonWord, len(shared)/2, "destination")
	e.skinny(SkinnyArgs{Shape: s, Rank: rank, Latent: dLat, Weight: dW, WeightPacked: true, Shared: dShared + 2*rank*cuda.DevicePtr(shard),
		SharedStride: s.Hidden, Dst: []cuda.DevicePtr{dDst}}, false)
	out := make([]BF16, len(shared))
	e.download(cuda.AsBytes(out), dDst, "destination")
	if probs := blockProblems(out, s.Hidden, s.M, rank*shard, shard); len(probs) > 0 {
		t.Errorf("%v rank %d: %v", s, rank, probs)
	}
	exp, err := Expect(s, lat, w, shared[rank*shard:], s.Hidden)
	e.must(err, "Expect")
	res, err := exp.Check(out[rank*shard:], s.Hidden)
	e.must(err, "Check")
	if res.Wrong > 0 {
		t.Errorf("%v rank %d: %d elements wrong, first %v", s, rank, res.Wrong, res.First)
	}
	zeros := 0
	for n := 0; n < shard; n += 2 {
		if out[rank*shard+n] == 0 {
			zeros++
		}
	}
	if zeros != shard/2 {
		t.Errorf("%d of the %d engineered results are +0", zeros, shard/2)
	}
}

// TestGPUSmall covers the kernels on small, odd shapes (a shard that is
// not a multiple of the tile, a latent_dim that is not a multiple of the
// k chunk, the smallest legal sizes) quickly enough to run under
// compute-sanitizer (scripts/gpu-test runs it with memcheck).
func TestGPUSmall(t *testing.T) {
	e := openGPU(t)
	runSmall(t, e, testRand(t), 50*time.Millisecond)
}

func runSmall(t *testing.T, e *env, rng *rand.Rand, timeout time.Duration) {
	t.Run("skinny", func(t *testing.T) {
		runSkinnyMatrix(e.sub(t), rng, matrixSpec{ms: []int{1, 3, 8}, shards: []int{8, 40, 72, 136}, latents: []int{8, 520, 3600}})
	})
	t.Run("negative zero", func(t *testing.T) { runNegativeZero(e.sub(t), rng) })
	t.Run("receive", func(t *testing.T) { runReceiveFull(e.sub(t), rng, 3, 216, 72) })
	t.Run("receive timeout", func(t *testing.T) {
		runReceiveTimeout(e.sub(t), rng, receiveTimeoutCases[1], 2, 72, timeout)
	})
	t.Run("step in a graph", func(t *testing.T) {
		for _, mode := range []stepReceive{receiveKernel, receiveFused, receiveFusedSkip} {
			runStepInGraph(e.sub(t), rng, Shape{M: 2, Hidden: 3 * 72, Latent: 520, TP: 3}, 2, mode)
		}
	})
	t.Run("receive, skip a rank", func(t *testing.T) { runReceiveSkip(e.sub(t), rng, 2, 216, 72, 1) })
	t.Run("PDL chain", func(t *testing.T) {
		runPDLChain(e.sub(t), rng, Shape{M: 3, Hidden: 136, Latent: 520, TP: 1}, 40, 3)
	})
	t.Run("slot rotation", func(t *testing.T) {
		for _, mode := range []stepReceive{receiveKernel, receiveFused, receiveFusedSkip} {
			runRotation(e.sub(t), rng, Shape{M: 2, Hidden: 3 * 40, Latent: 520, TP: 3}, 2, 3, mode, timeout)
		}
	})
	// The kernel for M above MaxSkinnyM (bigm.cu): every code size, a shard
	// below one warp's 32 rows and ones that leave a CTA's last warps
	// without rows, latents below one 32-k chunk and with a short last
	// chunk; then whole steps with its receive kernel (it has no fused
	// one), captured and with rotation, and a PDL chain.
	t.Run("larger M", func(t *testing.T) {
		runSkinnyMatrix(e.sub(t), rng, matrixSpec{ms: []int{9, 17, 40, 100, MaxM}, shards: []int{8, 40, 136}, latents: []int{8, 520, 3600}})
	})
	t.Run("larger M step in a graph", func(t *testing.T) {
		runStepInGraph(e.sub(t), rng, Shape{M: 12, Hidden: 3 * 72, Latent: 520, TP: 3}, 2, receiveKernel)
	})
	t.Run("larger M PDL chain", func(t *testing.T) {
		runPDLChain(e.sub(t), rng, Shape{M: 33, Hidden: 136, Latent: 520, TP: 1}, 40, 3)
	})
	t.Run("larger M slot rotation", func(t *testing.T) {
		for _, mode := range []stepReceive{receiveKernel, receiveKernelSkip} {
			runRotation(e.sub(t), rng, Shape{M: 20, Hidden: 3 * 40, Latent: 520, TP: 3}, 2, 3, mode, timeout)
		}
	})
}

// TestGPUSlotRotation plays whole steps of several ranks on one GPU with
// device-side slot rotation (SlotRotation): one step captured once and
// replayed, the mailbox slot chosen and advanced by the kernels.
func TestGPUSlotRotation(t *testing.T) {
	e := openGPU(t)
	rng := testRand(t)
	for _, mode := range []stepReceive{receiveKernel, receiveKernelSkip, receiveFused, receiveFusedSkip} {
		t.Run(mode.String(), func(t *testing.T) {
			runRotation(e.sub(t), rng, Shape{M: 3, Hidden: 4 * 72, Latent: 520, TP: 4}, 3, 1000, mode, 5*time.Second)
		})
	}
	// tp 2 at shard 3584: launches in clusters of 4 (the tables' configs
	// for that shard), so the tile leaders that arrive are one CTA in four.
	for _, mode := range []stepReceive{receiveKernel, receiveFused} {
		t.Run("tp 2 M 8 "+mode.String(), func(t *testing.T) {
			runRotation(e.sub(t), rng, Shape{M: 8, Hidden: 7168, Latent: 3584, TP: 2}, 2, 20, mode, 5*time.Second)
		})
	}
	// The kernel for M above MaxSkinnyM reads the counter and the receive
	// kernel after it advances it; tp 4 at shard 1792 and tp 8 at 896
	// launch in clusters.
	for _, s := range []Shape{{M: 64, Hidden: 7168, Latent: 3584, TP: 4}, {M: MaxM, Hidden: 7168, Latent: 3584, TP: 8}} {
		for _, mode := range []stepReceive{receiveKernel, receiveKernelSkip} {
			t.Run(fmt.Sprintf("tp %d M %d %v", s.TP, s.M, mode), func(t *testing.T) {
				runRotation(e.sub(t), rng, s, 3, 20, mode, 5*time.Second)
			})
		}
	}
}

// runRotation plays s.TP ranks on one GPU, each with a mailbox of `slots`
// slots (plain device memory, every slot `stride` bytes apart, more than
// a block, all armed with the sentinel), its own rotation counter and its
// own output. One step is captured once: every rank's skinny kernel
// stores its slice into slot 0 of every rank's mailbox as given (PDL
// between them), with the rank's Rotation, then every rank's receive
// (mode: receive kernels, or the last rank's fused into its skinny kernel;
// with receiveFusedSkip or receiveKernelSkip one rank stores its own slice
// straight into its output, marked Rotation.Fixed, and its receive skips
// it). The
// graph is replayed `replays` times, each on fresh inputs with poisoned
// outputs, and after each: every rank's output is the whole block within
// the float64 tolerance (no negative zero) and bit-identical on every
// rank, every counter names the next slot with no arrivals left, no
// receive timed out, and every word of every mailbox is the sentinel
// again (the slot used re-armed, the others never written). timeout: the
// receives' deadline.
func runRotation(e *env, rng *rand.Rand, s Shape, slots, replays int, mode stepReceive, timeout time.Duration) {
	t := e.t
	shard, K, block := s.Shard(), s.Latent, s.M*s.Hidden
	stride := uint64(2*block+255) &^ 15 // more than a block: the stride, not the block, steps the slots
	dLat := e.alloc(2*s.M*K, "latent")
	dShared := e.alloc(2*block, "shared")
	lat, w, shared := make([]BF16, s.M*K), make([]BF16, s.Hidden*K), make([]BF16, block)
	fillRandom(rng, w, float32(1/math.Sqrt(float64(K))))
	type rank struct {
		w, mailbox, counter, out, status cuda.DevicePtr
		rot                              SlotRotation
	}
	ranks := make([]rank, s.TP)
	for r := range ranks {
		x := &ranks[r]
		x.w = e.uploadPacked(w[r*shard*K:(r+1)*shard*K], shard, K, fmt.Sprintf("rank %d's weight", r))
		x.mailbox = e.alloc(int(stride)*slots, fmt.Sprintf("rank %d's mailbox", r))
		x.counter = e.alloc(16, fmt.Sprintf("rank %d's counter", r))
		x.out = e.alloc(2*block, fmt.Sprintf("rank %d's output", r))
		x.status = e.alloc(4*ReceiveStatusWords, fmt.Sprintf("rank %d's status", r))
		x.rot = SlotRotation{Counter: x.counter, Slots: slots, Stride: stride}
		e.fill(x.mailbox, Sentinel, int(stride)*slots/4, "mailbox")
		e.fill(x.counter, 0, 4, "counter")
		e.fill(x.status, 0, ReceiveStatusWords, "status")
	}
	e.sync("preparing the ranks")

	// The rank whose kernel receives is launched last (a middle rank with
	// its own slice into its output, so the receive steps over a slice);
	// own: the rank whose slice goes straight into its output.
	fr, own := -1, -1
	switch mode {
	case receiveFused:
		fr = s.TP - 1
	case receiveFusedSkip:
		fr, own = s.TP/2, s.TP/2
	case receiveKernelSkip:
		own = s.TP / 2
	}
	if own >= 0 {
		ranks[own].rot.Fixed = 1 << own
	}
	recv := func(r int) ReceiveArgs {
		ra := ReceiveArgs{M: s.M, Hidden: s.Hidden, Shard: shard, Slot: ranks[r].mailbox, Out: ranks[r].out,
			Status: ranks[r].status, Timeout: timeout, Rotation: ranks[r].rot}
		if r == own {
			ra.SkipSlice, ra.SkipRank = true, r
		}
		return ra
	}
	e.must(e.dev.StreamBeginCapture(e.stream, cuda.CaptureModeThreadLocal), "StreamBeginCapture")
	capture := func() error {
		var order []int
		for r := range s.TP {
			if r != fr {
				order = append(order, r)
			}
		}
		if fr >= 0 {
			order = append(order, fr)
		}
		launches := 0
		for _, r := range order {
			a := SkinnyArgs{Shape: s, Rank: r, Latent: dLat, Weight: ranks[r].w, WeightPacked: true,
				Shared: dShared + cuda.DevicePtr(2*r*shard), SharedStride: s.Hidden, Rotation: ranks[r].rot}
			for q := range s.TP {
				a.Dst = append(a.Dst, ranks[q].mailbox)
			}
			if r == own {
				a.Dst[r] = ranks[r].out
			}
			if r == fr {
				ra := recv(r)
				a.Receive = &ra
			}
			if err := e.k.LaunchSkinny(e.stream, a, launches > 0); err != nil {
				return err
			}
			launches++
		}
		for r := range s.TP {
			if r != fr {
				if err := e.k.LaunchReceive(e.stream, recv(r), true); err != nil {
					return err
				}
			}
		}
		return nil
	}
	x := e.endCapture(capture(), fmt.Sprintf("one step of %d ranks", s.TP))

	full := Shape{M: s.M, Hidden: s.Hidden, Latent: K, TP: 1}
	out, first := make([]BF16, block), make([]BF16, block)
	mailbox := make([]uint32, int(stride)*slots/4)
	var counter [2]uint32
	worst := 0.0
	start := time.Now()
	for i := range replays {
		fillRandom(rng, lat, 1)
		fillRandom(rng, shared, 1)
		e.upload(dLat, cuda.AsBytes(lat), "latent")
		e.upload(dShared, cuda.AsBytes(shared), "shared")
		for r := range ranks {
			e.fill(ranks[r].out, poisonWord, block/2, "output")
		}
		e.must(e.dev.GraphLaunch(x, e.stream), "GraphLaunch #%d", i)
		exp, err := Expect(full, lat, w, shared, s.Hidden)
		e.must(err, "Expect(%v)", full)
		for r := range ranks {
			if timedOut, missing := e.status(ranks[r].status); timedOut || len(missing) > 0 {
				t.Fatalf("replay %d rank %d: receive timed out %v, missing ranks %v (slot %d)", i, r, timedOut, missing, i%slots)
			}
			e.download(cuda.AsBytes(counter[:]), ranks[r].counter, "counter")
			if want := uint32((i + 1) % slots); counter != [2]uint32{want, 0} {
				t.Fatalf("replay %d rank %d: counter {%d, %d}, want {%d, 0}", i, r, counter[0], counter[1], want)
			}
			e.download(cuda.AsBytes(mailbox), ranks[r].mailbox, "mailbox")
			if j := slices.IndexFunc(mailbox, func(w uint32) bool { return w != Sentinel }); j >= 0 {
				t.Fatalf("replay %d rank %d: mailbox word %d (slot %d) = %#08x, want the sentinel (slot %d used)",
					i, r, j, 4*j/int(stride), mailbox[j], i%slots)
			}
			dst := out
			if r == 0 {
				dst = first
			}
			e.download(cuda.AsBytes(dst), ranks[r].out, "output")
			if r > 0 {
				if j := firstDiff(out, first); j >= 0 {
					t.Fatalf("replay %d: rank %d's output differs from rank 0's at element (%d, %d): %#04x vs %#04x",
						i, r, j/s.Hidden, j%s.Hidden, uint16(out[j]), uint16(first[j]))
				}
				continue
			}
			res, err := exp.Check(first, s.Hidden)
			e.must(err, "Check(%v)", full)
			if res.Wrong > 0 {
				t.Fatalf("replay %d of %v (slot %d): %d of %d elements wrong, first %v (rank %d's slice)",
					i, s, i%slots, res.Wrong, res.Checked, res.First, res.First.N/shard)
			}
			worst = max(worst, res.Worst)
		}
	}
	t.Logf("%v, %d slots, %s: %d replays of one captured step in %v, counters advancing, 0 wrong (worst error %.2f of tolerance)",
		s, slots, mode, replays, time.Since(start).Round(time.Millisecond), worst)
}
