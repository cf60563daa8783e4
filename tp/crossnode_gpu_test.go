package tp

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/mailbox"
)

// TestGPUAcrossNodesRefused runs what a user runs across nodes, on one
// GPU machine: two rank goroutines that join over TCP on the loopback as
// if on two nodes (TPRUN_FORCE_NODE), both on one device
// (TPRUN_TEST_DEVICE, default 0), make the op with --mailbox auto. The
// mailbox must use fabric handles; where the node has no IMEX channel the
// op is refused before any step, and the test logs the error each rank's
// program gets. Where fabric handles work, it says so and passes. It
// skips without a GPU. The safety rule is set, so no multicast object is
// ever made.
func TestGPUAcrossNodesRefused(t *testing.T) {
	drv, err := openGPU()
	switch {
	case errors.Is(err, cuda.ErrNoDriver):
		t.Skipf("no CUDA driver (libcuda.so.1 not loadable): %v", err)
	case cuda.IsNoDevice(err) || errors.Is(err, ErrNoGPU):
		t.Skipf("CUDA driver present but no device: %v", err)
	case err != nil:
		t.Fatalf("opening the GPU: %v", err)
	}
	if err := drv.Close(); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TPRUN_MULTICAST", "0")
	ordinal := "0"
	if s := os.Getenv("TPRUN_TEST_DEVICE"); s != "" {
		ordinal = s
	}
	ln, secret := loopback(t), randomSecret(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errs := runRanks(t, 2, func(r int) map[string]string {
		return withEnv(crossEnv(ln.Addr().String(), secret, r, 2, 1), "TPRUN_DEVICES", ordinal)
	}, []JoinOption{withListener(ln)}, func(r int, g *Group) error {
		up, err := NewUpProjection(ctx, g, 1024, 512, 4)
		if err == nil {
			t.Logf("rank %d: fabric handles work here: backend %s (%s)", r, up.Backend(), up.BackendReason())
			return up.Close()
		}
		t.Logf("rank %d's program gets: %v", r, err)
		if !errors.Is(err, mailbox.ErrFabric) && !errors.Is(err, mailbox.ErrPeer) {
			t.Errorf("rank %d: neither the fabric refusal nor a peer's report of it", r)
		}
		if cuda.IsNotPermitted(err) && !strings.Contains(err.Error(), "IMEX channel") {
			t.Errorf("rank %d: a NOT_PERMITTED refusal that does not name the IMEX channel", r)
		}
		return nil
	})
	noErrors(t, errs)
}
