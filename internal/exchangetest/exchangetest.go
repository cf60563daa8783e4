package exchangetest

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// Hub is where the ranks of one fake group meet.
type Hub struct {
	size   int
	mu     sync.Mutex
	rounds map[int]*round
}

type round struct {
	op      string
	arrived int
	bytes   [][]byte
	fds     [][]int // fds[contributor][receiver], dups owned by the receiver
	done    chan struct{}
}

// NewHub returns a hub for a group of size ranks.
func NewHub(size int) *Hub {
	return &Hub{size: size, rounds: map[int]*round{}}
}

// Rank returns rank r's exchanger. Call it once per rank: a Rank counts its
// own rounds, and each is used by one goroutine.
func (h *Hub) Rank(r int) *Rank { return &Rank{hub: h, r: r} }

// Run runs fn for every rank of a fresh hub, each on its own goroutine, and
// returns the errors, index = rank.
func Run(size int, fn func(r int, ex *Rank) error) []error {
	hub := NewHub(size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() { errs[r] = fn(r, hub.Rank(r)) })
	}
	wg.Wait()
	return errs
}

// Rank is one rank's view of a Hub; it has the methods of
// mailbox.Exchanger.
type Rank struct {
	hub *Hub
	r   int
	seq int
}

// Rank returns the rank number.
func (f *Rank) Rank() int { return f.r }

// Size returns the group size.
func (f *Rank) Size() int { return f.hub.size }

// meet deposits this rank's contribution to its next round and waits for
// every rank's.
func (f *Rank) meet(ctx context.Context, op string, deposit func(*round) error) (*round, error) {
	h := f.hub
	h.mu.Lock()
	rd, ok := h.rounds[f.seq]
	if !ok {
		rd = &round{op: op, bytes: make([][]byte, h.size), fds: make([][]int, h.size), done: make(chan struct{})}
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

// Barrier returns once every rank has called it.
func (f *Rank) Barrier(ctx context.Context) error {
	_, err := f.meet(ctx, "barrier", func(*round) error { return nil })
	return err
}

// AllGather returns every rank's b (copies), index = rank.
func (f *Rank) AllGather(ctx context.Context, b []byte) ([][]byte, error) {
	rd, err := f.meet(ctx, "allgather", func(rd *round) error {
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

// AllGatherFDs returns a new descriptor for every rank's fd, index = rank,
// owned by the caller.
func (f *Rank) AllGatherFDs(ctx context.Context, fd int) ([]int, error) {
	rd, err := f.meet(ctx, "allgatherfds", func(rd *round) error {
		d, err := dupN(fd, f.hub.size)
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

// BroadcastFDs returns new descriptors for root's fds, owned by the caller.
func (f *Rank) BroadcastFDs(ctx context.Context, root int, fds []int) ([]int, error) {
	rd, err := f.meet(ctx, "broadcastfds", func(rd *round) error {
		if f.r != root {
			return nil
		}
		// Root's descriptors go after the size per-contributor entries
		// that AllGatherFDs uses.
		for _, fd := range fds {
			d, err := dupN(fd, f.hub.size)
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

// dupN returns n close-on-exec dups of fd, or none.
func dupN(fd, n int) ([]int, error) {
	out := make([]int, n)
	for i := range out {
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			for _, o := range out[:i] {
				_ = unix.Close(o)
			}
			return nil, fmt.Errorf("fake hub: dup of fd %d: %w", fd, err)
		}
		out[i] = d
	}
	return out, nil
}
