package tp

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/mailbox"
)

// upHub is an in-process stand-in for the rendezvous hub, for running
// up-projection ranks as goroutines: ranks meet in numbered rounds, and
// descriptors are passed as dups, as SCM_RIGHTS hands each receiver a new
// descriptor.
type upHub struct {
	size   int
	mu     sync.Mutex
	rounds map[int]*upRound
}

type upRound struct {
	op      string
	arrived int
	bytes   [][]byte
	fds     [][]int // fds[contributor][receiver], dups owned by the receiver
	done    chan struct{}
}

func newUpHub(size int) *upHub { return &upHub{size: size, rounds: map[int]*upRound{}} }

// rank returns rank r's Exchanger; each is used by one goroutine.
func (h *upHub) rank(r int) *upRank { return &upRank{hub: h, r: r} }

type upRank struct {
	hub *upHub
	r   int
	seq int
}

var _ mailbox.Exchanger = (*upRank)(nil)

func (f *upRank) Rank() int { return f.r }
func (f *upRank) Size() int { return f.hub.size }

// meet deposits this rank's contribution to its next round and waits for
// every rank's.
func (f *upRank) meet(ctx context.Context, op string, deposit func(*upRound) error) (*upRound, error) {
	h := f.hub
	h.mu.Lock()
	rd, ok := h.rounds[f.seq]
	if !ok {
		rd = &upRound{op: op, bytes: make([][]byte, h.size), fds: make([][]int, h.size), done: make(chan struct{})}
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

func (f *upRank) Barrier(ctx context.Context) error {
	_, err := f.meet(ctx, "barrier", func(*upRound) error { return nil })
	return err
}

func (f *upRank) AllGather(ctx context.Context, b []byte) ([][]byte, error) {
	rd, err := f.meet(ctx, "allgather", func(rd *upRound) error {
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

func upDupAll(fd, n int) ([]int, error) {
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

func (f *upRank) AllGatherFDs(ctx context.Context, fd int) ([]int, error) {
	rd, err := f.meet(ctx, "allgatherfds", func(rd *upRound) error {
		d, err := upDupAll(fd, f.hub.size)
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

func (f *upRank) BroadcastFDs(ctx context.Context, root int, fds []int) ([]int, error) {
	rd, err := f.meet(ctx, "broadcastfds", func(rd *upRound) error {
		if f.r != root {
			return nil
		}
		for _, fd := range fds {
			d, err := upDupAll(fd, f.hub.size)
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

// onUpRanks runs fn for every rank of a fresh fake hub, each on its own
// goroutine, and returns the errors, index = rank.
func onUpRanks(size int, fn func(r int, ex mailbox.Exchanger) error) []error {
	hub := newUpHub(size)
	errs := make([]error, size)
	var wg sync.WaitGroup
	for r := range size {
		wg.Go(func() { errs[r] = fn(r, hub.rank(r)) })
	}
	wg.Wait()
	return errs
}
