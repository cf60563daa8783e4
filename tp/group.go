package tp

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tprun/tprun/internal/hub"
	"github.com/tprun/tprun/mailbox"
)

// Group is this rank's view of the job: who it is, and the collectives it
// shares with the other ranks. Every rank must make the same calls in the
// same order; a rank that dies, leaves early or calls something else makes
// the others' calls fail with a *RankError naming it (errors.Is(err,
// ErrAborted)).
//
// A collective whose ctx ends before its result arrives returns ctx's
// error. If it had already been sent, the other ranks could still complete
// it with this rank's contribution, and a retry would be matched with
// their next call instead; so such a call ends the job: the peers' calls
// fail with a *RankError naming this rank ("gave up on ..."), and so do
// this rank's later calls. A call cancelled before it was sent leaves the
// group usable.
//
// Nothing waits forever: a collective that some live rank never joins
// fails on every rank once the collective timeout of the first rank that
// waits in it runs out (WithCollectiveTimeout, TPRUN_COLLECTIVE_TIMEOUT,
// else DefaultCollectiveTimeout), even when the callers' ctx has no
// deadline. The error is a *CollectiveTimeoutError naming the collective
// and the ranks that never came, with their host and pid (errors.Is(err,
// ErrCollectiveTimeout) and errors.Is(err, ErrAborted)); the job is over.
//
// The collectives are made one at a time; calls from several goroutines
// queue up in the order they arrive, which the other ranks must match.
type Group struct {
	c *hub.Client
	l launch

	// Set on rank 0 when it hosts the hub (no tprun launcher).
	srv       *hub.Server
	stopServe context.CancelFunc
	served    chan error

	closeOnce sync.Once
	closeErr  error

	// The job watch of the ops made from this group (jobContext).
	jobMu     sync.Mutex
	job       context.Context
	jobFailed context.CancelCauseFunc
	jobWait   chan struct{} // closed when the watcher ends
	closed    bool
}

// A Group is what the mailbox exchanges its handles through.
var _ mailbox.Exchanger = (*Group)(nil)

// drainTimeout bounds how long the hub's host waits, when it closes, for
// its peers' last results to leave.
const drainTimeout = 5 * time.Second

// Rank is this rank's index in the job, 0..Size()-1.
func (g *Group) Rank() int { return g.l.rank }

// Size is the number of ranks in the job.
func (g *Group) Size() int { return g.l.size }

// LocalRank is this rank's index among the ranks on this node.
func (g *Group) LocalRank() int { return g.l.localRank }

// LocalSize is the number of ranks on this node.
func (g *Group) LocalSize() int { return g.l.localSize }

// Device is the device this rank should use: TPRUN_DEVICES[local rank], or
// the local rank. Where the launcher gives every rank its own
// CUDA_VISIBLE_DEVICES (srun with one GPU per task), the local rank is not
// the right ordinal: pass WithDevice(0) to NewUpProjection.
func (g *Group) Device() int { return g.l.device() }

// Launcher names what started the ranks: "tprun", "srun", "mpirun" or
// "torchrun".
func (g *Group) Launcher() string { return g.l.launcher }

// Peers returns what every rank said when it joined (pid, hostname,
// device); index = rank.
func (g *Group) Peers() []Peer { return g.c.Peers() }

// SpansNodes reports whether the job's ranks run on more than one node
// (or TPRUN_FORCE_NODE made them act so). Its ranks then reach each other
// over TCP and share GPU memory only through CUDA fabric handles: the
// descriptor collectives (AllGatherFDs, BroadcastFDs) fail with
// ErrCrossNode, and a GPU mailbox needs an IMEX channel on every node.
func (g *Group) SpansNodes() bool { return g.l.cross }

// Barrier returns when every rank has called it.
func (g *Group) Barrier(ctx context.Context) error {
	return g.wrap(g.c.Barrier(ctx))
}

// AllGather returns every rank's b; index = rank. Each rank may contribute
// at most MaxBlob(Size()) bytes (ErrTooLarge); an empty contribution comes
// back nil.
func (g *Group) AllGather(ctx context.Context, b []byte) ([][]byte, error) {
	out, err := g.c.AllGather(ctx, b)
	return out, g.wrap(err)
}

// AllGatherFDs: every rank contributes one descriptor; the result holds one
// new close-on-exec descriptor per rank (own included), owned by the caller.
func (g *Group) AllGatherFDs(ctx context.Context, fd int) ([]int, error) {
	out, err := g.c.AllGatherFDs(ctx, fd)
	return out, g.wrap(err)
}

// Broadcast returns root's b (at most MaxBlob(1) bytes) on every rank; the
// other ranks' b is ignored.
func (g *Group) Broadcast(ctx context.Context, root int, b []byte) ([]byte, error) {
	out, err := g.c.Broadcast(ctx, root, b)
	return out, g.wrap(err)
}

// BroadcastFDs: root contributes fds, every rank (root too) gets new
// close-on-exec copies, owned by the caller. The other ranks' fds are
// ignored.
func (g *Group) BroadcastFDs(ctx context.Context, root int, fds []int) ([]int, error) {
	out, err := g.c.BroadcastFDs(ctx, root, fds)
	return out, g.wrap(err)
}

// Abort fails the job for every rank with an error naming this rank.
func (g *Group) Abort(reason string) error { return g.c.Abort(reason) }

// abortJob is Abort for the ops made from the group (jobWatcher).
func (g *Group) abortJob(reason string) error { return g.Abort(reason) }

// Close leaves the job. Call it after this rank's last collective; a peer
// still waiting for this rank then fails, naming it. On the rank that
// hosts the hub, Close first lets the peers' last results go out, then
// stops the hub and removes its socket.
func (g *Group) Close() error {
	g.closeOnce.Do(func() {
		var errs []error
		if err := g.c.Close(); err != nil {
			errs = append(errs, err)
		}
		g.jobMu.Lock()
		g.closed = true
		wait := g.jobWait
		g.jobMu.Unlock()
		if wait != nil {
			<-wait // the client's Done is closed now: the watcher ends
		}
		errs = append(errs, g.stopHub())
		g.closeErr = errors.Join(errs...)
	})
	return g.closeErr
}

// jobContext returns a context that ends, with the job's failure as its
// cause, once the job fails (anything matching hub.ErrAborted: a peer died,
// left or aborted, the hub went away). A Group closed by this rank leaves
// it alone: ops made from the group work without it.
func (g *Group) jobContext() context.Context {
	g.jobMu.Lock()
	defer g.jobMu.Unlock()
	if g.job != nil {
		return g.job
	}
	g.job, g.jobFailed = context.WithCancelCause(context.Background())
	if g.closed {
		return g.job // never ends; no watcher to wait for
	}
	g.jobWait = make(chan struct{})
	go func() {
		defer close(g.jobWait)
		<-g.c.Done()
		if err := g.wrap(g.c.Err()); errors.Is(err, hub.ErrAborted) {
			g.jobFailed(err)
		}
	}()
	return g.job
}

// stopHub stops the hub this rank hosts, if any, and waits for it. It
// first lets the frames queued for the peers (their last results, or the
// job's failure) go out.
func (g *Group) stopHub() error {
	if g.srv == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), drainTimeout)
	// A peer that stopped reading is not worth waiting for longer: what
	// it was sent is lost either way.
	_ = g.srv.Drain(ctx)
	cancel()
	g.stopServe()
	serveErr := <-g.served
	return errors.Join(serveErr, g.srv.Close())
}

// wrap names rank 0 when the hub it hosts went away: without the launcher,
// a lost hub means rank 0 died or left (or, across nodes, its node went
// away).
func (g *Group) wrap(err error) error {
	host := ""
	if g.l.cross {
		host = g.c.Peers()[0].Hostname
	}
	return blameHost(g.l, g.srv != nil, host, err)
}

// blameHost names rank 0, on host (across nodes; "" on one node), for a
// lost hub that it hosted, unless this rank is the host.
func blameHost(l launch, isHost bool, host string, err error) error {
	if err == nil || isHost || l.launcher == LauncherTprun || !errors.Is(err, hub.ErrHubLost) {
		return err
	}
	return fmt.Errorf("%w: %w", &hub.RankError{Rank: 0, Host: host, Reason: "it hosts the hub and went away"}, err)
}
