package tp

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/kernel"
)

// openFDs counts this process's open sockets, memfds, pidfds and eventfds:
// what the descriptor route, its job watch and these tests open. (The Go
// runtime opens and closes files of its own, such as the cgroup's CPU
// limits, meanwhile; the eventfd of its network poller it opens once, on
// first use, which a pipe made here makes happen before the count.)
func openFDs(t *testing.T) int {
	t.Helper()
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	pr.Close()
	pw.Close()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		l, _ := os.Readlink("/proc/self/fd/" + e.Name())
		if strings.HasPrefix(l, "socket:") || strings.HasPrefix(l, "/memfd:") || l == "anon_inode:[pidfd]" || l == "anon_inode:[eventfd]" {
			n++
		}
	}
	return n
}

// sameFDs fails t unless as many sockets, memfds, pidfds and eventfds are
// open as before (openFDs).
func sameFDs(t *testing.T, before int) {
	t.Helper()
	if after := openFDs(t); after != before {
		t.Errorf("%d descriptors open before, %d after", before, after)
	}
}

// sameFile checks that fd is a new close-on-exec descriptor of the file
// that src is, holding want.
func sameFile(fd, src int, want []byte) error {
	if fd == src {
		return fmt.Errorf("descriptor %d is the sender's own, not a new one", fd)
	}
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return err
	}
	if err := unix.Fstat(src, &b); err != nil {
		return err
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		return fmt.Errorf("descriptor %d is inode %d, the sender's is %d", fd, a.Ino, b.Ino)
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
		return fmt.Errorf("descriptor %d is not close-on-exec (%v)", fd, err)
	}
	got := make([]byte, len(want))
	if n, err := unix.Pread(fd, got, 0); err != nil || n != len(want) || !bytes.Equal(got, want) {
		return fmt.Errorf("descriptor %d reads %d bytes that differ from the sender's (%v)", fd, n, err)
	}
	return nil
}

// TestExternalGroupFDs: on one node the descriptor collectives pass each
// rank's file to every rank (fresh bytes written through the sender's
// memfd read back through every received descriptor), as new descriptors
// the receiver owns, in rank order, root's in order for a broadcast; calls
// follow each other without a barrier between them, so a fast rank's next
// call meets a slow rank's current one; closing what was received leaves
// the senders' files alone, and nothing leaks.
func TestExternalGroupFDs(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	for _, size := range []int{1, 2, 3, 5} {
		t.Run(fmt.Sprintf("size%d", size), func(t *testing.T) {
			before := openFDs(t)
			const rounds = 6
			// data[round][rank][i]: what rank writes into its i-th file.
			rng := rand.New(rand.NewPCG(seed, uint64(size)))
			data := make([][][][]byte, rounds)
			nb := make([]int, rounds) // descriptors root broadcasts
			for i := range data {
				nb[i] = rng.IntN(4)
				data[i] = make([][][]byte, size)
				for r := range size {
					data[i][r] = make([][]byte, max(nb[i], 1))
					for k := range data[i][r] {
						data[i][r][k] = make([]byte, 1+rng.IntN(5000))
						for j := range data[i][r][k] {
							data[i][r][k][j] = byte(rng.Uint32())
						}
					}
				}
			}
			var mu sync.Mutex
			files := make([][][]int, rounds) // files[round][rank]: the senders' memfds, kept open until every rank is done
			for i := range files {
				files[i] = make([][]int, size)
			}
			errs := onExternalRanks(size, same, func(r int, g *ExternalGroup) error {
				ctx := context.Background()
				if g.SpansNodes() {
					return errors.New("ranks of one process say they span nodes")
				}
				jitter := rand.New(rand.NewPCG(seed, uint64(r)))
				for i := range rounds {
					mine := make([]int, len(data[i][r]))
					for k, b := range data[i][r] {
						fd, err := memfd(b)
						if err != nil {
							return err
						}
						mine[k] = fd
					}
					mu.Lock()
					files[i][r] = mine
					mu.Unlock()
					time.Sleep(time.Duration(jitter.IntN(3)) * time.Millisecond)
					got, err := g.AllGatherFDs(ctx, mine[0])
					if err != nil {
						return fmt.Errorf("round %d: AllGatherFDs: %w", i, err)
					}
					if len(got) != size {
						return fmt.Errorf("round %d: %d descriptors for %d ranks", i, len(got), size)
					}
					for q, fd := range got {
						mu.Lock()
						src := files[i][q][0]
						mu.Unlock()
						if err := sameFile(fd, src, data[i][q][0]); err != nil {
							return fmt.Errorf("round %d: AllGatherFDs: rank %d's: %w", i, q, err)
						}
					}
					closeAll(got)
					root := i % size
					pass := mine[:nb[i]]
					if r != root {
						pass = mine // ignored
					}
					got, err = g.BroadcastFDs(ctx, root, pass)
					if err != nil {
						return fmt.Errorf("round %d: BroadcastFDs from %d: %w", i, root, err)
					}
					if len(got) != nb[i] {
						return fmt.Errorf("round %d: BroadcastFDs: %d descriptors, root sent %d", i, len(got), nb[i])
					}
					for k, fd := range got {
						mu.Lock()
						src := files[i][root][k]
						mu.Unlock()
						if err := sameFile(fd, src, data[i][root][k]); err != nil {
							return fmt.Errorf("round %d: BroadcastFDs: root's %d: %w", i, k, err)
						}
					}
					closeAll(got)
					// The sender's files are whole after the receivers closed theirs.
					for k, fd := range mine {
						b := make([]byte, len(data[i][r][k]))
						if n, err := unix.Pread(fd, b, 0); err != nil || n != len(b) || !bytes.Equal(b, data[i][r][k]) {
							return fmt.Errorf("round %d: own file %d after the receivers closed theirs: %d bytes (%v)", i, k, n, err)
						}
					}
				}
				return nil
			})
			noErrors(t, errs)
			for _, round := range files {
				for _, fds := range round {
					closeAll(fds)
				}
			}
			sameFDs(t, before)
		})
	}
}

// TestExternalGroupFDsGiveUp: a descriptor collective that a rank never
// joins ends promptly on every rank that waits in it when their ctx ends,
// or at the collective timeout naming the missing rank; the group is then
// unusable there, and the rank that comes late fails at once instead of
// waiting, since the others closed their sockets. Nothing leaks.
func TestExternalGroupFDsGiveUp(t *testing.T) {
	for _, tc := range []struct {
		desc    string
		timeout time.Duration
		cancel  time.Duration // cancel the waiting ranks' ctx after this; 0: never
		want    error
	}{
		{desc: "ctx cancelled", timeout: time.Minute, cancel: 200 * time.Millisecond, want: context.Canceled},
		{desc: "collective timeout", timeout: 300 * time.Millisecond, want: ErrCollectiveTimeout},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			before := openFDs(t)
			const size = 3
			var waited sync.WaitGroup // the ranks that wait
			waited.Add(size - 1)
			site := func(int) externalSite { return externalSite{host: "h", node: "one node", timeout: tc.timeout} }
			errs := onExternalRanksAt(size, same, site, func(r int, g *ExternalGroup) error {
				fd, err := memfd([]byte{byte(r)})
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				if r == size-1 {
					// The late rank: comes once the others gave up.
					waited.Wait()
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					start := time.Now()
					_, err := g.AllGatherFDs(ctx, fd)
					if err == nil || !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "sending to rank 0") || time.Since(start) > 2*time.Second {
						return fmt.Errorf("the late rank after %v: %v", time.Since(start), err)
					}
					return nil
				}
				defer waited.Done()
				ctx, cancel := context.WithCancel(context.Background())
				defer cancel()
				if tc.cancel > 0 {
					time.AfterFunc(tc.cancel, cancel)
				}
				start := time.Now()
				_, err = g.AllGatherFDs(ctx, fd)
				took := time.Since(start)
				limit := max(tc.cancel, tc.timeout)
				// The first rank to give up tells the other, which may hear
				// it before its own ctx or deadline fires.
				gaveUp := errors.Is(err, ErrPeer) && strings.Contains(err.Error(), "gave up on a descriptor collective")
				if !(errors.Is(err, tc.want) || gaveUp) || !errors.Is(err, ErrAborted) || took > limit+time.Second {
					return fmt.Errorf("after %v (limit %v): %v", took, limit, err)
				}
				if tc.want == ErrCollectiveTimeout && !gaveUp && !strings.Contains(err.Error(), fmt.Sprintf("no descriptors from rank %d (pid %d)", size-1, os.Getpid())) {
					return fmt.Errorf("the timeout does not name the missing rank: %v", err)
				}
				if _, err := g.AllGatherFDs(context.Background(), fd); !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "unusable") {
					return fmt.Errorf("a call after the failed one: %v", err)
				}
				return nil
			})
			noErrors(t, errs)
			sameFDs(t, before)
		})
	}
}

// strangerHeader is a connection header as a sender writes it, with the
// given secret.
func strangerHeader(secret []byte, from int) []byte {
	return fdHeader{kind: fdAllGather, count: 1}.encode(secret, from)
}

// TestExternalGroupFDsRefuseStrangers: a connection to a rank's socket
// that does not present the group's secret (here, with a descriptor
// attached, from this very process, whose pid is a rank's), and one from
// another uid that presents it, are refused and closed, and the call goes
// on to complete with the ranks' descriptors; nothing leaks.
func TestExternalGroupFDsRefuseStrangers(t *testing.T) {
	before := openFDs(t)
	var py string
	if _, err := os.Stat("/usr/bin/python3"); err == nil && os.Getuid() == 0 {
		py = "/usr/bin/python3"
	}
	errs := onExternalRanks(2, same, func(r int, g *ExternalGroup) error {
		ctx := context.Background()
		strangers := 0
		if r == 1 {
			name := g.fds.name(1)
			wrong := bytes.Clone(g.fds.secret)
			wrong[0] ^= 1
			c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: name, Net: "unix"})
			if err != nil {
				return err
			}
			fd, err := memfd([]byte("not for the group"))
			if err != nil {
				return err
			}
			_, _, err = c.WriteMsgUnix(strangerHeader(wrong, 0), unix.UnixRights(fd), nil)
			unix.Close(fd)
			c.Close()
			if err != nil {
				return err
			}
			strangers++
			if py != "" {
				// Another uid, with the right secret: refused on its credentials.
				hdr := strangerHeader(g.fds.secret, 0)
				cmd := exec.Command(py, "-c", `import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.connect("\0" + sys.argv[1][1:])
s.sendall(bytes.fromhex(sys.argv[2]))
s.close()`, name, fmt.Sprintf("%x", hdr))
				cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
				if out, err := cmd.CombinedOutput(); err != nil {
					return fmt.Errorf("the connection from uid 65534: %v: %s", err, out)
				}
				strangers++
			}
		}
		// The strangers wait in rank 1's backlog before rank 0 sends.
		if err := g.Barrier(ctx); err != nil {
			return err
		}
		fd, err := memfd([]byte{byte(r + 1)})
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		got, err := g.AllGatherFDs(ctx, fd)
		if err != nil {
			return err
		}
		defer closeAll(got)
		b := make([]byte, 1)
		if _, err := unix.Pread(got[1-r], b, 0); err != nil || b[0] != byte(2-r) {
			return fmt.Errorf("rank %d's descriptor reads %v (%v)", 1-r, b, err)
		}
		if g.fds.refused != strangers {
			return fmt.Errorf("%d connections refused, %d strangers connected", g.fds.refused, strangers)
		}
		return nil
	})
	noErrors(t, errs)
	if py == "" {
		t.Log("not root or no python3: the connection from another uid was not tried")
	}
	sameFDs(t, before)
}

// TestExternalGroupHostOp: the op on the host backend through an
// ExternalGroup on one node, its mailboxes shared over the node's
// sockets: every step of fresh inputs matches the float64 reference, and
// every rank holds the same block.
func TestExternalGroupHostOp(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	const size, hidden, latent, maxM = 3, 96, 40, 9
	ms := []int{9, 1, 4, 9, 2, 8, 3}
	steps := newUpSteps(t, seed, hidden, latent, ms)
	got := make([][][]kernel.BF16, size)
	before := openFDs(t)
	errs := onExternalRanks(size, same, func(r int, g *ExternalGroup) (err error) {
		ctx := context.Background()
		up, err := g.NewUpProjection(ctx, hidden, latent, maxM, WithBackend(BackendHost), WithDeadline(10*time.Second))
		if err != nil {
			return err
		}
		defer func() { err = errors.Join(err, up.Close()) }()
		if up.Backend() != "host" {
			return fmt.Errorf("backend %q", up.Backend())
		}
		for i, d := range steps {
			out := poisonBlock(maxM*hidden + 3)
			if err := up.Step(ctx, hostInputs(d, r, size, hidden, latent), out); err != nil {
				return fmt.Errorf("step %d: %w", i, err)
			}
			if err := keepBlock(i, d.m, hidden, out, &got[r]); err != nil {
				return err
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
	checkBlocks(t, steps, got, hidden)
	sameFDs(t, before)
}

// TestFDRouteEarlyCallChecked: a connection that came for a later call
// while this rank was in an earlier one is checked against that later
// call as this rank makes it: a rank that ran ahead into another
// collective (another kind, another root, a rank that should not send)
// fails the call naming it, instead of its descriptors standing for what
// this rank called (or an AllGatherFDs result missing a rank's). Nothing
// leaks.
func TestFDRouteEarlyCallChecked(t *testing.T) {
	type msg struct {
		from       int
		kind       fdKind
		root, nfds int
	}
	for _, tc := range []struct {
		desc  string
		ahead msg // rank 1 or 2's call #1, sent while rank 0 is in call #0
		kind  fdKind
		root  int
		want  string
	}{
		{desc: "broadcast met by all-gather", ahead: msg{1, fdBroadcast, 1, 0}, kind: fdAllGather,
			want: "rank 1 called BroadcastFDs where rank 0 calls AllGatherFDs"},
		{desc: "all-gather met by broadcast", ahead: msg{1, fdAllGather, 0, 1}, kind: fdBroadcast, root: 1,
			want: "rank 1 called AllGatherFDs where rank 0 calls BroadcastFDs"},
		{desc: "another root", ahead: msg{2, fdBroadcast, 2, 1}, kind: fdBroadcast, root: 1,
			want: "rank 2 called BroadcastFDs with root 2, rank 0 with root 1"},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			before := openFDs(t)
			key, err := newFDKey()
			if err != nil {
				t.Fatal(err)
			}
			peers := make([]Peer, 3)
			routes := make([]*fdRoute, len(peers))
			for r := range peers {
				peers[r] = Peer{Rank: r, WorldSize: len(peers), PID: os.Getpid()}
			}
			for r := range routes {
				if routes[r], err = listenFDs(r, peers, key, 2*time.Second); err != nil {
					t.Fatal(err)
				}
				defer routes[r].close()
			}
			fd, err := memfd([]byte{byte(rand.Uint32())})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			deadline := time.Now().Add(2 * time.Second)
			send := func(m msg, seq uint64, kind fdKind, root, nfds int) {
				t.Helper()
				fds := make([]int, nfds)
				for i := range fds {
					fds[i] = fd
				}
				if err := routes[m.from].send(ctx, deadline, 0, seq, kind, root, fds); err != nil {
					t.Fatal(err)
				}
			}
			// Call #0, AllGatherFDs: rank ahead.from sends its #0, then its #1
			// ahead of the other rank's #0.
			other := 3 - tc.ahead.from
			send(tc.ahead, 0, fdAllGather, 0, 1)
			send(tc.ahead, 1, tc.ahead.kind, tc.ahead.root, tc.ahead.nfds)
			send(msg{from: other}, 0, fdAllGather, 0, 1)
			got, err := routes[0].allGather(ctx, fd)
			if err != nil {
				t.Fatalf("call #0: %v", err)
			}
			closeAll(got)
			// Call #1 as rank 0 (and the other rank) make it.
			if tc.kind == fdAllGather || tc.root == other {
				send(msg{from: other}, 1, tc.kind, tc.root, 1)
			}
			var out []int
			if tc.kind == fdAllGather {
				out, err = routes[0].allGather(ctx, fd)
			} else {
				out, err = routes[0].broadcast(ctx, tc.root, nil)
			}
			closeAll(out)
			if err == nil || !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("call #1: got %d descriptors, error %v; want %q", len(out), err, tc.want)
			}
			for _, r := range routes {
				r.close()
			}
			unix.Close(fd)
			sameFDs(t, before)
		})
	}
}

// fullSocket makes a rank's socket by hand, named name, with a backlog of
// nothing, and fills it; it closes with the test. It returns the
// listening socket.
func fullSocket(t *testing.T, name string) int {
	t.Helper()
	ln, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	fill := []int{ln}
	t.Cleanup(func() { closeAll(fill) })
	if err := unix.Bind(ln, &unix.SockaddrUnix{Name: name}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Listen(ln, 0); err != nil {
		t.Fatal(err)
	}
	for {
		c, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Connect(c, &unix.SockaddrUnix{Name: name})
		fill = append(fill, c)
		if errors.Is(err, unix.EAGAIN) {
			return ln
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(fill) > 100 {
			t.Fatal("the backlog never filled")
		}
	}
}

// TestFDRouteSendFullBacklog: a receiver whose backlog is full (it does
// not accept) holds a sender at most until the call's deadline, or until
// its ctx ends, not for ever.
func TestFDRouteSendFullBacklog(t *testing.T) {
	r0, _, _ := selfRoute(t, time.Minute)
	fullSocket(t, r0.name(1))
	for _, tc := range []struct {
		desc   string
		wait   time.Duration // the deadline
		cancel time.Duration // ctx ends after this; 0: never
		want   error
	}{
		{desc: "deadline", wait: 300 * time.Millisecond, want: context.DeadlineExceeded},
		{desc: "ctx", wait: time.Minute, cancel: 300 * time.Millisecond, want: context.Canceled},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancel > 0 {
				time.AfterFunc(tc.cancel, cancel)
			}
			start := time.Now()
			err := r0.send(ctx, start.Add(tc.wait), 1, 0, fdAllGather, 0, nil)
			took := time.Since(start)
			limit := tc.wait
			if tc.cancel > 0 {
				limit = tc.cancel
			}
			if err == nil || took > limit+time.Second || took < limit/2 {
				t.Fatalf("after %v: %v", took, err)
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Fatalf("after %v: %v, want %v", took, err, tc.want)
			}
			t.Logf("after %v: %v", took, err)
		})
	}
}

// TestFDRouteRefusedFlood: many connections that do not present the
// group's secret are each refused and closed; the call still waits for
// its rank until the deadline, and the timeout counts them all but names
// only the first few, so its message stays short. Nothing leaks.
func TestFDRouteRefusedFlood(t *testing.T) {
	before := openFDs(t)
	r0, _, _ := selfRoute(t, time.Minute)
	wrong := bytes.Clone(r0.secret)
	wrong[rand.IntN(len(wrong))] ^= byte(1 + rand.IntN(255))
	n := 50 + rand.IntN(150)
	for range n {
		c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: r0.name(0), Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Write(strangerHeader(wrong, 1))
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	got, err := r0.receive(context.Background(), start.Add(500*time.Millisecond), 0, fdAllGather, 0, []int{1})
	if err == nil || !errors.Is(err, ErrCollectiveTimeout) || len(got) != 0 {
		t.Fatalf("got %d, %v", len(got), err)
	}
	msg := err.Error()
	if !strings.Contains(msg, fmt.Sprintf("refused %d connections", n)) || !strings.Contains(msg, fmt.Sprintf("and %d more", n-maxRefusedNamed)) ||
		strings.Count(msg, "did not present the group's secret") != maxRefusedNamed {
		t.Fatalf("%d strangers: %s", n, msg)
	}
	if err := r0.close(); err != nil {
		t.Fatal(err)
	}
	sameFDs(t, before)
}

// TestExternalGroupFDsAfterAbort: a rank that aborted closes its
// descriptor socket: a peer's AllGatherFDs that sends to it fails at
// once, naming it, instead of waiting out its collective timeout; the
// aborted rank's own calls fail with its reason. Nothing leaks.
func TestExternalGroupFDsAfterAbort(t *testing.T) {
	before := openFDs(t)
	site := func(int) externalSite { return externalSite{host: "h", node: "one node", timeout: 10 * time.Second} }
	var aborted, tried sync.WaitGroup // rank 1 aborted; rank 0 tried (rank 1's Close would close its socket too)
	aborted.Add(1)
	tried.Add(1)
	errs := onExternalRanksAt(2, same, site, func(r int, g *ExternalGroup) error {
		fd, err := memfd([]byte{byte(r)})
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		ctx := context.Background()
		if r == 1 {
			if err := g.Abort("weights did not load"); err != nil {
				return err
			}
			aborted.Done()
			if _, err := g.AllGatherFDs(ctx, fd); !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "weights did not load") {
				return fmt.Errorf("AllGatherFDs after Abort: %v", err)
			}
			tried.Wait()
			return nil
		}
		aborted.Wait()
		start := time.Now()
		_, err = g.AllGatherFDs(ctx, fd)
		tried.Done()
		if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "sending to rank 1") || time.Since(start) > 5*time.Second {
			return fmt.Errorf("AllGatherFDs to an aborted rank, after %v: %v", time.Since(start), err)
		}
		return nil
	})
	noErrors(t, errs)
	sameFDs(t, before)
}

// TestExternalGroupFDsInterrupted: Close or Abort while this rank's
// descriptor call waits for a peer that never comes ends the call at once
// (not at its collective timeout), returns promptly itself, and leaves no
// descriptor open.
func TestExternalGroupFDsInterrupted(t *testing.T) {
	for _, how := range []string{"Close", "Abort"} {
		t.Run(how, func(t *testing.T) {
			before := openFDs(t)
			site := func(int) externalSite { return externalSite{host: "h", node: "one node", timeout: 20 * time.Second} }
			var done sync.WaitGroup // rank 0 finished; rank 1 stays in the group until then
			done.Add(1)
			errs := onExternalRanksAt(2, same, site, func(r int, g *ExternalGroup) error {
				if r == 1 {
					done.Wait()
					return nil
				}
				defer done.Done()
				fd, err := memfd([]byte{byte(r)})
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				called := make(chan error, 1)
				start := time.Now()
				go func() {
					_, err := g.AllGatherFDs(context.Background(), fd)
					called <- err
				}()
				time.Sleep(200 * time.Millisecond)
				herr := closeOrAbort(g, how, "the engine is shutting down")
				err = <-called
				took := time.Since(start)
				if herr != nil || err == nil || !strings.Contains(err.Error(), "closed or aborted on this rank") || took > 5*time.Second {
					return fmt.Errorf("%s after %v: %v; the waiting AllGatherFDs: %v", how, took, herr, err)
				}
				return nil
			})
			noErrors(t, errs)
			sameFDs(t, before)
		})
	}
}

// The helper process's modes (TestFDRouteHelperProcess).
const (
	envFDHelperListen = "TPRUN_FDROUTE_TEST_LISTEN" // listen on this socket, hand it to a child, exit when stdin closes
	envFDHelperHold   = "TPRUN_FDROUTE_TEST_HOLD"   // hold whatever it inherited until killed, a minute at most
	envFDHelperRoot   = "TPRUN_FDROUTE_TEST_ROOT"   // "key pid bytes...": rank 1 of the pid's route, broadcast each bytes once stdin closes, exit
)

// TestFDRouteHelperProcess is no test of its own: the tests below run the
// test binary through it as a rank's process. In envFDHelperListen mode it
// listens on the named socket as a rank does, starts a child in
// envFDHelperHold mode that inherits the socket (as a worker forked by a
// rank's Python process would), prints the child's pid, and exits once
// its stdin closes, leaving the child holding the socket. In
// envFDHelperRoot mode it is rank 1 of a group of two whose rank 0 is the
// pid named: once its stdin closes it broadcasts a memfd of each hex
// string named, one call each, and exits.
func TestFDRouteHelperProcess(t *testing.T) {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	switch {
	case os.Getenv(envFDHelperHold) != "":
		time.Sleep(time.Minute)
		os.Exit(0)
	case os.Getenv(envFDHelperRoot) != "":
		helperRoot(strings.Fields(os.Getenv(envFDHelperRoot)), fail)
		os.Exit(0)
	case os.Getenv(envFDHelperListen) == "":
		return
	}
	ln, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		fail(err)
	}
	if err := unix.Bind(ln, &unix.SockaddrUnix{Name: os.Getenv(envFDHelperListen)}); err != nil {
		fail(err)
	}
	if err := unix.Listen(ln, 16); err != nil {
		fail(err)
	}
	child := exec.Command(os.Args[0], "-test.run=^TestFDRouteHelperProcess$")
	child.Env = append(os.Environ(), envFDHelperHold+"=1")
	child.ExtraFiles = []*os.File{os.NewFile(uintptr(ln), "listener")}
	if err := child.Start(); err != nil {
		fail(err)
	}
	fmt.Println(child.Process.Pid)
	_, _ = io.Copy(io.Discard, os.Stdin)
	os.Exit(0)
}

// helperRoot is envFDHelperRoot's mode: args are the key, rank 0's pid
// and the hex contents to broadcast.
func helperRoot(args []string, fail func(error)) {
	if len(args) < 3 {
		fail(fmt.Errorf("%s: want key, pid and contents, got %q", envFDHelperRoot, args))
	}
	pid, err := strconv.Atoi(args[1])
	if err != nil {
		fail(err)
	}
	peers := []Peer{{Rank: 0, WorldSize: 2, PID: pid}, {Rank: 1, WorldSize: 2, PID: os.Getpid()}}
	r1, err := listenFDs(1, peers, args[0], 10*time.Second)
	if err != nil {
		fail(err)
	}
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, h := range args[2:] {
		b, err := hex.DecodeString(h)
		if err != nil {
			fail(err)
		}
		fd, err := memfd(b)
		if err != nil {
			fail(err)
		}
		if _, err := r1.broadcast(context.Background(), 1, []int{fd}); err != nil {
			fail(err)
		}
	}
}

// holdProcess starts a process of the test binary that holds files (a
// rank's inherited socket) until the test ends, and returns it; it is
// waited for (and its pidfd closed) only then.
func holdProcess(t *testing.T, files ...*os.File) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFDRouteHelperProcess$")
	cmd.Env = append(os.Environ(), envFDHelperHold+"=1")
	cmd.ExtraFiles = files
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd
}

// TestFDRouteClosedSocketInherited: a rank's socket that a child process
// inherited (a worker forked by the rank's Python process: close-on-exec
// does not cover a fork) still refuses connections once the rank closes
// or aborts its group, so a peer's descriptor call fails at once naming
// that rank instead of sending into a socket nobody accepts on and
// waiting out its collective timeout.
func TestFDRouteClosedSocketInherited(t *testing.T) {
	r0, key, peers := selfRoute(t, 10*time.Second)
	r1, err := listenFDs(1, peers, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	f, err := r1.ln.File()
	if err != nil {
		t.Fatal(err)
	}
	holdProcess(t, f)
	f.Close()
	r1.interrupt() // as Close and Abort do
	if err := r1.close(); err != nil {
		t.Fatal(err)
	}
	fd, err := memfd([]byte{byte(rand.Uint32())})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	start := time.Now()
	err = r0.send(context.Background(), start.Add(10*time.Second), 1, 0, fdAllGather, 0, []int{fd})
	if !errors.Is(err, syscall.ECONNREFUSED) || !strings.Contains(err.Error(), "sending to rank 1") || time.Since(start) > 2*time.Second {
		t.Fatalf("sending to a closed rank whose socket a child holds, after %v: %v", time.Since(start), err)
	}
}

// TestFDRoutePeerExited: a rank whose peer's process ends during a
// descriptor call fails the call within a moment, naming the rank and its
// pid, instead of waiting out the collective timeout: a receiver of a
// broadcast whose root died (it sends nothing it could fail on), and a
// sender to a rank that died while a process it started still holds its
// socket (the connection and the send succeed). Nothing leaks.
func TestFDRoutePeerExited(t *testing.T) {
	const timeout = 15 * time.Second
	fd, err := memfd([]byte{byte(rand.Uint32())})
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	check := func(t *testing.T, start time.Time, err error, pid int) {
		t.Helper()
		want := fmt.Sprintf("rank 1 (pid %d) exited", pid)
		if !errors.Is(err, ErrPeer) || !strings.Contains(err.Error(), want) || time.Since(start) > 5*time.Second {
			t.Fatalf("after %v: %v; want %q", time.Since(start), err, want)
		}
	}
	t.Run("broadcast root", func(t *testing.T) {
		key, err := newFDKey()
		if err != nil {
			t.Fatal(err)
		}
		root := holdProcess(t)
		before := openFDs(t)
		peers := []Peer{{Rank: 0, WorldSize: 2, PID: os.Getpid()}, {Rank: 1, WorldSize: 2, PID: root.Process.Pid}}
		r0, err := listenFDs(0, peers, key, timeout)
		if err != nil {
			t.Fatal(err)
		}
		defer r0.close()
		time.AfterFunc(100*time.Millisecond, func() { _ = root.Process.Kill() })
		start := time.Now()
		got, err := r0.broadcast(context.Background(), 1, nil)
		closeAll(got)
		check(t, start, err, root.Process.Pid)
		if err := r0.close(); err != nil {
			t.Fatal(err)
		}
		sameFDs(t, before)
	})
	t.Run("socket kept by a child", func(t *testing.T) {
		before := openFDs(t)
		key, err := newFDKey()
		if err != nil {
			t.Fatal(err)
		}
		name := (&fdRoute{prefix: "@tprun-fd-" + key[:fdKeyLen] + "-"}).name(1)
		rank := exec.Command(os.Args[0], "-test.run=^TestFDRouteHelperProcess$")
		rank.Env = append(os.Environ(), envFDHelperListen+"="+name)
		rank.Stderr = os.Stderr
		stdin, err := rank.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		out, err := rank.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := rank.Start(); err != nil {
			t.Fatal(err)
		}
		var child int
		if _, err := fmt.Fscan(out, &child); err != nil {
			_ = rank.Process.Kill()
			_ = rank.Wait()
			t.Fatalf("the rank's process printed no child: %v", err)
		}
		t.Cleanup(func() { _ = syscall.Kill(child, syscall.SIGKILL) })
		peers := []Peer{{Rank: 0, WorldSize: 2, PID: os.Getpid()}, {Rank: 1, WorldSize: 2, PID: rank.Process.Pid}}
		r0, err := listenFDs(0, peers, key, timeout)
		if err != nil {
			t.Fatal(err)
		}
		defer r0.close()
		stdin.Close()
		if err := rank.Wait(); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		got, err := r0.allGather(context.Background(), fd)
		closeAll(got)
		check(t, start, err, rank.Process.Pid)
		if err := r0.close(); err != nil {
			t.Fatal(err)
		}
		sameFDs(t, before)
	})
}

// TestFDRoutePeerDoneAndExited: a rank that did its part of a call (a
// broadcast's root that sent everything) and then ended its process
// legitimately leaves what it sent waiting in the receivers' backlogs; a
// receiver that comes to the call only afterwards gets it, in a first
// call and in a second whose descriptors came while the first ran,
// instead of failing because the sender's process has ended.
func TestFDRoutePeerDoneAndExited(t *testing.T) {
	before := openFDs(t)
	key, err := newFDKey()
	if err != nil {
		t.Fatal(err)
	}
	want := [][]byte{make([]byte, 24), make([]byte, 24)}
	args := []string{key, strconv.Itoa(os.Getpid())}
	for _, b := range want {
		for i := range b {
			b[i] = byte(rand.Uint32())
		}
		args = append(args, hex.EncodeToString(b))
	}
	root := exec.Command(os.Args[0], "-test.run=^TestFDRouteHelperProcess$")
	root.Env = append(os.Environ(), envFDHelperRoot+"="+strings.Join(args, " "))
	root.Stderr = os.Stderr
	stdin, err := root.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := root.Start(); err != nil {
		t.Fatal(err)
	}
	peers := []Peer{{Rank: 0, WorldSize: 2, PID: os.Getpid()}, {Rank: 1, WorldSize: 2, PID: root.Process.Pid}}
	r0, err := listenFDs(0, peers, key, 10*time.Second)
	if err != nil {
		_ = root.Process.Kill()
		_ = root.Wait()
		t.Fatal(err)
	}
	defer r0.close()
	stdin.Close()
	if err := root.Wait(); err != nil {
		t.Fatalf("the root's process: %v", err)
	}
	for i, w := range want {
		got, err := r0.broadcast(context.Background(), 1, nil)
		if err != nil {
			t.Fatalf("broadcast #%d after its root sent and exited: %v", i, err)
		}
		if len(got) != 1 {
			closeAll(got)
			t.Fatalf("broadcast #%d: %d descriptors, want 1", i, len(got))
		}
		b, err := pread(got[0])
		closeAll(got)
		if err != nil || !bytes.Equal(b, w) {
			t.Fatalf("broadcast #%d: its descriptor reads %x (%v), want %x", i, b, err, w)
		}
	}
	if err := r0.close(); err != nil {
		t.Fatal(err)
	}
	sameFDs(t, before)
}

// TestFDRouteInterrupted: Close or Abort (interrupt) ends a descriptor call
// of this rank at once wherever it waits, not only in Accept: sending to a
// rank whose backlog is full, and reading the header of a connection from
// a rank's pid that sent nothing yet. Nothing leaks.
func TestFDRouteInterrupted(t *testing.T) {
	for _, tc := range []struct {
		desc string
		wait func(t *testing.T, r0 *fdRoute) // makes rank 0's call wait
		call func(r0 *fdRoute, fd int) ([]int, error)
	}{
		{desc: "sending to a full backlog",
			wait: func(t *testing.T, r0 *fdRoute) { fullSocket(t, r0.name(1)) },
			call: func(r0 *fdRoute, fd int) ([]int, error) { return r0.allGather(context.Background(), fd) }},
		{desc: "reading a silent connection's header",
			wait: func(t *testing.T, r0 *fdRoute) {
				c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: r0.name(0), Net: "unix"})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
			},
			call: func(r0 *fdRoute, fd int) ([]int, error) { return r0.broadcast(context.Background(), 1, nil) }},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			before := openFDs(t)
			// Last: the silent connection and the full socket close with the test.
			t.Cleanup(func() { sameFDs(t, before) })
			r0, _, _ := selfRoute(t, 20*time.Second)
			tc.wait(t, r0)
			fd, err := memfd([]byte{byte(rand.Uint32())})
			if err != nil {
				t.Fatal(err)
			}
			defer unix.Close(fd)
			type result struct {
				fds []int
				err error
			}
			called := make(chan result, 1)
			start := time.Now()
			go func() {
				fds, err := tc.call(r0, fd)
				called <- result{fds, err}
			}()
			// Whether the call waits already or not, it ends at once.
			time.Sleep(100 * time.Millisecond)
			r0.interrupt()
			res := <-called
			closeAll(res.fds)
			if took := time.Since(start); !errors.Is(res.err, errInterrupted) || took > 5*time.Second {
				t.Fatalf("after %v: %v", took, res.err)
			}
			if err := r0.close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestExternalGroupFDsPeerLeft: a rank that closes or aborts its group
// while a peer's descriptor call waits for its descriptors (the peer's
// own send to it may have gone through already) tells the peer, whose
// call fails at once naming it instead of waiting out its collective
// timeout. Nothing leaks.
func TestExternalGroupFDsPeerLeft(t *testing.T) {
	for _, how := range []string{"Close", "Abort"} {
		t.Run(how, func(t *testing.T) {
			before := openFDs(t)
			site := func(int) externalSite { return externalSite{host: "h", node: "one node", timeout: 20 * time.Second} }
			var done sync.WaitGroup // rank 0's call ended
			done.Add(1)
			errs := onExternalRanksAt(2, same, site, func(r int, g *ExternalGroup) error {
				if r == 1 {
					// Whether rank 0 sent to this rank before it leaves or
					// not, rank 0's call ends at once.
					time.Sleep(200 * time.Millisecond)
					err := closeOrAbort(g, how, "the engine is shutting down")
					done.Wait()
					return err
				}
				defer done.Done()
				fd, err := memfd([]byte{byte(rand.Uint32())})
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				start := time.Now()
				got, err := g.AllGatherFDs(context.Background(), fd)
				closeAll(got)
				took := time.Since(start)
				if !errors.Is(err, ErrAborted) || !strings.Contains(err.Error(), "rank 1") || took > 5*time.Second {
					return fmt.Errorf("AllGatherFDs while rank 1 leaves, after %v: %v", took, err)
				}
				t.Logf("after %v: %v", took, err)
				return nil
			})
			noErrors(t, errs)
			sameFDs(t, before)
		})
	}
}

// TestExternalGroupSpansNodesWhy: a group whose ranks cannot pass
// descriptors on one node says, where a descriptor collective is refused,
// which rank keeps it from one node and why, in words that tell a person
// what to do: another machine, a container's own namespaces (and how to
// share the host's), TPRUN_FORCE_NODE (unset it), an identity that could
// not be read.
func TestExternalGroupSpansNodesWhy(t *testing.T) {
	id := func(host, boot, pid string) string {
		return fmt.Sprintf("%s %s net:[4026531840] pid:[%s] user:[4026531837]", host, boot, pid)
	}
	boot := fmt.Sprintf("%x", rand.Uint64())
	for _, tc := range []struct {
		desc string
		one  externalSite // rank 1's; rank 0 is on id("gpu1", boot, "4026531836")
		want []string     // on rank 0
		mine []string     // on rank 1
	}{
		{desc: "another machine", one: externalSite{host: "gpu2", node: id("gpu2", boot+"0", "4026531836")},
			want: []string{"rank 1 (pid", "on gpu2) runs on another machine than rank 0", "boot id"},
			mine: []string{"rank 0 (pid", "on gpu1) runs on another machine than rank 1"}},
		{desc: "a container's own pids", one: externalSite{host: "gpu1", node: id("gpu1", boot, "4026532999")},
			want: []string{"rank 1 (pid", "shares this machine's kernel with rank 0", "pid namespace (pid:[4026532999], not pid:[4026531836])", "--pid=host"},
			mine: []string{"rank 0 (pid", "pid namespace (pid:[4026531836], not pid:[4026532999])"}},
		{desc: "a container's own host name and pids", one: externalSite{host: "c0ffee", node: id("c0ffee", boot, "4026532999")},
			want: []string{"host name (c0ffee, not gpu1), pid namespace", "--uts=host"}},
		{desc: "TPRUN_FORCE_NODE", one: externalSite{host: "fake-b", alone: "sets TPRUN_FORCE_NODE=fake-b, which makes it act as on a node of its own (unset it to pass descriptors on this node)"},
			want: []string{"rank 1 (pid", "on fake-b) sets TPRUN_FORCE_NODE=fake-b", "unset it"},
			mine: []string{"this rank, rank 1 (pid", "sets TPRUN_FORCE_NODE=fake-b"}},
		{desc: "no identity", one: externalSite{host: "gpu1", alone: "could not read its node identity, so it acts as on a node of its own (open /proc/sys/kernel/random/boot_id: permission denied)"},
			want: []string{"rank 1 (pid", "could not read its node identity", "permission denied"}},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			site := func(r int) externalSite {
				if r == 0 {
					return externalSite{host: "gpu1", node: id("gpu1", boot, "4026531836"), timeout: time.Minute}
				}
				s := tc.one
				s.timeout = time.Minute
				return s
			}
			errs := onExternalRanksAt(2, same, site, func(r int, g *ExternalGroup) error {
				if !g.SpansNodes() {
					return errors.New("the group says its ranks share a node")
				}
				fd, err := memfd([]byte{byte(r)})
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				_, err = g.AllGatherFDs(context.Background(), fd)
				if !errors.Is(err, ErrCrossNode) || !errors.Is(err, ErrBackendUnavailable) {
					return fmt.Errorf("AllGatherFDs: %v", err)
				}
				want := tc.want
				if r == 1 {
					want = tc.mine
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						return fmt.Errorf("AllGatherFDs: %v; want %q in it", err, w)
					}
				}
				t.Logf("rank %d: %v", r, err)
				return nil
			})
			noErrors(t, errs)
		})
	}
	// What NewExternalGroup reads here is one node's identity, with a
	// field for every part named.
	host, _ := os.Hostname()
	node, err := nodeIdentity(host)
	if err != nil {
		t.Skipf("no node identity here: %v", err)
	}
	if f := strings.Fields(node); len(f) != len(nodeParts) || f[0] != host {
		t.Fatalf("node identity %q: %d fields, %d parts named", node, len(f), len(nodeParts))
	}
}

// selfRoute is rank 0's route of a group of two ranks that are both this
// process, with its key and peers; it closes with the test.
func selfRoute(t *testing.T, timeout time.Duration) (*fdRoute, string, []Peer) {
	t.Helper()
	key, err := newFDKey()
	if err != nil {
		t.Fatal(err)
	}
	peers := []Peer{{Rank: 0, WorldSize: 2, PID: os.Getpid()}, {Rank: 1, WorldSize: 2, PID: os.Getpid()}}
	r0, err := listenFDs(0, peers, key, timeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r0.close() })
	return r0, key, peers
}

// TestFDRouteLeftNoticeAfterInterrupt: the notice that Close or Abort
// sends after interrupting the route still waits, within its own budget,
// for a peer whose backlog is full at that instant, and reaches it once
// the peer accepts again.
func TestFDRouteLeftNoticeAfterInterrupt(t *testing.T) {
	r0, _, _ := selfRoute(t, time.Minute)
	ln := fullSocket(t, r0.name(1))
	r0.interrupt()
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		r0.giveUp(notice{kind: fdLeft})
	}()
	// Rank 1 accepts again a moment later: the filling connections first,
	// then the notice, whose header names rank 0 and the kind.
	time.Sleep(150 * time.Millisecond)
	if err := unix.SetsockoptTimeval(ln, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 2}); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		c, _, err := unix.Accept(ln)
		if err != nil {
			t.Fatalf("after %d connections: no notice: %v", i, err)
		}
		var b [64]byte
		if err := unix.SetsockoptTimeval(c, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Usec: 200000}); err != nil {
			t.Fatal(err)
		}
		n, _ := unix.Read(c, b[:])
		unix.Close(c)
		if n <= 0 {
			continue // a filling connection: it sends nothing
		}
		want := fdHeader{seq: r0.seq, kind: fdLeft}.encode(r0.secret, 0)
		if !bytes.Equal(b[:n], want) {
			t.Fatalf("got %x, want the left notice %x", b[:n], want)
		}
		break
	}
	<-sent
}

// closeOrAbort ends g as how names it: "Close", or Abort with reason.
func closeOrAbort(g *ExternalGroup, how, reason string) error {
	if how == "Close" {
		return g.Close()
	}
	return g.Abort(reason)
}
