package fdpass

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// ErrRights: descriptors arrived in a way the reader cannot account for
// (a malformed control message, more than it allows, a truncated one).
var ErrRights = errors.New("fdpass: bad descriptors in a control message")

// Send writes b with fds attached to its first byte. The caller keeps
// ownership of fds (the kernel duplicates them into the peer).
func Send(c *net.UnixConn, b []byte, fds []int) error {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := c.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return err
	}
	// A stream socket may take part of a large write; the descriptors went
	// with the first part, the rest follows as plain bytes.
	if n < len(b) {
		_, err = c.Write(b[n:])
	}
	return err
}

// Recv reads exactly len(b) bytes and returns the descriptors that came
// with them, at most maxFDs; the caller owns those. On error it closes
// every descriptor it received. Descriptors arrive close-on-exec (Go's
// ReadMsgUnix passes MSG_CMSG_CLOEXEC on Linux).
func Recv(c *net.UnixConn, b []byte, maxFDs int) ([]int, error) {
	oob := make([]byte, unix.CmsgSpace(max(maxFDs, 1)*4))
	var fds []int
	got := 0
	for got < len(b) {
		n, oobn, flags, _, err := c.ReadMsgUnix(b[got:], oob)
		if oobn > 0 {
			more, perr := ParseRights(oob[:oobn])
			fds = append(fds, more...)
			if perr != nil && err == nil {
				err = perr
			}
		}
		if err == nil && flags&unix.MSG_CTRUNC != 0 {
			err = fmt.Errorf("%w: descriptors were truncated (more than %d in one message)", ErrRights, maxFDs)
		}
		if err == nil && len(fds) > maxFDs {
			err = fmt.Errorf("%w: %d descriptors, at most %d expected", ErrRights, len(fds), maxFDs)
		}
		got += n
		if n == 0 && err == nil {
			err = io.EOF
		}
		if errors.Is(err, io.EOF) && got > 0 {
			err = fmt.Errorf("%w after %d of %d bytes", io.ErrUnexpectedEOF, got, len(b))
		}
		if err != nil {
			Close(fds)
			return nil, err
		}
	}
	return fds, nil
}

// ParseRights returns the descriptors in the control messages of oob. It
// returns every descriptor it could parse even when it also returns an
// error, so that the caller can close them.
func ParseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrRights, err)
	}
	var fds []int
	var bad error
	for i := range msgs {
		got, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			bad = fmt.Errorf("%w: %w", ErrRights, err)
			continue
		}
		fds = append(fds, got...)
	}
	return fds, bad
}

// PeerCred returns the credentials of the process at the other end
// (SO_PEERCRED): its pid, uid and gid when it connected (or listened).
func PeerCred(c *net.UnixConn) (*unix.Ucred, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := rc.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	if cerr != nil {
		return nil, os.NewSyscallError("getsockopt SO_PEERCRED", cerr)
	}
	return cred, nil
}

// Dup returns a close-on-exec duplicate of fd.
func Dup(fd int) (int, error) {
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, os.NewSyscallError("fcntl F_DUPFD_CLOEXEC", err)
	}
	return nfd, nil
}

// DupAll duplicates every fd, or none: on error the copies made so far
// are closed.
func DupAll(fds []int) ([]int, error) {
	out := make([]int, 0, len(fds))
	for _, fd := range fds {
		nfd, err := Dup(fd)
		if err != nil {
			Close(out)
			return nil, err
		}
		out = append(out, nfd)
	}
	return out, nil
}

// Close closes every fd.
func Close(fds []int) {
	for _, fd := range fds {
		// Nothing useful can be done about a failed close of a descriptor
		// being discarded.
		_ = unix.Close(fd)
	}
}

// InterruptOn makes blocking I/O through set (SetReadDeadline,
// SetWriteDeadline or SetDeadline of a connection or listener) fail once
// ctx is done. The returned release undoes it and reports whether ctx
// fired; it waits for a firing in progress, so no stale deadline is left
// behind. The deadline it leaves is none: a caller with a deadline of its
// own sets it again after release.
func InterruptOn(ctx context.Context, set func(time.Time) error) (release func() (fired bool)) {
	done := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		_ = set(time.Unix(1, 0)) // in the past: blocked I/O returns at once
		close(done)
	})
	return func() bool {
		if stop() {
			return false
		}
		<-done
		_ = set(time.Time{})
		return true
	}
}
