package hub

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func newSecret(t testing.TB) []byte {
	t.Helper()
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return b
}

// startTCPHub serves a TCP hub on the loopback; hosts[r] is the node rank r
// says it runs on.
func startTCPHub(t *testing.T, cfg ServerConfig, tweak func(*Server)) *testHub {
	t.Helper()
	if cfg.TCPAddr == "" && cfg.Listener == nil {
		cfg.TCPAddr = "127.0.0.1:0"
	}
	if cfg.Secret == nil {
		cfg.Secret = newSecret(t)
	}
	h := startHub(t, cfg, tweak)
	h.secret = cfg.Secret
	return h
}

func nodeOf(r int) string { return fmt.Sprintf("node-%c", 'a'+r/2) } // two ranks a node

// dialTCP joins rank r over TCP from its node (two ranks a node).
func (h *testHub) dialTCP(ctx context.Context, r int, live time.Duration) (*Client, error) {
	hello := h.hello(r)
	hello.Hostname = nodeOf(r)
	return DialTCP(ctx, h.Path(), hello, TCPConfig{Secret: h.secret, Liveness: live})
}

// dialAllTCP joins every rank over TCP, two ranks per node.
func dialAllTCP(t *testing.T, h *testHub, live time.Duration) []*Client {
	t.Helper()
	return dialEvery(t, h, func(ctx context.Context, r int) (*Client, error) { return h.dialTCP(ctx, r, live) })
}

// TestTCPCollectives: four ranks on two "nodes" join over the loopback,
// run the blob collectives with fresh random data, and are refused the
// descriptor ones before anything is sent, which leaves the job usable.
func TestTCPCollectives(t *testing.T) {
	const n = 4
	h := startTCPHub(t, ServerConfig{WorldSize: n}, nil)
	if !strings.HasPrefix(h.Path(), "127.0.0.1:") {
		t.Fatalf("hub at %q", h.Path())
	}
	clients := dialAllTCP(t, h, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for r, c := range clients {
		if c.keep == nil {
			t.Errorf("rank %d: no keepalive on a TCP client", r)
		}
		for q, p := range c.Peers() {
			if p.Hostname != nodeOf(q) || p.Token != "" {
				t.Errorf("rank %d sees peer %d as %+v", r, q, p)
			}
		}
	}
	blobs := make([][]byte, n)
	for r := range blobs {
		blobs[r] = randomBytes(1 + mrand.IntN(MaxBlob(n)/64))
	}
	root := mrand.IntN(n)
	onEvery(t, clients, func(r int, c *Client) error {
		if err := c.Barrier(ctx); err != nil {
			return err
		}
		got, err := c.AllGather(ctx, blobs[r])
		if err != nil {
			return err
		}
		for q := range got {
			if !bytes.Equal(got[q], blobs[q]) {
				return fmt.Errorf("AllGather: rank %d's blob differs", q)
			}
		}
		b, err := c.Broadcast(ctx, root, blobs[r])
		if err != nil {
			return err
		}
		if !bytes.Equal(b, blobs[root]) {
			return errors.New("Broadcast: not the root's blob")
		}
		if _, err := c.AllGatherFDs(ctx, 0); !errors.Is(err, ErrCrossNode) {
			return fmt.Errorf("AllGatherFDs over TCP: %v, want ErrCrossNode", err)
		}
		if _, err := c.BroadcastFDs(ctx, 0, []int{0}); !errors.Is(err, ErrCrossNode) {
			return fmt.Errorf("BroadcastFDs over TCP: %v, want ErrCrossNode", err)
		}
		return c.Barrier(ctx)
	})
	onEvery(t, clients, func(r int, c *Client) error { return c.Close() })
	waitFor(t, func() bool { return h.idle() })
	if err := h.Err(); err != nil {
		t.Errorf("a clean run failed the job: %v", err)
	}
}

func TestTCPNeedsSecret(t *testing.T) {
	for _, secret := range [][]byte{nil, []byte("short")} {
		s, err := Listen(ServerConfig{WorldSize: 2, Token: "t", TCPAddr: "127.0.0.1:0", Secret: secret})
		if err == nil {
			_ = s.Close()
			t.Fatalf("secret %q: a TCP hub listened", secret)
		}
		if !strings.Contains(err.Error(), "needs a job secret of at least 16 bytes") {
			t.Errorf("secret %q: %v", secret, err)
		}
	}
	ctx := context.Background()
	if _, err := DialTCP(ctx, "127.0.0.1:1", Hello{WorldSize: 1}, TCPConfig{Secret: []byte("short")}); err == nil || !strings.Contains(err.Error(), "at least 16") {
		t.Errorf("client with a short secret: %v", err)
	}
}

// TestTCPWrongSecret: a client with another secret is refused, and the
// hub logs why; a hub that cannot prove the secret is refused by the
// client; the job goes on for the right ones.
func TestTCPWrongSecret(t *testing.T) {
	h := startTCPHub(t, ServerConfig{WorldSize: 2}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := DialTCP(ctx, h.Path(), h.hello(0), TCPConfig{Secret: newSecret(t)})
	if !errors.Is(err, ErrSecret) || !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "wrong job secret") {
		t.Errorf("wrong secret: got %v", err)
	}
	if !h.log.contains("wrong job secret") || !h.log.contains("refused connection from 127.0.0.1:") {
		t.Errorf("hub log:\n%s", h.log)
	}
	clients := dialAllTCP(t, h, 0)
	onEvery(t, clients, func(r int, c *Client) error { return c.Barrier(ctx) })

	// A listener that answers with a proof made under another secret.
	fake := fakeHub(t, newSecret(t), func(fc *frameConn) {})
	_, err = DialTCP(ctx, fake, Hello{Rank: 0, WorldSize: 1}, TCPConfig{Secret: newSecret(t)})
	if !errors.Is(err, ErrSecret) || !strings.Contains(err.Error(), "could not prove it knows this job's secret") {
		t.Errorf("hub with another secret: got %v", err)
	}
}

// fakeHub listens on the loopback and runs the hub's side of the
// handshake under secret for one connection, then hands it to then. It
// returns the address.
func fakeHub(t *testing.T, secret []byte, then func(fc *frameConn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
	})
	go func() {
		defer close(done)
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		fc := newStreamConn(c)
		var ch challengeMsg
		_, _ = rand.Read(ch.nonce[:])
		if fc.writeMessage(&ch, nil) != nil {
			return
		}
		m, _, err := fc.readMessage()
		if err != nil {
			return
		}
		pr := m.(*proofMsg)
		var ok proofOKMsg
		copy(ok.mac[:], proofMAC(secret, roleHub, pr.nonce, ch.nonce))
		if fc.writeMessage(&ok, nil) != nil {
			return
		}
		fc.admit()
		then(fc)
	}()
	return ln.Addr().String()
}

// handshakeRaw does a client's handshake by hand on a fresh connection and
// returns it, for the tests that then misbehave.
func handshakeRaw(t *testing.T, h *testHub, hello *Hello) (net.Conn, *frameConn) {
	t.Helper()
	c, err := net.Dial("tcp", h.Path())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fc := newStreamConn(c)
	if err := prove(fc, h.Path(), TCPConfig{Secret: h.secret}); err != nil {
		t.Fatal(err)
	}
	fc.admit()
	if hello != nil {
		if err := fc.writeMessage(&helloMsg{h: *hello}, nil); err != nil {
			t.Fatal(err)
		}
	}
	return c, fc
}

// TestTCPBadFrames: oversized and truncated frames, before and after the
// handshake, end that connection with a named error, never a hang or an
// allocation of what the header claims.
func TestTCPBadFrames(t *testing.T) {
	header := func(typ msgType, n uint32) []byte {
		b := []byte{'T', 'P', 'H', Version, 0, 0, 0, 0, byte(typ)}
		binary.BigEndian.PutUint32(b[4:8], n)
		return b
	}
	readChallenge := func(t *testing.T, h *testHub) net.Conn {
		c, err := net.Dial("tcp", h.Path())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close() })
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, _, err := newStreamConn(c).readMessage(); err != nil {
			t.Fatal(err)
		}
		return c
	}
	pre := []struct {
		desc string
		send []byte
		hold bool // keep the connection open after sending
		want string
	}{
		{"oversized before the secret", header(msgProof, MaxHandshakeFrame+1), true, fmt.Sprintf("frame of %d bytes exceeds the limit of %d", MaxHandshakeFrame+1, MaxHandshakeFrame)},
		{"huge before the secret", header(msgHello, 0xFFFFFFFF), true, "exceeds the limit"},
		{"truncated proof, closed", append(header(msgProof, nonceLen+macLen), 1, 2, 3), false, "connection closed inside a frame"},
		{"truncated proof, stalled", append(header(msgProof, nonceLen+macLen), 1, 2, 3), true, "i/o timeout"},
		{"garbage", []byte("GET / HTTP/1.1\r\n\r\n"), true, "bad magic"},
		{"hello without the proof", mustEncode(t, &helloMsg{h: Hello{WorldSize: 2}}), true, "expected a proof of the job secret, got a hello frame"},
	}
	for _, tc := range pre {
		t.Run(tc.desc, func(t *testing.T) {
			h := startTCPHub(t, ServerConfig{WorldSize: 2}, func(s *Server) { s.helloTimeout = 300 * time.Millisecond })
			c := readChallenge(t, h)
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			if !tc.hold {
				_ = c.(*net.TCPConn).CloseWrite()
			}
			// The hub refuses, says why, and closes its end.
			start := time.Now()
			fc := newStreamConn(c)
			m, _, err := fc.readMessage()
			f, ok := m.(*failMsg)
			if err != nil || !ok || f.code != failRefused || !strings.Contains(f.reason, tc.want) {
				t.Errorf("hub answered %#v, %v; want a refusal saying %q", m, err, tc.want)
			}
			if _, _, err := fc.readMessage(); !errors.Is(err, io.EOF) {
				t.Errorf("connection still open after the refusal: %v", err)
			}
			if took := time.Since(start); took > 2*time.Second {
				t.Errorf("refused after %v", took)
			}
			if !h.log.contains(tc.want) {
				t.Errorf("log:\n%s", h.log)
			}
			// The hub still serves the job.
			dialAllTCP(t, h, 0)
		})
	}
	t.Run("admitted rank sends an oversized frame", func(t *testing.T) {
		h := startTCPHub(t, ServerConfig{WorldSize: 2}, nil)
		errc := make(chan error, 1)
		go func() {
			c, err := h.dialTCP(context.Background(), 1, 0)
			if err == nil {
				err = c.Barrier(context.Background())
				_ = c.Close()
			}
			errc <- err
		}()
		hello := h.hello(0)
		hello.Hostname = "node-a"
		_, fc := handshakeRaw(t, h, &hello)
		for {
			m, _, err := fc.readMessage()
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := m.(*welcomeMsg); ok {
				break
			}
		}
		if _, err := fc.c.Write(header(msgOp, MaxFrame+1)); err != nil {
			t.Fatal(err)
		}
		err := <-errc
		var re *RankError
		if !errors.As(err, &re) || re.Rank != 0 || re.Host != "node-a" || !strings.Contains(err.Error(), "rank 0 on node-a: sent a malformed frame") {
			t.Errorf("peer got %v", err)
		}
	})
	t.Run("hub sends a truncated frame", func(t *testing.T) {
		secret := newSecret(t)
		addr := fakeHub(t, secret, func(fc *frameConn) {
			_, _, _ = fc.readMessage()
			_, _ = fc.c.Write(header(msgWelcome, 100)[:9])
			_, _ = fc.c.Write([]byte{0, 0, 0})
		})
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := DialTCP(ctx, addr, Hello{Rank: 0, WorldSize: 1}, TCPConfig{Secret: secret})
		if !errors.Is(err, ErrHubLost) || !strings.Contains(err.Error(), "connection closed inside a frame") {
			t.Errorf("got %v", err)
		}
	})
	t.Run("not a hub", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_, _ = c.Write([]byte("SSH-2.0-OpenSSH\r\n"))
				time.Sleep(time.Second)
				_ = c.Close()
			}
		}()
		_, err = DialTCP(context.Background(), ln.Addr().String(), Hello{Rank: 0, WorldSize: 1}, TCPConfig{Secret: newSecret(t)})
		if !errors.Is(err, ErrProtocol) || !strings.Contains(err.Error(), "is not a tprun hub") {
			t.Errorf("got %v", err)
		}
	})
}

func TestTCPPortInUse(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, err = Listen(ServerConfig{WorldSize: 2, Token: "t", TCPAddr: taken.Addr().String(), Secret: newSecret(t)})
	if !errors.Is(err, syscall.EADDRINUSE) || !strings.Contains(err.Error(), "another job or process holds this port") ||
		!strings.Contains(err.Error(), taken.Addr().String()) {
		t.Errorf("got %v", err)
	}
}

// TestTCPRankKilled: a rank whose connection drops without a goodbye is
// named, with its node, on every other rank at once.
func TestTCPRankKilled(t *testing.T) {
	const n, dead = 4, 3
	h := startTCPHub(t, ServerConfig{WorldSize: n}, nil)
	clients := dialAllTCP(t, h, 0)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, c := range clients {
		if r != dead {
			wg.Go(func() { errs[r] = c.Barrier(context.Background()) })
		}
	}
	waitFor(t, func() bool {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.pending[1] != nil && h.pending[1].arrived == n-1
	})
	start := time.Now()
	_ = clients[dead].fc.c.Close()
	wg.Wait()
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("others failed after %v", took)
	}
	for r, err := range errs {
		if r == dead {
			continue
		}
		var re *RankError
		if !errors.As(err, &re) || re.Rank != dead || re.Host != "node-b" ||
			!strings.Contains(err.Error(), "rank 3 on node-b: connection lost (the process exited or was killed, or its node went down)") {
			t.Errorf("rank %d: got %v", r, err)
		}
	}
}

// TestTCPSilentNode: both ranks of a node stop answering (their node cut
// off: the connections stay open, nothing comes); the hub ends the job
// within the liveness period naming the node and its ranks, and a hub that
// goes silent is left by its clients likewise.
func TestTCPSilentNode(t *testing.T) {
	const n = 4
	live := 400 * time.Millisecond
	h := startTCPHub(t, ServerConfig{WorldSize: n, Liveness: live}, nil)
	clients := dialAllTCP(t, h, live)
	// Several liveness periods of an idle job end nothing: the pings
	// keep it alive.
	time.Sleep(3 * live)
	if err := h.Err(); err != nil {
		t.Fatalf("an idle job failed: %v", err)
	}
	for _, r := range []int{2, 3} { // node-b
		clients[r].keep.halt()
	}
	start := time.Now()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { errs[r] = clients[r].Barrier(context.Background()) })
	}
	wg.Wait()
	if took := time.Since(start); took > live+2*time.Second {
		t.Errorf("node-a's ranks failed after %v, liveness %v", took, live)
	}
	for r, err := range errs {
		var ne *NodeError
		if !errors.As(err, &ne) || ne.Host != "node-b" || !slices.Equal(ne.Ranks, []int{2, 3}) || !errors.Is(err, ErrAborted) ||
			!strings.Contains(err.Error(), "node node-b (ranks 2,3) silent for 400ms: it is cut off from the network, stalled or down") {
			t.Errorf("rank %d: got %v", r, err)
		}
	}

	t.Run("the hub goes silent", func(t *testing.T) {
		secret := newSecret(t)
		addr := fakeHub(t, secret, func(fc *frameConn) {
			m, _, err := fc.readMessage()
			if err != nil {
				return
			}
			hello := m.(*helloMsg).h
			hello.Token = ""
			_ = fc.writeMessage(&welcomeMsg{peers: []Hello{hello}}, nil)
			// Then nothing: no pings, no reading, connection open.
			time.Sleep(3 * live)
		})
		c, err := DialTCP(context.Background(), addr, Hello{Rank: 0, WorldSize: 1}, TCPConfig{Secret: secret, Liveness: live})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		err = c.Barrier(context.Background())
		if took := time.Since(start); took > live+2*time.Second {
			t.Errorf("failed after %v", took)
		}
		if !errors.Is(err, ErrHubLost) || !strings.Contains(err.Error(), "no word from the hub at "+addr+" for 400ms") {
			t.Errorf("got %v", err)
		}
	})
}

// TestTCPRendezvousTimeoutHosts: the missing ranks are named with the
// hosts the launcher expects them on.
func TestTCPRendezvousTimeoutHosts(t *testing.T) {
	const n = 6
	h := startTCPHub(t, ServerConfig{WorldSize: n, RendezvousTimeout: 300 * time.Millisecond, Where: nodeOf}, nil)
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Go(func() { _, errs[r] = h.dialTCP(context.Background(), r, 0) })
	}
	wg.Wait()
	for r, err := range errs {
		var rv *RendezvousError
		if !errors.As(err, &rv) || !slices.Equal(rv.Missing, []int{2, 3, 4, 5}) ||
			!strings.Contains(err.Error(), "ranks 2,3 (node-b), ranks 4,5 (node-c) never connected") {
			t.Errorf("rank %d: got %v", r, err)
		}
	}
}

// fakeStream is a connection whose reads come from a byte slice; writes
// are discarded. It feeds the decoder in the fuzz target.
type fakeStream struct {
	net.Conn
	r *bytes.Reader
}

func (f fakeStream) Read(b []byte) (int, error) { return f.r.Read(b) }

// FuzzDecodeTCPStream feeds arbitrary bytes to a TCP connection's reader,
// before the handshake (MaxHandshakeFrame) or after: it must never panic
// or read past a frame's limit, every error is a protocol error or the end
// of the stream, and every frame it accepts re-encodes to the same bytes.
func FuzzDecodeTCPStream(f *testing.F) {
	rng := mrand.New(mrand.NewPCG(3, 4))
	var all []byte
	for _, m := range sampleMessages(rng) {
		b, err := encodeFrame(m)
		if err != nil {
			f.Fatal(err)
		}
		all = append(all, b...)
		f.Add(b, false)
		f.Add(b[:len(b)-1], true)
	}
	f.Add(all, true)
	f.Add(all[:len(all)/3], false)
	f.Fuzz(func(t *testing.T, b []byte, admitted bool) {
		fc := newStreamConn(fakeStream{r: bytes.NewReader(b)})
		if admitted {
			fc.admit()
		}
		used := 0
		for {
			m, fds, err := fc.readMessage()
			if len(fds) != 0 {
				t.Fatalf("%d descriptors from a TCP stream", len(fds))
			}
			if err != nil {
				if !errors.Is(err, ErrProtocol) && !errors.Is(err, io.EOF) {
					t.Fatalf("error %v is neither a protocol error nor the end", err)
				}
				return
			}
			again, err := encodeFrame(m)
			if err != nil {
				t.Fatalf("re-encode: %v", err)
			}
			if len(again)-headerLen > fc.limit {
				t.Fatalf("accepted a %d-byte payload over the limit %d", len(again)-headerLen, fc.limit)
			}
			if !bytes.Equal(again, b[used:used+len(again)]) {
				t.Fatalf("re-encoding differs:\n in %x\nout %x", b[used:used+len(again)], again)
			}
			used += len(again)
		}
	})
}

// TestTCPSlowHandshake: a rank whose handshake took longer than the
// liveness period (a slow node, within the handshake's own deadline) is
// not taken for silent once admitted.
func TestTCPSlowHandshake(t *testing.T) {
	live := 300 * time.Millisecond
	h := startTCPHub(t, ServerConfig{WorldSize: 1, Liveness: live}, nil)
	c, err := net.Dial("tcp", h.Path())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fc := newStreamConn(c)
	time.Sleep(2 * live) // the challenge waits unread
	if err := prove(fc, h.Path(), TCPConfig{Secret: h.secret}); err != nil {
		t.Fatal(err)
	}
	fc.admit()
	if err := fc.writeMessage(&helloMsg{h: h.hello(0)}, nil); err != nil {
		t.Fatal(err)
	}
	// Quiet for half the period (the hub's watch ticks five times in
	// it), then ping as a client does, for a while, reading what comes.
	time.Sleep(live / 2)
	deadline := time.Now().Add(2 * live)
	for time.Now().Before(deadline) {
		_ = c.SetReadDeadline(time.Now().Add(live / 5))
		m, _, err := fc.readMessage()
		if f, ok := m.(*failMsg); ok {
			t.Fatalf("the hub failed the job: %v", f.err(h.Path()))
		}
		if err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatal(err)
		}
		if err := fc.writeMessage(&pingMsg{}, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Err(); err != nil {
		t.Errorf("job failed: %v", err)
	}
}
