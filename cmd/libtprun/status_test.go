package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/tprun/tprun/tp"
)

func TestStatusOf(t *testing.T) {
	timeout := &tp.TimeoutError{Rank: 0, Step: 4, Missing: []int{2, 1}}
	for _, c := range []struct {
		desc  string
		err   error
		want  int
		ranks []int
	}{
		{"success", nil, statusOK, nil},
		{"busy", fmt.Errorf("tp: rank 0: up-projection step: %w", tp.ErrBusy), statusBusy, nil},
		{"closed handle", fmt.Errorf("op handle 3: %w", errHandleClosed), statusClosed, nil},
		{"closed group", fmt.Errorf("x: %w", tp.ErrGroupClosed), statusClosed, nil},
		{"closed mailbox", fmt.Errorf("x: %w", tp.ErrClosed), statusClosed, nil},
		{"receive timed out", fmt.Errorf("step: %w", timeout), statusTimeout, []int{1, 2}},
		{"timeout, then the job failed", errors.Join(timeout, &tp.RankError{Rank: 0, Reason: "gave up"}), statusTimeout, []int{0, 1, 2}},
		{"other M", &tp.TimeoutError{OtherM: []tp.RankRows{{Rank: 3, M: 2}}}, statusTimeout, []int{3}},
		{"context deadline", context.DeadlineExceeded, statusTimeout, nil},
		{"peer died", fmt.Errorf("step: %w", &tp.RankError{Rank: 3, Reason: "connection lost"}), statusAborted, []int{3}},
		{"rendezvous", &tp.RendezvousError{Missing: []int{2}}, statusAborted, []int{2}},
		{"peer's bad argument", fmt.Errorf("%w: rank 1: %w", tp.ErrPeer, tp.ErrShape), statusAborted, nil},
		{"broken op", tp.ErrBroken, statusAborted, nil},
		{"ranks disagree", tp.ErrStepMismatch, statusAborted, nil},
		{"no GPU", fmt.Errorf("x: %w", tp.ErrNoGPU), statusUnavailable, nil},
		{"host backend", fmt.Errorf("x: %w", tp.ErrBackendUnavailable), statusUnavailable, nil},
		{"shape", &tp.ShapeError{Field: "M", Value: 9, Rule: "1..8"}, statusInval, nil},
		{"argument", argErr("latent is NULL"), statusInval, nil},
		{"environment", &tp.EnvError{Var: "RANK"}, statusInval, nil},
		{"too large", tp.ErrTooLarge, statusInval, nil},
		{"no weight", fmt.Errorf("x: %w", tp.ErrNoWeight), statusInval, nil},
		{"multicast forbidden", fmt.Errorf("x: %w", tp.ErrMulticastDisabled), statusUnavailable, nil},
		{"anything else", errors.New("disk on fire"), statusInternal, nil},
	} {
		if got := statusOf(c.err); got != c.want {
			t.Errorf("%s: statusOf(%v) = %d, want %d", c.desc, c.err, got, c.want)
		}
		if got := blamedRanks(c.err); !slices.Equal(got, c.ranks) {
			t.Errorf("%s: blamedRanks(%v) = %v, want %v", c.desc, c.err, got, c.ranks)
		}
	}
}

func TestRegistry(t *testing.T) {
	r := &registry{next: 1, groups: map[uintptr]*group{}, ops: map[uintptr]*op{}, closed: map[uintptr]string{}}
	g := &group{ops: map[uintptr]*op{}}
	gid := r.addGroup(g)
	o := &op{g: g}
	oid, err := r.addOp(g, o)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		desc   string
		id     uintptr
		op     bool // look up as an op, else as a group
		status int
		text   string
	}{
		{"live group", gid, false, statusOK, ""},
		{"live op", oid, true, statusOK, ""},
		{"null", 0, true, statusInval, "NULL"},
		{"group as op", gid, true, statusInval, "is a group handle, not an op handle"},
		{"op as group", oid, false, statusInval, "is an op handle, not a group handle"},
		{"never issued", 77, true, statusInval, "never issued"},
	} {
		var err error
		if c.op {
			_, err = r.op(c.id)
		} else {
			_, err = r.group(c.id)
		}
		if statusOf(err) != c.status || (err != nil && !strings.Contains(err.Error(), c.text)) {
			t.Errorf("%s: %v (status %d), want status %d and %q", c.desc, err, statusOf(err), c.status, c.text)
		}
	}
	ops, ok := r.removeGroup(g)
	if !ok || len(ops) != 1 || ops[0] != o {
		t.Fatalf("removeGroup = %v, %v; want its op", ops, ok)
	}
	if _, ok := r.removeGroup(g); ok {
		t.Error("second removeGroup succeeded")
	}
	if r.removeOp(o) {
		t.Error("removeOp of an op its group's close removed succeeded")
	}
	for _, id := range []uintptr{gid, oid} {
		_, gerr := r.group(id)
		_, oerr := r.op(id)
		if statusOf(gerr) == statusOK || statusOf(oerr) == statusOK {
			t.Errorf("handle %d still live after close: %v, %v", id, gerr, oerr)
		}
	}
	if _, err := r.op(oid); statusOf(err) != statusClosed {
		t.Errorf("closed op: %v, want a closed handle", err)
	}
	if _, err := r.addOp(g, &op{g: g}); statusOf(err) != statusClosed {
		t.Errorf("op added to a closed group: %v", err)
	}
}
