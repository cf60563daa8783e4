package hub

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/internal/fdpass"
)

// frameConn reads and writes frames on a stream connection: a Unix socket,
// with the descriptors that travel beside the frames, or a TCP connection,
// without. It is not safe for concurrent reads or concurrent writes; a
// read and a write may run at the same time.
type frameConn struct {
	c  net.Conn
	uc *net.UnixConn // c on a Unix socket; nil over TCP

	// limit is the largest payload readMessage accepts: MaxHandshakeFrame
	// until a TCP peer is admitted, MaxFrame after.
	limit int

	buf  []byte // buf[r:w] is read but not yet decoded
	r, w int
	fdq  []int // descriptors received and not yet claimed by a frame
	oob  []byte
}

const readChunk = 64 << 10

func newFrameConn(c *net.UnixConn) *frameConn {
	return &frameConn{
		c:     c,
		uc:    c,
		limit: MaxFrame,
		buf:   make([]byte, readChunk),
		oob:   make([]byte, unix.CmsgSpace(MaxFDs*4)),
	}
}

// newStreamConn is a frameConn over a connection that carries no
// descriptors (TCP), reading at most MaxHandshakeFrame per frame until
// admit raises the limit.
func newStreamConn(c net.Conn) *frameConn {
	return &frameConn{c: c, limit: MaxHandshakeFrame, buf: make([]byte, 512)}
}

// admit lifts the handshake's frame limit.
func (fc *frameConn) admit() { fc.limit = MaxFrame }

// remote says whether the connection is TCP (no descriptors).
func (fc *frameConn) remote() bool { return fc.uc == nil }

// readMessage reads one frame and returns its message and the descriptors
// it announced. The caller owns those descriptors. Any error leaves the
// connection unusable.
func (fc *frameConn) readMessage() (message, []int, error) {
	if err := fc.fill(headerLen); err != nil {
		return nil, nil, err
	}
	t, n, err := parseHeader(fc.buf[fc.r:fc.r+headerLen], fc.limit)
	if err != nil {
		return nil, nil, err
	}
	if err := fc.fill(headerLen + n); err != nil {
		return nil, nil, err
	}
	m, err := decodePayload(t, fc.buf[fc.r+headerLen:fc.r+headerLen+n])
	fc.r += headerLen + n
	if err != nil {
		return nil, nil, err
	}
	k := m.fdCount()
	if k > len(fc.fdq) {
		return nil, nil, fmt.Errorf("%w: %s frame announces %d descriptors, %d arrived", ErrProtocol, t, k, len(fc.fdq))
	}
	fds := append([]int(nil), fc.fdq[:k]...)
	fc.fdq = fc.fdq[k:]
	// With nothing buffered, any descriptor still queued came with bytes
	// that are already consumed: the peer sent descriptors no frame claims.
	if fc.r == fc.w && len(fc.fdq) > 0 {
		fdpass.Close(fds)
		return nil, nil, fmt.Errorf("%w: %d descriptors arrived that no frame announced", ErrProtocol, len(fc.fdq))
	}
	return m, fds, nil
}

// fill reads until at least n bytes are buffered.
func (fc *frameConn) fill(n int) error {
	if fc.w-fc.r >= n {
		return nil
	}
	if fc.r > 0 {
		fc.w = copy(fc.buf, fc.buf[fc.r:fc.w])
		fc.r = 0
	}
	if n > len(fc.buf) {
		nb := make([]byte, max(n, 2*len(fc.buf)))
		copy(nb, fc.buf[:fc.w])
		fc.buf = nb
	}
	for fc.w < n {
		var got int
		var err error
		if fc.uc == nil {
			got, err = fc.c.Read(fc.buf[fc.w:])
		} else {
			var oobn, flags int
			got, oobn, flags, _, err = fc.uc.ReadMsgUnix(fc.buf[fc.w:], fc.oob)
			if oobn > 0 {
				if perr := fc.takeRights(fc.oob[:oobn]); perr != nil && err == nil {
					err = perr
				}
			}
			if err == nil && flags&unix.MSG_CTRUNC != 0 {
				err = fmt.Errorf("%w: descriptors were truncated (more than %d in one message)", ErrProtocol, MaxFDs)
			}
		}
		fc.w += got
		if got == 0 && err == nil {
			err = io.EOF
		}
		if errors.Is(err, io.EOF) && fc.w > 0 {
			return fmt.Errorf("%w: connection closed inside a frame (%d of %d bytes)", ErrProtocol, fc.w, n)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// takeRights queues the descriptors in a control message. Go's
// ReadMsgUnix passes MSG_CMSG_CLOEXEC on Linux, so they arrive
// close-on-exec.
func (fc *frameConn) takeRights(oob []byte) error {
	fds, err := fdpass.ParseRights(oob)
	fc.fdq = append(fc.fdq, fds...)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrProtocol, err) // err names the control message
	}
	if len(fc.fdq) > 2*MaxFDs {
		return fmt.Errorf("%w: %d unclaimed descriptors", ErrProtocol, len(fc.fdq))
	}
	return nil
}

// writeMessage writes m with fds attached to its first byte. The caller
// keeps ownership of fds (the kernel duplicates them into the peer).
func (fc *frameConn) writeMessage(m message, fds []int) error {
	b, err := encodeFrame(m)
	if err != nil {
		return err
	}
	return fc.writeFrame(b, fds)
}

func (fc *frameConn) writeFrame(b []byte, fds []int) error {
	if fc.uc == nil {
		if len(fds) > 0 {
			return fmt.Errorf("%w: %d descriptors on a TCP connection", ErrCrossNode, len(fds))
		}
		_, err := fc.c.Write(b)
		return err
	}
	return fdpass.Send(fc.uc, b, fds)
}

// releaseFDs closes every descriptor no frame claimed. Only the reading
// goroutine may call it, after its last read.
func (fc *frameConn) releaseFDs() {
	fdpass.Close(fc.fdq)
	fc.fdq = nil
}

// isRetryableDial reports whether a Dial error means the hub is not there
// yet (no socket file, or nobody listening on it).
func isRetryableDial(err error) bool {
	// EAGAIN: a non-blocking connect to a listener whose backlog is full.
	return errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EAGAIN)
}
