package hub

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tprun/tprun/internal/fdpass"
)

// TCPConfig is what a client of a TCP hub needs beyond the address.
type TCPConfig struct {
	// Secret is the job secret; the hub refuses a client that cannot
	// prove it knows it, and the client refuses a hub that cannot.
	Secret []byte
	// Liveness: the hub is taken for gone after this long without a frame
	// from it (0 means DefaultLiveness); the client pings after a fifth.
	Liveness time.Duration
}

// The roles in the handshake's MACs: a proof made for one can never pass
// for the other, so a hub cannot be made to answer its own challenge.
const (
	roleClient = "client"
	roleHub    = "hub"
)

// wrongSecret is the hub's refusal of a client whose proof does not match.
const wrongSecret = "wrong job secret"

// proofMAC is HMAC-SHA256 under secret of the role and both nonces, the
// verifier's first.
func proofMAC(secret []byte, role string, first, second [nonceLen]byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write([]byte("tprun-hub-proof\x00" + role + "\x00"))
	m.Write(first[:])
	m.Write(second[:])
	return m.Sum(nil)
}

// handshakeTimeout bounds the client's wait for the hub's challenge and
// proof: a listener that is no tprun hub must not hold a rank forever.
const handshakeTimeout = 10 * time.Second

// DialTCP joins a hub that serves ranks on several nodes at addr
// (host:port): it connects (retrying while nothing listens there yet, or
// the host is not reachable yet, until ctx ends), proves the job secret
// and checks the hub's proof, sends hello, and returns once every rank has
// said hello. Descriptor collectives are refused on such a client
// (ErrCrossNode). A wrong secret on either side matches ErrSecret.
func DialTCP(ctx context.Context, addr string, h Hello, cfg TCPConfig) (*Client, error) {
	if h.WorldSize < 1 || h.WorldSize > MaxWorldSize {
		return nil, fmt.Errorf("hub: world size %d out of range [1,%d]", h.WorldSize, MaxWorldSize)
	}
	if h.Rank < 0 || h.Rank >= h.WorldSize {
		return nil, fmt.Errorf("hub: rank %d out of range [0,%d)", h.Rank, h.WorldSize)
	}
	if len(cfg.Secret) < MinSecret {
		return nil, fmt.Errorf("hub: joining the hub at %s as rank %d: the job secret has %d bytes, at least %d needed", addr, h.Rank, len(cfg.Secret), MinSecret)
	}
	if cfg.Liveness <= 0 {
		cfg.Liveness = DefaultLiveness
	}
	conn, err := connectTCP(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("joining hub as rank %d: %w", h.Rank, err)
	}
	fc := newStreamConn(conn)
	c, err := handshakeTCP(ctx, fc, addr, h, cfg)
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("joining hub as rank %d: %w", h.Rank, err)
	}
	go c.readLoop()
	return c, nil
}

func connectTCP(ctx context.Context, addr string) (net.Conn, error) {
	backoff := 20 * time.Millisecond
	for {
		d := net.Dialer{Timeout: 5 * time.Second}
		c, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("no hub at %s: %w (last error: %v)", addr, ctx.Err(), err)
		}
		if !retryableTCP(err) {
			return nil, fmt.Errorf("connecting to the hub at %s: %w", addr, err)
		}
		t := time.NewTimer(backoff)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("no hub at %s: %w (last error: %v)", addr, ctx.Err(), err)
		case <-t.C:
		}
		backoff = min(2*backoff, 500*time.Millisecond)
	}
}

// retryableTCP reports whether a dial error means the hub is not there
// yet: nobody listens, or the host or its network is not up yet.
func retryableTCP(err error) bool {
	for _, e := range []error{syscall.ECONNREFUSED, syscall.ECONNRESET, syscall.EHOSTUNREACH,
		syscall.ENETUNREACH, syscall.ETIMEDOUT, os.ErrDeadlineExceeded} {
		if errors.Is(err, e) {
			return true
		}
	}
	var dns *net.DNSError
	return errors.As(err, &dns) && dns.IsTemporary
}

// handshakeTCP is the client's side of the TCP handshake, then the hello
// and the wait for the others, with the keepalive running from the
// moment the hub has proved itself.
func handshakeTCP(ctx context.Context, fc *frameConn, addr string, h Hello, cfg TCPConfig) (*Client, error) {
	_ = fc.c.SetDeadline(time.Now().Add(handshakeTimeout))
	release := fdpass.InterruptOn(ctx, fc.c.SetDeadline)
	err := prove(fc, addr, cfg)
	if release() {
		return nil, fmt.Errorf("handshake with the hub at %s: %w", addr, ctx.Err())
	}
	if err != nil {
		return nil, err
	}
	_ = fc.c.SetDeadline(time.Time{})
	fc.admit()
	var wmu sync.Mutex
	k := startKeepalive(fc, &wmu, cfg.Liveness)
	c, err := handshakeHello(ctx, fc, addr, h, &wmu, k)
	if err != nil {
		k.halt()
		return nil, err
	}
	return c, nil
}

// prove answers the hub's challenge and checks the hub's proof.
func prove(fc *frameConn, addr string, cfg TCPConfig) error {
	m, _, err := fc.readMessage()
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("%w: no challenge from %s within %v: no tprun hub listens there", ErrProtocol, addr, handshakeTimeout)
		}
		if errors.Is(err, ErrProtocol) {
			return fmt.Errorf("the listener at %s is not a tprun hub of this version: %w", addr, err)
		}
		return &lostError{err: err}
	}
	ch, ok := m.(*challengeMsg)
	if !ok {
		return fmt.Errorf("%w: expected the hub's challenge from %s, got a %s frame", ErrProtocol, addr, m.typ())
	}
	var pr proofMsg
	if _, err := rand.Read(pr.nonce[:]); err != nil {
		return fmt.Errorf("hub: no randomness for the handshake: %w", err)
	}
	copy(pr.mac[:], proofMAC(cfg.Secret, roleClient, ch.nonce, pr.nonce))
	if err := fc.writeMessage(&pr, nil); err != nil {
		return &lostError{err: err}
	}
	m, _, err = fc.readMessage()
	if err != nil {
		return &lostError{err: err}
	}
	switch m := m.(type) {
	case *failMsg:
		return m.err(addr)
	case *proofOKMsg:
		if !hmac.Equal(m.mac[:], proofMAC(cfg.Secret, roleHub, pr.nonce, ch.nonce)) {
			return fmt.Errorf("%w: the hub at %s could not prove it knows this job's secret (another job's hub on that port, or a different secret there): not talking to it", ErrSecret, addr)
		}
		return nil
	}
	return fmt.Errorf("%w: expected the hub's proof from %s, got a %s frame", ErrProtocol, addr, m.typ())
}

// keepalive pings a TCP hub and watches for its silence: once nothing
// came for the liveness period it closes the connection, and the reader
// reports the silence.
type keepalive struct {
	fc     *frameConn
	wmu    *sync.Mutex
	live   time.Duration
	heard  atomic.Int64 // Unix nanoseconds of the last frame from the hub
	silent atomic.Bool  // the keepalive closed the connection
	stop   chan struct{}
	done   chan struct{}
	once   sync.Once
}

func startKeepalive(fc *frameConn, wmu *sync.Mutex, live time.Duration) *keepalive {
	k := &keepalive{fc: fc, wmu: wmu, live: live, stop: make(chan struct{}), done: make(chan struct{})}
	k.heard.Store(time.Now().UnixNano())
	go k.run()
	return k
}

func (k *keepalive) run() {
	defer close(k.done)
	t := time.NewTicker(k.live / 5)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
		}
		if time.Since(time.Unix(0, k.heard.Load())) >= k.live {
			k.silent.Store(true)
			_ = k.fc.c.Close()
			return
		}
		// A write in flight is traffic enough; a ping must never wait.
		if k.wmu.TryLock() {
			_ = k.fc.c.SetWriteDeadline(time.Now().Add(k.live))
			err := k.fc.writeMessage(&pingMsg{}, nil)
			_ = k.fc.c.SetWriteDeadline(time.Time{})
			k.wmu.Unlock()
			if err != nil {
				return // the reader sees the broken connection
			}
		}
	}
}

// saw records a frame from the hub.
func (k *keepalive) saw() { k.heard.Store(time.Now().UnixNano()) }

// halt stops the keepalive and waits for it; idempotent.
func (k *keepalive) halt() {
	k.once.Do(func() { close(k.stop) })
	<-k.done
}

// silence is the error for a hub that went silent.
func (k *keepalive) silence(addr string) error {
	return &lostError{err: fmt.Errorf("no word from the hub at %s for %v (its node is cut off, stalled or down)", addr, k.live)}
}
