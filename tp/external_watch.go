package tp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/internal/fdpass"
)

// externalRankError is the failure an ExternalGroup's job watch ends the
// job with: a rank whose process ended without closing its group, or that
// aborted its group (this rank included) or gave up on a descriptor
// collective. It unwraps to a *RankError naming the rank, so it matches
// ErrAborted, and errors.As finds the rank.
type externalRankError struct {
	rank *RankError
	pid  int
}

func (e *externalRankError) Error() string {
	return fmt.Sprintf("tp: rank %d (pid %d) %s", e.rank.Rank, e.pid, e.rank.Reason)
}

func (e *externalRankError) Unwrap() error { return e.rank }

// fdWatch is the job watch of an ExternalGroup whose ranks share this node
// and whose peers' processes it can watch (pidfds): one goroutine that
// blocks in poll on the peers' pidfds, the route's listener and a wake
// eventfd, and ends the job (job, with a cause naming the rank) when
//
//   - a peer's process ends without having said that it closed its group
//     (the route's notice): a rank that closed its group and then exited
//     is a job's normal end, and ranks finish at different times;
//   - a peer's notice says it aborted its group, or gave up on a
//     descriptor collective (at once, whether its process lives on or
//     not);
//   - this rank aborts its group (fail, from Abort).
//
// To learn whether an exited rank left first, the watch takes the route's
// lock (a call in progress holds it and sees the exit itself) and drains
// the listener's backlog into the route's state, as a call would: notices
// are noted, descriptors sent early wait for their call (fdRoute.drain).
// It wakes on the listener too, so that an abort notice that arrives
// while no call runs fails the job at once.
//
// It owns duplicates of the route's pidfds and listener, so that the
// route may close its own (a failed call) while the watch runs; stop ends
// it and closes them.
type fdWatch struct {
	r    *fdRoute
	job  context.Context
	fail context.CancelCauseFunc
	// wake is an eventfd that stop writes; ln a duplicate of the route's
	// listener, -1 once the route takes no more connections; pidfds[q] a
	// duplicate of rank q's pidfd, -1 where there is none or once its
	// exit has been judged. Only run touches them until done is closed.
	wake     int
	ln       int
	pidfds   []int
	stopping atomic.Bool
	done     chan struct{}
	stopOnce sync.Once
	// judged counts the peers' exits the watch has judged (and failed the
	// job for, where one was a failure), for a test to wait on.
	judged atomic.Int32
}

// watchFDs starts the job watch of r, or returns nil when r watches no
// peer's process (a kernel without pidfds, ranks that are this process):
// the job's failures are then seen at the steps' deadline. A watch that
// cannot be set up (no descriptors left) is likewise none.
func watchFDs(r *fdRoute) *fdWatch {
	watched := false
	for _, fd := range r.pidfds {
		watched = watched || fd >= 0
	}
	if !watched {
		return nil
	}
	w := &fdWatch{r: r, wake: -1, ln: -1, pidfds: make([]int, len(r.pidfds)), done: make(chan struct{})}
	for q := range w.pidfds {
		w.pidfds[q] = -1
	}
	ok := func() bool {
		var err error
		if w.wake, err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			return false
		}
		rc, err := r.ln.SyscallConn()
		if err != nil {
			return false
		}
		if cerr := rc.Control(func(fd uintptr) { w.ln, err = fdpass.Dup(int(fd)) }); cerr != nil || err != nil {
			return false
		}
		for q, fd := range r.pidfds {
			if fd >= 0 {
				if w.pidfds[q], err = fdpass.Dup(fd); err != nil {
					return false
				}
			}
		}
		return true
	}()
	if !ok {
		w.closeFDs()
		return nil
	}
	w.job, w.fail = context.WithCancelCause(context.Background())
	r.mu.Lock()
	r.noticed = func(q int, n notice) {
		if n.kind != fdLeft {
			w.fail(w.rankError(q, n.String()))
		}
	}
	r.mu.Unlock()
	go w.run()
	return w
}

// rankError is the job's failure that rank q is to blame for, why in words.
func (w *fdWatch) rankError(q int, why string) error {
	return &externalRankError{rank: &RankError{Rank: q, Reason: why}, pid: w.r.peers[q].PID}
}

// abort ends the job for this rank's own Abort.
func (w *fdWatch) abort(reason string) {
	w.fail(w.rankError(w.r.rank, "aborted its group: "+reason))
}

// run is the watch's goroutine: it ends when stop wakes it, when the job
// has failed, or when poll fails (the deadline then catches what it would
// have).
func (w *fdWatch) run() {
	defer close(w.done)
	for w.job.Err() == nil {
		pfd := []unix.PollFd{{Fd: int32(w.wake), Events: unix.POLLIN}}
		which := []int{-1} // rank of pfd[i]; -1 the wake, -2 the listener
		if w.ln >= 0 {
			pfd = append(pfd, unix.PollFd{Fd: int32(w.ln), Events: unix.POLLIN})
			which = append(which, -2)
		}
		for q, fd := range w.pidfds {
			if fd >= 0 {
				pfd = append(pfd, unix.PollFd{Fd: int32(fd), Events: unix.POLLIN})
				which = append(which, q)
			}
		}
		if _, err := unix.Poll(pfd, -1); err != nil {
			if errors.Is(err, unix.EINTR) {
				continue
			}
			return
		}
		if w.stopping.Load() {
			return
		}
		var exited []int
		lnReady := false
		for i, p := range pfd {
			switch {
			case p.Revents == 0 || which[i] == -1:
			case which[i] == -2:
				lnReady = true
			default:
				q := which[i]
				exited = append(exited, q)
				_ = unix.Close(w.pidfds[q])
				w.pidfds[q] = -1
			}
		}
		live, took, cause := w.look(exited)
		if cause != nil && !w.stopping.Load() {
			w.fail(cause)
		}
		w.judged.Add(int32(len(exited)))
		switch {
		case !lnReady:
		case !live:
			// Closed or interrupted: the listener no longer takes
			// connections, and a shut-down socket polls ready for good.
			_ = unix.Close(w.ln)
			w.ln = -1
		case !took:
			// Ready, yet nothing could be taken (no descriptors left to
			// accept with): look again a moment later, not at once, unless
			// stop wakes it first.
			_, _ = unix.Poll([]unix.PollFd{{Fd: int32(w.wake), Events: unix.POLLIN}}, int(peerPoll/time.Millisecond))
		}
	}
}

// look drains the route's backlog (live: the route still takes
// connections; took: a connection was taken) and judges the ranks whose
// processes exited: cause is the job's failure, nil when each of them
// closed its group first.
func (w *fdWatch) look(exited []int) (live, took bool, cause error) {
	r := w.r
	r.mu.Lock()
	defer r.mu.Unlock()
	live = !r.closed && r.life.Err() == nil
	if live {
		took = r.drain()
	}
	for _, q := range exited {
		n, ok := r.left[q]
		switch {
		case !ok:
			return live, took, w.rankError(q, "exited without closing its group")
		case n.kind != fdLeft:
			return live, took, w.rankError(q, n.String())
		}
	}
	return live, took, nil
}

// drain takes every connection waiting in the backlog, outside a call (the
// job watch; mu held), and files it as the next call would find it
// (keep). It reports whether it took any.
func (r *fdRoute) drain() bool {
	took := false
	for r.queued() {
		if err := r.ln.SetDeadline(time.Now().Add(peerPoll)); err != nil {
			return took
		}
		c, err := r.ln.AcceptUnix()
		if err != nil {
			return took
		}
		took = true
		h, fds, q, why, err := r.admit(r.life, time.Now().Add(r.timeout), c)
		switch {
		case why != "":
			r.refused++
		case err != nil:
			if r.life.Err() != nil {
				return took
			}
			if r.broken == nil {
				r.broken = err
			}
		default:
			r.keep(h, fds, q)
		}
	}
	return took
}

// stop ends the watch, waits for its goroutine and closes its
// descriptors; the job is left as it is. Safe to call twice, and on nil.
func (w *fdWatch) stop() {
	if w == nil {
		return
	}
	w.stopOnce.Do(func() {
		w.stopping.Store(true)
		var one [8]byte
		binary.NativeEndian.PutUint64(one[:], 1)
		// An eventfd write fails only when its counter would overflow: it
		// is readable then, which is all the wake needs.
		_, _ = unix.Write(w.wake, one[:])
		<-w.done
		w.closeFDs()
	})
}

func (w *fdWatch) closeFDs() {
	for _, fd := range append([]int{w.wake, w.ln}, w.pidfds...) {
		if fd >= 0 {
			_ = unix.Close(fd)
		}
	}
	w.wake, w.ln = -1, -1
	for q := range w.pidfds {
		w.pidfds[q] = -1
	}
}
