// Command rank is a whole tensor-parallel rank program around tprun's
// fused up-projection, for copying: it joins the job, makes the op, gives
// it this rank's rows of the weight once, runs steps (on the GPU where
// every rank has one, else on the host backend), checks every block
// against a float64 reference computed here, and closes.
//
// Run it under the launcher, one process per rank:
//
//	go build -o rank ./examples/go/rank
//	tprun --tp 2 -- ./rank --hidden 1024 --latent 512 --m 4 --steps 20
//	tprun --tp 3 -- ./rank --m 64  # hidden / tp must be a multiple of 8
//
// It joins under torchrun, srun or mpirun as well (one node). Every rank
// draws the same inputs from --seed, so that each can check the whole
// block, every rank's columns.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"os/signal"
	"syscall"

	"github.com/tprun/tprun/tp"
)

func main() {
	hidden := flag.Int("hidden", 1536, "hidden dimension, split across the ranks: hidden / tp a multiple of 8 (the default suits tp 1, 2, 3, 4, 6 and 8)")
	latent := flag.Int("latent", 512, "latent dimension")
	maxM := flag.Int("m", 4, "rows per step, 1..128")
	steps := flag.Int("steps", 20, "steps to run")
	backend := flag.String("backend", "auto", "mailbox backend: auto, unicast, multicast or host")
	seed := flag.Uint64("seed", 1, "seed of the inputs, the same on every rank")
	flag.Parse()

	// tprun stops the ranks with SIGTERM: end the steps and leave cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *hidden, *latent, *maxM, *steps, *backend, *seed); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, hidden, latent, maxM, steps int, backend string, seed uint64) (err error) {
	kind, err := tp.ParseBackend(backend)
	if err != nil {
		return err
	}
	g, err := tp.Join(ctx)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, g.Close()) }()
	rank, size := g.Rank(), g.Size()

	// A collective: every rank passes the same shape. Shape errors match
	// tp.ErrShape and name the rule (hidden divisible by the ranks, the
	// shard a multiple of 8, ...).
	up, err := g.NewUpProjection(ctx, hidden, latent, maxM, tp.WithBackend(kind))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, up.Close()) }()
	if rank == 0 {
		fmt.Printf("%d ranks, hidden %d, latent %d, M up to %d: backend %s (%s)\n",
			size, hidden, latent, maxM, up.Backend(), up.BackendReason())
	}

	// The full weight is drawn the same on every rank; each gives the op
	// its own rows, row-major, once.
	shard := hidden / size
	rng := rand.New(rand.NewPCG(seed, 1))
	weight := random(rng, hidden*latent, 1/math.Sqrt(float64(latent)))
	if err := up.SetWeight(ctx, weight[rank*shard*latent:(rank+1)*shard*latent]); err != nil {
		return err
	}

	var dev *deviceBuffers
	if up.Device() >= 0 {
		if dev, err = newDeviceBuffers(up.Device(), maxM, hidden, latent); err != nil {
			return err
		}
		defer func() { err = errors.Join(err, dev.free()) }()
	}
	out := make([]tp.BF16, maxM*hidden)
	wrong := 0
	for t := range steps {
		m := 1 + t%maxM
		latentIn := random(rng, m*latent, 1)
		shared := random(rng, m*hidden, 1) // the full [m, hidden] residual
		for i := range out {
			out[i] = tp.BF16(0x7FC1) // a NaN: what the step fails to write stays wrong
		}
		if dev != nil {
			err = dev.step(ctx, up, m, rank*shard, latentIn, shared, out)
		} else {
			in := tp.UpInputs{M: m, Latent: latentIn, Shared: shared[rank*shard:], SharedStride: hidden}
			err = up.Step(ctx, in, out)
		}
		if err != nil {
			// A peer that died or stalled: a *tp.RankError (the job
			// failed) or a *tp.TimeoutError, naming the ranks.
			return fmt.Errorf("rank %d, step %d: %w", rank, t, err)
		}
		wrong += check(out[:m*hidden], latentIn, weight, shared, m, hidden, latent)
	}
	if wrong > 0 {
		return fmt.Errorf("rank %d: %d wrong values in %d steps", rank, wrong, steps)
	}
	fmt.Printf("rank %d: %d steps, every block within tolerance of the float64 reference\n", rank, steps)
	return nil
}

// deviceBuffers are the step's operands in device memory. A framework's
// tensors (a data_ptr() on the op's device) would do as well.
type deviceBuffers struct {
	device              int
	latent, shared, out tp.DevicePtr
}

func newDeviceBuffers(device, maxM, hidden, latent int) (*deviceBuffers, error) {
	d := &deviceBuffers{device: device}
	for _, b := range []struct {
		p     *tp.DevicePtr
		elems int
	}{{&d.latent, maxM * latent}, {&d.shared, maxM * hidden}, {&d.out, maxM * hidden}} {
		p, err := tp.DeviceAlloc(device, 2*b.elems)
		if err != nil {
			return nil, errors.Join(err, d.free())
		}
		*b.p = p
	}
	return d, nil
}

// step copies the operands to the device, queues the step on the legacy
// default stream (stream 0) and waits for it, and copies the block back.
func (d *deviceBuffers) step(ctx context.Context, up *tp.UpProjection, m, col int, latent, shared, out []tp.BF16) error {
	for _, c := range []struct {
		p tp.DevicePtr
		v []tp.BF16
	}{{d.latent, latent}, {d.shared, shared}, {d.out, out}} {
		if err := tp.CopyToDevice(d.device, c.p, c.v); err != nil {
			return err
		}
	}
	hidden := len(shared) / m
	in := tp.DeviceInputs{M: m, Latent: d.latent, Shared: d.shared + tp.DevicePtr(2*col), SharedStride: hidden}
	if err := up.Enqueue(in, d.out, 0); err != nil {
		return err
	}
	if err := up.Synchronize(ctx, 0); err != nil {
		return err
	}
	return tp.CopyFromDevice(d.device, out, d.out)
}

func (d *deviceBuffers) free() error {
	var errs []error
	for _, p := range []tp.DevicePtr{d.latent, d.shared, d.out} {
		if p != 0 {
			errs = append(errs, tp.DeviceFree(d.device, p))
		}
	}
	return errors.Join(errs...)
}

// random is n bf16 values scale*N(0, 1), none zero.
func random(rng *rand.Rand, n int, scale float64) []tp.BF16 {
	v := make([]tp.BF16, n)
	for i := range v {
		x := rng.NormFloat64() * scale
		if x == 0 {
			x = scale
		}
		v[i] = tp.BF16FromFloat64(x)
	}
	return v
}

// check counts the values of the [m, hidden] block that are off the
// float64 reference by more than the op's two bf16 roundings allow (with
// room to spare: a wrong weight row, column or slot is off by about the
// value itself), and any negative zero, which the op never stores.
func check(out, latent, weight, shared []tp.BF16, m, hidden, k int) int {
	wrong := 0
	for r := range m {
		for n := range hidden {
			s := 0.0
			for i := range k {
				s += latent[r*k+i].Float64() * weight[n*k+i].Float64()
			}
			ref := s + shared[r*hidden+n].Float64()
			got := out[r*hidden+n]
			tol := math.Ldexp(math.Abs(s)+math.Abs(ref), -6) + 1e-6
			if got == tp.BF16(0x8000) || got.IsNaN() || math.Abs(got.Float64()-ref) > tol {
				wrong++
			}
		}
	}
	return wrong
}
