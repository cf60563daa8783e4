package exchangetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// memfdHolding returns a memfd whose first byte is v.
func memfdHolding(t *testing.T, v byte) int {
	t.Helper()
	fd, err := unix.MemfdCreate("exchangetest", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := unix.Pwrite(fd, []byte{v}, 0); err != nil {
		t.Fatal(err)
	}
	return fd
}

func firstByte(fd int) (byte, error) {
	var b [1]byte
	if _, err := unix.Pread(fd, b[:], 0); err != nil {
		return 0, err
	}
	return b[0], nil
}

func TestCollectives(t *testing.T) {
	const size = 3
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	own := make([]int, size)
	for r := range own {
		own[r] = memfdHolding(t, byte(0x40+r))
		t.Cleanup(func() { _ = unix.Close(own[r]) })
	}
	errs := Run(size, func(r int, ex *Rank) error {
		if ex.Rank() != r || ex.Size() != size {
			return fmt.Errorf("Rank, Size = %d, %d", ex.Rank(), ex.Size())
		}
		if err := ex.Barrier(ctx); err != nil {
			return err
		}
		got, err := ex.AllGather(ctx, []byte(fmt.Sprint("r", r)))
		if err != nil {
			return err
		}
		for c, b := range got {
			if want := fmt.Sprint("r", c); string(b) != want {
				return fmt.Errorf("AllGather[%d] = %q, want %q", c, b, want)
			}
		}
		fds, err := ex.AllGatherFDs(ctx, own[r])
		if err != nil {
			return err
		}
		var bfds []int
		if r == 1 {
			bfds, err = ex.BroadcastFDs(ctx, 1, []int{own[2], own[0]})
		} else {
			bfds, err = ex.BroadcastFDs(ctx, 1, nil)
		}
		if err != nil {
			return err
		}
		defer func() {
			for _, fd := range append(fds, bfds...) {
				_ = unix.Close(fd)
			}
		}()
		want := []byte{0x40, 0x41, 0x42, 0x42, 0x40}
		for i, fd := range append(fds, bfds...) {
			if fd == own[r] {
				return fmt.Errorf("descriptor %d is the caller's own, not a dup", i)
			}
			b, err := firstByte(fd)
			if err != nil {
				return err
			}
			if b != want[i] {
				return fmt.Errorf("descriptor %d holds %#x, want %#x", i, b, want[i])
			}
		}
		return nil
	})
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}

func TestMismatchedCalls(t *testing.T) {
	errs := Run(2, func(r int, ex *Rank) error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if r == 0 {
			return ex.Barrier(ctx)
		}
		_, err := ex.AllGather(ctx, nil)
		return err
	})
	// Whichever rank arrives second is told; the first waits for a round
	// that never completes and sees its deadline.
	var named, late int
	for _, err := range errs {
		switch {
		case err != nil && strings.Contains(err.Error(), "while others called"):
			named++
		case errors.Is(err, context.DeadlineExceeded):
			late++
		}
	}
	if named != 1 || late != 1 {
		t.Errorf("errors %v: want one mismatch and one deadline", errs)
	}
}
