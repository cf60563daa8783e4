package mailbox

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/cuda"
)

// TestGPUFabricAcrossNodes sets up the unicast mailbox for two goroutine
// ranks on one device that say they span nodes, so every handle must be a
// FABRIC handle. Where the node has an IMEX channel, it works; where it
// has none (a single machine like the lab's H200), the export is refused
// and the test logs, on every rank, the exact error a job across nodes
// stops with. Any other outcome fails: a fallback to descriptors, an
// error that is not a *FabricError on the rank that met the refusal, or a
// refusal without the administrator's part.
func TestGPUFabricAcrossNodes(t *testing.T) {
	g := openGPU(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	us := make([]*Unicast, 2)
	errs := onRanks(2, func(r int, ex Exchanger) error {
		unbind, err := g.drv.BindContext(g.cctx)
		if err != nil {
			return err
		}
		defer unbind()
		us[r], err = NewUnicast(ctx, crossRank{ex}, g.drv, g.dev, Config{Hidden: 1024, Capacity: 4})
		return err
	})
	if errors.Join(errs...) == nil {
		for r, u := range us {
			if u.HandleType() != cuda.HandleTypeFabric {
				t.Errorf("rank %d: handle type %v across nodes", r, u.HandleType())
			}
			if err := u.Close(); err != nil {
				t.Errorf("rank %d: Close: %v", r, err)
			}
		}
		t.Logf("fabric handles export and import here: a job across nodes can share its mailboxes")
		return
	}
	own := 0
	for r, err := range errs {
		t.Logf("rank %d: %v", r, err)
		if us[r] != nil {
			t.Errorf("rank %d: an error and a mailbox", r)
		}
		var fe *FabricError
		switch {
		case errors.As(err, &fe):
			own++
			if cuda.IsNotPermitted(fe.Err) && !strings.Contains(err.Error(), "/dev/nvidia-caps-imex-channels/channel0") {
				t.Errorf("rank %d: a NOT_PERMITTED refusal that does not name the IMEX channel", r)
			}
		case errors.Is(err, ErrPeer):
		default:
			t.Errorf("rank %d: neither a *FabricError nor a peer's: %v", r, err)
		}
	}
	if own == 0 {
		t.Error("no rank holds the *FabricError")
	}
}
