package hub

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/internal/fdpass"
)

// logBuf collects a server's log lines.
type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) logf(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *logBuf) contains(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

type testHub struct {
	*Server
	log    *logBuf
	token  string
	n      int
	secret []byte // a TCP hub's
}

// startHub listens and serves in a goroutine that the test's cleanup
// waits for. tweak may change the server before Serve starts.
func startHub(t *testing.T, cfg ServerConfig, tweak func(*Server)) *testHub {
	t.Helper()
	lb := &logBuf{}
	if cfg.Token == "" {
		cfg.Token = fmt.Sprintf("token-%x", rand.Uint64())
	}
	cfg.Logf = lb.logf
	s, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(s)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(context.Background()) }()
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
		// ErrClosed: the test ended before Serve's goroutine started.
		if err := <-errc; err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return &testHub{Server: s, log: lb, token: cfg.Token, n: cfg.WorldSize}
}

func (h *testHub) hello(rank int) Hello {
	return Hello{Rank: rank, WorldSize: h.n, LocalRank: rank, PID: os.Getpid(), Hostname: "test", Device: fmt.Sprint(rank), Token: h.token}
}

// dialAll connects every rank concurrently; the clients are closed at
// cleanup.
func dialAll(t *testing.T, h *testHub) []*Client {
	t.Helper()
	return dialEvery(t, h, func(ctx context.Context, r int) (*Client, error) { return Dial(ctx, h.Path(), h.hello(r)) })
}

// dialEvery joins every rank concurrently through dial; the clients are
// closed at cleanup.
func dialEvery(t *testing.T, h *testHub, dial func(ctx context.Context, r int) (*Client, error)) []*Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	clients := make([]*Client, h.n)
	errs := make([]error, h.n)
	var wg sync.WaitGroup
	for r := range h.n {
		wg.Go(func() { clients[r], errs[r] = dial(ctx, r) })
	}
	wg.Wait()
	for r, c := range clients {
		if c != nil {
			t.Cleanup(func() { _ = c.Close() })
		}
		if errs[r] != nil {
			t.Fatalf("rank %d: joining: %v\nlog:\n%s", r, errs[r], h.log)
		}
	}
	return clients
}

// onEvery runs f for every rank concurrently and fails the test with each
// rank's error.
func onEvery(t *testing.T, clients []*Client, f func(r int, c *Client) error) {
	t.Helper()
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for r, c := range clients {
		wg.Go(func() { errs[r] = f(r, c) })
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Errorf("rank %d: %v", r, err)
		}
	}
}

// memfdWith returns a memfd holding content.
func memfdWith(t *testing.T, content []byte) int {
	t.Helper()
	fd, err := unix.MemfdCreate("hub-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, content, 0); err != nil {
		t.Fatal(err)
	}
	return fd
}

func readFD(fd, n int) ([]byte, error) {
	b := make([]byte, n)
	got, err := unix.Pread(fd, b, 0)
	if err != nil {
		return nil, err
	}
	return b[:got], nil
}

func checkCloexec(fd int) error {
	flags, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0)
	if err != nil {
		return err
	}
	if flags&unix.FD_CLOEXEC == 0 {
		return fmt.Errorf("descriptor %d is not close-on-exec", fd)
	}
	return nil
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd")
	}
	return len(ents)
}

func TestCollectives(t *testing.T) {
	for _, n := range []int{1, 2, 8} {
		t.Run(fmt.Sprintf("N=%d", n), func(t *testing.T) {
			h := startHub(t, ServerConfig{WorldSize: n}, nil)
			clients := dialAll(t, h)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()

			for r, c := range clients {
				peers := c.Peers()
				if len(peers) != n {
					t.Fatalf("rank %d sees %d peers", r, len(peers))
				}
				for q, p := range peers {
					if p.Rank != q || p.Device != fmt.Sprint(q) || p.Token != "" || p.PID != os.Getpid() {
						t.Errorf("rank %d: peer %d is %+v", r, q, p)
					}
				}
			}

			onEvery(t, clients, func(r int, c *Client) error { return c.Barrier(ctx) })

			// Fresh random blobs of different sizes, one empty.
			blobs := make([][]byte, n)
			for r := range blobs {
				if r == n-1 && n > 1 {
					continue
				}
				blobs[r] = make([]byte, 1+rand.IntN(3000))
				for i := range blobs[r] {
					blobs[r][i] = byte(rand.UintN(256))
				}
			}
			onEvery(t, clients, func(r int, c *Client) error {
				got, err := c.AllGather(ctx, blobs[r])
				if err != nil {
					return err
				}
				for q := range n {
					if !bytes.Equal(got[q], blobs[q]) {
						return fmt.Errorf("AllGather: blob of rank %d differs (%d vs %d bytes)", q, len(got[q]), len(blobs[q]))
					}
				}
				return nil
			})

			root := rand.IntN(n)
			onEvery(t, clients, func(r int, c *Client) error {
				// Non-root contributions must be ignored.
				got, err := c.Broadcast(ctx, root, blobs[(r+1)%n])
				if err != nil {
					return err
				}
				if want := blobs[(root+1)%n]; !bytes.Equal(got, want) {
					return fmt.Errorf("Broadcast: got %d bytes, want root's %d", len(got), len(want))
				}
				return nil
			})

			// Each rank shares a memfd holding its rank number and a
			// fresh salt; every rank reads every peer's value through the
			// descriptors it received.
			salt := rand.Uint64()
			content := func(r int) []byte { return fmt.Appendf(nil, "rank %d salt %x", r, salt) }
			onEvery(t, clients, func(r int, c *Client) error {
				fd := memfdWith(t, content(r))
				defer unix.Close(fd)
				fds, err := c.AllGatherFDs(ctx, fd)
				if err != nil {
					return err
				}
				defer fdpass.Close(fds)
				for q, got := range fds {
					if got == fd {
						return fmt.Errorf("AllGatherFDs returned the caller's own descriptor")
					}
					if err := checkCloexec(got); err != nil {
						return err
					}
					b, err := readFD(got, 64)
					if err != nil {
						return err
					}
					if !bytes.Equal(b, content(q)) {
						return fmt.Errorf("descriptor of rank %d holds %q, want %q", q, b, content(q))
					}
				}
				return nil
			})

			onEvery(t, clients, func(r int, c *Client) error {
				var mine []int
				if r == root {
					for i := range 3 {
						mine = append(mine, memfdWith(t, fmt.Appendf(nil, "buffer %d salt %x", i, salt)))
					}
					defer fdpass.Close(mine)
				}
				fds, err := c.BroadcastFDs(ctx, root, mine)
				if err != nil {
					return err
				}
				defer fdpass.Close(fds)
				if len(fds) != 3 {
					return fmt.Errorf("BroadcastFDs: got %d descriptors, want 3", len(fds))
				}
				for i, fd := range fds {
					b, err := readFD(fd, 64)
					if err != nil {
						return err
					}
					if want := fmt.Sprintf("buffer %d salt %x", i, salt); string(b) != want {
						return fmt.Errorf("broadcast descriptor %d holds %q, want %q", i, b, want)
					}
				}
				return nil
			})

			for r, c := range clients {
				if err := c.Close(); err != nil {
					t.Errorf("rank %d: Close: %v", r, err)
				}
			}
			waitFor(t, func() bool { return h.idle() })
			if err := h.Err(); err != nil {
				t.Errorf("a clean run failed the job: %v", err)
			}
		})
	}
}

// waitFor polls cond for up to 5 s; explain, if given, says what was
// seen instead.
func waitFor(t *testing.T, cond func() bool, explain ...func() string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for _, e := range explain {
				t.Log(e())
			}
			t.Fatal("condition not met within 5s")
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestNoDescriptorLeak runs descriptor exchanges, failures included, and
// checks that the process holds as many descriptors afterwards as before.
func TestNoDescriptorLeak(t *testing.T) {
	// Warm up the runtime's poller and the test helpers' own descriptors.
	func() {
		h := startHub(t, ServerConfig{WorldSize: 1}, nil)
		c := dialAll(t, h)[0]
		_ = c.Barrier(context.Background())
	}()
	before := openFDs(t)
	func() {
		h := startHub(t, ServerConfig{WorldSize: 4}, nil)
		clients := dialAll(t, h)
		ctx := context.Background()
		for range 3 {
			onEvery(t, clients, func(r int, c *Client) error {
				fd := memfdWith(t, []byte{byte(r)})
				defer unix.Close(fd)
				fds, err := c.AllGatherFDs(ctx, fd)
				fdpass.Close(fds)
				return err
			})
		}
		// Three ranks send descriptors, the fourth never comes: the hub
		// must close what it holds when the job fails.
		var wg sync.WaitGroup
		for r := range 3 {
			wg.Go(func() {
				fd := memfdWith(t, []byte{byte(r)})
				defer unix.Close(fd)
				if _, err := clients[r].AllGatherFDs(ctx, fd); !errors.Is(err, ErrAborted) {
					t.Errorf("rank %d: got %v, want ErrAborted", r, err)
				}
			})
		}
		waitFor(t, func() bool {
			h.mu.Lock()
			defer h.mu.Unlock()
			return len(h.pending) == 1 && h.pending[4].arrived == 3
		})
		h.Abort(3, "test abort")
		wg.Wait()
		for _, c := range clients {
			_ = c.Close()
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
	}()
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open before, %d after", before, after)
	}
}

// TestRankDiesMidBarrier: one rank's connection drops while the others
// wait in a barrier; they must fail within a second, naming it.
func TestRankDiesMidBarrier(t *testing.T) {
	const n, dead = 4, 2
	h := startHub(t, ServerConfig{WorldSize: n}, nil)
	clients := dialAll(t, h)
	ctx := context.Background()

	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range clients {
		if r != dead {
			wg.Go(func() { errs[r] = c.Barrier(ctx) })
		}
	}
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.pending[1] != nil && h.pending[1].arrived == n-1
	})
	// Die without saying goodbye, as a killed process would.
	start := time.Now()
	_ = clients[dead].fc.c.Close()
	wg.Wait()
	if took := time.Since(start); took > time.Second {
		t.Errorf("others failed after %v, want < 1s", took)
	}
	for r, err := range errs {
		if r == dead {
			continue
		}
		var re *RankError
		if !errors.As(err, &re) || re.Rank != dead || !errors.Is(err, ErrAborted) {
			t.Errorf("rank %d: got %v, want a *RankError naming rank %d", r, err, dead)
		}
	}
	// Later calls fail the same way, at once.
	_, err := clients[0].AllGather(ctx, []byte("x"))
	var re *RankError
	if !errors.As(err, &re) || re.Rank != dead {
		t.Errorf("later call: got %v, want a *RankError naming rank %d", err, dead)
	}
	if !h.log.contains("rank 2: connection lost") {
		t.Errorf("log does not name the lost rank:\n%s", h.log)
	}
	if !errors.As(h.Err(), &re) || re.Rank != dead || re.Left {
		t.Errorf("hub verdict %#v, want rank %d blamed for a lost connection, not for leaving", h.Err(), dead)
	}
}

func TestServerAbort(t *testing.T) {
	const n = 3
	h := startHub(t, ServerConfig{WorldSize: n}, nil)
	clients := dialAll(t, h)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range clients {
		wg.Go(func() {
			_, errs[r] = c.AllGather(context.Background(), []byte{byte(r)})
		})
	}
	// Rank 1 may or may not have arrived; the abort must reach everyone.
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	h.Abort(1, "exited with status 3")
	wg.Wait()
	if took := time.Since(start); took > time.Second {
		t.Errorf("abort took %v", took)
	}
	for r, err := range errs {
		var re *RankError
		if err == nil {
			// The all-gather may have completed before the abort.
			continue
		}
		if !errors.As(err, &re) || re.Rank != 1 || re.Reason != "exited with status 3" {
			t.Errorf("rank %d: got %v", r, err)
		}
	}
	for r, c := range clients {
		var re *RankError
		if err := c.Barrier(context.Background()); !errors.As(err, &re) || re.Rank != 1 {
			t.Errorf("rank %d: later call: got %v", r, err)
		}
	}
	if err := h.Err(); err == nil || !strings.Contains(err.Error(), "rank 1: exited with status 3") {
		t.Errorf("Err() = %v", err)
	}
	// The launcher reports what it told the hub; the hub does not log it.
	if h.log.contains("exited with status 3") {
		t.Errorf("the hub logged the abort: %s", h.log.String())
	}
	select {
	case <-h.Failed():
	default:
		t.Error("Failed() not closed")
	}
}

func TestClientAbort(t *testing.T) {
	h := startHub(t, ServerConfig{WorldSize: 2}, nil)
	clients := dialAll(t, h)
	done := make(chan error, 1)
	go func() { done <- clients[0].Barrier(context.Background()) }()
	if err := clients[1].Abort("bad input"); err != nil {
		t.Fatal(err)
	}
	var re *RankError
	if err := <-done; !errors.As(err, &re) || re.Rank != 1 || !strings.Contains(re.Reason, "bad input") {
		t.Errorf("got %v, want a *RankError naming rank 1", err)
	}
	// A rank's own reason is logged: nobody else reports it.
	if want := "rank 1: aborted: bad input"; !h.log.contains(want) {
		t.Errorf("hub log %q does not contain %q", h.log, want)
	}
}

func TestMismatchedCalls(t *testing.T) {
	cases := []struct {
		desc string
		a, b func(context.Context, *Client) error
		want string
	}{
		{
			"barrier vs all-gather",
			func(ctx context.Context, c *Client) error { return c.Barrier(ctx) },
			func(ctx context.Context, c *Client) error { _, err := c.AllGather(ctx, []byte("x")); return err },
			"AllGather as collective #1",
		},
		{
			"broadcast roots differ",
			func(ctx context.Context, c *Client) error { _, err := c.Broadcast(ctx, 0, []byte("x")); return err },
			func(ctx context.Context, c *Client) error { _, err := c.Broadcast(ctx, 1, []byte("y")); return err },
			"Broadcast(root 1) as collective #1 while rank 0 called Broadcast(root 0)",
		},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			h := startHub(t, ServerConfig{WorldSize: 2}, nil)
			clients := dialAll(t, h)
			ctx := context.Background()
			errA := make(chan error, 1)
			go func() { errA <- tc.a(ctx, clients[0]) }()
			waitFor(t, func() bool {
				h.mu.Lock()
				defer h.mu.Unlock()
				return h.pending[1] != nil
			})
			errB := tc.b(ctx, clients[1])
			for r, err := range []error{<-errA, errB} {
				var re *RankError
				if !errors.As(err, &re) || re.Rank != 1 || !strings.Contains(re.Reason, tc.want) {
					t.Errorf("rank %d: got %v, want a *RankError on rank 1 containing %q", r, err, tc.want)
				}
			}
		})
	}
}

// TestEarlyLeave: a rank may close after its last call; only a peer that
// then waits for it fails, naming it.
func TestEarlyLeave(t *testing.T) {
	h := startHub(t, ServerConfig{WorldSize: 2}, nil)
	clients := dialAll(t, h)
	ctx := context.Background()
	onEvery(t, clients, func(r int, c *Client) error { return c.Barrier(ctx) })
	if err := clients[1].Close(); err != nil {
		t.Fatal(err)
	}
	// The goodbye alone is not a failure.
	time.Sleep(20 * time.Millisecond)
	if err := h.Err(); err != nil {
		t.Fatalf("a clean goodbye failed the job: %v", err)
	}
	err := clients[0].Barrier(ctx)
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || !strings.Contains(re.Reason, "closed its connection after collective #1") {
		t.Errorf("got %v, want a *RankError naming rank 1", err)
	}
	if err := clients[1].Barrier(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("call after Close: got %v, want ErrClosed", err)
	}
	// The launcher reads the verdict: rank 1 is blamed only for leaving.
	var se *RankError
	if !errors.As(h.Err(), &se) || se.Rank != 1 || !se.Left {
		t.Errorf("hub verdict %#v, want rank 1 blamed for leaving (Left)", h.Err())
	}
}

func TestContextCancel(t *testing.T) {
	h := startHub(t, ServerConfig{WorldSize: 2}, nil)
	clients := dialAll(t, h)

	// A call whose ctx has ended before it is sent sends nothing: the
	// ranks stay in step.
	done, cancelDone := context.WithCancel(context.Background())
	cancelDone()
	if err := clients[0].Barrier(done); !errors.Is(err, context.Canceled) {
		t.Fatalf("call with an ended ctx: %v, want context.Canceled", err)
	}
	salt := byte(rand.Uint32())
	onEvery(t, clients, func(r int, c *Client) error {
		got, err := c.AllGather(context.Background(), []byte{salt + byte(r)})
		if err == nil && (got[0][0] != salt || got[1][0] != salt+1) {
			err = fmt.Errorf("AllGather got %v, want [[%d] [%d]]", got, salt, salt+1)
		}
		return err
	})

	// A call abandoned after it was sent ends the job: rank 1 could still
	// complete it with rank 0's contribution, and a retry by rank 0 would
	// be matched with rank 1's next call.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := clients[0].AllGather(ctx, []byte("first"))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took > 500*time.Millisecond {
		t.Errorf("cancelled call returned after %v", took)
	}
	var re *RankError
	if err := clients[0].Barrier(context.Background()); !errors.As(err, &re) || re.Rank != 0 || !strings.Contains(err.Error(), "gave up on AllGather #2") {
		t.Errorf("rank 0's next call: %v, want a *RankError naming rank 0 that gave up on AllGather #2", err)
	}
	// Rank 1's matching call may still complete, with rank 0's data, if
	// the hub matched it before it read rank 0's abort; its next call
	// fails.
	got, err := clients[1].AllGather(context.Background(), []byte("late"))
	if err == nil {
		if string(got[0]) != "first" || string(got[1]) != "late" {
			t.Errorf("rank 1's AllGather completed with %q, want [first late]", got)
		}
		err = clients[1].Barrier(context.Background())
	}
	if !errors.As(err, &re) || re.Rank != 0 || !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "gave up") {
		t.Errorf("rank 1: %v, want a *RankError naming rank 0 that gave up", err)
	}
}

func TestRefusals(t *testing.T) {
	const n = 3
	h := startHub(t, ServerConfig{WorldSize: n, RendezvousTimeout: 3 * time.Second}, nil)
	// Rank 0 is present, so a second rank 0 is a duplicate.
	first := make(chan *Client, 1)
	go func() {
		c, err := Dial(context.Background(), h.Path(), h.hello(0))
		if err != nil {
			t.Errorf("rank 0: %v", err)
		}
		first <- c
	}()
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.joined == 1
	})
	cases := []struct {
		desc string
		edit func(*Hello)
		want string
	}{
		{"wrong token", func(hl *Hello) { hl.Token = "forged" }, "wrong job token"},
		{"empty token", func(hl *Hello) { hl.Token = "" }, "wrong job token"},
		{"world size mismatch", func(hl *Hello) { hl.WorldSize = n + 1 }, "says world size 4, the job has 3"},
		{"duplicate rank", func(hl *Hello) { hl.Rank = 0 }, "rank 0 is already connected"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			hl := h.hello(1)
			tc.edit(&hl)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			c, err := Dial(ctx, h.Path(), hl)
			if err == nil {
				_ = c.Close()
				t.Fatal("Dial succeeded")
			}
			var fe *RefusedError
			if !errors.As(err, &fe) || !errors.Is(err, ErrRefused) || !strings.Contains(fe.Reason, tc.want) {
				t.Errorf("got %v, want a refusal containing %q", err, tc.want)
			}
			if !h.log.contains(tc.want) {
				t.Errorf("refusal not logged:\n%s", h.log)
			}
		})
	}
	// Ranks out of range are refused by the hub even when a client skips
	// its own check.
	for _, rank := range []int{-1, n, 1 << 20} {
		hl := h.hello(0)
		hl.Rank = rank
		m := rawHello(t, h.Path(), hl)
		if f, ok := m.(*failMsg); !ok || f.code != failRefused || !strings.Contains(f.reason, "out of range") {
			t.Errorf("rank %d: got %#v, want a refusal", rank, m)
		}
	}
	// The refused attempts did not disturb the job.
	clients := make([]*Client, n)
	var wg sync.WaitGroup
	for r := 1; r < n; r++ {
		wg.Go(func() {
			c, err := Dial(context.Background(), h.Path(), h.hello(r))
			if err != nil {
				t.Errorf("rank %d: %v", r, err)
			}
			clients[r] = c
		})
	}
	wg.Wait()
	clients[0] = <-first
	for _, c := range clients {
		if c == nil {
			t.FailNow()
		}
		t.Cleanup(func() { _ = c.Close() })
	}
	onEvery(t, clients, func(r int, c *Client) error { return c.Barrier(context.Background()) })
}

// rawHello sends a hello without the client's checks and returns the
// hub's answer.
func rawHello(t *testing.T, path string, h Hello) message {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fc := newFrameConn(c)
	defer fc.releaseFDs()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if err := fc.writeMessage(&helloMsg{h: h}, nil); err != nil {
		t.Fatal(err)
	}
	m, fds, err := fc.readMessage()
	fdpass.Close(fds)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestForeignUID(t *testing.T) {
	// The hub pretends to run as another uid, so this process is foreign.
	h := startHub(t, ServerConfig{WorldSize: 1}, func(s *Server) { s.uid = os.Getuid() + 1 })
	_, err := Dial(context.Background(), h.Path(), h.hello(0))
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "peer uid") {
		t.Errorf("got %v, want a refusal for the uid", err)
	}
	if !h.log.contains("is not the hub's uid") {
		t.Errorf("refusal not logged:\n%s", h.log)
	}
	// And the client refuses a hub that runs as another uid.
	h2 := startHub(t, ServerConfig{WorldSize: 1}, nil)
	_, err = dial(context.Background(), h2.Path(), h2.hello(0), os.Getuid()+1)
	if err == nil || !strings.Contains(err.Error(), "not talking to it") {
		t.Errorf("got %v, want the client to refuse the hub", err)
	}
}

// TestRendezvousClockStartsAtFirstJoin: while no rank has said hello the
// rendezvous cannot time out (ranks of tprun -- CMD need not use the hub
// at all), so ranks that all join after more than the timeout still meet,
// and nothing is logged.
func TestRendezvousClockStartsAtFirstJoin(t *testing.T) {
	const n = 3
	timeout := 200 * time.Millisecond
	h := startHub(t, ServerConfig{WorldSize: n, RendezvousTimeout: timeout}, nil)
	time.Sleep(3 * timeout)
	clients := dialAll(t, h)
	onEvery(t, clients, func(r int, c *Client) error { return c.Barrier(context.Background()) })
	for _, c := range clients {
		_ = c.Close()
	}
	h.log.mu.Lock()
	defer h.log.mu.Unlock()
	for _, l := range h.log.lines {
		if strings.Contains(l, "rendezvous") {
			t.Errorf("hub logged %q", l)
		}
	}
}

func TestRendezvousTimeout(t *testing.T) {
	const n = 4
	timeout := 300 * time.Millisecond
	h := startHub(t, ServerConfig{WorldSize: n, RendezvousTimeout: timeout, TimeoutKnob: "tprun --rendezvous-timeout"}, nil)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	start := time.Now()
	for r := range 2 {
		wg.Go(func() {
			c, err := Dial(context.Background(), h.Path(), h.hello(r))
			if c != nil {
				_ = c.Close()
			}
			errs[r] = err
		})
	}
	wg.Wait()
	if took := time.Since(start); took < timeout || took > timeout+time.Second {
		t.Errorf("Dial failed after %v, want about %v", took, timeout)
	}
	for r, err := range errs {
		var rv *RendezvousError
		if !errors.As(err, &rv) || !slices.Equal(rv.Missing, []int{2, 3}) || !errors.Is(err, ErrRendezvous) || !errors.Is(err, ErrAborted) {
			t.Errorf("rank %d: got %v, want a *RendezvousError naming ranks 2,3", r, err)
			continue
		}
		if !strings.Contains(err.Error(), "rendezvous timed out after 300ms: ranks 2,3 never connected (tprun --rendezvous-timeout sets this limit)") {
			t.Errorf("rank %d: message %q", r, err)
		}
	}
	// A latecomer is told the failure instead of waiting.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := Dial(ctx, h.Path(), h.hello(3))
	if !errors.Is(err, ErrRendezvous) {
		t.Errorf("latecomer: got %v", err)
	}
	// Ranks 0 and 1 joined, 3 was turned away by the failure, 2 never came.
	for r, want := range []bool{true, true, false, true} {
		if got := h.SaidHello(r); got != want {
			t.Errorf("SaidHello(%d) = %v, want %v", r, got, want)
		}
	}
	if !h.log.contains("ranks 2,3 never connected (tprun --rendezvous-timeout sets this limit)") {
		t.Errorf("not logged:\n%s", h.log)
	}
}

// TestMalformedInput writes raw bytes on the socket: each bad connection
// is refused and logged, and the hub keeps serving the job.
func TestMalformedInput(t *testing.T) {
	h := startHub(t, ServerConfig{WorldSize: 2}, nil)
	oversize := []byte{'T', 'P', 'H', Version, 0, 0, 0, 0, byte(msgHello)}
	binary.BigEndian.PutUint32(oversize[4:8], MaxFrame+1)
	hello, err := encodeFrame(&helloMsg{h: h.hello(0)})
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		desc string
		in   []byte
		want string
	}{
		{"garbage", []byte("GET / HTTP/1.1\r\n\r\n"), "bad magic"},
		{"other version", append([]byte{'T', 'P', 'H', Version + 1}, hello[4:]...), "version"},
		{"oversize frame", oversize, "exceeds the limit"},
		{"truncated hello", hello[:len(hello)-2], "closed inside a frame"},
		{"op before hello", mustEncode(t, &opMsg{seq: 1, kind: opBarrier}), "expected a hello frame"},
		{"random bytes", randomBytes(512), "no valid hello"},
	}
	for _, tc := range cases {
		t.Run(tc.desc, func(t *testing.T) {
			c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: h.Path(), Net: "unix"})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.in); err != nil {
				t.Fatal(err)
			}
			_ = c.CloseWrite()
			waitFor(t, func() bool { return h.log.contains(tc.want) }, h.log.String)
		})
	}
	clients := dialAll(t, h)
	onEvery(t, clients, func(r int, c *Client) error { return c.Barrier(context.Background()) })

	// Garbage from an admitted rank fails the job, naming it.
	_, _ = clients[1].fc.c.Write([]byte("\x00\x01garbage-after-hello"))
	err = clients[0].Barrier(context.Background())
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 1 || !strings.Contains(re.Reason, "malformed frame") {
		t.Errorf("got %v, want a *RankError naming rank 1", err)
	}
}

func mustEncode(t *testing.T, m message) []byte {
	t.Helper()
	b, err := encodeFrame(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.UintN(256))
	}
	return b
}

func TestListenAndClose(t *testing.T) {
	s, err := Listen(ServerConfig{WorldSize: 1, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(s.Path())
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("hub directory mode %v, want 0700", fi.Mode().Perm())
	}
	// Close without Serve, twice.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("hub directory still there: %v", err)
	}
	if err := s.Serve(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Serve after Close: %v", err)
	}

	// Serve ends when its context does.
	s, err = Listen(ServerConfig{WorldSize: 1, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(ctx) }()
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("Serve: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	for _, cfg := range []ServerConfig{{WorldSize: 0, Token: "t"}, {WorldSize: MaxWorldSize + 1, Token: "t"}, {WorldSize: 2}} {
		if s, err := Listen(cfg); err == nil {
			_ = s.Close()
			t.Errorf("Listen(%+v) succeeded", cfg)
		}
	}
}

// TestGivenPath covers the external-launcher mode: a path chosen by the
// caller, a parent made 0700, a stale socket replaced, a live one kept.
func TestGivenPath(t *testing.T) {
	base := shortTempDir(t)
	path := filepath.Join(base, "sub", "job.sock")

	// Dial before the hub exists: it retries until the socket appears.
	h := Hello{Rank: 0, WorldSize: 1, Token: "tok"}
	dialed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := Dial(ctx, path, h)
		if err == nil {
			err = c.Barrier(ctx)
			_ = c.Close()
		}
		dialed <- err
	}()
	time.Sleep(30 * time.Millisecond)

	// A stale socket file: bound, but nobody listens.
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	stale, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	stale.SetUnlinkOnClose(false)
	_ = stale.Close()
	time.Sleep(30 * time.Millisecond) // Dial now sees ECONNREFUSED and retries

	s, err := Listen(ServerConfig{WorldSize: 1, Token: "tok", Path: path})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(context.Background()) }()
	if err := <-dialed; err != nil {
		t.Errorf("Dial through a late hub: %v", err)
	}
	// A second hub on the live path is refused.
	if s2, err := Listen(ServerConfig{WorldSize: 1, Token: "tok", Path: path}); err == nil {
		_ = s2.Close()
		t.Error("second Listen on a live socket succeeded")
	} else if !strings.Contains(err.Error(), "another hub is listening") {
		t.Errorf("second Listen: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Errorf("Serve: %v", err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("socket still there after Close: %v", err)
	}
	// The parent Listen made is 0700 and is left for other jobs.
	fi, err := os.Stat(filepath.Dir(path))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("parent: %v %v", fi.Mode(), err)
	}

	// Neither a non-socket at the path nor an overlong path is accepted.
	plain := filepath.Join(base, "plain")
	if err := os.WriteFile(plain, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(base, strings.Repeat("x", 120))
	for _, p := range []string{plain, long} {
		if s, err := Listen(ServerConfig{WorldSize: 1, Token: "t", Path: p}); err == nil {
			_ = s.Close()
			t.Errorf("Listen at %s succeeded", p)
		}
	}
}

// shortTempDir is a t.TempDir substitute with a path short enough for
// socket names (t.TempDir embeds the test name).
func shortTempDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "hubt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	return dir
}

func TestDialGivesUp(t *testing.T) {
	path := filepath.Join(shortTempDir(t), "none.sock")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := Dial(ctx, path, Hello{Rank: 0, WorldSize: 1, Token: "t"})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no hub at") {
		t.Errorf("got %v", err)
	}
	for _, h := range []Hello{{Rank: 1, WorldSize: 1}, {Rank: -1, WorldSize: 2}, {Rank: 0, WorldSize: 0}} {
		if _, err := Dial(ctx, path, h); err == nil || !strings.Contains(err.Error(), "out of range") {
			t.Errorf("Dial(%+v): %v", h, err)
		}
	}
}

func TestTooLarge(t *testing.T) {
	h := startHub(t, ServerConfig{WorldSize: 2}, nil)
	clients := dialAll(t, h)
	if _, err := clients[0].AllGather(context.Background(), make([]byte, MaxBlob(2)+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("AllGather: got %v, want ErrTooLarge", err)
	}
	if _, err := clients[0].BroadcastFDs(context.Background(), 0, make([]int, MaxFDs+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("BroadcastFDs: got %v, want ErrTooLarge", err)
	}
	// Nothing was sent: the job is still fine.
	onEvery(t, clients, func(r int, c *Client) error { return c.Barrier(context.Background()) })
}

// TestResultBeforeHubCloses: a result that arrives just before the hub
// closes the connection still completes the call.
func TestResultBeforeHubCloses(t *testing.T) {
	for i := range 40 {
		h := startHub(t, ServerConfig{WorldSize: 2}, nil)
		clients := dialAll(t, h)
		done := make(chan error, 1)
		go func() { done <- clients[0].Barrier(context.Background()) }()
		if err := clients[1].Barrier(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := h.Drain(context.Background()); err != nil {
			t.Fatal(err)
		}
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Fatalf("round %d: rank 0's barrier: %v", i, err)
		}
	}
}

// TestRemoveStaleDirs: Listen removes the hub directories whose owner died
// without closing its hub (tprun SIGKILLed), and only those: not one whose
// owner file a live hub holds locked (even if the pid it names means
// nothing here: another pid namespace), not one without an owner file, not
// another name's.
func TestRemoveStaleDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	mk := func(name string, owner bool) string {
		d := filepath.Join(tmp, name)
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(d, "hub.sock"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if owner {
			// A pid that does not exist: what a live hub in another pid
			// namespace looks like from here, and a dead one's too.
			if err := os.WriteFile(filepath.Join(d, ownerFile), []byte("2147483646\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	stale := mk(hubDirPrefix+"stale", true)
	held := mk(hubDirPrefix+"held", true)
	lock, err := os.Open(filepath.Join(held, ownerFile))
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	keep := []string{held, mk(hubDirPrefix+"noowner", false), mk("other-dir", true)}
	s, err := Listen(ServerConfig{WorldSize: 1, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(stale); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("stale directory %s: %v, want it removed", stale, err)
	}
	for _, d := range keep {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("%s: %v, want it kept", d, err)
		}
	}
	// Its own directory: its pid in the owner file, which it holds locked,
	// so a second hub's sweep leaves it alone.
	dir := filepath.Dir(s.Path())
	b, err := os.ReadFile(filepath.Join(dir, ownerFile))
	if err != nil || strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("own owner file: %q, %v", b, err)
	}
	s2, err := Listen(ServerConfig{WorldSize: 1, Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(s.Path()); err != nil {
		t.Errorf("a second hub's sweep removed the first's socket: %v", err)
	}
	for _, h := range []*Server{s, s2} {
		d := filepath.Dir(h.Path())
		if err := h.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(d); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("own directory after Close: %v", err)
		}
	}
}

// TestListenConcurrent: hubs made at the same time under one temp
// directory never remove each other's directory (each one's sweep runs
// while the others are being made).
func TestListenConcurrent(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	var wg sync.WaitGroup
	errs := make(chan error, 16*25)
	for range 16 {
		wg.Go(func() {
			for range 25 {
				s, err := Listen(ServerConfig{WorldSize: 1, Token: "t"})
				if err != nil {
					errs <- err
					continue
				}
				if _, err := os.Stat(s.Path()); err != nil {
					errs <- err
				}
				if err := s.Close(); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestListenDeepTempDir: a TMPDIR too deep for a Unix socket path makes
// Listen use /tmp instead of failing (tprun used to exit 1 there).
// TestListenDeepTempDirNoFallback: with a TMPDIR too deep for a socket and
// no usable /tmp, Listen says that TMPDIR is the cause (it used to pass on
// the fallback's bare "permission denied").
func TestListenDeepTempDirNoFallback(t *testing.T) {
	deep := filepath.Join(shortTempDir(t), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", deep)
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, fallback, want string }{
		{"a file", notDir, "is not there to fall back on (not a directory): set TMPDIR to a shorter directory"},
		{"missing", filepath.Join(t.TempDir(), "missing"), "is not there to fall back on"},
		// A directory nobody may make a directory in, root included.
		{"unwritable", "/proc", "and making the socket directory in /proc instead failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func(old string) { fallbackTmp = old }(fallbackTmp)
			fallbackTmp = tc.fallback
			s, err := Listen(ServerConfig{WorldSize: 1, Token: "t"})
			if err == nil {
				_ = s.Close()
				t.Fatalf("Listen with TMPDIR=%s and fallback %s succeeded", deep, tc.fallback)
			}
			for _, w := range []string{deep + " (TMPDIR) is too long for a Unix socket path", tc.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
		})
	}
}

func TestListenDeepTempDir(t *testing.T) {
	deep := filepath.Join(shortTempDir(t), strings.Repeat("d", 60), strings.Repeat("e", 60))
	if err := os.MkdirAll(deep, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Setenv("TMPDIR", deep)
	s, err := Listen(ServerConfig{WorldSize: 1, Token: "t"})
	if err != nil {
		t.Fatalf("Listen with TMPDIR=%s (%d bytes): %v", deep, len(deep), err)
	}
	dir := filepath.Dir(s.Path())
	if filepath.Dir(dir) != "/tmp" || len(s.Path()) > maxSocketPath {
		t.Errorf("socket at %s, want it in a directory under /tmp", s.Path())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("hub directory still there: %v", err)
	}
}

// TestLastWordBeforeHubGoes: a hub that ended the job and then went away
// (its host drained and closed it) leaves its verdict in the client's
// socket. A call whose frame cannot be sent any more (the hub's end is
// closed) reports that verdict, not the closed connection, even when the
// client's reader had not read it yet: here the reader starts only after
// the call failed to send.
func TestLastWordBeforeHubGoes(t *testing.T) {
	lb := &logBuf{}
	s, err := Listen(ServerConfig{WorldSize: 1, Token: "t", Logf: lb.logf})
	if err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(context.Background()) }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn, err := connect(ctx, s.Path())
	if err != nil {
		t.Fatal(err)
	}
	c, err := handshake(ctx, newFrameConn(conn), s.Path(), Hello{Rank: 0, WorldSize: 1, Token: "t"}, os.Getuid())
	if err != nil {
		t.Fatal(err)
	}
	s.Abort(0, "ended by the test")
	_ = s.Drain(ctx)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(50 * time.Millisecond)
		c.readLoop()
	}()
	defer c.Close()
	err = c.Barrier(context.Background())
	var re *RankError
	if !errors.As(err, &re) || re.Rank != 0 || !strings.Contains(err.Error(), "ended by the test") {
		t.Fatalf("got %v, want the hub's verdict", err)
	}
}
