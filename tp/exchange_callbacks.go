package tp

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tprun/tprun/internal/hub"
	"github.com/tprun/tprun/mailbox"
)

// Collectives is what a rank process that already belongs to a framework's
// process group (PyTorch's torch.distributed, MPI, NCCL with a CPU side
// channel) lends the op in place of tprun's rendezvous: a fixed-size
// all-gather of bytes and a barrier over the same ranks, numbered the same
// way. ExternalGroup builds a group on them.
//
// Both are collectives of the framework: every rank calls them in the same
// order, and a call blocks until every rank has made it. They cannot be
// interrupted from tprun: ctx is checked before each call and passed on,
// and a rank that never comes is noticed when the framework's own timeout
// (or its failure handling) ends the call.
type Collectives interface {
	// AllGather: every rank passes in of the same length n; out holds
	// Size()*n bytes and receives rank r's bytes at out[r*n:(r+1)*n]. in
	// and out are valid only during the call.
	AllGather(ctx context.Context, in, out []byte) error
	// Barrier returns when every rank has called it.
	Barrier(ctx context.Context) error
}

// ErrExternalCollective is matched when a collective of the caller's
// framework (Collectives) failed. It also matches ErrAborted: the
// framework's group is in an unknown state, so the ExternalGroup refuses
// further collectives. The concrete error is an *ExternalCollectiveError.
var ErrExternalCollective = errors.New("tp: a collective of the caller's framework failed")

// ExternalCollectiveError is a collective of the caller's framework that
// failed on this rank: which one, and the framework's error.
type ExternalCollectiveError struct {
	Rank       int    // this rank
	Collective string // "AllGather" or "Barrier"
	Err        error  // what the framework's call returned
}

func (e *ExternalCollectiveError) Error() string {
	return fmt.Sprintf("tp: rank %d: the framework's %s failed: %v", e.Rank, e.Collective, e.Err)
}

func (e *ExternalCollectiveError) Unwrap() error { return e.Err }

// Is makes errors.Is true for ErrExternalCollective and ErrAborted.
func (e *ExternalCollectiveError) Is(target error) bool {
	return target == ErrExternalCollective || target == ErrAborted
}

// descriptorError refuses a descriptor collective on an ExternalGroup
// whose ranks span nodes. It matches ErrCrossNode (what a TCP hub answers
// to the same call) and ErrBackendUnavailable: the host mailbox, which
// shares a memfd, cannot run across nodes.
type descriptorError struct {
	rank int
	why  string // which rank keeps the group from one node, and why
}

func (e descriptorError) Error() string {
	return fmt.Sprintf("tp: rank %d: descriptors cannot travel through the framework's collectives, and this group's ranks span nodes "+
		"(or do not share a kernel and its network, pid and user namespaces), so they cannot pass them over node-local sockets either: "+
		"%s; across nodes the GPU mailbox shares CUDA fabric handles, which travel as bytes (the host backend cannot run on this route)", e.rank, e.why)
}

func (e descriptorError) Is(target error) bool {
	return target == ErrCrossNode || target == ErrBackendUnavailable
}

// ExternalGroup is a group whose collectives go through the caller's
// framework (Collectives) instead of tprun's rendezvous: for an op
// embedded in a process that already has a process group. It is an
// Exchanger; NewUpProjection runs on it.
//
// Descriptors cannot travel through a framework's collectives, so the
// group passes them itself when every rank runs on this node: each rank
// listens on an abstract Unix socket named from a random key that rank 0
// drew, and a rank sends its descriptors by connecting to the others
// (SCM_RIGHTS); every connection must come from this uid and a rank's pid
// and present the key's secret. The framework's collectives only carry the
// key and the word that every rank listens. On one node the group thus
// acts as a one-node Group: SpansNodes is false, the GPU mailbox shares
// POSIX descriptor handles, and the host backend runs.
//
// What differs from a Group joined with Join:
//
//   - Ranks that do not all share one kernel and its network, pid and
//     user namespaces (other nodes, other containers), or that
//     TPRUN_FORCE_NODE makes act so, span nodes (SpansNodes): memory
//     handles must travel as bytes, so the GPU mailbox shares CUDA fabric
//     handles (an IMEX channel on every node), and a driver that refuses
//     them fails setup with a *mailbox.FabricError naming the cause. The
//     descriptor collectives, and with them the host backend, are then
//     refused (errors.Is ErrCrossNode and ErrBackendUnavailable).
//   - A descriptor collective that fails on a rank (ctx, the collective
//     timeout TPRUN_COLLECTIVE_TIMEOUT, a peer that gave up) leaves the
//     group unusable on that rank (errors.Is ErrAborted); the rank tells
//     the others, whose descriptor collectives then fail too, as does a
//     rank that closes or aborts its group. A descriptor collective that
//     waits for a rank's descriptors, or sends to it, fails within a
//     moment once that rank's process has ended, even where a child
//     forked from it still holds its socket; what a rank sent before it
//     ended still arrives. The root of a broadcast does not wait for the
//     receivers.
//   - The job watch of the ops made from the group runs only on one node
//     (and where the kernel gives pidfds): a step waiting for its peers
//     ends at once, with an error that matches ErrAborted and names the
//     rank and its pid (a *RankError inside), when a peer's process ends
//     without having closed its group, when a peer aborts its group
//     (naming its reason) or gives up on a descriptor collective, or when
//     this rank calls Abort. A peer that closed its group and then exited
//     is the job's end, not a failure: ranks finish at different times.
//     Across nodes a peer that dies is noticed by a waiting step at its
//     deadline (a *TimeoutError naming the rank), or by the framework's
//     next collective, and Abort marks only this rank's group failed: the
//     framework's own abort tells the peers.
//
// The collectives are made one at a time, in the order the calls arrive.
type ExternalGroup struct {
	rank, size, localRank, device int
	c                             Collectives
	peers                         []Peer
	fds                           *fdRoute // nil when the ranks span nodes
	split                         string   // why they span nodes (nodeSplit)
	// watch is the job watch of the ops made from the group (jobContext):
	// nil without a route, or where the peers' processes cannot be
	// watched.
	watch *fdWatch

	mu     sync.Mutex // one collective at a time; guards failed, closed
	failed error      // an earlier collective failed, or Abort
	closed bool
}

var (
	_ mailbox.Exchanger   = (*ExternalGroup)(nil)
	_ mailbox.NodeSpanner = (*ExternalGroup)(nil)
	_ jobWatcher          = (*ExternalGroup)(nil)
)

// NewExternalGroup makes this rank's group on the framework's collectives:
// rank and size as the framework numbers its ranks, localRank among the
// ranks of this node, device the CUDA ordinal this rank uses (the op's
// default device). It is a collective (one all-gather through c): every
// rank of the framework's group calls it, and each learns the others'
// host, pid and device (Peers), and whether they all run on this node;
// on one node a second all-gather says that every rank listens for
// descriptors. Ranks that disagree about the size, or whose rank is not
// their place in the framework's all-gather, fail on every rank with
// ErrConfig, naming them.
func NewExternalGroup(ctx context.Context, rank, size, localRank, device int, c Collectives) (*ExternalGroup, error) {
	timeout, err := collectiveTimeout(joinConfig{lookup: os.LookupEnv})
	if err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	site := externalSite{host: host, timeout: timeout}
	if forced := os.Getenv(EnvForceNode); forced != "" {
		site.host = forced
		site.alone = fmt.Sprintf("sets %s=%s, which makes it act as on a node of its own (unset it to pass descriptors on this node)", EnvForceNode, forced)
	} else if site.node, err = nodeIdentity(host); err != nil {
		site.alone = fmt.Sprintf("could not read its node identity, so it acts as on a node of its own (%v)", err)
	}
	return newExternalGroup(ctx, rank, size, localRank, device, c, site)
}

// externalSite is where NewExternalGroup finds itself: the host name it
// reports, its node identity ("" when it must act as on a node of its
// own, alone saying why) and the timeout of its descriptor collectives.
type externalSite struct {
	host, node, alone string
	timeout           time.Duration
}

func newExternalGroup(ctx context.Context, rank, size, localRank, device int, c Collectives, site externalSite) (*ExternalGroup, error) {
	switch {
	case c == nil:
		return nil, fmt.Errorf("%w: tp: external group: the collectives are nil", ErrArgument)
	case size < 1 || size > 1<<16:
		return nil, fmt.Errorf("%w: tp: external group: size = %d, must be 1..%d", ErrArgument, size, 1<<16)
	case rank < 0 || rank >= size:
		return nil, fmt.Errorf("%w: tp: external group: rank = %d, must be 0..%d (size %d)", ErrArgument, rank, size-1, size)
	case localRank < 0 || localRank >= size:
		return nil, fmt.Errorf("%w: tp: external group: rank %d: local rank = %d, must be 0..%d", ErrArgument, rank, localRank, size-1)
	case device < 0:
		return nil, fmt.Errorf("%w: tp: external group: rank %d: device = %d, must be a CUDA ordinal (0 or more)", ErrArgument, rank, device)
	}
	g := &ExternalGroup{rank: rank, size: size, localRank: localRank, device: device, c: c}
	me := externalPeer{Peer: Peer{Rank: rank, WorldSize: size, LocalRank: localRank, PID: os.Getpid(), Hostname: site.host, Device: strconv.Itoa(device)},
		Node: site.node, Alone: site.alone}
	if rank == 0 {
		key, err := newFDKey()
		if err != nil {
			return nil, fmt.Errorf("tp: external group: rank 0: drawing the descriptor route's key: %w", err)
		}
		me.FDKey = key
	}
	b, err := json.Marshal(me)
	if err != nil {
		return nil, fmt.Errorf("tp: external group: rank %d: %w", rank, err)
	}
	all, err := g.AllGather(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("tp: external group: rank %d: all-gather of the ranks' descriptions: %w", rank, err)
	}
	g.peers = make([]Peer, size)
	key := ""
	var bad []error
	for i, b := range all {
		var ep externalPeer
		if err := json.Unmarshal(b, &ep); err != nil {
			bad = append(bad, fmt.Errorf("%w: the rank at place %d of the framework's all-gather sent %d bytes that are no rank description: %w", ErrPeer, i, len(b), err))
			continue
		}
		p := ep.Peer
		p.Token = ""
		if why := nodeSplit(rank, me, i, ep); why != "" && g.split == "" {
			g.split = why
		}
		if i == 0 {
			key = ep.FDKey
		}
		switch {
		case p.WorldSize != size:
			bad = append(bad, fmt.Errorf("%w: rank %d (pid %d on %s) says the group has %d ranks, rank %d says %d", ErrConfig, p.Rank, p.PID, p.Hostname, p.WorldSize, rank, size))
		case p.Rank != i:
			bad = append(bad, fmt.Errorf("%w: the process at place %d of the framework's all-gather (pid %d on %s) says it is rank %d: pass the framework's own rank", ErrConfig, i, p.PID, p.Hostname, p.Rank))
		}
		g.peers[i] = p
	}
	if len(bad) > 0 {
		return nil, fmt.Errorf("tp: external group: rank %d: %w", rank, errors.Join(bad...))
	}
	if g.split == "" {
		if err := g.listen(ctx, key, site.timeout); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// listen opens this rank's end of the descriptor route and waits, through
// the framework's all-gather, until every rank has: a rank that could not
// fails the group on every rank, named.
func (g *ExternalGroup) listen(ctx context.Context, key string, timeout time.Duration) error {
	route, err := listenFDs(g.rank, g.peers, key, timeout)
	status := ""
	if err != nil {
		status = err.Error()
	}
	all, gerr := g.AllGather(ctx, []byte(status))
	if gerr != nil {
		if route != nil {
			_ = route.close()
		}
		return fmt.Errorf("tp: external group: rank %d: all-gather of the descriptor sockets' state: %w", g.rank, gerr)
	}
	var bad []error
	for r, b := range all {
		if len(b) > 0 {
			bad = append(bad, fmt.Errorf("%w: rank %d (pid %d) cannot pass descriptors on this node: %s", ErrPeer, r, g.peers[r].PID, b))
		}
	}
	if len(bad) > 0 {
		if route != nil {
			_ = route.close()
		}
		return fmt.Errorf("tp: external group: rank %d: %w", g.rank, errors.Join(bad...))
	}
	g.fds = route
	g.watch = watchFDs(route)
	return nil
}

// Rank is this rank's index in the framework's group.
func (g *ExternalGroup) Rank() int { return g.rank }

// Size is the number of ranks.
func (g *ExternalGroup) Size() int { return g.size }

// LocalRank is this rank's index among the ranks on its node, as given.
func (g *ExternalGroup) LocalRank() int { return g.localRank }

// Device is the CUDA device this rank uses, as given: NewUpProjection's
// default.
func (g *ExternalGroup) Device() int { return g.device }

// Peers returns what every rank said when the group was made (rank, size,
// local rank, pid, hostname, device); index = rank.
func (g *ExternalGroup) Peers() []Peer { return append([]Peer(nil), g.peers...) }

// SpansNodes reports whether the ranks do not all share this node (its
// kernel and its network, pid and user namespaces), or TPRUN_FORCE_NODE
// made them act so: memory handles then travel only as bytes, so the GPU
// mailbox shares fabric handles, and the descriptor collectives are
// refused (see ExternalGroup).
func (g *ExternalGroup) SpansNodes() bool { return g.fds == nil }

// splitReason is which rank keeps the group off one node and why, "" when
// the ranks share one.
func (g *ExternalGroup) splitReason() string { return g.split }

// enter takes the collective lock and reports why no collective may run.
func (g *ExternalGroup) enter(ctx context.Context) error {
	g.mu.Lock()
	switch {
	case g.closed:
		g.mu.Unlock()
		return fmt.Errorf("tp: rank %d: external group: %w", g.rank, ErrGroupClosed)
	case g.failed != nil:
		err := g.failed
		g.mu.Unlock()
		return err
	}
	if err := ctx.Err(); err != nil {
		g.mu.Unlock()
		return err
	}
	return nil
}

// broke records err, a failed framework collective, and returns it.
func (g *ExternalGroup) broke(which string, err error) error {
	e := &ExternalCollectiveError{Rank: g.rank, Collective: which, Err: err}
	g.failed = fmt.Errorf("%w (the group is unusable after it)", e)
	return e
}

// Barrier returns when every rank has called it.
func (g *ExternalGroup) Barrier(ctx context.Context) error {
	if err := g.enter(ctx); err != nil {
		return err
	}
	defer g.mu.Unlock()
	if err := g.c.Barrier(ctx); err != nil {
		return g.broke("Barrier", err)
	}
	return nil
}

// AllGather returns every rank's b; index = rank; an empty contribution
// comes back nil. Contributions may differ in length: the ranks first
// all-gather their lengths, then their bytes padded to the longest. A
// contribution over MaxBlob(Size()) bytes fails on every rank with
// ErrTooLarge naming the rank, and leaves the group usable.
func (g *ExternalGroup) AllGather(ctx context.Context, b []byte) ([][]byte, error) {
	if err := g.enter(ctx); err != nil {
		return nil, err
	}
	defer g.mu.Unlock()
	limit := MaxBlob(g.size)
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(b)))
	lens := make([]byte, 8*g.size)
	if err := g.c.AllGather(ctx, n[:], lens); err != nil {
		return nil, g.broke("AllGather", err)
	}
	longest := 0
	var over []string
	size := make([]int, g.size)
	for r := range g.size {
		l := binary.LittleEndian.Uint64(lens[8*r:])
		if l > uint64(limit) {
			over = append(over, fmt.Sprintf("rank %d contributed %d bytes", r, l))
			continue
		}
		size[r] = int(l)
		longest = max(longest, int(l))
	}
	if len(over) > 0 {
		return nil, fmt.Errorf("%w: tp: rank %d: all-gather through the framework: %s; at most %d bytes each in a group of %d",
			ErrTooLarge, g.rank, strings.Join(over, ", "), limit, g.size)
	}
	out := make([][]byte, g.size)
	if longest == 0 {
		return out, nil
	}
	in := make([]byte, longest)
	copy(in, b)
	all := make([]byte, longest*g.size)
	if err := g.c.AllGather(ctx, in, all); err != nil {
		return nil, g.broke("AllGather", err)
	}
	for r := range g.size {
		if size[r] > 0 {
			out[r] = all[r*longest : r*longest+size[r] : r*longest+size[r]]
		}
	}
	return out, nil
}

// AllGatherFDs: every rank contributes one descriptor; the result holds
// one new close-on-exec descriptor per rank (own included), owned by the
// caller; the caller keeps fd. The descriptors travel over the node's
// Unix sockets (see ExternalGroup); across nodes it is refused (errors.Is
// ErrCrossNode).
func (g *ExternalGroup) AllGatherFDs(ctx context.Context, fd int) ([]int, error) {
	if g.fds == nil {
		return nil, descriptorError{g.rank, g.split}
	}
	if fd < 0 {
		return nil, fmt.Errorf("%w: tp: rank %d: AllGatherFDs: invalid descriptor %d", ErrArgument, g.rank, fd)
	}
	if err := g.enter(ctx); err != nil {
		return nil, err
	}
	defer g.mu.Unlock()
	out, err := g.fds.allGather(ctx, fd)
	return out, g.brokeFDs(err)
}

// BroadcastFDs: root contributes fds (at most 250), every rank (root too)
// gets new close-on-exec copies, owned by the caller; root keeps its own,
// and the other ranks' fds are ignored. The descriptors travel as
// AllGatherFDs's do; across nodes it is refused.
func (g *ExternalGroup) BroadcastFDs(ctx context.Context, root int, fds []int) ([]int, error) {
	if g.fds == nil {
		return nil, descriptorError{g.rank, g.split}
	}
	switch {
	case root < 0 || root >= g.size:
		return nil, fmt.Errorf("%w: tp: rank %d: BroadcastFDs: root %d is not a rank of this group of %d", ErrArgument, g.rank, root, g.size)
	case g.rank != root:
		fds = nil
	case len(fds) > hub.MaxFDs:
		return nil, fmt.Errorf("tp: rank %d: BroadcastFDs of %d descriptors: %w (at most %d)", g.rank, len(fds), ErrTooLarge, hub.MaxFDs)
	}
	for _, fd := range fds {
		if fd < 0 {
			return nil, fmt.Errorf("%w: tp: rank %d: BroadcastFDs: invalid descriptor %d", ErrArgument, g.rank, fd)
		}
	}
	if err := g.enter(ctx); err != nil {
		return nil, err
	}
	defer g.mu.Unlock()
	out, err := g.fds.broadcast(ctx, root, fds)
	return out, g.brokeFDs(err)
}

// brokeFDs records err, a failed descriptor collective, and closes this
// rank's end of the route, so that peers that send to it fail at once
// instead of at their deadline. nil stays nil. A call that Close or Abort
// interrupted leaves the route to them: they tell the peers what ended
// it (a closed group, which a peer's job watch does not take for a
// failure, or the abort's reason), where a give-up would fail the peers'
// jobs without the reason.
func (g *ExternalGroup) brokeFDs(err error) error {
	if err == nil {
		return nil
	}
	e := &fdRouteError{rank: g.rank, err: err}
	g.failed = fmt.Errorf("%w (the group is unusable after it)", e)
	if g.fds.life.Err() == nil {
		_ = g.fds.leave(notice{kind: fdGaveUp})
	}
	return e
}

// leave tells the peers, unless a failed call told them already, that
// this rank takes part in no further descriptor call (n: it closed or
// aborted its group), closes its end of the route, so that a peer that
// waits for its descriptors fails at once, and stops the job watch.
// Called with the lock held, after interrupt.
func (g *ExternalGroup) leave(n notice) error {
	err := g.fds.leave(n)
	g.watch.stop()
	return err
}

// jobContext returns a context that ends, with the job's failure as its
// cause (errors.Is ErrAborted, naming the rank and its pid), when a peer's
// process ends without having closed its group, when a peer aborts its
// group or gives up on a descriptor collective, or when this rank aborts
// its group; nil when the group cannot tell (its ranks span nodes, or
// their processes cannot be watched): its ops then see a peer's failure
// at their deadline. A peer that closed its group and then exited is no
// failure. Close leaves the context as it is.
func (g *ExternalGroup) jobContext() context.Context {
	if g.watch == nil {
		return nil
	}
	return g.watch.job
}

// abortJob is Abort for the ops made from the group (jobWatcher).
func (g *ExternalGroup) abortJob(reason string) error { return g.Abort(reason) }

// NewUpProjection is NewUpProjection on this group, on its device.
func (g *ExternalGroup) NewUpProjection(ctx context.Context, hidden, latent, maxM int, opts ...UpOption) (*UpProjection, error) {
	return NewUpProjection(ctx, g, hidden, latent, maxM, opts...)
}

// Abort marks this rank's group failed: its later collectives fail with
// an error naming reason (ErrAborted). The peers' framework collectives
// are not told (the framework's collectives have no such message): end
// the framework's group, or the process, for that. On one node it tells
// the peers, with reason, and closes this rank's descriptor socket: a
// peer's descriptor collective that waits for this rank or sends to it
// fails at once instead of at its collective timeout, and so does this
// rank's own descriptor call in progress; where the group watches its
// job, the steps of the ops made from it, this rank's and the peers',
// fail at once too, naming this rank and reason.
func (g *ExternalGroup) Abort(reason string) error {
	if g.watch != nil {
		g.watch.abort(reason)
	}
	if g.fds != nil {
		g.fds.interrupt() // a descriptor call in progress holds the lock
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.failed == nil {
		g.failed = fmt.Errorf("%w: tp: rank %d aborted its external group: %s", ErrAborted, g.rank, reason)
	}
	if g.fds != nil {
		return g.leave(notice{kind: fdAborted, reason: reason})
	}
	return nil
}

// Close ends the group: later collectives fail with ErrGroupClosed, a
// descriptor collective of this rank in progress fails at once, and so
// does a peer's that waits for this rank's descriptors. The peers' job
// watches take this rank's later exit for the job's end, not a failure:
// close the group before the process ends. The framework's group is the
// caller's and stays as it is. Close ops made from the group first.
func (g *ExternalGroup) Close() error {
	if g.fds != nil {
		g.fds.interrupt() // a descriptor call in progress holds the lock
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed = true
	if g.fds != nil {
		return g.leave(notice{kind: fdLeft})
	}
	return nil
}
