package tp

import (
	"context"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
)

// BenchmarkEnqueueHost is the host's share of one Enqueue: the op's checks,
// the launch config, the parameter block and the launch call, on the fake
// GPU's driver, whose launch only records (the real driver's launch adds its
// own). It is what an eager caller pays per step before the GPU does
// anything; under a CUDA graph it is paid once, at capture.
//
//	go test -run '^$' -bench EnqueueHost ./tp
func BenchmarkEnqueueHost(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	gpu := newFakeGPU()
	const hidden, latent, m = 896, 3584, 4
	up, d, err := newLaunchUp(ctx, gpu, hidden, latent, 8)
	if err != nil {
		b.Fatal(err)
	}
	defer up.Close()
	w := make([]kernel.BF16, hidden*latent)
	kernel.FillRandom(kernel.NewRand(1), w, 1/float32(latent))
	if err := up.SetWeight(ctx, w); err != nil {
		b.Fatal(err)
	}
	lat := make([]kernel.BF16, m*latent)
	sh := make([]kernel.BF16, m*hidden)
	in := DeviceInputs{M: m, Latent: devBuf(b, gpu, lat), Shared: devBuf(b, gpu, sh), SharedStride: hidden}
	out := devBuf(b, gpu, make([]kernel.BF16, m*hidden))
	stream, err := d.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		b.Fatal(err)
	}
	if err := d.StreamBeginCapture(stream, cuda.CaptureModeGlobal); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		if err := up.Enqueue(in, out, Stream(stream)); err != nil {
			b.Fatal(err)
		}
	}
}
