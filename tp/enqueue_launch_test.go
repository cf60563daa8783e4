package tp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// What a stream-ordered step queues, against what a step of Capture's
// graph queues: the real kernel loader and launcher (package kernel, its
// launch tables) on the fake GPU's driver, which records every call that
// puts work on a stream instead of running kernels. A step queued with
// Enqueue must put on the stream exactly what a step of Capture's graph
// does (the same entry point, grid, block, shared memory, cluster and
// programmatic dependent launch, and nothing else), whether the steps
// belong to one op or to one op each: `tprun bench` times Capture's graphs,
// and a framework's graph of Enqueue calls is held to its figures.

// launchDrv is the fake GPU's driver with the module calls of the real
// kernels: it hands out a function per entry point and records each
// launch and each other call that queues work, while log is on.
type launchDrv struct {
	*fakeDrv
	mu    sync.Mutex
	names map[cuda.Function]string
	on    bool
	log   []queued
}

// queued is one call that queued work on a stream.
type queued struct {
	call   string // "launch", or the driver call's name
	stream cuda.Stream
	fn     string // launch: the entry point
	cfg    cuda.LaunchConfig
	params []byte // launch: the parameter block
}

// config is what a launch is timed by: everything but the stream and the
// parameters.
func (q queued) config() string {
	if q.call != "launch" {
		return q.call
	}
	c := q.cfg
	return fmt.Sprintf("%s grid %v block %v smem %d cluster %v policy %d carveout %d pdl %t",
		q.fn, c.Grid, c.Block, c.SharedMem, c.ClusterDim, c.ClusterPolicy, c.SharedCarveout, c.ProgrammaticSerialization)
}

// param is the parameter block's 64-bit word at byte off.
func (q queued) param(off int) uint64 { return binary.LittleEndian.Uint64(q.params[off:]) }

func (d *launchDrv) record(q queued) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.on {
		d.log = append(d.log, q)
	}
}

// logging turns the log on (clearing it) or off and returns what it held.
func (d *launchDrv) logging(on bool) []queued {
	d.mu.Lock()
	defer d.mu.Unlock()
	l := d.log
	d.on, d.log = on, nil
	return l
}

func (d *launchDrv) ModuleLoadData([]byte) (cuda.Module, error) { return 0xa0d, nil }
func (d *launchDrv) ModuleUnload(cuda.Module) error             { return nil }
func (d *launchDrv) ModuleGetFunction(_ cuda.Module, name string) (cuda.Function, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f := cuda.Function(0x1000 + len(d.names))
	d.names[f] = name
	return f, nil
}
func (d *launchDrv) FuncSetAttribute(f cuda.Function, attr cuda.FuncAttribute, v int) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.names[f] == "" || attr != cuda.FuncAttrMaxDynamicSharedSizeBytes || v > kernel.MaxSharedOptIn {
		return fmt.Errorf("FuncSetAttribute(%#x, %d, %d)", uintptr(f), attr, v)
	}
	return nil
}
func (d *launchDrv) LaunchKernelEx(cfg cuda.LaunchConfig, f cuda.Function, params ...[]byte) error {
	d.mu.Lock()
	name := d.names[f]
	d.mu.Unlock()
	if name == "" || len(params) != 1 {
		return fmt.Errorf("launch of function %#x (%q) with %d parameters", uintptr(f), name, len(params))
	}
	d.record(queued{call: "launch", stream: cfg.Stream, fn: name, cfg: cfg, params: append([]byte(nil), params[0]...)})
	return nil
}
func (d *launchDrv) MemcpyHtoD(dst cuda.DevicePtr, src []byte) error {
	d.record(queued{call: "MemcpyHtoD"})
	return d.fakeDrv.MemcpyHtoD(dst, src)
}
func (d *launchDrv) MemcpyDtoD(dst, src cuda.DevicePtr, n uint64) error {
	d.record(queued{call: "MemcpyDtoD"})
	return d.fakeDrv.MemcpyDtoD(dst, src, n)
}
func (d *launchDrv) MemcpyDtoH(dst []byte, src cuda.DevicePtr) error {
	d.record(queued{call: "MemcpyDtoH"})
	return d.fakeDrv.MemcpyDtoH(dst, src)
}
func (d *launchDrv) MemsetD32Async(p cuda.DevicePtr, v uint32, n uint64, s cuda.Stream) error {
	d.record(queued{call: "MemsetD32Async", stream: s})
	return d.fakeDrv.MemsetD32Async(p, v, n, s)
}
func (d *launchDrv) EventRecord(e cuda.Event, s cuda.Stream) error {
	d.record(queued{call: "EventRecord", stream: s})
	return d.fakeDrv.EventRecord(e, s)
}
func (d *launchDrv) GraphLaunch(e cuda.GraphExec, s cuda.Stream) error {
	d.record(queued{call: "GraphLaunch", stream: s})
	return d.fakeDrv.GraphLaunch(e, s)
}

// newLaunchUp is an op of rank 0 of a group of one on gpu whose engine
// loads the real kernels through a launchDrv.
func newLaunchUp(ctx context.Context, gpu *fakeGPU, hidden, latent, maxM int) (*UpProjection, *launchDrv, error) {
	s := kernel.Shape{M: maxM, Hidden: hidden, Latent: latent, TP: 1}
	d := &launchDrv{fakeDrv: newFakeDrv(gpu, 0), names: map[cuda.Function]string{}}
	deps := fakeDeps()
	deps.loadKernels = func(drv engineDriver) (stepKernels, error) { return loadStepKernels(drv) }
	unicast := deps.newUnicast
	deps.newUnicast = func(ctx context.Context, ex mailbox.Exchanger, _ engineDriver, dev cuda.Device, cfg mailbox.Config) (gpuMailbox, []cuda.DevicePtr, error) {
		return unicast(ctx, ex, d.fakeDrv, dev, cfg)
	}
	eng, err := newCUDAEngine(ctx, newUpHub(1).rank(0), s, upConfig{deadline: time.Second}, d, nil, 0, mailbox.KindUnicast, deps)
	if err != nil {
		return nil, nil, err
	}
	return &UpProjection{rank: 0, shape: s, eng: eng, reason: "fake"}, d, nil
}

// TestEnqueueLaunchesAsCapture: at tp 1 (where `tprun bench --tp 1` and a
// framework's graph of Enqueue calls are compared), for every M, K steps
// queued with Enqueue (on one op, and on K ops with a weight each, as a
// model's layers are) put on the stream, step for step, the launch
// Capture's graph of K steps holds, with programmatic dependent launch on
// each, and no other work; the launches read the operands and the counter
// of their own op.
func TestEnqueueLaunchesAsCapture(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	const k = 3
	for _, shape := range []struct{ hidden, latent int }{{896, 3584}, {7168, 3584}, {256, 96}} {
		t.Run(fmt.Sprintf("hidden %d, latent %d", shape.hidden, shape.latent), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			gpu := newFakeGPU()
			const maxM = 8
			ops := make([]*UpProjection, k)
			drvs := make([]*launchDrv, k)
			for i := range ops {
				up, d, err := newLaunchUp(ctx, gpu, shape.hidden, shape.latent, maxM)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					if err := up.Close(); err != nil {
						t.Error(err)
					}
				}()
				ops[i], drvs[i] = up, d
			}
			n := shape.hidden * shape.latent
			w := make([]kernel.BF16, n)
			kernel.FillRandom(kernel.NewRand(rng.Uint64()), w, 1/float32(shape.latent))
			for _, up := range ops {
				if err := up.SetWeight(ctx, w); err != nil {
					t.Fatal(err)
				}
			}
			packed := kernel.PreferPacked(shape.hidden, shape.latent)
			wlen := n
			if packed {
				wlen = kernel.PackedWeightLen(shape.hidden, shape.latent)
			}
			pw := make([]kernel.BF16, wlen)
			if packed {
				if err := kernel.PackWeight(pw, w, shape.hidden, shape.latent); err != nil {
					t.Fatal(err)
				}
			} else {
				copy(pw, w)
			}
			weights := make([]DevicePtr, k)
			for i := range weights {
				weights[i] = devBuf(t, gpu, pw)
			}
			for m := 1; m <= maxM; m++ {
				lat := make([]kernel.BF16, m*shape.latent)
				sh := make([]kernel.BF16, m*shape.hidden)
				kernel.FillRandom(kernel.NewRand(rng.Uint64()), lat, 1)
				kernel.FillRandom(kernel.NewRand(rng.Uint64()), sh, 1)
				in := DeviceInputs{M: m, Latent: devBuf(t, gpu, lat), Shared: devBuf(t, gpu, sh), SharedStride: shape.hidden}
				outs := make([]DevicePtr, k)
				steps := make([]DeviceStep, k)
				for i := range outs {
					outs[i] = poisoned(t, gpu, m*shape.hidden)
					steps[i] = DeviceStep{In: in, Out: outs[i]}
					steps[i].In.Weight, steps[i].In.WeightPacked = weights[i], packed
				}

				// Capture's graph of k steps, each with its weight copy (what
				// `tprun bench` times).
				drvs[0].logging(true)
				g, err := ops[0].Capture(ctx, steps)
				if err != nil {
					t.Fatal(err)
				}
				captured := drvs[0].logging(false)
				if err := g.Close(); err != nil {
					t.Fatal(err)
				}

				// k Enqueue calls on one op, then one on each of k ops with its
				// own weight, all on one stream of the caller's under its own
				// capture, as a framework's graph capture does.
				stream, err := drvs[0].StreamCreate(cuda.StreamNonBlocking)
				if err != nil {
					t.Fatal(err)
				}
				enqueued := func(what string, op func(i int) *UpProjection, in func(i int) DeviceInputs) []queued {
					t.Helper()
					if err := drvs[0].StreamBeginCapture(stream, cuda.CaptureModeGlobal); err != nil {
						t.Fatal(err)
					}
					for _, d := range drvs {
						d.logging(true)
					}
					for i := range k {
						if err := op(i).Enqueue(in(i), outs[i], Stream(stream)); err != nil {
							t.Fatalf("%s: %v", what, err)
						}
					}
					var all []queued
					for _, d := range drvs {
						all = append(all, d.logging(false)...)
					}
					if _, err := drvs[0].StreamEndCapture(stream); err != nil {
						t.Fatal(err)
					}
					return all
				}
				oneOp := enqueued("one op", func(int) *UpProjection { return ops[0] }, func(i int) DeviceInputs { return steps[i].In })
				ownWeights := enqueued("an op per step", func(i int) *UpProjection { return ops[i] }, func(int) DeviceInputs { return in })
				if err := drvs[0].StreamDestroy(stream); err != nil {
					t.Fatal(err)
				}

				for _, c := range []struct {
					what string
					got  []queued
					ops  []*UpProjection
				}{{"one op", oneOp, []*UpProjection{ops[0], ops[0], ops[0]}}, {"an op per step", ownWeights, ops}} {
					if len(captured) != k || len(c.got) != k {
						t.Fatalf("M %d: Capture queued %s; Enqueue (%s) queued %s: want %d launches each",
							m, describe(captured), c.what, describe(c.got), k)
					}
					for i := range k {
						cap, got := captured[i], c.got[i]
						want := cap.config()
						if i == 0 {
							// A graph's first kernel has no kernel before it
							// in the graph; a stream-ordered step may have one.
							want = strings.Replace(want, "pdl false", "pdl true", 1)
						}
						if got.config() != want {
							t.Errorf("M %d, step %d: Enqueue (%s) launched\n\t%s\nCapture's graph\n\t%s", m, i, c.what, got.config(), cap.config())
						}
						if got.stream != stream {
							t.Errorf("M %d, step %d: Enqueue (%s) launched on stream %#x, not the caller's %#x", m, i, c.what, uintptr(got.stream), uintptr(stream))
						}
						e := c.ops[i].eng.(*cudaEngine)
						wantWeight := steps[i].In.Weight
						if c.what != "one op" {
							wantWeight = DevicePtr(e.weight)
						}
						// skinny.h: weight at 8, out of the fused receive at
						// 192, the rotation counter at 224.
						if got.param(8) != uint64(wantWeight) || got.param(192) != uint64(outs[i]) || got.param(224) != uint64(e.counter) {
							t.Errorf("M %d, step %d: Enqueue (%s) launched with weight %#x, out %#x, counter %#x: want %#x, %#x, %#x",
								m, i, c.what, got.param(8), got.param(192), got.param(224), uint64(wantWeight), uint64(outs[i]), uint64(e.counter))
						}
					}
				}
				for i, q := range captured {
					if pdl := q.cfg.ProgrammaticSerialization; pdl != (i > 0) {
						t.Errorf("M %d: step %d of Capture's graph launched with pdl %t", m, i, pdl)
					}
				}
				if m == 1 || m == maxM {
					t.Logf("M %d: %s", m, captured[k-1].config())
				}
			}
		})
	}
}

// describe lists what a log queued.
func describe(l []queued) string {
	var s []string
	for _, q := range l {
		s = append(s, q.config())
	}
	return fmt.Sprintf("%d calls [%s]", len(l), strings.Join(s, "; "))
}

// TestCaptureStreamFake: a graph of the caller's, captured with
// CaptureStream around one Enqueue on each of K ops of a rank (each with
// its own weight, SetWeight), replays on every rank any number of times;
// after the replays every op's block matches the float64 reference of its
// own weight, and every op's slot counter has advanced once per replay.
func TestCaptureStreamFake(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const (
		size, k, maxM         = 2, 3, 4
		hidden, latent, slots = 128, 64, 3
		replays               = 5 // no multiple of slots
	)
	rng := rand.New(rand.NewPCG(seed, 11))
	ws := make([]weightSteps, k)
	for i := range ws {
		ws[i] = newWeightSteps(t, rng.Uint64(), hidden, latent, []int{1 + rng.IntN(maxM)})
	}
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make([][][]kernel.BF16, size)
	errs := onUpRanks(size, func(r int, ex mailbox.Exchanger) (err error) {
		d := newFakeDrv(gpu, r)
		ops := make([]*UpProjection, k)
		for i := range ops {
			s := kernel.Shape{M: maxM, Hidden: hidden, Latent: latent, TP: size}
			eng, err := newCUDAEngine(ctx, ex, s, upConfig{slots: slots, deadline: 10 * time.Second}, d, nil, 0, mailbox.KindUnicast, fakeDeps())
			if err != nil {
				return err
			}
			up := &UpProjection{rank: r, shape: s, eng: eng, reason: "fake"}
			defer func() { err = errors.Join(err, up.Close()) }()
			if err := up.SetWeight(ctx, ws[i].shard(r, size)); err != nil {
				return err
			}
			ops[i] = up
		}
		shard := hidden / size
		ins := make([]DeviceInputs, k)
		outs := make([]DevicePtr, k)
		for i, w := range ws {
			st := w.steps[0]
			ins[i] = DeviceInputs{M: st.m, Latent: devBuf(t, gpu, st.latent), Shared: devBuf(t, gpu, st.shared) + DevicePtr(2*r*shard), SharedStride: hidden}
			outs[i] = poisoned(t, gpu, maxM*hidden)
		}
		bind := func() (streamGraphDriver, func(), error) { return d, func() {}, nil }
		g, err := captureStream(bind, func(s Stream) error {
			for i, up := range ops {
				if err := up.Enqueue(ins[i], outs[i], s); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, g.Close(), g.Close()) }()
		for i := range ops {
			if slot, err := counterSlot(gpu, ops[i].eng.(*cudaEngine)); err != nil || slot != 0 {
				return fmt.Errorf("op %d: slot counter %d (%v) after the capture: the steps ran", i, slot, err)
			}
		}
		if err := g.Replay(replays - 1); err != nil {
			return err
		}
		for _, o := range outs {
			b, err := gpu.at(o, 2*maxM*hidden)
			if err != nil {
				return err
			}
			for i := range bf16s(b) {
				bf16s(b)[i] = poison
			}
		}
		times, err := g.TimeReplays(1)
		if err != nil {
			return err
		}
		if len(times) != 1 || times[0] <= 0 {
			return fmt.Errorf("TimeReplays(1) = %v", times)
		}
		for i, up := range ops {
			if err := up.Synchronize(ctx, g.Stream()); err != nil {
				return err
			}
			e := up.eng.(*cudaEngine)
			if slot, err := counterSlot(gpu, e); err != nil || int(slot) != replays%e.layout.Slots {
				return fmt.Errorf("op %d: slot counter %d (%v) after %d replays of %d slots", i, slot, err, replays, e.layout.Slots)
			}
			b, err := gpu.at(outs[i], 2*maxM*hidden)
			if err != nil {
				return err
			}
			if err := keepBlock(i, ws[i].steps[0].m, hidden, slices.Clone(bf16s(b)), &got[r]); err != nil {
				return err
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	var steps []upStepData
	for _, w := range ws {
		steps = append(steps, w.steps[0])
	}
	checkBlocks(t, steps, got, hidden)
	checkNoLeaks(t, gpu)
}

// TestLargeMLaunches: at tp 1, a step of M above kernel.MaxSkinnyM, queued
// with Enqueue or held in Capture's graph, is the larger-M kernel's launch
// (the config kernel.ConfigFor picks: entry point with slot rotation, grid,
// block, cluster, shared memory; M in the flags; no fused receive) and
// then the receive kernel's with the same counter, which ends the step;
// Enqueue queues what Capture's graph holds.
func TestLargeMLaunches(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 13))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const hidden, latent = 896, 3584
	gpu := newFakeGPU()
	up, d, err := newLaunchUp(ctx, gpu, hidden, latent, kernel.MaxM)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := up.Close(); err != nil {
			t.Error(err)
		}
	}()
	w := make([]kernel.BF16, hidden*latent)
	kernel.FillRandom(kernel.NewRand(rng.Uint64()), w, 1/float32(latent))
	if err := up.SetWeight(ctx, w); err != nil {
		t.Fatal(err)
	}
	e := up.eng.(*cudaEngine)
	for _, m := range []int{9, 16, 33, 64, 100, kernel.MaxM} {
		lat := make([]kernel.BF16, m*latent)
		sh := make([]kernel.BF16, m*hidden)
		in := DeviceInputs{M: m, Latent: devBuf(t, gpu, lat), Shared: devBuf(t, gpu, sh), SharedStride: hidden}
		out := poisoned(t, gpu, m*hidden)
		d.logging(true)
		g, err := up.Capture(ctx, []DeviceStep{{In: in, Out: out}, {In: in, Out: out}})
		if err != nil {
			t.Fatal(err)
		}
		captured := d.logging(false)
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		stream, err := d.StreamCreate(cuda.StreamNonBlocking)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.StreamBeginCapture(stream, cuda.CaptureModeGlobal); err != nil {
			t.Fatal(err)
		}
		d.logging(true)
		for range 2 {
			if err := up.Enqueue(in, out, Stream(stream)); err != nil {
				t.Fatalf("M %d: Enqueue: %v", m, err)
			}
		}
		enqueued := d.logging(false)
		if _, err := d.StreamEndCapture(stream); err != nil {
			t.Fatal(err)
		}
		if err := d.StreamDestroy(stream); err != nil {
			t.Fatal(err)
		}
		c := kernel.ConfigFor(m, hidden, latent)
		if len(captured) != 4 || len(enqueued) != 4 {
			t.Fatalf("M %d: Capture queued %s, Enqueue %s: want a larger-M launch and a receive per step", m, describe(captured), describe(enqueued))
		}
		for i, q := range captured {
			wantFn := c.Function + kernel.RotationSuffix
			if i%2 == 1 {
				wantFn = "tprun_receive" + kernel.RotationSuffix
			}
			if q.call != "launch" || q.fn != wantFn {
				t.Fatalf("M %d: launch %d of the graph is %s, want %s", m, i, q.config(), wantFn)
			}
			if got := enqueued[i].config(); got != q.config() && (i > 0 || got != strings.Replace(q.config(), "pdl false", "pdl true", 1)) {
				t.Errorf("M %d, launch %d: Enqueue launched\n\t%s\nCapture's graph\n\t%s", m, i, got, q.config())
			}
			if i%2 == 1 {
				// tprun_receive_params: m at 32, the counter at 48.
				if rm := binary.LittleEndian.Uint32(q.params[32:]); int(rm) != m || q.param(48) != uint64(e.counter) {
					t.Errorf("M %d: receive with m %d counter %#x, want %d, %#x", m, rm, q.param(48), m, uint64(e.counter))
				}
				continue
			}
			cfg := q.cfg
			flags := binary.LittleEndian.Uint32(q.params[220:])
			tile := binary.LittleEndian.Uint32(q.params[176:])
			switch {
			case cfg.Grid[0] != uint32(c.GridX) || cfg.Block[0] != uint32(c.BlockX) || cfg.ClusterDim[0] != uint32(c.Cluster) || int(cfg.SharedMem) != c.SharedBytes:
				t.Errorf("M %d: launch %s, config %+v", m, q.config(), c)
			case flags != uint32(kernel.SkinnyPacked|m<<kernel.SkinnyRowsShift) || int(tile) != c.TileRows:
				t.Errorf("M %d: flags %#x tile_rows %d, want M in the flags and tile_rows %d", m, flags, tile, c.TileRows)
			case q.param(184) != 0 || q.param(224) != uint64(e.counter) || q.param(8) != uint64(e.weight):
				t.Errorf("M %d: recv_slot %#x counter %#x weight %#x: want no fused receive, the op's counter and weight", m, q.param(184), q.param(224), q.param(8))
			}
		}
		if m == kernel.MaxM || m == 9 {
			t.Logf("M %d: %s", m, captured[0].config())
		}
	}
}

// TestCaptureStreamGraphDotNeedsDriver: with GraphDotEnv set, a driver
// that cannot write a graph fails the capture, naming the variable, and
// leaves no graph behind; without it the same capture succeeds.
func TestCaptureStreamGraphDotNeedsDriver(t *testing.T) {
	gpu := newFakeGPU()
	d := newFakeDrv(gpu, 0)
	bind := func() (streamGraphDriver, func(), error) { return d, func() {}, nil }
	queue := func(Stream) error { return nil }
	t.Setenv(GraphDotEnv, filepath.Join(t.TempDir(), "g"))
	if g, err := captureStream(bind, queue); err == nil || !strings.Contains(err.Error(), GraphDotEnv) {
		if g != nil {
			_ = g.Close()
		}
		t.Fatalf("capture with %s set on a driver without cuGraphDebugDotPrint: %v, want an error naming it", GraphDotEnv, err)
	}
	t.Setenv(GraphDotEnv, "")
	g, err := captureStream(bind, queue)
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
}
