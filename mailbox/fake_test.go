package mailbox

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeHub is an in-process stand-in for the rendezvous hub: goroutine ranks
// meet in numbered rounds, and descriptors are passed as dups, exactly as
// SCM_RIGHTS would hand each receiver a new descriptor.
type fakeHub struct {
	size   int
	mu     sync.Mutex
	rounds map[int]*fakeRound
}

type fakeRound struct {
	op      string
	arrived int
	bytes   [][]byte
	fds     [][]int // fds[contributor][receiver], dups owned by the receiver
	done    chan struct{}
}

func newFakeHub(size int) *fakeHub {
	return &fakeHub{size: size, rounds: map[int]*fakeRound{}}
}

// rank returns rank r's Exchanger; each is used by one goroutine.
func (h *fakeHub) rank(r int) *fakeRank { return &fakeRank{hub: h, r: r} }

type fakeRank struct {
	hub *fakeHub
	r   int
	seq int
}

var _ Exchanger = (*fakeRank)(nil)

func (f *fakeRank) Rank() int { return f.r }
func (f *fakeRank) Size() int { return f.hub.size }

// meet deposits this rank's contribution to its next round and waits for
// every rank's.
func (f *fakeRank) meet(ctx context.Context, op string, deposit func(*fakeRound) error) (*fakeRound, error) {
	h := f.hub
	h.mu.Lock()
	rd, ok := h.rounds[f.seq]
	if !ok {
		rd = &fakeRound{op: op, bytes: make([][]byte, h.size), fds: make([][]int, h.size), done: make(chan struct{})}
		h.rounds[f.seq] = rd
	}
	f.seq++
	if rd.op != op {
		h.mu.Unlock()
		return nil, fmt.Errorf("fake hub: rank %d called %s while others called %s", f.r, op, rd.op)
	}
	err := deposit(rd)
	rd.arrived++
	if rd.arrived == h.size {
		close(rd.done)
	}
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	select {
	case <-rd.done:
		return rd, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *fakeRank) Barrier(ctx context.Context) error {
	_, err := f.meet(ctx, "barrier", func(*fakeRound) error { return nil })
	return err
}

func (f *fakeRank) AllGather(ctx context.Context, b []byte) ([][]byte, error) {
	rd, err := f.meet(ctx, "allgather", func(rd *fakeRound) error {
		rd.bytes[f.r] = append([]byte(nil), b...)
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(rd.bytes))
	for i, b := range rd.bytes {
		out[i] = append([]byte(nil), b...)
	}
	return out, nil
}

func dupAll(fd, n int) ([]int, error) {
	out := make([]int, n)
	for i := range out {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, o := range out[:i] {
				_ = unix.Close(o)
			}
			return nil, err
		}
		out[i] = d
	}
	return out, nil
}

func (f *fakeRank) AllGatherFDs(ctx context.Context, fd int) ([]int, error) {
	rd, err := f.meet(ctx, "allgatherfds", func(rd *fakeRound) error {
		d, err := dupAll(fd, f.hub.size)
		rd.fds[f.r] = d
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]int, f.hub.size)
	for c := range out {
		if rd.fds[c] == nil {
			return nil, fmt.Errorf("fake hub: rank %d contributed no descriptor", c)
		}
		out[c] = rd.fds[c][f.r]
	}
	return out, nil
}

func (f *fakeRank) BroadcastFDs(ctx context.Context, root int, fds []int) ([]int, error) {
	rd, err := f.meet(ctx, "broadcastfds", func(rd *fakeRound) error {
		if f.r != root {
			return nil
		}
		for _, fd := range fds {
			d, err := dupAll(fd, f.hub.size)
			if err != nil {
				return err
			}
			rd.fds = append(rd.fds, d)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var out []int
	for _, d := range rd.fds[f.hub.size:] {
		out = append(out, d[f.r])
	}
	return out, nil
}

// onRanks runs fn for every rank of a fresh fake hub on its own goroutine
// and returns the errors, index = rank.
func onRanks(size int, fn func(r int, ex Exchanger) error) []error {
	hub := newFakeHub(size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() { errs[r] = fn(r, hub.rank(r)) })
	}
	wg.Wait()
	return errs
}

// newHosts creates a group of Hosts over a fake hub; they are closed when
// the test ends.
func newHosts(t testing.TB, size int, cfg Config) []*Host {
	t.Helper()
	hosts := make([]*Host, size)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := onRanks(size, func(r int, ex Exchanger) error {
		h, err := NewHost(ctx, ex, cfg)
		hosts[r] = h
		return err
	})
	for _, h := range hosts {
		if h != nil {
			t.Cleanup(func() {
				if err := h.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	return hosts
}
