package tp_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
	"github.com/tprun/tprun/tp"
)

// A rank program: join the job, set up the fused up-projection, run a step
// and read the whole output block. Started by `tprun --tp N -- ./rank`, Join
// reads the launcher's environment; here a torchrun-style environment of
// one rank stands in for it, and the op is asked for the host backend (the
// CPU and a shared-memory mailbox), so the example runs anywhere. Without
// WithBackend, the op takes a GPU where every rank has one.
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
	up, err := g.NewUpProjection(ctx, hidden, latent, maxM, tp.WithBackend(mailbox.KindHost))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer up.Close()
	shard := hidden / g.Size()

	// One step of M = 2 rows: out = latent · weightᵀ + shared, in bf16.
	const m = 2
	in := tp.UpInputs{M: m, Latent: make([]kernel.BF16, m*latent), Weight: make([]kernel.BF16, shard*latent),
		Shared: make([]kernel.BF16, m*hidden), SharedStride: hidden}
	for i := range in.Latent {
		in.Latent[i] = kernel.BF16FromFloat32(float32(i%latent) / 4)
	}
	for n := range shard {
		in.Weight[n*latent+n%latent] = kernel.BF16FromFloat32(1) // row n picks latent column n mod 8
	}
	for i := range in.Shared {
		in.Shared[i] = kernel.BF16FromFloat32(float32(i / hidden)) // row r adds r
	}
	in.Shared = in.Shared[g.Rank()*shard:] // this rank's columns of the residual
	out := make([]kernel.BF16, m*hidden)
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
			fmt.Print(" ", v.Float32())
		}
		fmt.Println(" ...")
	}

	// A step with more rows than maxM is refused before anything is sent.
	in.M = 3
	err = up.Step(ctx, in, out)
	fmt.Println(errors.Is(err, kernel.ErrShape))
	// Output:
	// row0: 0 0.25 0.5 0.75 1 1.25 ...
	// row1: 1 1.25 1.5 1.75 2 2.25 ...
	// true
}
