package tp_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tprun/tprun/tp"
)

// A rank program: join the job, set up the fused up-projection, give it
// this rank's weight once, run a step and read the whole output block.
// Started by `tprun --tp N -- ./rank`, Join reads the launcher's
// environment; here a torchrun-style environment of one rank stands in for
// it, and the op is asked for the host backend (the CPU and a shared-memory
// mailbox), so the example runs anywhere. Without WithBackend, the op takes
// a GPU where every rank has one.
func Example() {
	tmp, _ := os.MkdirTemp("", "tp-example")
	defer os.RemoveAll(tmp)
	env := map[string]string{"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1",
		"TORCHELASTIC_RUN_ID": "example", "TMPDIR": tmp}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	g, err := tp.Join(ctx, tp.WithEnv(env)) // tp.Join(ctx) under tprun
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()

	// Every rank passes the same hidden, latent and maxM; each owns
	// hidden/Size() rows of the weight.
	const hidden, latent, maxM = 16, 8, 2
	up, err := g.NewUpProjection(ctx, hidden, latent, maxM, tp.WithBackend(tp.BackendHost))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer up.Close()
	shard := hidden / g.Size()

	// This rank's rows of the weight, row-major, given once: row n picks
	// latent column n mod 8.
	w := make([]tp.BF16, shard*latent)
	for n := range shard {
		w[n*latent+n%latent] = tp.BF16FromFloat32(1)
	}
	if err := up.SetWeight(ctx, w); err != nil {
		fmt.Println(err)
		return
	}

	// One step of M = 2 rows: out = latent · weightᵀ + shared, in bf16.
	const m = 2
	in := tp.UpInputs{M: m, Latent: make([]tp.BF16, m*latent), Shared: make([]tp.BF16, m*hidden), SharedStride: hidden}
	for i := range in.Latent {
		in.Latent[i] = tp.BF16FromFloat32(float32(i%latent) / 4)
	}
	for i := range in.Shared {
		in.Shared[i] = tp.BF16FromFloat32(float32(i / hidden)) // row r adds r
	}
	in.Shared = in.Shared[g.Rank()*shard:] // this rank's columns of the residual
	out := make([]tp.BF16, m*hidden)
	if err := up.Step(ctx, in, out); err != nil {
		var re *tp.RankError
		if errors.As(err, &re) {
			fmt.Printf("rank %d failed: %s\n", re.Rank, re.Reason)
		}
		fmt.Println(err)
		return
	}
	for r := range m {
		fmt.Print("row", r, ":")
		for _, v := range out[r*hidden : r*hidden+6] {
			fmt.Print(" ", tp.BF16ToFloat32(v))
		}
		fmt.Println(" ...")
	}

	// A step with more rows than maxM is refused before anything is sent.
	in.M = 3
	err = up.Step(ctx, in, out)
	fmt.Println(errors.Is(err, tp.ErrShape))
	// Output:
	// row0: 0 0.25 0.5 0.75 1 1.25 ...
	// row1: 1 1.25 1.5 1.75 2 2.25 ...
	// true
}

// Steps queued on a CUDA stream (a cudaStream_t; 0 is the legacy default
// stream) between the caller's own kernels, and synchronized once. The
// pointers here come from DeviceAlloc; a framework's tensors
// (data_ptr()) on the op's device do as well.
func ExampleUpProjection_Enqueue() {
	ctx := context.Background()
	g, err := tp.Join(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()
	const hidden, latent, maxM = 7168, 3584, 8
	up, err := g.NewUpProjection(ctx, hidden, latent, maxM, tp.WithBackend(tp.BackendUnicast))
	if err != nil {
		fmt.Println(err) // errors.Is(err, tp.ErrBackendUnavailable) without a GPU
		return
	}
	defer up.Close()
	shard, dev := hidden/g.Size(), up.Device()
	if err := up.SetWeight(ctx, make([]tp.BF16, shard*latent)); err != nil { // this rank's rows
		fmt.Println(err)
		return
	}
	var bufs []tp.DevicePtr // latent, shared, out
	defer func() {
		for _, p := range bufs {
			if err := tp.DeviceFree(dev, p); err != nil {
				fmt.Println(err)
			}
		}
	}()
	for _, elems := range []int{maxM * latent, maxM * hidden, maxM * hidden} {
		p, err := tp.DeviceAlloc(dev, 2*elems)
		if err != nil {
			fmt.Println(err)
			return
		}
		bufs = append(bufs, p)
	}
	lat, shared, out := bufs[0], bufs[1], bufs[2]
	in := tp.DeviceInputs{M: maxM, Latent: lat, Shared: shared + tp.DevicePtr(2*g.Rank()*shard), SharedStride: hidden}
	var stream tp.Stream // the caller's stream
	for range 10 {
		// ... the caller's kernels that write lat and shared ...
		if err := up.Enqueue(in, out, stream); err != nil {
			fmt.Println(err)
			return
		}
		// ... the caller's kernels that read out ...
	}
	if err := up.Synchronize(ctx, stream); err != nil {
		var te *tp.TimeoutError
		if errors.As(err, &te) {
			fmt.Println("ranks", te.Missing, "did not send their slices")
		}
		fmt.Println(err)
		return
	}
	block := make([]tp.BF16, maxM*hidden)
	if err := tp.CopyFromDevice(dev, block, out); err != nil {
		fmt.Println(err)
	}
}
