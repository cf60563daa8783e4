package tp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// Stream-ordered steps, the op's own weight and the device-side slot
// rotation on the fake GPU (upproj_cuda_test.go), whose kernels refuse a
// launch without a rotation and pick the slot from the counter when they
// run.

// weightSteps is a group's steps that share one weight (given once with
// SetWeight): fresh latent and shared rows per step, and the float64
// yardstick of the whole block.
type weightSteps struct {
	hidden, latent int
	weight         []kernel.BF16 // the full [hidden, latent]
	steps          []upStepData  // weight field unset
}

func newWeightSteps(t *testing.T, seed uint64, hidden, latent int, ms []int) weightSteps {
	t.Helper()
	rng := kernel.NewRand(seed)
	ws := weightSteps{hidden: hidden, latent: latent, weight: make([]kernel.BF16, hidden*latent)}
	kernel.FillRandom(rng, ws.weight, 1/float32(latent))
	for _, m := range ms {
		d := upStepData{m: m, latent: make([]kernel.BF16, m*latent), shared: make([]kernel.BF16, m*hidden)}
		kernel.FillRandom(rng, d.latent, 1)
		kernel.FillRandom(rng, d.shared, 0.5)
		want, err := kernel.Expect(kernel.Shape{M: m, Hidden: hidden, Latent: latent, TP: 1}, d.latent, ws.weight, d.shared, hidden)
		if err != nil {
			t.Fatal(err)
		}
		d.want = want
		ws.steps = append(ws.steps, d)
	}
	return ws
}

// shard is rank r's rows of the weight in a group of n.
func (ws weightSteps) shard(r, n int) []kernel.BF16 {
	s := ws.hidden / n * ws.latent
	return ws.weight[r*s : (r+1)*s]
}

// fakeParts are an op's fake engine, driver and kernels.
func fakeParts(up *UpProjection) (*cudaEngine, *fakeDrv, *fakeKernels) {
	e := up.eng.(*cudaEngine)
	return e, e.drv.(*fakeDrv), loadedFake(e.kern)
}

// counterSlot reads word 0 of the op's slot counter.
func counterSlot(gpu *fakeGPU, e *cudaEngine) (uint32, error) {
	b, err := gpu.bytes(e.counter, 8)
	if err != nil {
		return 0, err
	}
	return atomic.LoadUint32(&words(b)[0]), nil
}

// poisoned is a device buffer of n poison elements.
func poisoned(t testing.TB, gpu *fakeGPU, n int) DevicePtr {
	v := make([]kernel.BF16, n)
	for i := range v {
		v[i] = poison
	}
	return devBuf(t, gpu, v)
}

// TestCUDAEngineFakeEnqueue: steps queued with Enqueue on a stream of the
// caller's run there, every launch with the slot rotation, and nothing
// waits until Synchronize; the blocks match the float64 reference and each
// other, computed from the op's own weight (SetWeight, row-major, packed
// by the op where the kernels prefer that).
func TestCUDAEngineFakeEnqueue(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	tests := []struct {
		desc               string
		tp, hidden, latent int
		maxM, slots        int
		ms                 []int
		kind               mailbox.Kind
	}{
		{desc: "one rank", tp: 1, hidden: 64, latent: 40, maxM: 3, ms: []int{1, 3, 2, 3, 3}},
		{desc: "two ranks, two slots, every M", tp: 2, hidden: 256, latent: 96, maxM: 8, slots: 2, ms: []int{8, 1, 2, 3, 4, 5, 6, 7, 8}},
		{desc: "three ranks", tp: 3, hidden: 144, latent: 64, maxM: 4, ms: []int{4, 2, 4, 1, 3, 4, 4}},
		{desc: "three ranks, multicast", tp: 3, hidden: 96, latent: 32, maxM: 2, ms: []int{2, 1, 2, 2}, kind: mailbox.KindMulticast},
	}
	for i, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			ws := newWeightSteps(t, seed+uint64(i), tc.hidden, tc.latent, tc.ms)
			shard := tc.hidden / tc.tp
			gpu := newFakeGPU()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got := make([][][]kernel.BF16, tc.tp)
			kind, deps := mailbox.KindUnicast, fakeDeps()
			if tc.kind == mailbox.KindMulticast {
				kind, deps = tc.kind, fakeMulticastDeps()
			}
			errs := onUpRanks(tc.tp, func(r int, ex mailbox.Exchanger) (err error) {
				up, err := newFakeUpKind(ctx, ex, gpu, tc.hidden, tc.latent, tc.maxM, tc.slots, 10*time.Second, kind, deps)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, up.Close()) }()
				e, d, k := fakeParts(up)
				if err := up.SetWeight(ctx, ws.shard(r, tc.tp)); err != nil {
					return err
				}
				if e.weightPacked != kernel.PreferPacked(shard, tc.latent) {
					return fmt.Errorf("the op keeps its weight packed=%v, the kernels prefer %v", e.weightPacked, !e.weightPacked)
				}
				cs, err := d.StreamCreate(cuda.StreamNonBlocking)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, d.StreamDestroy(cs)) }()
				outs := make([]DevicePtr, len(ws.steps))
				ins := make([]DeviceInputs, len(ws.steps))
				for i, st := range ws.steps {
					outs[i] = poisoned(t, gpu, tc.maxM*tc.hidden)
					ins[i] = DeviceInputs{M: st.m, Latent: devBuf(t, gpu, st.latent),
						Shared: devBuf(t, gpu, st.shared) + DevicePtr(2*r*shard), SharedStride: tc.hidden}
				}
				syncs := d.syncs.Load()
				for i := range ws.steps {
					if err := up.Enqueue(ins[i], outs[i], Stream(cs)); err != nil {
						return fmt.Errorf("enqueue %d: %w", i, err)
					}
				}
				if n := d.syncs.Load() - syncs; n != 0 {
					return fmt.Errorf("%d synchronizations while enqueuing", n)
				}
				if err := up.Synchronize(ctx, Stream(cs)); err != nil {
					return err
				}
				if err := up.Err(); err != nil {
					return fmt.Errorf("Err after a good Synchronize: %w", err)
				}
				if on := k.launchedOn(); len(on) != len(ws.steps) || slices.ContainsFunc(on, func(s cuda.Stream) bool { return s != cs }) {
					return fmt.Errorf("skinny launches on streams %v, want %d on the caller's %v", on, len(ws.steps), cs)
				}
				slot, err := counterSlot(gpu, e)
				if err != nil {
					return err
				}
				if want := len(ws.steps) % e.layout.Slots; int(slot) != want {
					return fmt.Errorf("slot counter %d after %d steps with %d slots, want %d", slot, len(ws.steps), e.layout.Slots, want)
				}
				if up.Steps() != uint64(len(ws.steps)) {
					return fmt.Errorf("Steps() = %d after %d enqueued steps", up.Steps(), len(ws.steps))
				}
				for i, o := range outs {
					b, err := gpu.at(o, 2*tc.maxM*tc.hidden)
					if err != nil {
						return err
					}
					if err := keepBlock(i, ws.steps[i].m, tc.hidden, slices.Clone(bf16s(b)), &got[r]); err != nil {
						return err
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			checkBlocks(t, ws.steps, got, tc.hidden)
			checkNoLeaks(t, gpu)
		})
	}
}

// TestCUDAEngineFakeOneStepGraph: a graph of one step replays any number
// of times, whatever the slot count: captured with Capture, and captured
// by the caller around Enqueue on its own stream. Between replays the
// inputs are rewritten in place, so every replay must compute anew from
// the right slot.
func TestCUDAEngineFakeOneStepGraph(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const replays = 7 // no multiple of the slot counts
	for i, tc := range []struct {
		desc               string
		tp, hidden, latent int
		slots, m           int
	}{
		{desc: "one rank, three slots", tp: 1, hidden: 64, latent: 32, slots: 3, m: 2},
		{desc: "two ranks, two slots", tp: 2, hidden: 128, latent: 48, slots: 2, m: 4},
		{desc: "three ranks, three slots", tp: 3, hidden: 96, latent: 32, slots: 3, m: 3},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			ms := make([]int, 2*replays)
			for j := range ms {
				ms[j] = tc.m
			}
			ws := newWeightSteps(t, seed+uint64(i), tc.hidden, tc.latent, ms)
			shard := tc.hidden / tc.tp
			gpu := newFakeGPU()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			got := make([][][]kernel.BF16, tc.tp)
			errs := onUpRanks(tc.tp, func(r int, ex mailbox.Exchanger) (err error) {
				up, err := newFakeUp(ctx, ex, gpu, tc.hidden, tc.latent, tc.m, tc.slots, 10*time.Second)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, up.Close()) }()
				_, d, _ := fakeParts(up)
				if err := up.SetWeight(ctx, ws.shard(r, tc.tp)); err != nil {
					return err
				}
				lat := devBuf(t, gpu, make([]kernel.BF16, tc.m*tc.latent))
				sh := devBuf(t, gpu, make([]kernel.BF16, tc.m*tc.hidden))
				out := poisoned(t, gpu, tc.m*tc.hidden)
				st := DeviceStep{Out: out, In: DeviceInputs{M: tc.m, Latent: lat, Shared: sh + DevicePtr(2*r*shard), SharedStride: tc.hidden}}
				// step j's inputs into the baked buffers, and poison.
				load := func(j int) error {
					for _, c := range []struct {
						p DevicePtr
						v []kernel.BF16
					}{{lat, ws.steps[j].latent}, {sh, ws.steps[j].shared}} {
						b, err := gpu.at(c.p, 2*len(c.v))
						if err != nil {
							return err
						}
						copy(bf16s(b), c.v)
					}
					b, err := gpu.at(out, 2*tc.m*tc.hidden)
					if err != nil {
						return err
					}
					for k := range bf16s(b) {
						bf16s(b)[k] = poison
					}
					return nil
				}
				keep := func() error {
					b, err := gpu.at(out, 2*tc.m*tc.hidden)
					if err == nil {
						got[r] = append(got[r], slices.Clone(bf16s(b)))
					}
					return err
				}
				g, err := up.Capture(ctx, []DeviceStep{st})
				if err != nil {
					return fmt.Errorf("capture of one step: %w", err)
				}
				defer func() { err = errors.Join(err, g.Close()) }()
				for j := range replays {
					if err := load(j); err != nil {
						return err
					}
					if err := g.Replay(ctx, 1); err != nil {
						return fmt.Errorf("replay %d: %w", j, err)
					}
					if err := keep(); err != nil {
						return err
					}
				}
				// The caller's own capture of Enqueue on its stream.
				cs, err := d.StreamCreate(cuda.StreamNonBlocking)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, d.StreamDestroy(cs)) }()
				if err := d.StreamBeginCapture(cs, cuda.CaptureModeThreadLocal); err != nil {
					return err
				}
				err = up.Enqueue(st.In, st.Out, Stream(cs))
				graph, cerr := d.StreamEndCapture(cs)
				if err := errors.Join(err, cerr); err != nil {
					return fmt.Errorf("capturing Enqueue: %w", err)
				}
				exec, err := d.GraphInstantiate(graph, 0)
				if err != nil {
					return err
				}
				defer func() { err = errors.Join(err, d.GraphExecDestroy(exec), d.GraphDestroy(graph)) }()
				if err := up.Synchronize(ctx, Stream(cs)); err != nil {
					return fmt.Errorf("synchronize after the capture (nothing ran): %w", err)
				}
				for j := replays; j < 2*replays; j++ {
					if err := load(j); err != nil {
						return err
					}
					if err := d.GraphLaunch(exec, cs); err != nil {
						return err
					}
					if err := up.Synchronize(ctx, Stream(cs)); err != nil {
						return fmt.Errorf("replay %d of the caller's graph: %w", j-replays, err)
					}
					if err := keep(); err != nil {
						return err
					}
				}
				return nil
			})
			if err := errors.Join(errs...); err != nil {
				t.Fatal(err)
			}
			checkBlocks(t, ws.steps, got, tc.hidden)
			checkNoLeaks(t, gpu)
		})
	}
}

// TestCUDAEngineFakeEnqueueStalledPeer: a peer that stalls without dying
// (rank 2 never queues its steps) fails the others' queued steps about one
// deadline after they began, not one deadline per queued step: the rank
// whose receive timed out names the stalled rank (Err, Synchronize) and
// fails the job, whose failure ends every rank's queued receives and
// reaches the stalled rank, whose Err and Enqueue then report it.
func TestCUDAEngineFakeEnqueueStalledPeer(t *testing.T) {
	const n, hidden, latent, maxM, stalled, queued = 3, 48, 16, 2, 2, 4
	const deadline = 150 * time.Millisecond
	ws := newWeightSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{maxM})
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tmp, job := shortTempDir(t), newJobID()
	var done sync.WaitGroup
	done.Add(n - 1)
	var timeouts atomic.Int32
	errs := runRanks(t, n, func(r int) map[string]string { return torchrunEnv(tmp, job, r, n) }, []JoinOption{WithTimeout(10 * time.Second)},
		func(r int, g *Group) (err error) {
			if r != stalled {
				defer done.Done()
			}
			up, err := newFakeUp(ctx, g, gpu, hidden, latent, maxM, 2, deadline)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, up.Close()) }()
			if err := up.SetWeight(ctx, ws.shard(r, n)); err != nil {
				return err
			}
			d := ws.steps[0]
			in := DeviceInputs{M: d.m, Latent: devBuf(t, gpu, d.latent), Shared: devBuf(t, gpu, d.shared[r*hidden/n:]), SharedStride: hidden}
			out := poisoned(t, gpu, maxM*hidden)
			if err := g.Barrier(ctx); err != nil {
				return err
			}
			if r == stalled {
				done.Wait()
				if err := up.Err(); !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), fmt.Sprintf("no slice from rank %d within", stalled)) {
					return fmt.Errorf("the stalled rank's Err after the others gave up: %v, want the job's failure naming it", err)
				}
				if err := up.Enqueue(in, out, 0); !errors.Is(err, ErrAborted) {
					return fmt.Errorf("the stalled rank's Enqueue after the others gave up: %v, want the job's failure", err)
				}
				return nil
			}
			t0 := time.Now()
			for range queued {
				if err := up.Enqueue(in, out, 0); err != nil {
					return err
				}
			}
			if err := up.Err(); err != nil {
				return fmt.Errorf("Err right after queuing: %w", err)
			}
			err = up.Synchronize(ctx, 0)
			took := time.Since(t0)
			t.Logf("rank %d: %d queued steps ended after %v: %v", r, queued, took.Round(time.Millisecond), err)
			timedOut, err := checkStalledReplay(err, took, stalled, queued, deadline)
			if timedOut {
				timeouts.Add(1)
			}
			if err != nil {
				return err
			}
			if eerr := up.Err(); eerr == nil {
				return errors.New("Err is nil after a failed Synchronize")
			}
			if err := up.Enqueue(in, out, 0); err == nil || !(errors.Is(err, ErrTimeout) || errors.Is(err, ErrAborted)) {
				return fmt.Errorf("Enqueue after the failure: %v, want the failure", err)
			}
			return nil
		})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	if timeouts.Load() == 0 {
		t.Error("no rank saw the timeout itself")
	}
	checkNoLeaks(t, gpu)
}

// TestCUDAEngineFakeEnqueueJobFails: steps queued on rank 0 wait for rank
// 1, which aborts the job instead of stepping: the queued receives end at
// once (the job watch sets the abort word), well before their deadline,
// and Err and Synchronize report the job's failure naming rank 1.
func TestCUDAEngineFakeEnqueueJobFails(t *testing.T) {
	const n, hidden, latent, maxM, queued = 2, 48, 16, 2, 3
	const deadline = 20 * time.Second
	ws := newWeightSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{maxM})
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tmp, job := shortTempDir(t), newJobID()
	errs := runRanks(t, n, func(r int) map[string]string { return srunEnv(tmp, job, r, n) }, []JoinOption{WithTimeout(10 * time.Second)},
		func(r int, g *Group) (err error) {
			up, err := newFakeUp(ctx, g, gpu, hidden, latent, maxM, 3, deadline)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, up.Close()) }()
			if err := up.SetWeight(ctx, ws.shard(r, n)); err != nil {
				return err
			}
			if err := g.Barrier(ctx); err != nil {
				return err
			}
			if r == 1 {
				time.Sleep(100 * time.Millisecond) // rank 0's steps wait meanwhile
				return g.Abort("test: rank 1 gives up")
			}
			d := ws.steps[0]
			in := DeviceInputs{M: d.m, Latent: devBuf(t, gpu, d.latent), Shared: devBuf(t, gpu, d.shared), SharedStride: hidden}
			start := time.Now()
			for range queued {
				if err := up.Enqueue(in, poisoned(t, gpu, maxM*hidden), 0); err != nil {
					return err
				}
			}
			var eerr error
			for eerr == nil && time.Since(start) < 5*time.Second {
				time.Sleep(time.Millisecond)
				eerr = up.Err()
			}
			var re *RankError
			if !errors.As(eerr, &re) || re.Rank != 1 || !strings.Contains(eerr.Error(), "rank 1 gives up") {
				return fmt.Errorf("Err: %v, want the job's failure naming rank 1", eerr)
			}
			serr := up.Synchronize(ctx, 0)
			took := time.Since(start)
			if !errors.As(serr, &re) || re.Rank != 1 {
				return fmt.Errorf("Synchronize: %v, want the job's failure naming rank 1", serr)
			}
			if took > 5*time.Second {
				return fmt.Errorf("the queued steps ended after %v; the job failed after about 100ms", took)
			}
			t.Logf("rank 0's %d queued steps ended %v after they were queued: %v", queued, took.Round(time.Millisecond), serr)
			return nil
		})
	if errs[1] != nil {
		t.Errorf("rank 1: %v", errs[1])
	}
	if errs[0] != nil {
		t.Errorf("rank 0: %v", errs[0])
	}
	checkNoLeaks(t, gpu)
}

// TestCUDAEngineFakeCloseWithQueuedSteps: Close while enqueued steps wait
// for a peer that never comes ends them (the abort) and returns well
// before their deadline, leaving nothing allocated.
func TestCUDAEngineFakeCloseWithQueuedSteps(t *testing.T) {
	const hidden, latent, maxM = 32, 16, 1
	const deadline = 20 * time.Second
	ws := newWeightSteps(t, uint64(time.Now().UnixNano()), hidden, latent, []int{maxM})
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := onUpRanks(2, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := newFakeUp(ctx, ex, gpu, hidden, latent, maxM, 2, deadline)
		if err != nil {
			return err
		}
		if r == 1 {
			return up.Close() // never steps
		}
		if err := up.SetWeight(ctx, ws.shard(r, 2)); err != nil {
			return errors.Join(err, up.Close())
		}
		d := ws.steps[0]
		in := DeviceInputs{M: d.m, Latent: devBuf(t, gpu, d.latent), Shared: devBuf(t, gpu, d.shared), SharedStride: hidden}
		for range 3 {
			if err := up.Enqueue(in, poisoned(t, gpu, maxM*hidden), 0); err != nil {
				return errors.Join(err, up.Close())
			}
		}
		time.Sleep(20 * time.Millisecond) // the first receive waits
		start := time.Now()
		if err := up.Close(); err != nil {
			return err
		}
		if took := time.Since(start); took > 5*time.Second {
			return fmt.Errorf("Close with queued steps took %v", took)
		}
		if err := up.Enqueue(in, poisoned(t, gpu, maxM*hidden), 0); !errors.Is(err, ErrClosed) {
			return fmt.Errorf("Enqueue after Close: %v, want ErrClosed", err)
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	checkNoLeaks(t, gpu)
}

// TestEnqueueRefusesBadCalls: what Enqueue refuses before it queues
// anything, on every rank alone (no step of the group runs).
func TestEnqueueRefusesBadCalls(t *testing.T) {
	const hidden, latent, maxM = 64, 16, 2
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := onUpRanks(1, func(_ int, ex mailbox.Exchanger) (err error) {
		up, err := newFakeUp(ctx, ex, gpu, hidden, latent, maxM, 0, time.Second)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		_, _, k := fakeParts(up)
		lat, sh, out := devBuf(t, gpu, make([]kernel.BF16, maxM*latent)), devBuf(t, gpu, make([]kernel.BF16, maxM*hidden)), poisoned(t, gpu, maxM*hidden)
		good := DeviceInputs{M: 1, Latent: lat, Shared: sh, SharedStride: hidden}
		bad := []struct {
			desc string
			in   DeviceInputs
			out  DevicePtr
			want error
		}{
			{"no weight yet", good, out, ErrNoWeight},
			{"M above maxM", DeviceInputs{M: 3, Latent: lat, Weight: sh, Shared: sh, SharedStride: hidden}, out, ErrShape},
			{"unaligned latent", DeviceInputs{M: 1, Latent: lat + 2, Weight: sh, Shared: sh, SharedStride: hidden}, out, ErrShape},
			{"no output", DeviceInputs{M: 1, Latent: lat, Weight: sh, Shared: sh, SharedStride: hidden}, 0, ErrShape},
		}
		for _, tc := range bad {
			if err := up.Enqueue(tc.in, tc.out, 0); !errors.Is(err, tc.want) {
				return fmt.Errorf("%s: %v, want %v", tc.desc, err, tc.want)
			}
		}
		if err := up.SetWeight(ctx, make([]kernel.BF16, hidden*latent-8)); !errors.Is(err, ErrShape) {
			return fmt.Errorf("SetWeight of a short weight: %v, want ErrShape", err)
		}
		if err := up.SetWeightDevice(ctx, 0); !errors.Is(err, ErrShape) {
			return fmt.Errorf("SetWeightDevice(0): %v, want ErrShape", err)
		}
		if n := len(k.launchedOn()); n != 0 {
			return fmt.Errorf("%d launches after refused calls", n)
		}
		if up.Steps() != 0 || up.Err() != nil {
			return fmt.Errorf("after refused calls: Steps() = %d, Err() = %v", up.Steps(), up.Err())
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

// fakeCtxDriver records the current context of one thread.
type fakeCtxDriver struct {
	current cuda.Context
	sets    int
}

func (d *fakeCtxDriver) CtxGetCurrent() (cuda.Context, error) { return d.current, nil }
func (d *fakeCtxDriver) CtxSetCurrent(c cuda.Context) error {
	d.current = c
	d.sets++
	return nil
}

// TestBindRestoring: a binding leaves the caller's current context as it
// found it, and costs no set when that context is the one wanted.
func TestBindRestoring(t *testing.T) {
	d := &fakeCtxDriver{current: 7}
	unbind, err := bindRestoring(d, 9)
	if err != nil {
		t.Fatal(err)
	}
	if d.current != 9 {
		t.Fatalf("bound: current %d, want 9", d.current)
	}
	inner, err := bindRestoring(d, 9)
	if err != nil {
		t.Fatal(err)
	}
	inner()
	if d.current != 9 || d.sets != 1 {
		t.Errorf("nested binding of the same context: current %d after %d sets, want 9 after 1", d.current, d.sets)
	}
	unbind()
	if d.current != 7 {
		t.Errorf("unbound: current %d, want the caller's 7", d.current)
	}
	d = &fakeCtxDriver{}
	unbind, err = bindRestoring(d, 3)
	if err != nil {
		t.Fatal(err)
	}
	unbind()
	if d.current != 0 {
		t.Errorf("a thread with no context got %d back", d.current)
	}
}

// TestCUDAEngineFakeMixedStepKinds: the ranks of a group may run the same
// steps in different ways (here rank 0 enqueues them, rank 1 steps with
// host operands, rank 2 with device operands), with step checks on, which
// count every one of them as a step.
func TestCUDAEngineFakeMixedStepKinds(t *testing.T) {
	const n, hidden, latent, maxM = 3, 96, 32, 4
	ms := []int{4, 1, 3, 2, 4}
	ws := newWeightSteps(t, uint64(time.Now().UnixNano()), hidden, latent, ms)
	shard := hidden / n
	gpu := newFakeGPU()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := make([][][]kernel.BF16, n)
	errs := onUpRanks(n, func(r int, ex mailbox.Exchanger) (err error) {
		up, err := newFakeUp(ctx, ex, gpu, hidden, latent, maxM, 0, 10*time.Second)
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		up.checks, up.checkWait, up.opID = ex, 10*time.Second, nextOpID(ex)
		if err := up.SetWeight(ctx, ws.shard(r, n)); err != nil {
			return err
		}
		for i, d := range ws.steps {
			out := poisonBlock(maxM * hidden)
			switch r {
			case 0, 2:
				o := devBuf(t, gpu, out)
				in := DeviceInputs{M: d.m, Latent: devBuf(t, gpu, d.latent), Shared: devBuf(t, gpu, d.shared[r*shard:]), SharedStride: hidden}
				if r == 0 {
					err = up.Enqueue(in, o, 0)
					if err == nil {
						err = up.Synchronize(ctx, 0)
					}
				} else {
					err = up.StepDevice(ctx, in, o)
				}
				if err != nil {
					return fmt.Errorf("step %d: %w", i, err)
				}
				b, err := gpu.at(o, 2*len(out))
				if err != nil {
					return err
				}
				copy(out, bf16s(b))
			default:
				in := UpInputs{M: d.m, Latent: d.latent, Shared: d.shared[r*shard:], SharedStride: hidden}
				if err := up.Step(ctx, in, out); err != nil {
					return fmt.Errorf("step %d: %w", i, err)
				}
			}
			if err := keepBlock(i, d.m, hidden, out, &got[r]); err != nil {
				return err
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	checkBlocks(t, ws.steps, got, hidden)
	checkNoLeaks(t, gpu)
}
