package fdpass

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// pair is a connected pair of Unix stream sockets.
func pair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	conn := func(fd int) *net.UnixConn {
		f := os.NewFile(uintptr(fd), "pair")
		defer f.Close()
		c, err := net.FileConn(f)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c.(*net.UnixConn)
	}
	return conn(fds[0]), conn(fds[1])
}

// TestSendRecv: fresh bytes and several descriptors arrive whole, the
// descriptors new, close-on-exec and of the sender's files; more
// descriptors than the reader allows, and a message cut short, fail with
// every received descriptor closed.
func TestSendRecv(t *testing.T) {
	a, b := pair(t)
	msg := make([]byte, 1+rand.IntN(200000)) // larger than one socket buffer: sent in parts
	for i := range msg {
		msg[i] = byte(rand.Uint32())
	}
	var src []int
	for range 3 {
		fd, err := unix.MemfdCreate("fdpass-test", unix.MFD_CLOEXEC)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		src = append(src, fd)
	}
	done := make(chan error, 1)
	go func() { done <- Send(a, msg, src) }()
	got := make([]byte, len(msg))
	fds, err := Recv(b, got, 4)
	if err != nil || <-done != nil {
		t.Fatalf("recv %v", err)
	}
	defer Close(fds)
	if !bytes.Equal(got, msg) || len(fds) != len(src) {
		t.Fatalf("%d bytes equal %v, %d descriptors for %d", len(got), bytes.Equal(got, msg), len(fds), len(src))
	}
	for i, fd := range fds {
		var x, y unix.Stat_t
		if err := unix.Fstat(fd, &x); err != nil || unix.Fstat(src[i], &y) != nil || x.Ino != y.Ino || fd == src[i] {
			t.Errorf("descriptor %d: inode %d, sender's %d (%v)", i, x.Ino, y.Ino, err)
		}
		if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFD, 0); err != nil || fl&unix.FD_CLOEXEC == 0 {
			t.Errorf("descriptor %d is not close-on-exec", i)
		}
	}

	if err := Send(a, []byte{1, 2}, src); err != nil {
		t.Fatal(err)
	}
	if fds, err := Recv(b, make([]byte, 2), 2); !errors.Is(err, ErrRights) || fds != nil {
		t.Errorf("three descriptors where two are allowed: %v %v", fds, err)
	}

	if err := Send(a, []byte{1}, src[:1]); err != nil {
		t.Fatal(err)
	}
	a.Close()
	if fds, err := Recv(b, make([]byte, 2), 1); !errors.Is(err, io.ErrUnexpectedEOF) || fds != nil {
		t.Errorf("a message cut short: %v %v", fds, err)
	}
}
