package hub

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/internal/fdpass"
)

// callKind makes collective k on c with valid arguments for rank r.
func callKind(ctx context.Context, c *Client, k opKind, r int) error {
	switch k {
	case opBarrier:
		return c.Barrier(ctx)
	case opAllGather:
		_, err := c.AllGather(ctx, []byte(fmt.Sprint(r)))
		return err
	case opBroadcast:
		_, err := c.Broadcast(ctx, 0, []byte("root's"))
		return err
	case opAllGatherFDs:
		fd, err := unix.MemfdCreate("hub-test", unix.MFD_CLOEXEC)
		if err != nil {
			return err
		}
		defer fdpass.Close([]int{fd})
		fds, err := c.AllGatherFDs(ctx, fd)
		fdpass.Close(fds)
		return err
	case opBroadcastFDs:
		fd, err := unix.MemfdCreate("hub-test", unix.MFD_CLOEXEC)
		if err != nil {
			return err
		}
		defer fdpass.Close([]int{fd})
		fds, err := c.BroadcastFDs(ctx, 0, []int{fd})
		fdpass.Close(fds)
		return err
	}
	return fmt.Errorf("no such collective %v", k)
}

// TestCollectiveTimeout: ranks that are connected and alive but never
// join a collective make it fail, on every rank that waits in it (their
// ctx has no deadline) and on the missing ranks too, with an error naming
// the collective and the missing ranks, after the timeout of the rank
// whose deadline comes first.
func TestCollectiveTimeout(t *testing.T) {
	cases := []struct {
		n       int
		kind    opKind
		missing []int
	}{
		{3, opBarrier, []int{2}},
		{4, opAllGather, []int{1, 3}},
		{3, opBroadcast, []int{0}}, // the root itself never comes
		{2, opAllGatherFDs, []int{1}},
		{4, opBroadcastFDs, []int{2, 3}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("%s/n=%d/missing=%v", tc.kind, tc.n, tc.missing), func(t *testing.T) {
			h := startHub(t, ServerConfig{WorldSize: tc.n, CollectiveTimeoutKnob: "the test's knob"}, nil)
			clients := dialAll(t, h)
			// A fresh timeout per run, different per rank: the earliest
			// deadline wins, here the first rank's to arrive.
			short := time.Duration(150+rand.IntN(150)) * time.Millisecond
			first := -1
			for r, c := range clients {
				if slices.Contains(tc.missing, r) {
					c.SetCollectiveTimeout(time.Hour, "unused")
					continue
				}
				if first < 0 {
					first = r
					c.SetCollectiveTimeout(short, "unused")
				} else {
					c.SetCollectiveTimeout(short+time.Duration(r)*10*time.Second, "unused")
				}
			}
			ctx := context.Background()
			// One collective completes first, so the one that times out is #2.
			onEvery(t, clients, func(r int, c *Client) error { return c.Barrier(ctx) })

			errs := make([]error, tc.n)
			var wg sync.WaitGroup
			start := time.Now()
			for r, c := range clients {
				if !slices.Contains(tc.missing, r) {
					wg.Go(func() { errs[r] = callKind(ctx, c, tc.kind, r) })
				}
			}
			wg.Wait()
			took := time.Since(start)
			want := short
			if took < want || took > want+2*time.Second {
				t.Errorf("waiting ranks failed after %v, want about %v", took, want)
			}
			check := func(who string, err error) {
				t.Helper()
				var ce *CollectiveTimeoutError
				if !errors.As(err, &ce) || !errors.Is(err, ErrAborted) || !errors.Is(err, ErrCollectiveTimeout) {
					t.Fatalf("%s: got %v, want a *CollectiveTimeoutError", who, err)
				}
				if ce.Collective != tc.kind.String() || ce.Seq != 2 || !slices.Equal(ce.Missing, tc.missing) || ce.After != want {
					t.Errorf("%s: got %+v, want %s #2 missing %v after %v", who, ce, tc.kind, tc.missing, want)
				}
				for i := range ce.Missing {
					if ce.Hosts[i] != "test" || ce.PIDs[i] != os.Getpid() {
						t.Errorf("%s: missing rank %d at %q pid %d", who, ce.Missing[i], ce.Hosts[i], ce.PIDs[i])
					}
				}
				says := []string{tc.kind.String() + " #2 timed out after " + want.String(), "never joined it", "the test's knob sets this limit"}
				for _, r := range tc.missing {
					says = append(says, fmt.Sprintf("%d (pid %d on test)", r, os.Getpid()))
				}
				for _, s := range says {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("%s: %q does not say %q", who, err, s)
					}
				}
			}
			for r, err := range errs {
				if !slices.Contains(tc.missing, r) {
					check(fmt.Sprintf("rank %d", r), err)
				}
			}
			// The missing ranks learn it too, and their next call fails at once.
			for _, r := range tc.missing {
				waitFor(t, func() bool { return clients[r].Err() != nil })
				check(fmt.Sprintf("missing rank %d", r), clients[r].Err())
				check(fmt.Sprintf("missing rank %d's late call", r), callKind(ctx, clients[r], tc.kind, r))
			}
			check("the hub's verdict", h.Err())
			if !h.log.contains("never joined it") {
				t.Errorf("hub log does not say it:\n%s", h.log)
			}
			t.Logf("rank %d got: %v", first, errs[first])
		})
	}
}

// TestCollectiveTimeoutEarliestDeadline: a rank that arrives later with a
// shorter timeout brings the deadline forward; a later arrival with a
// longer one leaves it.
func TestCollectiveTimeoutEarliestDeadline(t *testing.T) {
	const n = 4
	h := startHub(t, ServerConfig{WorldSize: n}, nil)
	clients := dialAll(t, h)
	clients[0].SetCollectiveTimeout(20*time.Second, "")
	clients[1].SetCollectiveTimeout(300*time.Millisecond, "")
	clients[2].SetCollectiveTimeout(30*time.Second, "")
	ctx := context.Background()
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := time.Now()
	wg.Go(func() { errs[0] = clients[0].Barrier(ctx) })
	arrived := func(k int) func() bool {
		return func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return h.pending[1] != nil && h.pending[1].arrived == k
		}
	}
	waitFor(t, arrived(1))
	time.Sleep(100 * time.Millisecond)
	at1 := time.Now()
	wg.Go(func() { errs[1] = clients[1].Barrier(ctx) })
	waitFor(t, arrived(2))
	wg.Go(func() { errs[2] = clients[2].Barrier(ctx) })
	wg.Wait()
	took := time.Since(at1)
	if took < 300*time.Millisecond || took > 2*time.Second {
		t.Errorf("failed %v after rank 1 arrived, want about 300ms (%v after rank 0)", took, time.Since(start))
	}
	for r := range 3 {
		var ce *CollectiveTimeoutError
		if !errors.As(errs[r], &ce) || !slices.Equal(ce.Missing, []int{3}) || ce.After != 300*time.Millisecond {
			t.Errorf("rank %d: got %v, want rank 3 missing after 300ms", r, errs[r])
		}
	}
}

// TestCollectiveTimeoutHubDefault: calls that carry no timeout get the
// hub's.
func TestCollectiveTimeoutHubDefault(t *testing.T) {
	h := startHub(t, ServerConfig{WorldSize: 2, CollectiveTimeout: 200 * time.Millisecond}, nil)
	clients := dialAll(t, h)
	start := time.Now()
	_, err := clients[1].AllGather(context.Background(), []byte("x"))
	var ce *CollectiveTimeoutError
	if !errors.As(err, &ce) || !slices.Equal(ce.Missing, []int{0}) || ce.After != 200*time.Millisecond || ce.Collective != "AllGather" || ce.Seq != 1 {
		t.Errorf("got %v, want AllGather #1 missing rank 0 after 200ms", err)
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("took %v", took)
	}
	if ce != nil && strings.Contains(err.Error(), "sets this limit") {
		t.Errorf("no knob was given, yet the error names one: %v", err)
	}
}

// TestCollectiveTimeoutNotSpurious: a job whose ranks each arrive within
// the timeout runs on, even when its collectives together take many times
// the timeout; a stopped timer must not fire into a later collective.
func TestCollectiveTimeoutNotSpurious(t *testing.T) {
	const n, rounds = 3, 24
	// Each collective's last rank comes a tenth of the timeout after the
	// first, a margin for a loaded machine; together they take more than
	// two timeouts.
	timeout := 500 * time.Millisecond
	h := startHub(t, ServerConfig{WorldSize: n}, nil)
	clients := dialAll(t, h)
	for _, c := range clients {
		c.SetCollectiveTimeout(timeout, "")
	}
	start := time.Now()
	onEvery(t, clients, func(r int, c *Client) error {
		for i := range rounds {
			if r == (i % n) {
				time.Sleep(timeout / 10)
			}
			got, err := c.AllGather(context.Background(), []byte{byte(r), byte(i)})
			if err != nil {
				return fmt.Errorf("round %d: %w", i, err)
			}
			for q, b := range got {
				if len(b) != 2 || b[0] != byte(q) || b[1] != byte(i) {
					return fmt.Errorf("round %d: rank %d's blob is %v", i, q, b)
				}
			}
		}
		return nil
	})
	if took := time.Since(start); took < 2*timeout {
		t.Fatalf("the rounds took %v, not several timeouts: the test proves nothing", took)
	}
	// Every timer stopped with its collective: nothing fires later.
	time.Sleep(2 * timeout)
	if err := h.Err(); err != nil {
		t.Errorf("hub failed the job: %v", err)
	}
}

// TestHubSilence: a hub that takes the call and never answers (stalled,
// or the way to it cut without a reset) fails the call on its own, well
// after the collective timeout, instead of never.
func TestHubSilence(t *testing.T) {
	old := silenceMargin
	silenceMargin = 200 * time.Millisecond
	t.Cleanup(func() { silenceMargin = old })

	dir := shortTempDir(t)
	path := dir + "/mute.sock"
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.AcceptUnix()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		fc := newFrameConn(c)
		defer fc.releaseFDs()
		m, _, err := fc.readMessage()
		if err != nil {
			served <- err
			return
		}
		h := m.(*helloMsg).h
		h.Token = ""
		if err := fc.writeMessage(&welcomeMsg{peers: []Hello{h}}, nil); err != nil {
			served <- err
			return
		}
		// Read whatever comes and never answer, until the client goes.
		for {
			if _, fds, err := fc.readMessage(); err != nil {
				served <- nil
				return
			} else {
				fdpass.Close(fds)
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := Dial(ctx, path, Hello{Rank: 0, WorldSize: 1, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetCollectiveTimeout(100*time.Millisecond, "")
	start := time.Now()
	err = c.Barrier(context.Background())
	took := time.Since(start)
	if !errors.Is(err, ErrHubLost) || !strings.Contains(err.Error(), "no word from the hub") {
		t.Errorf("got %v, want ErrHubLost saying the hub was silent", err)
	}
	if want := hubSilence(100 * time.Millisecond); took < want || took > want+2*time.Second {
		t.Errorf("gave up after %v, want about %v", took, want)
	}
	if err := <-served; err != nil {
		t.Errorf("mute hub: %v", err)
	}
}
