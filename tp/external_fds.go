package tp

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/internal/fdpass"
	"github.com/tprun/tprun/internal/hub"
)

// externalPeer is what a rank says in NewExternalGroup's all-gather: its
// Peer (the JSON of a Peer, which a decoder of a plain Peer still reads),
// the node it runs on, and on rank 0 the key of the descriptor route.
type externalPeer struct {
	Peer
	// Node is this rank's node identity (nodeIdentity); empty when it
	// could not tell, or TPRUN_FORCE_NODE made it act as on a node of its
	// own. Ranks whose Node is one non-empty value share a kernel and a
	// network namespace.
	Node string `json:",omitempty"`
	// Alone says why Node is empty: TPRUN_FORCE_NODE, or what could not
	// be read.
	Alone string `json:",omitempty"`
	// FDKey: rank 0's fdKeyLen random bytes, hex: the first half names the
	// ranks' sockets, the second half is the secret each connection
	// presents.
	FDKey string `json:",omitempty"`
}

const fdKeyLen = 32

// nodeIdentity names what abstract Unix sockets, SO_PEERCRED and
// descriptor passing need shared between two processes: the kernel (its
// boot id), the network namespace (abstract socket names live in it), and
// the pid and user namespaces (the pids and uids a peer's credentials are
// compared with), in the order of nodeParts. An error when any of it
// cannot be read: such a rank is taken to be on a node of its own. host
// is this rank's host name.
func nodeIdentity(host string) (string, error) {
	const bootID = "/proc/sys/kernel/random/boot_id"
	boot, err := os.ReadFile(bootID)
	if err != nil {
		return "", err
	}
	if len(strings.TrimSpace(string(boot))) == 0 {
		return "", fmt.Errorf("%s is empty", bootID)
	}
	id := []string{host, strings.TrimSpace(string(boot))}
	for _, ns := range []string{"net", "pid", "user"} {
		l, err := os.Readlink("/proc/self/ns/" + ns)
		if err != nil {
			return "", err
		}
		id = append(id, l)
	}
	return strings.Join(id, " "), nil
}

// nodeParts names the fields of a node identity, in its order.
var nodeParts = []string{"host name", "kernel boot id", "network namespace", "pid namespace", "user namespace"}

// nodeSplit says why rank q's node identity (Node, or why it has none)
// keeps it from passing descriptors with rank me, and what a person could
// do about it; "" when they share a node.
func nodeSplit(me int, mine externalPeer, q int, theirs externalPeer) string {
	rank := func(r int, p externalPeer) string {
		return fmt.Sprintf("rank %d (pid %d on %s)", r, p.PID, p.Hostname)
	}
	switch {
	case mine.Node == theirs.Node && mine.Node != "":
		return ""
	case mine.Node == "":
		return fmt.Sprintf("this rank, %s, %s", rank(me, mine), cmp.Or(mine.Alone, "has no node identity"))
	case theirs.Node == "":
		return fmt.Sprintf("%s %s", rank(q, theirs), cmp.Or(theirs.Alone, "has no node identity"))
	}
	a, b := strings.Fields(mine.Node), strings.Fields(theirs.Node)
	if len(a) != len(nodeParts) || len(b) != len(nodeParts) {
		return fmt.Sprintf("%s has another node identity than %s (%q, not %q)", rank(q, theirs), rank(me, mine), theirs.Node, mine.Node)
	}
	if a[1] != b[1] {
		return fmt.Sprintf("%s runs on another machine than %s (its kernel boot id differs)", rank(q, theirs), rank(me, mine))
	}
	var differ []string
	for i := range a {
		if a[i] != b[i] {
			differ = append(differ, fmt.Sprintf("%s (%s, not %s)", nodeParts[i], b[i], a[i]))
		}
	}
	return fmt.Sprintf("%s shares this machine's kernel with %s but not its %s: run the ranks in one container, "+
		"or give every container the host's network, pid and user namespaces and host name "+
		"(docker run --network=host --pid=host --uts=host, or one pod's shared process namespace with hostNetwork on Kubernetes)",
		rank(q, theirs), rank(me, mine), strings.Join(differ, ", "))
}

// fdRoute passes descriptors among the ranks of an ExternalGroup on one
// node: each rank listens on an abstract Unix socket named from rank 0's
// key, and a rank sends its descriptors by connecting to each receiver
// (SCM_RIGHTS), one connection per receiver and call. The framework's
// collectives only told the ranks the key and that everyone listens; no
// descriptor travels through them.
//
// Every accepted connection must come from this uid, present the secret,
// and come from the pid its rank said it has; others are refused and
// closed, and the call goes on waiting for its ranks. A call waits at most
// until its deadline (the collective timeout) or ctx, and fails within a
// moment once the process of a rank it waits for or sends to has ended.
type fdRoute struct {
	rank    int
	peers   []Peer
	prefix  string // of the socket names: "@tprun-fd-<hex>-"
	secret  []byte
	ln      *net.UnixListener
	timeout time.Duration
	// pidfds[q] watches rank q's process (pidfd_open), -1 where there is
	// none (this rank; a kernel without pidfds). A socket outlives its
	// rank's process when a child forked from it holds the socket, so a
	// connection that succeeds does not prove the rank alive.
	pidfds []int
	// life ends when Close or Abort interrupts the route: a call in
	// progress then ends at once, wherever it waits.
	life context.Context
	end  context.CancelFunc

	// mu is held by a call for its whole length, by the notices and close,
	// and by the group's job watch while it drains the backlog (drain):
	// the state below is the route's, whoever reads the listener.
	mu      sync.Mutex
	seq     uint64              // of the next call, the same on every rank
	early   map[early]earlyCall // connections of later calls, sent while this rank was in an earlier one
	refused int                 // connections refused so far
	left    map[int]notice      // ranks that said they closed or aborted their group, or gave up on a call
	// broken: a connection the job watch took outside a call that the
	// next call must fail on (a call would have failed on it): nil while
	// there is none.
	broken error
	// noticed, when the group watches its job, hears of every notice as
	// it is taken (under mu): an abort, or a call a rank gave up on, fails
	// the job at once.
	noticed func(q int, n notice)
	closed  bool
}

// notice is what a rank said when it left the route: how (fdLeft: it
// closed its group; fdAborted: it aborted it, for reason; fdGaveUp: a
// descriptor collective failed there).
type notice struct {
	kind   fdKind
	reason string
}

// String is how the notice names the rank's end, after "rank N".
func (n notice) String() string {
	switch n.kind {
	case fdAborted:
		return "aborted its group: " + n.reason
	case fdGaveUp:
		return "gave up on a descriptor collective, and the group is unusable there"
	}
	return "closed its group"
}

func has[K comparable, V any](m map[K]V, k K) bool {
	_, ok := m[k]
	return ok
}

// fdRouteError is a descriptor collective of an ExternalGroup on one node
// that failed on this rank. It matches ErrAborted: the ranks may have
// stopped at different points of the call, so the group is unusable after
// it.
type fdRouteError struct {
	rank int
	err  error
}

func (e *fdRouteError) Error() string {
	return fmt.Sprintf("tp: rank %d: passing descriptors over the node's sockets: %v", e.rank, e.err)
}

func (e *fdRouteError) Unwrap() error { return e.err }

// Is makes errors.Is(err, ErrAborted) true.
func (e *fdRouteError) Is(target error) bool { return target == ErrAborted }

type early struct {
	seq  uint64
	from int
}

// earlyCall is a connection kept for a later call: its header, checked
// against that call when it comes, and its descriptors.
type earlyCall struct {
	h   fdHeader
	fds []int
}

// fdKind tells the two descriptor collectives apart on the wire.
type fdKind uint8

const (
	fdAllGather fdKind = 1 + iota
	fdBroadcast
	// fdGaveUp: the sender's descriptor collective failed; it takes part
	// in no further call.
	fdGaveUp
	// fdLeft: the sender closed its group; it takes part in no further
	// call.
	fdLeft
	// fdAborted: the sender aborted its group; it takes part in no
	// further call. The reason follows the header (fdHeader.body).
	fdAborted
)

func (k fdKind) String() string {
	switch k {
	case fdBroadcast:
		return "BroadcastFDs"
	case fdGaveUp:
		return "a failed descriptor collective"
	case fdLeft:
		return "a group's end"
	case fdAborted:
		return "a group's abort"
	}
	return "AllGatherFDs"
}

// maxEarly bounds the descriptors kept for later calls: a root runs ahead
// through its broadcasts (it waits for nobody), but not without end.
const maxEarly = 1024

// The header of one connection: magic (its last byte the route's
// version), secret, call, sender, kind, root, descriptor count, length of
// the body that follows it (an abort's reason). The descriptors come with
// its first byte.
const (
	fdMagic     = "tprunfd2"
	fdHeaderLen = len(fdMagic) + fdKeyLen/2 + 8 + 4 + 1 + 4 + 4 + 4
)

// maxReason bounds an abort notice's reason on the wire, in bytes.
const maxReason = 1024

// newFDKey draws rank 0's key.
func newFDKey() (string, error) {
	b := make([]byte, fdKeyLen)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// listenFDs makes this rank's end of the route from rank 0's key.
func listenFDs(rank int, peers []Peer, key string, timeout time.Duration) (*fdRoute, error) {
	k, err := hex.DecodeString(key)
	if err != nil || len(k) != fdKeyLen {
		return nil, fmt.Errorf("%w: rank 0 sent a descriptor route key of %d characters that is not %d hex bytes", ErrPeer, len(key), fdKeyLen)
	}
	r := &fdRoute{rank: rank, peers: peers, prefix: "@tprun-fd-" + hex.EncodeToString(k[:fdKeyLen/2]) + "-",
		secret: k[fdKeyLen/2:], timeout: timeout, early: map[early]earlyCall{}, left: map[int]notice{}}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: r.name(rank), Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("listening for descriptors: %w", err)
	}
	// An abstract socket has no file: nothing to remove when it closes.
	r.ln = ln
	r.life, r.end = context.WithCancel(context.Background())
	r.pidfds = make([]int, len(peers))
	for q, p := range peers {
		r.pidfds[q] = -1
		if q != rank && p.PID != os.Getpid() {
			// Without a pidfd (an old kernel, a sandbox that forbids it)
			// a rank's end is noticed as before: when a send to it is
			// refused, else at the deadline.
			if fd, err := unix.PidfdOpen(p.PID, 0); err == nil {
				r.pidfds[q] = fd
			}
		}
	}
	return r, nil
}

// exited reports the first rank of ranks whose process has ended.
func (r *fdRoute) exited(ranks []int) error {
	var pfd []unix.PollFd
	var which []int
	for _, q := range ranks {
		if q < len(r.pidfds) && r.pidfds[q] >= 0 {
			pfd = append(pfd, unix.PollFd{Fd: int32(r.pidfds[q]), Events: unix.POLLIN})
			which = append(which, q)
		}
	}
	if len(pfd) == 0 {
		return nil
	}
	// A failed poll (EINTR) tells nothing: the next look does.
	if n, err := unix.Poll(pfd, 0); err != nil || n == 0 {
		return nil
	}
	for i, p := range pfd {
		if p.Revents != 0 {
			q := which[i]
			return fmt.Errorf("%w: rank %d (pid %d) exited", ErrPeer, q, r.peers[q].PID)
		}
	}
	return nil
}

// queued reports whether a connection waits in the listener's backlog;
// true where that cannot be told, so that the call goes on to look.
func (r *fdRoute) queued() bool {
	rc, err := r.ln.SyscallConn()
	if err != nil {
		return true
	}
	ready := true
	_ = rc.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(p, 0); err == nil {
			ready = n > 0
		}
	})
	return ready
}

// peerPoll is how often a call that waits looks whether the ranks it
// waits for still run.
const peerPoll = 100 * time.Millisecond

// errInterrupted ends a call of this rank that Close or Abort interrupted.
var errInterrupted = errors.New("the group was closed or aborted on this rank during the call")

// call is ctx, ended also when Close or Abort interrupts the route; done
// releases it.
func (r *fdRoute) call(ctx context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(r.life, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// stopped is why a call with ctx (call's) must end now, nil while it may
// go on: errInterrupted once Close or Abort interrupted the route (which
// ends life before it closes the listener, so a closed listener always
// finds it), else ctx's error.
func (r *fdRoute) stopped(ctx context.Context) error {
	if r.life.Err() != nil {
		return errInterrupted
	}
	return ctx.Err()
}

func (r *fdRoute) name(rank int) string { return fmt.Sprintf("%s%d", r.prefix, rank) }

// leave tells the other ranks, unless the route is closed already (a
// failed call told them), that this rank takes part in no further call
// (n: it gave up on a call, closed or aborted its group), and closes the
// route.
func (r *fdRoute) leave(n notice) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.closed {
		r.giveUp(n)
	}
	return r.closeLocked()
}

// giveUp tells every other rank, as far as it can within a second, that
// this rank takes part in no further call (n.kind: fdGaveUp, its
// descriptor collective failed; fdLeft, it closed its group; fdAborted, it
// aborted it, for n.reason), so that a rank waiting for its descriptors
// fails now instead of at its deadline, and one that watches its job
// (fdWatch) knows whether this rank's end is a failure. A rank not in a
// call hears it in its next one, or its job watch at once. Called with mu
// held.
func (r *fdRoute) giveUp(n notice) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	deadline, _ := ctx.Deadline()
	var body []byte
	if n.kind == fdAborted {
		body = []byte(n.reason)
		if len(body) > maxReason {
			body = append(body[:maxReason-len("...")], "..."...)
		}
	}
	for q := range r.peers {
		if q != r.rank {
			// A rank that cannot be told learns it at its deadline.
			_ = r.sendBody(ctx, deadline, q, r.seq, n.kind, 0, nil, body)
		}
	}
}

// close closes the listener, the pidfds and every descriptor that arrived
// early; idempotent.
func (r *fdRoute) close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closeLocked()
}

func (r *fdRoute) closeLocked() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.end()
	for k, e := range r.early {
		fdpass.Close(e.fds)
		delete(r.early, k)
	}
	fdpass.Close(slices.DeleteFunc(r.pidfds, func(fd int) bool { return fd < 0 }))
	r.pidfds = nil
	r.shutdown()
	if err := r.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// shutdown makes the listening socket refuse connections. Closing it is
// not enough where a child forked from this process (a Python worker)
// inherited it: the socket lives on in the child, a peer's connection
// succeeds, its send too, and nobody accepts it. Shut down, the socket
// refuses connections in every process that holds it.
func (r *fdRoute) shutdown() {
	rc, err := r.ln.SyscallConn()
	if err != nil {
		return // closed already, and shut down before that
	}
	_ = rc.Control(func(fd uintptr) { _ = unix.Shutdown(int(fd), unix.SHUT_RDWR) })
}

// interrupt, from Close or Abort without the group's lock, ends a
// descriptor call of this rank in progress at once (waiting in Accept, a
// peer's header or a full backlog) instead of at its deadline, and makes
// the socket refuse connections. close still releases the rest.
func (r *fdRoute) interrupt() {
	r.end()
	r.shutdown()
	_ = r.ln.Close()
}

// allGather is AllGatherFDs: fd to every other rank, one new descriptor
// per rank back, own a dup.
func (r *fdRoute) allGather(ctx context.Context, fd int) ([]int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, done := r.call(ctx)
	defer done()
	deadline := r.deadline(ctx)
	seq := r.seq
	r.seq++
	own, err := fdpass.Dup(fd)
	if err != nil {
		return nil, fmt.Errorf("AllGatherFDs: descriptor %d: %w", fd, err)
	}
	out := make([]int, len(r.peers))
	for i := range out {
		out[i] = -1
	}
	out[r.rank] = own
	from := make([]int, 0, len(r.peers)-1)
	for q := range r.peers {
		if q == r.rank {
			continue
		}
		from = append(from, q)
		if err := r.send(ctx, deadline, q, seq, fdAllGather, 0, []int{fd}); err != nil {
			fdpass.Close(out[r.rank : r.rank+1])
			return nil, err
		}
	}
	got, err := r.receive(ctx, deadline, seq, fdAllGather, 0, from)
	if err != nil {
		fdpass.Close(out[r.rank : r.rank+1])
		return nil, err
	}
	for q, fds := range got {
		out[q] = fds[0]
	}
	return out, nil
}

// broadcast is BroadcastFDs: root's fds to every other rank; every rank,
// root too, gets new descriptors.
func (r *fdRoute) broadcast(ctx context.Context, root int, fds []int) ([]int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ctx, done := r.call(ctx)
	defer done()
	deadline := r.deadline(ctx)
	seq := r.seq
	r.seq++
	if r.rank != root {
		got, err := r.receive(ctx, deadline, seq, fdBroadcast, root, []int{root})
		if err != nil {
			return nil, err
		}
		return got[root], nil
	}
	for q := range r.peers {
		if q == r.rank {
			continue
		}
		if err := r.send(ctx, deadline, q, seq, fdBroadcast, root, fds); err != nil {
			return nil, err
		}
	}
	if len(fds) == 0 {
		return nil, nil
	}
	return fdpass.DupAll(fds)
}

// deadline is when a call gives up: the collective timeout from now, or
// ctx's deadline when sooner.
func (r *fdRoute) deadline(ctx context.Context) time.Time {
	d := time.Now().Add(r.timeout)
	if cd, ok := ctx.Deadline(); ok && cd.Before(d) {
		d = cd
	}
	return d
}

// send connects to rank to and sends it fds as call seq. The receiver's
// socket must be held by rank to's pid under this uid.
func (r *fdRoute) send(ctx context.Context, deadline time.Time, to int, seq uint64, kind fdKind, root int, fds []int) error {
	return r.sendBody(ctx, deadline, to, seq, kind, root, fds, nil)
}

// sendBody is send with body after the header (an abort's reason).
func (r *fdRoute) sendBody(ctx context.Context, deadline time.Time, to int, seq uint64, kind fdKind, root int, fds []int, body []byte) error {
	fail := func(err error) error {
		return fmt.Errorf("%s #%d: sending to rank %d (pid %d): %w", kind, seq, to, r.peers[to].PID, err)
	}
	// A notice (a failed call, a group's end) is this rank's last word on
	// the route: sent after Close or Abort interrupted it, it ends only
	// with its own ctx.
	stopped := r.stopped
	if kind == fdGaveUp || kind == fdLeft || kind == fdAborted {
		stopped = func(ctx context.Context) error { return ctx.Err() }
	}
	d := net.Dialer{Deadline: deadline}
	var c *net.UnixConn
	for {
		nc, err := d.DialContext(ctx, "unix", r.name(to))
		if err == nil {
			c = nc.(*net.UnixConn)
			break
		}
		// The call's own end is named first: a dial that fails because the
		// ctx ended or the deadline passed reports that, not the last
		// dial error (a full backlog retried until then).
		if stop := stopped(ctx); stop != nil {
			return fail(fmt.Errorf("%w (last attempt: %v)", stop, err))
		}
		// EAGAIN: the receiver's backlog is full; it drains as it accepts.
		if !errors.Is(err, syscall.EAGAIN) {
			if errors.Is(err, syscall.ECONNREFUSED) {
				err = fmt.Errorf("%w (its group is closed, or the process ended)", err)
			}
			return fail(err)
		}
		if err := r.exited([]int{to}); err != nil {
			return fail(err)
		}
		if !time.Now().Before(deadline) {
			return fail(fmt.Errorf("%w: its backlog stayed full (%v)", context.DeadlineExceeded, err))
		}
		t := time.NewTimer(time.Millisecond)
		select {
		case <-ctx.Done():
		case <-t.C:
		}
		t.Stop()
	}
	defer c.Close()
	cred, err := fdpass.PeerCred(c)
	if err != nil {
		return fail(err)
	}
	if int(cred.Uid) != os.Getuid() || int(cred.Pid) != r.peers[to].PID {
		return fail(fmt.Errorf("%w: its socket is held by pid %d of uid %d, not by pid %d of uid %d", ErrPeer, cred.Pid, cred.Uid, r.peers[to].PID, os.Getuid()))
	}
	// The credentials are the listener's maker's: a socket that a child
	// forked from rank to holds outlives it, and takes the send.
	if err := r.exited([]int{to}); err != nil {
		return fail(fmt.Errorf("%w, and a process it started still holds its socket", err))
	}
	h := append(fdHeader{seq: seq, kind: kind, root: root, count: len(fds), body: len(body)}.encode(r.secret, r.rank), body...)
	if err := c.SetDeadline(deadline); err != nil {
		return fail(err)
	}
	release := fdpass.InterruptOn(ctx, c.SetDeadline)
	err = fdpass.Send(c, h, fds)
	if release() {
		return fail(stopped(ctx))
	}
	if err != nil {
		return fail(err)
	}
	return nil
}

// receive accepts connections until every rank in from has sent call seq
// and returns their descriptors, index = rank. A sender one call ahead is
// kept for the next call; anything else from a rank of the group fails the
// call; connections that are not from a rank of the group are refused and
// closed.
func (r *fdRoute) receive(ctx context.Context, deadline time.Time, seq uint64, kind fdKind, root int, from []int) (got map[int][]int, err error) {
	start := time.Now()
	got = map[int][]int{}
	defer func() {
		if err != nil {
			for _, fds := range got {
				fdpass.Close(fds)
			}
			got = nil
		}
	}()
	// What the job watch took from the backlog meanwhile and no call
	// could use fails this one, as it would have had the call taken it.
	if r.broken != nil {
		return got, fmt.Errorf("%s #%d: %w", kind, seq, r.broken)
	}
	// What came early for this call is checked as if it came now; what
	// came for it from a rank this rank expects nothing from is a rank
	// that called another collective.
	for k, e := range r.early {
		if k.seq > seq {
			continue
		}
		delete(r.early, k)
		if err := r.check(e.h, len(e.fds), k.from, seq, kind, root, from, got); err != nil {
			fdpass.Close(e.fds)
			return got, fmt.Errorf("%s #%d: %w", kind, seq, err)
		}
		got[k.from] = e.fds
	}
	if err := r.hasLeft(from, got); err != nil {
		return got, fmt.Errorf("%s #%d: %w", kind, seq, err)
	}
	release := fdpass.InterruptOn(ctx, r.ln.SetDeadline)
	defer release()
	var refused []string // the first maxRefusedNamed reasons
	nrefused := 0
	for len(got) < len(from) {
		// Accept wakes every peerPoll to look whether the ranks still to
		// send run (a dead broadcast root sends nothing to fail on); a
		// ctx that ends meanwhile moves the deadline to the past.
		if stop := r.stopped(ctx); stop != nil {
			return got, fmt.Errorf("%s #%d: %w", kind, seq, stop)
		}
		// A rank that sent its part and then ended (a root done with its
		// broadcast) left it queued here: only with nothing queued does an
		// ended rank fail the call. Looked at in this order, whatever it
		// sent before it ended is queued by the time its end is seen.
		if err := r.exited(slices.DeleteFunc(slices.Clone(from), func(q int) bool { return has(got, q) })); err != nil && !r.queued() {
			return got, fmt.Errorf("%s #%d: %w", kind, seq, err)
		}
		if !time.Now().Before(deadline) {
			return got, r.timedOut(seq, kind, time.Since(start), from, got, nrefused, refused)
		}
		wake := time.Now().Add(peerPoll)
		if deadline.Before(wake) {
			wake = deadline
		}
		if err := r.ln.SetDeadline(wake); err != nil {
			if stop := r.stopped(ctx); stop != nil {
				return got, fmt.Errorf("%s #%d: %w", kind, seq, stop)
			}
			return got, fmt.Errorf("%s #%d: %w", kind, seq, err)
		}
		c, err := r.ln.AcceptUnix()
		if err != nil {
			var ne net.Error
			switch {
			case r.stopped(ctx) != nil:
				return got, fmt.Errorf("%s #%d: %w", kind, seq, r.stopped(ctx))
			case errors.As(err, &ne) && ne.Timeout():
				continue
			case errors.Is(err, net.ErrClosed):
				return got, fmt.Errorf("%s #%d: %w", kind, seq, errInterrupted)
			}
			return got, fmt.Errorf("%s #%d: accepting: %w", kind, seq, err)
		}
		h, fds, q, why, err := r.admit(ctx, deadline, c)
		if why != "" {
			r.refused++
			nrefused++
			if len(refused) < maxRefusedNamed {
				refused = append(refused, why)
			}
			continue
		}
		if err != nil {
			return got, fmt.Errorf("%s #%d: %w", kind, seq, err)
		}
		if err := r.take(h, fds, q, seq, kind, root, from, got); err != nil {
			fdpass.Close(fds)
			return got, fmt.Errorf("%s #%d: %w", kind, seq, err)
		}
	}
	return got, nil
}

// fdHeader is a decoded connection header.
type fdHeader struct {
	seq   uint64
	kind  fdKind
	root  int
	count int
	body  int // bytes after the header: an abort's reason
	// reason is the body as admit read it.
	reason string
}

// encode is h as rank from sends it, presenting secret (decodeFDHeader
// reads it back).
func (h fdHeader) encode(secret []byte, from int) []byte {
	b := make([]byte, 0, fdHeaderLen)
	b = append(b, fdMagic...)
	b = append(b, secret...)
	b = binary.LittleEndian.AppendUint64(b, h.seq)
	b = binary.LittleEndian.AppendUint32(b, uint32(from))
	b = append(b, byte(h.kind))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.root))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.count))
	return binary.LittleEndian.AppendUint32(b, uint32(h.body))
}

// decodeFDHeader reads a connection's header, b (fdHeaderLen bytes), and
// the rank it says it is from. why says, for the refusal, what makes it no
// header of this route's: another version of the route (the magic's last
// byte), the wrong secret, a kind or body no rank sends.
func decodeFDHeader(b, secret []byte) (h fdHeader, from int, why string) {
	if len(b) != fdHeaderLen {
		return h, 0, fmt.Sprintf("sent a header of %d bytes, not %d", len(b), fdHeaderLen)
	}
	if v := otherVersion(b); v != "" {
		return h, 0, v
	}
	magic := b[:len(fdMagic)]
	p := b[len(fdMagic):]
	if string(magic) != fdMagic || subtle.ConstantTimeCompare(p[:len(secret)], secret) != 1 {
		return h, 0, "did not present the group's secret"
	}
	p = p[len(secret):]
	h.seq = binary.LittleEndian.Uint64(p)
	from = int(binary.LittleEndian.Uint32(p[8:]))
	h.kind = fdKind(p[12])
	h.root = int(binary.LittleEndian.Uint32(p[13:]))
	h.count = int(binary.LittleEndian.Uint32(p[17:]))
	h.body = int(binary.LittleEndian.Uint32(p[21:]))
	switch {
	case h.kind < fdAllGather || h.kind > fdAborted:
		return h, from, fmt.Sprintf("sent a header of unknown kind %d", h.kind)
	case h.body != 0 && h.kind != fdAborted, h.body > maxReason:
		return h, from, fmt.Sprintf("announced %d bytes after a header of %s", uint32(h.body), h.kind)
	}
	return h, from, ""
}

// otherVersion says, for a refusal, that b, a header as far as it was read
// (the rest zero), begins with the magic of another version of the route;
// "" when it does not. Another version's header may be shorter than this
// one's: its connection ends before a whole header of this version came.
func otherVersion(b []byte) string {
	n := len(fdMagic)
	if len(b) < n || string(b[:n-1]) != fdMagic[:n-1] || b[n-1] == fdMagic[n-1] || b[n-1] == 0 {
		return ""
	}
	return fmt.Sprintf("speaks version %q of the descriptor route, this rank %q (the ranks run different tprun builds)", b[n-1], fdMagic[n-1])
}

// admit reads one connection's header and descriptors and closes it. A
// connection that is not from a rank of the group (another uid, a pid no
// rank has, a wrong secret) comes back as why, refused; an error is a rank
// of the group that failed to send.
func (r *fdRoute) admit(ctx context.Context, deadline time.Time, c *net.UnixConn) (h fdHeader, fds []int, from int, why string, err error) {
	defer c.Close()
	cred, err := fdpass.PeerCred(c)
	if err != nil {
		return h, nil, 0, fmt.Sprintf("a connection whose credentials could not be read (%v)", err), nil
	}
	if int(cred.Uid) != os.Getuid() {
		return h, nil, 0, fmt.Sprintf("pid %d of uid %d (not this uid, %d)", cred.Pid, cred.Uid, os.Getuid()), nil
	}
	if !slices.ContainsFunc(r.peers, func(p Peer) bool { return p.PID == int(cred.Pid) }) {
		return h, nil, 0, fmt.Sprintf("pid %d, which is no rank's", cred.Pid), nil
	}
	if err := c.SetReadDeadline(deadline); err != nil {
		return h, nil, 0, "", err
	}
	release := fdpass.InterruptOn(ctx, c.SetReadDeadline)
	b := make([]byte, fdHeaderLen)
	fds, err = fdpass.Recv(c, b, hub.MaxFDs)
	if release() {
		fdpass.Close(fds)
		return h, nil, 0, "", r.stopped(ctx)
	}
	if err != nil {
		if v := otherVersion(b); v != "" {
			return h, nil, 0, fmt.Sprintf("pid %d, which %s", cred.Pid, v), nil
		}
		return h, nil, 0, fmt.Sprintf("pid %d, which sent no header (%v)", cred.Pid, err), nil
	}
	refuse := func(what string) (fdHeader, []int, int, string, error) {
		fdpass.Close(fds)
		return fdHeader{}, nil, 0, fmt.Sprintf("pid %d, which %s", cred.Pid, what), nil
	}
	h, from, bad := decodeFDHeader(b, r.secret)
	if bad != "" {
		return refuse(bad)
	}
	if from >= len(r.peers) || from == r.rank || r.peers[from].PID != int(cred.Pid) {
		return refuse(fmt.Sprintf("says it is rank %d, whose pid is not its own", from))
	}
	if h.count != len(fds) {
		fdpass.Close(fds)
		return h, nil, from, "", fmt.Errorf("%w: rank %d announced %d descriptors and sent %d", ErrPeer, from, h.count, len(fds))
	}
	if h.body > 0 {
		body := make([]byte, h.body)
		release := fdpass.InterruptOn(ctx, c.SetReadDeadline)
		more, err := fdpass.Recv(c, body, 0)
		if release() {
			fdpass.Close(more)
			return h, nil, from, "", r.stopped(ctx)
		}
		if err != nil || len(more) > 0 {
			fdpass.Close(more)
			return h, nil, from, "", fmt.Errorf("%w: rank %d announced %s of %d bytes and sent no such (%d descriptors with it, %v)", ErrPeer, from, h.kind, h.body, len(more), err)
		}
		h.reason = strings.ToValidUTF8(string(body), "?")
	}
	return h, fds, from, "", nil
}

// take files rank q's connection under the call it belongs to, or keeps
// it for a later call.
func (r *fdRoute) take(h fdHeader, fds []int, q int, seq uint64, kind fdKind, root int, from []int, got map[int][]int) error {
	if r.note(h, q) && h.kind != fdGaveUp {
		// Everything rank q sent before it left came before this: a call
		// that has q's descriptors, or needs none, goes on.
		return r.hasLeft(from, got)
	}
	if h.kind != fdGaveUp && h.seq > seq && !has(r.early, early{h.seq, q}) && len(r.early) < maxEarly {
		r.early[early{h.seq, q}] = earlyCall{h, fds}
		return nil
	}
	if err := r.check(h, len(fds), q, seq, kind, root, from, got); err != nil {
		return err
	}
	got[q] = fds
	return nil
}

// note records rank q's notice, if h is one (a closed or aborted group, a
// call it gave up on), and tells the job watch; false when h is no notice.
func (r *fdRoute) note(h fdHeader, q int) bool {
	if h.kind != fdLeft && h.kind != fdAborted && h.kind != fdGaveUp {
		return false
	}
	// The first word stands: a rank that gave up on a call and then
	// closed its group sends no second notice, and one that aborted
	// gave its reason.
	if !has(r.left, q) {
		n := notice{kind: h.kind, reason: h.reason}
		r.left[q] = n
		if r.noticed != nil {
			r.noticed(q, n)
		}
	}
	return true
}

// keep files rank q's connection, which the job watch took from the
// backlog outside a call, as the next call would find it: a notice is
// noted, descriptors are kept for the call they name (a call that has
// passed included: the next call then fails on them, as it would have had
// it taken them), and what cannot be kept is the next call's failure.
func (r *fdRoute) keep(h fdHeader, fds []int, q int) {
	if r.note(h, q) {
		fdpass.Close(fds)
		return
	}
	k := early{h.seq, q}
	if !has(r.early, k) && len(r.early) < maxEarly {
		r.early[k] = earlyCall{h, fds}
		return
	}
	fdpass.Close(fds)
	if r.broken != nil {
		return
	}
	if has(r.early, k) {
		r.broken = fmt.Errorf("%w: rank %d sent descriptors of call #%d twice", ErrPeer, q, h.seq)
	} else {
		r.broken = fmt.Errorf("%w: rank %d sent descriptors of call #%d while this rank, at call #%d, kept %d later calls' already (at most %d)",
			ErrPeer, q, h.seq, r.seq, len(r.early), maxEarly)
	}
}

// hasLeft reports a rank that gave up on a call (the group is unusable
// there), or a rank of from that closed or aborted its group without
// sending what got lacks.
func (r *fdRoute) hasLeft(from []int, got map[int][]int) error {
	for q := range r.peers {
		if n, ok := r.left[q]; ok && n.kind == fdGaveUp {
			return fmt.Errorf("%w: rank %d (pid %d) %s", ErrPeer, q, r.peers[q].PID, n)
		}
	}
	for _, q := range from {
		if n, ok := r.left[q]; ok && !has(got, q) {
			// The reason of an abort comes last, as its rank gave it.
			return fmt.Errorf("%w: rank %d (pid %d) took no part in this call: it %s", ErrPeer, q, r.peers[q].PID, n)
		}
	}
	return nil
}

// check reports why rank q's connection, carrying n descriptors, does not
// belong to call seq (kind, root, from) as this rank calls it, having got
// got so far.
func (r *fdRoute) check(h fdHeader, n, q int, seq uint64, kind fdKind, root int, from []int, got map[int][]int) error {
	switch {
	case h.kind == fdGaveUp:
		return fmt.Errorf("%w: rank %d gave up on a descriptor collective, and the group is unusable there", ErrPeer, q)
	case h.seq != seq:
		return fmt.Errorf("%w: rank %d sent descriptors of call #%d during call #%d", ErrPeer, q, h.seq, seq)
	case h.kind != kind:
		return fmt.Errorf("%w: rank %d called %s where rank %d calls %s", ErrPeer, q, h.kind, r.rank, kind)
	case h.kind == fdBroadcast && h.root != root:
		return fmt.Errorf("%w: rank %d called BroadcastFDs with root %d, rank %d with root %d", ErrPeer, q, h.root, r.rank, root)
	case !slices.Contains(from, q) || has(got, q):
		return fmt.Errorf("%w: rank %d sent descriptors it should not have in %s #%d", ErrPeer, q, kind, seq)
	case h.kind == fdAllGather && n != 1:
		return fmt.Errorf("%w: rank %d sent %d descriptors to AllGatherFDs, not 1", ErrPeer, q, n)
	}
	return nil
}

// maxRefusedNamed bounds the refused connections a timeout names: a
// stranger may connect without end.
const maxRefusedNamed = 8

// timedOut names the ranks whose descriptors never came, and what was
// refused meanwhile (n connections, the first of them why).
func (r *fdRoute) timedOut(seq uint64, kind fdKind, waited time.Duration, from []int, got map[int][]int, n int, why []string) error {
	var missing []string
	for _, q := range from {
		if !has(got, q) {
			missing = append(missing, fmt.Sprintf("rank %d (pid %d)", q, r.peers[q].PID))
		}
	}
	msg := fmt.Sprintf("%s #%d: no descriptors from %s after %v", kind, seq, strings.Join(missing, ", "), waited.Round(time.Millisecond))
	if n > 0 {
		msg += fmt.Sprintf("; refused %d connections meanwhile: %s", n, strings.Join(why, "; "))
		if n > len(why) {
			msg += fmt.Sprintf("; and %d more", n-len(why))
		}
	}
	return fmt.Errorf("%w: %s", ErrCollectiveTimeout, msg)
}
