package hub

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// waitJoined waits until the hub has admitted k hellos.
func waitJoined(t *testing.T, h *testHub, k int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		h.mu.Lock()
		joined := h.joined
		h.mu.Unlock()
		if joined >= k {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d hellos admitted after 5s", joined, k)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// checkExitedErr checks err is the rendezvous failure naming gone as
// exited with how, with missing the ranks that had not said hello.
func checkExitedErr(t *testing.T, who string, err error, gone int, how string, missing []int) {
	t.Helper()
	var rv *RendezvousError
	if !errors.As(err, &rv) || !errors.Is(err, ErrRendezvous) || !errors.Is(err, ErrAborted) {
		t.Errorf("%s: got %v, want a *RendezvousError", who, err)
		return
	}
	if want := []ExitedRank{{Rank: gone, How: how}}; !slices.Equal(rv.Exited, want) || !slices.Equal(rv.Missing, missing) {
		t.Errorf("%s: Exited %v Missing %v, want %v %v", who, rv.Exited, rv.Missing, want, missing)
	}
	if want := fmt.Sprintf("hub: rendezvous failed: rank %d exited (%s) before joining", gone, how); !strings.Contains(err.Error(), want) {
		t.Errorf("%s: message %q, want it to contain %q", who, err, want)
	}
}

// TestExitedFailsRendezvous: a rank that ends before its hello fails the
// rendezvous at once, whether ranks already wait in it or say hello
// later, instead of leaving them to the timeout.
func TestExitedFailsRendezvous(t *testing.T) {
	const n = 4
	tests := []struct {
		desc    string
		waiting int // ranks that said hello before Exited
	}{
		{desc: "ranks wait in the rendezvous", waiting: 2},
		{desc: "no rank said hello yet", waiting: 0},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			gone := tc.waiting + rand.IntN(n-tc.waiting-1) // never the last rank: it says hello at the end
			how := fmt.Sprintf("exit status %d", rand.IntN(256))
			h := startHub(t, ServerConfig{WorldSize: n, RendezvousTimeout: time.Minute}, nil)
			errs := make(chan error, tc.waiting)
			for r := range tc.waiting {
				go func() {
					c, err := Dial(context.Background(), h.Path(), h.hello(r))
					if c != nil {
						_ = c.Close()
					}
					errs <- err
				}()
			}
			waitJoined(t, h, tc.waiting)
			start := time.Now()
			h.Exited(gone, how)
			var missing []int
			for r := tc.waiting; r < n; r++ {
				missing = append(missing, r)
			}
			for range tc.waiting {
				select {
				case err := <-errs:
					checkExitedErr(t, "waiting rank", err, gone, how, missing)
				case <-time.After(5 * time.Second):
					t.Fatal("a waiting Dial did not return within 5s of Exited")
				}
			}
			if tc.waiting == 0 {
				// Nothing waits: nothing failed, nothing logged.
				if err := h.Err(); err != nil || len(h.log.String()) != 0 {
					t.Fatalf("Exited with no hello: Err %v, log %q", err, h.log)
				}
			}
			// A hello after Exited fails at once.
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			_, err := Dial(ctx, h.Path(), h.hello(n-1))
			if tc.waiting == 0 {
				missing = slices.DeleteFunc(missing, func(r int) bool { return r == n-1 })
			}
			checkExitedErr(t, "latecomer", err, gone, how, missing)
			if took := time.Since(start); took > 5*time.Second {
				t.Errorf("failures took %v", took)
			}
			if !h.log.contains(fmt.Sprintf("rank %d exited (%s) before joining", gone, how)) {
				t.Errorf("not logged:\n%s", h.log)
			}
		})
	}
}

// TestExitedIgnored: Exited changes nothing for a rank that said hello
// (its goodbye or lost connection speaks for it), after the rendezvous,
// or for a job whose ranks never use the hub.
func TestExitedIgnored(t *testing.T) {
	t.Run("rank that said hello", func(t *testing.T) {
		const n = 2
		h := startHub(t, ServerConfig{WorldSize: n}, nil)
		errc := make(chan error, 1)
		go func() {
			c, err := Dial(context.Background(), h.Path(), h.hello(0))
			if c != nil {
				t.Cleanup(func() { _ = c.Close() })
			}
			errc <- err
		}()
		waitJoined(t, h, 1)
		h.Exited(0, "exit status 0")
		c1, err := Dial(context.Background(), h.Path(), h.hello(1))
		if err != nil {
			t.Fatalf("rank 1: %v", err)
		}
		defer c1.Close()
		if err := <-errc; err != nil {
			t.Fatalf("rank 0: %v", err)
		}
		h.Exited(1, "exit status 0") // after the rendezvous
		if err := h.Err(); err != nil {
			t.Errorf("Err %v", err)
		}
	})
	t.Run("no rank uses the hub", func(t *testing.T) {
		h := startHub(t, ServerConfig{WorldSize: 3}, nil)
		for r := range 3 {
			h.Exited(r, "exit status 0")
		}
		h.Exited(-1, "exit status 0")
		h.Exited(3, "exit status 0")
		if err := h.Err(); err != nil || len(h.log.String()) != 0 {
			t.Errorf("Err %v, log %q", err, h.log)
		}
	})
}
