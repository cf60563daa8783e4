package mailbox

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// The cross-process test re-runs this test binary as rank processes. Each
// child talks to a tiny hub in the parent over a SOCK_SEQPACKET socketpair
// (fd 3): the mailbox memfds really travel with SCM_RIGHTS between
// processes and are mapped by each of them.

const childEnv = "TPRUN_MAILBOX_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// Exit codes of a child.
const (
	childOK      = 0
	childFailed  = 1
	childTimeout = 3 // its Receive timed out; stdout says whom it missed
	childDied    = 7 // it was told to die
)

func childMain() int {
	geti := func(k string) int {
		v, err := strconv.Atoi(os.Getenv(k))
		if err != nil {
			fmt.Fprintf(os.Stderr, "child: %s: %v\n", k, err)
			os.Exit(childFailed)
		}
		return v
	}
	rank, size, steps, dieAt := geti("RANK"), geti("SIZE"), geti("STEPS"), geti("DIE_AT")
	deadline := time.Duration(geti("DEADLINE_MS")) * time.Millisecond
	seed := uint64(geti("SEED"))
	ex := &sockExchanger{fd: 3, rank: rank, size: size}
	ctx := context.Background()
	h, err := NewHost(ctx, ex, Config{Hidden: 16 * size, Capacity: 4, Deadline: deadline})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return childFailed
	}
	defer h.Close()
	l := h.Layout()
	slice := make([]uint16, l.Capacity*l.Shard)
	out := make([]uint16, l.Capacity*l.Hidden)
	for s := range steps {
		step := uint64(s)
		if s == dieAt {
			fmt.Fprintf(os.Stderr, "rank %d: dying before step %d\n", rank, step)
			return childDied
		}
		m := stepM(seed, step, l.Capacity)
		fillSlice(slice, seed, step, rank, m, l.Shard)
		if err := h.Write(ctx, step, m, slice[:m*l.Shard]); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return childFailed
		}
		for i := range out {
			out[i] = 0xdead
		}
		if err := h.Receive(ctx, step, m, out); err != nil {
			var te *TimeoutError
			if errors.As(err, &te) {
				fmt.Printf("TIMEOUT step=%d missing=%v\n%v\n", te.Step, te.Missing, err)
				return childTimeout
			}
			fmt.Fprintln(os.Stderr, err)
			return childFailed
		}
		if err := checkBlock(out, l, seed, step, m); err != nil {
			fmt.Fprintf(os.Stderr, "rank %d: %v\n", rank, err)
			return childFailed
		}
	}
	fmt.Printf("OK %d steps\n", steps)
	return childOK
}

// sockExchanger is a child's Exchanger: one request packet to the hub, one
// reply packet back. It ignores ctx (a test fake; the hub never stalls
// while its children live).
type sockExchanger struct {
	fd, rank, size int
}

func (s *sockExchanger) Rank() int { return s.rank }
func (s *sockExchanger) Size() int { return s.size }

func (s *sockExchanger) call(op byte, payload []byte, fds []int) ([]byte, []int, error) {
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(s.fd, append([]byte{op}, payload...), oob, nil, 0); err != nil {
		return nil, nil, fmt.Errorf("send %c: %w", op, err)
	}
	buf := make([]byte, 1<<16)
	oobBuf := make([]byte, unix.CmsgSpace(4*s.size))
	n, oobn, _, _, err := unix.Recvmsg(s.fd, buf, oobBuf, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("receive %c: %w", op, err)
	}
	if n == 0 {
		return nil, nil, fmt.Errorf("receive %c: hub closed", op)
	}
	got, err := parseRights(oobBuf[:oobn])
	if err != nil {
		return nil, nil, err
	}
	if buf[0] != op {
		closeAll(got)
		return nil, nil, fmt.Errorf("hub answered %c to %c: %s", buf[0], op, buf[1:n])
	}
	return buf[1:n], got, nil
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		f, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			closeAll(fds)
			return nil, err
		}
		fds = append(fds, f...)
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, f := range fds {
		_ = unix.Close(f)
	}
}

func (s *sockExchanger) Barrier(context.Context) error {
	_, _, err := s.call('B', nil, nil)
	return err
}

func (s *sockExchanger) AllGather(_ context.Context, b []byte) ([][]byte, error) {
	p, _, err := s.call('G', b, nil)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for len(p) >= 4 {
		n := int(binary.LittleEndian.Uint32(p))
		if n > len(p)-4 {
			return nil, errors.New("short all-gather reply")
		}
		out = append(out, p[4:4+n])
		p = p[4+n:]
	}
	return out, nil
}

func (s *sockExchanger) AllGatherFDs(_ context.Context, fd int) ([]int, error) {
	_, fds, err := s.call('F', nil, []int{fd})
	if err == nil && len(fds) != s.size {
		closeAll(fds)
		return nil, fmt.Errorf("got %d descriptors for %d ranks", len(fds), s.size)
	}
	return fds, err
}

func (s *sockExchanger) BroadcastFDs(context.Context, int, []int) ([]int, error) {
	return nil, errors.New("not supported by the test hub")
}

// serveHub answers the children's collective calls in lockstep until one
// of them hangs up, then closes every connection.
func serveHub(conns []int) error {
	defer closeAll(conns)
	buf := make([]byte, 1<<16)
	oob := make([]byte, unix.CmsgSpace(4))
	for {
		var op byte
		payloads := make([][]byte, len(conns))
		fds := make([]int, 0, len(conns))
		for r, c := range conns {
			n, oobn, _, _, err := unix.Recvmsg(c, buf, oob, unix.MSG_CMSG_CLOEXEC)
			if err != nil || n == 0 {
				closeAll(fds)
				return nil // a child is gone: the job is over
			}
			got, err := parseRights(oob[:oobn])
			if err != nil {
				closeAll(fds)
				return err
			}
			fds = append(fds, got...)
			if r > 0 && buf[0] != op {
				closeAll(fds)
				return fmt.Errorf("rank %d called %c, rank 0 called %c", r, buf[0], op)
			}
			op = buf[0]
			payloads[r] = append([]byte(nil), buf[1:n]...)
		}
		reply := []byte{op}
		var rights []byte
		switch op {
		case 'G':
			for _, p := range payloads {
				reply = binary.LittleEndian.AppendUint32(reply, uint32(len(p)))
				reply = append(reply, p...)
			}
		case 'F':
			if len(fds) != len(conns) {
				closeAll(fds)
				return fmt.Errorf("got %d descriptors from %d ranks", len(fds), len(conns))
			}
			rights = unix.UnixRights(fds...)
		}
		for _, c := range conns {
			if err := unix.Sendmsg(c, reply, rights, nil, 0); err != nil {
				closeAll(fds)
				return err
			}
		}
		closeAll(fds)
	}
}

type childResult struct {
	code           int
	stdout, stderr string
}

// runChildren starts size rank processes and the hub and waits for all.
func runChildren(t *testing.T, size, steps, dieRank, dieAt int, deadline time.Duration, seed uint64) []childResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	conns := make([]int, size)
	cmds := make([]*exec.Cmd, size)
	outs := make([][2]*bytes.Buffer, size)
	for r := range size {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		conns[r] = pair[0]
		childEnd := os.NewFile(uintptr(pair[1]), "hub")
		die := -1
		if r == dieRank {
			die = dieAt
		}
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"=1",
			fmt.Sprintf("RANK=%d", r), fmt.Sprintf("SIZE=%d", size), fmt.Sprintf("STEPS=%d", steps),
			fmt.Sprintf("DIE_AT=%d", die), fmt.Sprintf("DEADLINE_MS=%d", deadline.Milliseconds()),
			fmt.Sprintf("SEED=%d", seed))
		cmd.ExtraFiles = []*os.File{childEnd}
		outs[r] = [2]*bytes.Buffer{{}, {}}
		cmd.Stdout, cmd.Stderr = outs[r][0], outs[r][1]
		err = cmd.Start()
		childEnd.Close() // the child has its copy
		if err != nil {
			cancel()
			for _, c := range cmds[:r] {
				_ = c.Wait()
			}
			closeAll(conns[:r+1])
			t.Fatal(err)
		}
		cmds[r] = cmd
	}
	hubDone := make(chan error, 1)
	go func() { hubDone <- serveHub(conns) }()
	res := make([]childResult, size)
	var wg sync.WaitGroup
	for r, cmd := range cmds {
		wg.Go(func() {
			err := cmd.Wait()
			code := 0
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				code = ee.ExitCode()
			} else if err != nil {
				code = -1
			}
			res[r] = childResult{code, outs[r][0].String(), outs[r][1].String()}
		})
	}
	wg.Wait()
	if err := <-hubDone; err != nil {
		t.Errorf("hub: %v", err)
	}
	return res
}

func TestCrossProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts rank processes")
	}
	seed := uint64(time.Now().UnixNano() & 0x7fffffff)
	t.Run("4 processes, 3000 steps, every block checked", func(t *testing.T) {
		start := time.Now()
		res := runChildren(t, 4, 3000, -1, 0, 20*time.Second, seed)
		for r, c := range res {
			if c.code != childOK || !strings.Contains(c.stdout, "OK 3000 steps") {
				t.Errorf("rank %d (seed %d): exit %d\nstdout: %s\nstderr: %s", r, seed, c.code, c.stdout, c.stderr)
			}
		}
		t.Logf("%v", time.Since(start))
	})
	t.Run("a rank that dies is named by the others", func(t *testing.T) {
		const deadline = 500 * time.Millisecond
		res := runChildren(t, 3, 100, 1, 40, deadline, seed)
		if res[1].code != childDied {
			t.Errorf("rank 1: exit %d, want %d\nstderr: %s", res[1].code, childDied, res[1].stderr)
		}
		for _, r := range []int{0, 2} {
			c := res[r]
			if c.code != childTimeout || !strings.Contains(c.stdout, "TIMEOUT step=40 missing=[1]") ||
				!strings.Contains(c.stdout, "no slice from rank 1 after") {
				t.Errorf("rank %d: exit %d\nstdout: %s\nstderr: %s", r, c.code, c.stdout, c.stderr)
			}
		}
	})
}
