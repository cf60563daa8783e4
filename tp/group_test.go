package tp

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/internal/hub"
)

// exercise runs every collective once and checks the results. Rank 0
// broadcasts a fresh salt first, so every rank knows what every other
// rank contributes without sharing memory with it.
func exercise(ctx context.Context, g *Group) error {
	if err := g.Barrier(ctx); err != nil {
		return err
	}
	var mine []byte
	if g.Rank() == 0 {
		mine = binary.LittleEndian.AppendUint64(nil, rand.Uint64()|1)
	}
	b, err := g.Broadcast(ctx, 0, mine)
	if err != nil {
		return err
	}
	if len(b) != 8 {
		return fmt.Errorf("Broadcast: got %d bytes, want 8", len(b))
	}
	salt := binary.LittleEndian.Uint64(b)
	content := func(r int) []byte { return fmt.Appendf(nil, "rank %d salt %x", r, salt) }

	all, err := g.AllGather(ctx, content(g.Rank()))
	if err != nil {
		return err
	}
	for r, got := range all {
		if !bytes.Equal(got, content(r)) {
			return fmt.Errorf("AllGather: rank %d's blob is %q, want %q", r, got, content(r))
		}
	}

	// Each rank shares a memfd holding its rank number; every rank reads
	// every peer's value through the descriptors it received.
	fd, err := memfd(content(g.Rank()))
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	fds, err := g.AllGatherFDs(ctx, fd)
	if err != nil {
		return err
	}
	defer closeAll(fds)
	for r, f := range fds {
		got, err := pread(f)
		if err != nil {
			return err
		}
		if !bytes.Equal(got, content(r)) {
			return fmt.Errorf("AllGatherFDs: rank %d's memfd holds %q, want %q", r, got, content(r))
		}
	}

	root := g.Size() - 1
	var shared []int
	if g.Rank() == root {
		for i := range 2 {
			f, err := memfd(fmt.Appendf(nil, "buffer %d salt %x", i, salt))
			if err != nil {
				return err
			}
			defer unix.Close(f)
			shared = append(shared, f)
		}
	}
	got, err := g.BroadcastFDs(ctx, root, shared)
	if err != nil {
		return err
	}
	defer closeAll(got)
	if len(got) != 2 {
		return fmt.Errorf("BroadcastFDs: got %d descriptors, want 2", len(got))
	}
	for i, f := range got {
		b, err := pread(f)
		if err != nil {
			return err
		}
		if want := fmt.Sprintf("buffer %d salt %x", i, salt); string(b) != want {
			return fmt.Errorf("BroadcastFDs: descriptor %d holds %q, want %q", i, b, want)
		}
	}
	return g.Barrier(ctx)
}

func memfd(content []byte) (int, error) {
	fd, err := unix.MemfdCreate("tp-test", unix.MFD_CLOEXEC)
	if err != nil {
		return -1, err
	}
	if _, err := unix.Pwrite(fd, content, 0); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func pread(fd int) ([]byte, error) {
	b := make([]byte, 128)
	n, err := unix.Pread(fd, b, 0)
	if err != nil {
		return nil, err
	}
	return b[:n], nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// TestRankLeavesMidBarrier: a rank that closes while the others wait in a
// barrier makes them fail within a second, naming it; that holds for the
// rank that hosts the hub too.
func TestRankLeavesMidBarrier(t *testing.T) {
	cases := []struct {
		desc   string
		leaver int
		// hubDies: the host's hub vanishes without a goodbye, as when
		// rank 0 is killed.
		hubDies bool
	}{
		{"rank 2 leaves", 2, false},
		{"rank 0 leaves", 0, false},
		{"rank 0 and its hub die", 0, true},
	}
	for _, tc := range cases {
		leaver := tc.leaver
		t.Run(tc.desc, func(t *testing.T) {
			const n = 3
			tmp, job := shortTempDir(t), newJobID()
			joined := make(chan struct{}, n)
			errs := runRanks(t, n, func(r int) map[string]string { return srunEnv(tmp, job, r, n) },
				[]JoinOption{WithTimeout(10 * time.Second)}, func(r int, g *Group) error {
					joined <- struct{}{}
					if r == leaver {
						// Let the others reach the barrier, then leave.
						for range n {
							<-joined
						}
						time.Sleep(50 * time.Millisecond)
						if tc.hubDies {
							return g.srv.Close()
						}
						return nil
					}
					start := time.Now()
					err := g.Barrier(context.Background())
					if took := time.Since(start); took > 50*time.Millisecond+time.Second {
						return fmt.Errorf("barrier failed after %v", took)
					}
					var re *hub.RankError
					if !errors.As(err, &re) || re.Rank != leaver || !errors.Is(err, hub.ErrAborted) {
						return fmt.Errorf("got %v, want a *hub.RankError naming rank %d", err, leaver)
					}
					if tc.hubDies != errors.Is(err, hub.ErrHubLost) {
						return fmt.Errorf("got %v; hub lost: %v", err, tc.hubDies)
					}
					if r == 1 {
						t.Logf("rank 1 got: %v", err)
					}
					// Later calls fail the same way.
					if err := g.Barrier(context.Background()); !errors.As(err, &re) || re.Rank != leaver {
						return fmt.Errorf("later call: %v", err)
					}
					return nil
				})
			noErrors(t, errs)
		})
	}
}

func TestGroupAbort(t *testing.T) {
	const n = 2
	tmp, job := shortTempDir(t), newJobID()
	errs := runRanks(t, n, func(r int) map[string]string { return torchrunEnv(tmp, job, r, n) },
		[]JoinOption{WithTimeout(10 * time.Second)}, func(r int, g *Group) error {
			if r == 1 {
				return g.Abort("input file missing")
			}
			err := g.Barrier(context.Background())
			var re *hub.RankError
			if !errors.As(err, &re) || re.Rank != 1 || !strings.Contains(re.Reason, "input file missing") {
				return fmt.Errorf("got %v, want a *hub.RankError naming rank 1", err)
			}
			return nil
		})
	noErrors(t, errs)
}
