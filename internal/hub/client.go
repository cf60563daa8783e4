package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/tprun/tprun/internal/fdpass"
)

// Client is one rank's connection to the hub. Collective calls are made
// one at a time (concurrent calls queue up); every rank must make the same
// calls in the same order.
//
// A call whose ctx ends after it was sent, before its result came, ends
// the job (see call): the other ranks may still complete it with this
// rank's contribution, and this rank's next call would then be matched
// with their next one, so a retry would silently pair the wrong calls.
type Client struct {
	fc    *frameConn
	path  string
	self  Hello
	peers []Hello

	sem chan struct{} // one collective call at a time
	wmu *sync.Mutex   // one frame write at a time (shared with keep)

	// keep pings a TCP hub and watches for its silence; nil on a Unix
	// socket, where the kernel tells us when the hub goes.
	keep *keepalive

	mu      sync.Mutex
	timeout time.Duration // SetCollectiveTimeout; 0: the hub's default
	knob    string
	seq     uint64
	waiters map[uint64]chan delivery
	err     error         // set once: the job failure, lost connection, or ErrClosed
	failed  chan struct{} // closed when err is set

	readerDone chan struct{}
	closeOnce  sync.Once
	closeErr   error
}

// byeWait bounds how long Close waits for the hub to acknowledge the
// goodbye by closing its end.
const byeWait = time.Second

// lastWordWait bounds how long a call whose frame could not be sent waits
// for the reader to read what the hub sent before the connection broke.
const lastWordWait = 200 * time.Millisecond

// hubSilence is how long past its own collective timeout a call waits for
// the hub's verdict before it takes the hub for gone: the hub times the
// collective out itself and names the missing ranks, so this only fires
// when the hub itself stalled or the way to it was cut without a reset.
func hubSilence(timeout time.Duration) time.Duration {
	return timeout + max(timeout/10, silenceMargin)
}

// silenceMargin is hubSilence's least margin (a variable for the tests).
var silenceMargin = 5 * time.Second

type delivery struct {
	res *resultMsg
	fds []int
}

// Dial connects (retrying while the socket does not exist yet or nobody
// listens on it, until ctx ends), checks that the hub runs as our uid,
// sends hello, and returns once every rank has said hello. A refused hello
// returns a *RefusedError; a rendezvous that times out a *RendezvousError.
func Dial(ctx context.Context, path string, h Hello) (*Client, error) {
	return dial(ctx, path, h, os.Getuid())
}

func dial(ctx context.Context, path string, h Hello, uid int) (*Client, error) {
	if h.WorldSize < 1 || h.WorldSize > MaxWorldSize {
		return nil, fmt.Errorf("hub: world size %d out of range [1,%d]", h.WorldSize, MaxWorldSize)
	}
	if h.Rank < 0 || h.Rank >= h.WorldSize {
		return nil, fmt.Errorf("hub: rank %d out of range [0,%d)", h.Rank, h.WorldSize)
	}
	conn, err := connect(ctx, path)
	if err != nil {
		return nil, fmt.Errorf("joining hub as rank %d: %w", h.Rank, err)
	}
	fc := newFrameConn(conn)
	c, err := handshake(ctx, fc, path, h, uid)
	if err != nil {
		_ = conn.Close()
		fc.releaseFDs()
		return nil, fmt.Errorf("joining hub as rank %d: %w", h.Rank, err)
	}
	go c.readLoop()
	return c, nil
}

func connect(ctx context.Context, path string) (*net.UnixConn, error) {
	backoff := 5 * time.Millisecond
	for {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if err == nil {
			return c.(*net.UnixConn), nil
		}
		if ctx.Err() != nil || errors.Is(err, os.ErrDeadlineExceeded) {
			// The dialer times out on ctx's deadline a moment before ctx
			// itself reports it.
			cause := ctx.Err()
			if cause == nil {
				cause = context.DeadlineExceeded
			}
			return nil, fmt.Errorf("no hub at %s: %w (last error: %v)", path, cause, err)
		}
		if !isRetryableDial(err) {
			return nil, fmt.Errorf("connecting to hub: %w", err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("no hub at %s: %w (last error: %v)", path, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 200*time.Millisecond)
	}
}

func handshake(ctx context.Context, fc *frameConn, path string, h Hello, uid int) (*Client, error) {
	cred, err := fdpass.PeerCred(fc.uc)
	if err != nil {
		return nil, err
	}
	if int(cred.Uid) != uid {
		return nil, fmt.Errorf("hub at %s runs as uid %d, not %d; not talking to it", path, cred.Uid, uid)
	}
	return handshakeHello(ctx, fc, path, h, &sync.Mutex{}, nil)
}

// handshakeHello sends the hello and waits for the rendezvous; k is the
// keepalive of a TCP connection, nil on a Unix socket.
func handshakeHello(ctx context.Context, fc *frameConn, path string, h Hello, wmu *sync.Mutex, k *keepalive) (*Client, error) {
	release := fdpass.InterruptOn(ctx, fc.c.SetDeadline)
	m, err := hello(fc, h, wmu, k)
	if release() {
		return nil, fmt.Errorf("waiting for the rendezvous at %s: %w", path, ctx.Err())
	}
	if err != nil {
		if k != nil && k.silent.Load() {
			return nil, k.silence(path)
		}
		return nil, &lostError{err: err}
	}
	switch m := m.(type) {
	case *failMsg:
		return nil, m.err(path)
	case *welcomeMsg:
		if len(m.peers) != h.WorldSize {
			return nil, fmt.Errorf("%w: welcome lists %d ranks, the job has %d", ErrProtocol, len(m.peers), h.WorldSize)
		}
		for r, p := range m.peers {
			if p.Rank != r {
				return nil, fmt.Errorf("%w: welcome lists rank %d at index %d", ErrProtocol, p.Rank, r)
			}
		}
		h.Token = ""
		return &Client{
			fc:         fc,
			path:       path,
			self:       h,
			peers:      m.peers,
			wmu:        wmu,
			keep:       k,
			sem:        make(chan struct{}, 1),
			waiters:    make(map[uint64]chan delivery),
			failed:     make(chan struct{}),
			readerDone: make(chan struct{}),
		}, nil
	}
	return nil, fmt.Errorf("%w: expected welcome, got %s", ErrProtocol, m.typ())
}

func hello(fc *frameConn, h Hello, wmu *sync.Mutex, k *keepalive) (message, error) {
	wmu.Lock()
	werr := fc.writeMessage(&helloMsg{h: h}, nil)
	wmu.Unlock()
	for {
		// A hub that refuses us before reading (foreign uid) has closed
		// its end, so the write fails; its reason is still there to read.
		m, fds, err := fc.readMessage()
		fdpass.Close(fds)
		if err != nil && werr != nil {
			return nil, werr
		}
		if err != nil {
			return nil, err
		}
		if k != nil {
			k.saw()
			if _, ok := m.(*pingMsg); ok {
				continue
			}
		}
		return m, nil
	}
}

// SetCollectiveTimeout sets how long each collective of this rank lets the
// hub wait for the other ranks once this rank has arrived (d <= 0: the
// hub's default). When the first waiting rank's timeout runs out, the hub
// ends the job with a *CollectiveTimeoutError naming the ranks that never
// came; knob names what sets d, for that error's message. Should the hub
// not answer even well after d, the call fails on its own (ErrHubLost).
func (c *Client) SetCollectiveTimeout(d time.Duration, knob string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.timeout, c.knob = max(d, 0), knob
}

// Rank is this client's rank.
func (c *Client) Rank() int { return c.self.Rank }

// Size is the number of ranks in the job.
func (c *Client) Size() int { return c.self.WorldSize }

// Peers returns every rank's hello (tokens removed); index = rank.
func (c *Client) Peers() []Hello { return slices.Clone(c.peers) }

// Done is closed once the client can make no more calls: the job failed
// (Err matches ErrAborted), the connection broke, or Close was called
// (Err matches ErrClosed).
func (c *Client) Done() <-chan struct{} { return c.failed }

// Err is why Done is closed, or nil while it is not.
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Barrier returns when every rank has called it.
func (c *Client) Barrier(ctx context.Context) error {
	_, _, err := c.call(ctx, opBarrier, 0, nil, nil)
	return err
}

// AllGather returns every rank's b; index = rank. Each rank may contribute
// at most MaxBlob(Size()) bytes; an empty contribution comes back nil.
func (c *Client) AllGather(ctx context.Context, b []byte) ([][]byte, error) {
	if len(b) > MaxBlob(c.Size()) {
		return nil, fmt.Errorf("hub: rank %d: AllGather of %d bytes: %w (at most %d per rank with %d ranks)",
			c.Rank(), len(b), ErrTooLarge, MaxBlob(c.Size()), c.Size())
	}
	res, _, err := c.call(ctx, opAllGather, 0, b, nil)
	if err != nil {
		return nil, err
	}
	if len(res.blobs) != c.Size() {
		return nil, c.broken(fmt.Errorf("%w: AllGather result has %d blobs for %d ranks", ErrProtocol, len(res.blobs), c.Size()))
	}
	return res.blobs, nil
}

// Broadcast returns root's b on every rank; other ranks' b is ignored.
func (c *Client) Broadcast(ctx context.Context, root int, b []byte) ([]byte, error) {
	if err := c.checkRoot(opBroadcast, root); err != nil {
		return nil, err
	}
	if c.Rank() != root {
		b = nil
	} else if len(b) > MaxBlob(1) {
		return nil, fmt.Errorf("hub: rank %d: Broadcast of %d bytes: %w (at most %d)", c.Rank(), len(b), ErrTooLarge, MaxBlob(1))
	}
	res, _, err := c.call(ctx, opBroadcast, root, b, nil)
	if err != nil {
		return nil, err
	}
	if len(res.blobs) != 1 {
		return nil, c.broken(fmt.Errorf("%w: Broadcast result has %d blobs", ErrProtocol, len(res.blobs)))
	}
	return res.blobs[0], nil
}

// AllGatherFDs: every rank contributes one descriptor; the result holds one
// new descriptor per rank (own included), owned by the caller and
// close-on-exec. The caller keeps fd.
func (c *Client) AllGatherFDs(ctx context.Context, fd int) ([]int, error) {
	if err := c.localFDs(opAllGatherFDs); err != nil {
		return nil, err
	}
	if fd < 0 {
		return nil, fmt.Errorf("hub: rank %d: AllGatherFDs: invalid descriptor %d", c.Rank(), fd)
	}
	_, fds, err := c.call(ctx, opAllGatherFDs, 0, nil, []int{fd})
	if err != nil {
		return nil, err
	}
	if len(fds) != c.Size() {
		fdpass.Close(fds)
		return nil, c.broken(fmt.Errorf("%w: AllGatherFDs result has %d descriptors for %d ranks", ErrProtocol, len(fds), c.Size()))
	}
	return fds, nil
}

// BroadcastFDs: root contributes fds (at most MaxFDs), every rank gets new
// copies of them, owned by the caller and close-on-exec. Other ranks' fds
// are ignored; root keeps its own.
func (c *Client) BroadcastFDs(ctx context.Context, root int, fds []int) ([]int, error) {
	if err := c.localFDs(opBroadcastFDs); err != nil {
		return nil, err
	}
	if err := c.checkRoot(opBroadcastFDs, root); err != nil {
		return nil, err
	}
	if c.Rank() != root {
		fds = nil
	} else if len(fds) > MaxFDs {
		return nil, fmt.Errorf("hub: rank %d: BroadcastFDs of %d descriptors: %w (at most %d)", c.Rank(), len(fds), ErrTooLarge, MaxFDs)
	}
	for _, fd := range fds {
		if fd < 0 {
			return nil, fmt.Errorf("hub: rank %d: BroadcastFDs: invalid descriptor %d", c.Rank(), fd)
		}
	}
	_, got, err := c.call(ctx, opBroadcastFDs, root, nil, fds)
	if err != nil {
		return nil, err
	}
	if c.Rank() == root && len(got) != len(fds) {
		fdpass.Close(got)
		return nil, c.broken(fmt.Errorf("%w: BroadcastFDs returned %d descriptors, root sent %d", ErrProtocol, len(got), len(fds)))
	}
	return got, nil
}

// Abort fails the job for every rank with a *RankError naming this rank.
// This rank's own calls fail too, once the hub's answer arrives.
func (c *Client) Abort(reason string) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.fc.writeMessage(&abortMsg{reason: reason}, nil); err != nil {
		return fmt.Errorf("hub: rank %d: sending abort: %w", c.Rank(), err)
	}
	return nil
}

// Close says goodbye and closes the connection; calls in progress fail
// with ErrClosed. A rank may close once it has made its last call; only a
// peer still waiting for it in a later call fails (naming this rank).
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		c.setErr(fmt.Errorf("%w (this rank called Close)", ErrClosed))
		// A write in flight means the hub is not reading; then skip the
		// goodbye rather than wait for it.
		said := false
		if c.wmu.TryLock() {
			_ = c.fc.c.SetWriteDeadline(time.Now().Add(time.Second))
			// Best effort: the hub may already be gone.
			said = c.fc.writeMessage(&byeMsg{}, nil) == nil
			c.wmu.Unlock()
		}
		if said {
			// The hub closes its end once it has seen the goodbye: after
			// that, whatever leaving means for the others (a peer still
			// waiting for this rank fails) is settled, which the rank that
			// hosts the hub relies on before it shuts the hub down.
			t := time.NewTimer(byeWait)
			select {
			case <-c.readerDone:
			case <-t.C:
			}
			t.Stop()
		}
		c.closeErr = c.fc.c.Close()
		<-c.readerDone
		if c.keep != nil {
			c.keep.halt()
		}
		c.mu.Lock()
		for seq, ch := range c.waiters {
			delete(c.waiters, seq)
			drain(ch)
		}
		c.mu.Unlock()
	})
	return c.closeErr
}

// localFDs refuses a descriptor collective on a TCP client, before
// anything is sent: the group stays usable.
func (c *Client) localFDs(k opKind) error {
	if c.keep != nil {
		return fmt.Errorf("hub: rank %d: %s: %w (this job's ranks reach the hub over TCP; share memory through handles that are bytes, such as CUDA fabric handles)", c.Rank(), k, ErrCrossNode)
	}
	return nil
}

func (c *Client) checkRoot(k opKind, root int) error {
	if root < 0 || root >= c.Size() {
		return fmt.Errorf("hub: rank %d: %s: root %d out of range [0,%d)", c.Rank(), k, root, c.Size())
	}
	return nil
}

// call makes one collective call and waits for its result.
func (c *Client) call(ctx context.Context, kind opKind, root int, data []byte, fds []int) (*resultMsg, []int, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("hub: rank %d: %s: %w", c.Rank(), kind, err)
	}
	select {
	case c.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, nil, fmt.Errorf("hub: rank %d: %s: %w", c.Rank(), kind, ctx.Err())
	}
	defer func() { <-c.sem }()

	c.mu.Lock()
	if c.err != nil {
		err := c.err
		c.mu.Unlock()
		return nil, nil, fmt.Errorf("%s on rank %d: %w", kind, c.Rank(), err)
	}
	c.seq++
	seq := c.seq
	ch := make(chan delivery, 1)
	c.waiters[seq] = ch
	timeout := c.timeout
	c.mu.Unlock()
	wrap := func(err error) error { return fmt.Errorf("%s #%d on rank %d: %w", kind, seq, c.Rank(), err) }

	if err := c.send(ctx, &opMsg{seq: seq, kind: kind, root: root, data: data, nfds: len(fds), timeout: timeout}, fds); err != nil {
		c.forget(seq, ch)
		if ctx.Err() != nil {
			// Part of the frame may be on the wire: the stream is unusable.
			c.broken(fmt.Errorf("a call was interrupted while sending: %w", ctx.Err()))
			return nil, nil, wrap(ctx.Err())
		}
		// A hub that ended the job told every rank why before it went:
		// let the reader take what is left in the socket, so that the
		// error is the job's failure, not the closed connection.
		t := time.NewTimer(lastWordWait)
		select {
		case <-c.readerDone:
		case <-t.C:
		}
		t.Stop()
		return nil, nil, wrap(c.broken(&lostError{err: err}))
	}

	var silence <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(hubSilence(timeout))
		defer t.Stop()
		silence = t.C
	}
	var cause error
	select {
	case d := <-ch:
		return c.check(kind, seq, d, wrap)
	case <-c.failed:
	case <-ctx.Done():
		cause = ctx.Err()
	case <-silence:
		c.broken(&lostError{err: fmt.Errorf("no word from the hub %v after sending %s #%d, though the collective timeout is %v: taking the hub for gone",
			hubSilence(timeout), kind, seq, timeout)})
	}
	// A result that arrived together with the failure or cancellation
	// still counts: the call did complete.
	if d, ok := c.forget(seq, ch); ok {
		return c.check(kind, seq, d, wrap)
	}
	if cause == nil {
		c.mu.Lock()
		cause = c.err
		c.mu.Unlock()
		return nil, nil, wrap(cause)
	}
	c.giveUp(fmt.Sprintf("gave up on %s #%d after sending it (%v): the other ranks could still complete it, so no later call of this rank could be matched with theirs", kind, seq, cause))
	return nil, nil, wrap(cause)
}

// giveUp ends the job after this rank abandoned a call it had sent: its
// own later calls fail at once with a *RankError naming it, and the hub
// tells the other ranks the same reason.
func (c *Client) giveUp(reason string) {
	c.setErr(&RankError{Rank: c.Rank(), Reason: reason})
	if !c.wmu.TryLock() {
		return // a write in flight: the hub is not reading; the peers learn when this rank goes
	}
	defer c.wmu.Unlock()
	_ = c.fc.c.SetWriteDeadline(time.Now().Add(time.Second))
	_ = c.fc.writeMessage(&abortMsg{reason: reason}, nil) // best effort, as in Close
	_ = c.fc.c.SetWriteDeadline(time.Time{})
}

func (c *Client) check(kind opKind, seq uint64, d delivery, wrap func(error) error) (*resultMsg, []int, error) {
	if d.res.kind != kind {
		fdpass.Close(d.fds)
		return nil, nil, wrap(c.broken(fmt.Errorf("%w: result #%d is for %s", ErrProtocol, seq, d.res.kind)))
	}
	return d.res, d.fds, nil
}

// forget removes the waiter ch for seq and returns a result already
// delivered to it.
func (c *Client) forget(seq uint64, ch chan delivery) (delivery, bool) {
	c.mu.Lock()
	delete(c.waiters, seq)
	c.mu.Unlock()
	// deliver sends while holding c.mu, so after the delete above any
	// result for seq is already in ch.
	select {
	case d := <-ch:
		return d, true
	default:
		return delivery{}, false
	}
}

func (c *Client) send(ctx context.Context, m message, fds []int) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	release := fdpass.InterruptOn(ctx, c.fc.c.SetWriteDeadline)
	err := c.fc.writeMessage(m, fds)
	release()
	return err
}

// broken records a failure of the connection itself and closes it, so the
// hub sees this rank go.
func (c *Client) broken(err error) error {
	c.setErr(err)
	_ = c.fc.c.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

func (c *Client) setErr(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.failed)
	}
}

func (c *Client) readLoop() {
	defer close(c.readerDone)
	defer c.fc.releaseFDs()
	for {
		m, fds, err := c.fc.readMessage()
		if err != nil {
			if c.keep != nil && c.keep.silent.Load() {
				c.setErr(c.keep.silence(c.path))
				return
			}
			c.setErr(&lostError{err: err})
			return
		}
		if c.keep != nil {
			c.keep.saw()
		}
		switch m := m.(type) {
		case *pingMsg:
			if c.keep == nil {
				c.broken(&lostError{err: fmt.Errorf("%w: unexpected ping from the hub", ErrProtocol)})
				return
			}
		case *resultMsg:
			c.deliver(m, fds)
		case *failMsg:
			fdpass.Close(fds)
			err := m.err(c.path)
			var ce *CollectiveTimeoutError
			if errors.As(err, &ce) && ce.Knob == "" {
				c.mu.Lock()
				ce.Knob = c.knob
				c.mu.Unlock()
			}
			c.setErr(err)
		default:
			fdpass.Close(fds)
			c.broken(&lostError{err: fmt.Errorf("%w: unexpected %s frame from the hub", ErrProtocol, m.typ())})
			return
		}
	}
}

func (c *Client) deliver(m *resultMsg, fds []int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch, ok := c.waiters[m.seq]
	if !ok {
		// The call was cancelled; nobody takes these.
		fdpass.Close(fds)
		return
	}
	delete(c.waiters, m.seq)
	ch <- delivery{res: m, fds: fds} // buffered, never blocks
}

func drain(ch chan delivery) {
	select {
	case d := <-ch:
		fdpass.Close(d.fds)
	default:
	}
}
