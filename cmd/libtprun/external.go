package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#include <stdlib.h>
#include "tprun.h"
#include "collectives.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/tprun/tprun/tp"
)

// callbacks is a caller's tprun_collectives as tp.Collectives. The
// callbacks run on the goroutine that calls them, which inside an exported
// function is locked to the C thread that called it: the thread that made
// the tprun call.
type callbacks struct {
	h *C.tprun__collectives_holder // C memory, freed by extGroup.Close
}

var _ tp.Collectives = callbacks{}

// errCallback is matched by a nonzero status from a caller's callback.
var errCallback = errors.New("callback failed")

func (c callbacks) AllGather(_ context.Context, in, out []byte) error {
	if len(in) == 0 || len(out) == 0 {
		return fmt.Errorf("%w: an empty all-gather", errArgument) // ExternalGroup never asks for one
	}
	if st := C.tprun__call_allgather(c.h, unsafe.Pointer(&in[0]), C.size_t(len(in)), unsafe.Pointer(&out[0])); st != 0 {
		return fmt.Errorf("%w: the allgather callback returned %d", errCallback, int(st))
	}
	return nil
}

func (c callbacks) Barrier(context.Context) error {
	if st := C.tprun__call_barrier(c.h); st != 0 {
		return fmt.Errorf("%w: the barrier callback returned %d", errCallback, int(st))
	}
	return nil
}

// extGroup is a tp.ExternalGroup whose close also frees the C holder of
// its callbacks. ExternalGroup.Close waits for a running collective and
// refuses later ones, so no callback runs once it returns.
type extGroup struct {
	*tp.ExternalGroup
	h    *C.tprun__collectives_holder
	once sync.Once
}

func (e *extGroup) Close() error {
	err := e.ExternalGroup.Close()
	e.once.Do(func() { C.free(unsafe.Pointer(e.h)) })
	return err
}

//export tprun_group_from_collectives
func tprun_group_from_collectives(rank, size, localRank, device C.int, coll *C.tprun__ccollectives, user unsafe.Pointer, out **C.tprun_group) (st C.int) {
	const name = "tprun_group_from_collectives"
	defer guard(name, &st)
	switch {
	case out == nil:
		return fail(name, argErr("group (the out pointer) is NULL"))
	case coll == nil:
		return fail(name, argErr("collectives is NULL"))
	case coll.allgather == nil || coll.barrier == nil:
		return fail(name, argErr("collectives: allgather and barrier must both be set"))
	}
	h := C.tprun__collectives_hold(coll, user)
	if h == nil {
		return fail(name, errors.New("out of memory"))
	}
	g, err := tp.NewExternalGroup(context.Background(), int(rank), int(size), int(localRank), int(device), callbacks{h})
	if err != nil {
		C.free(unsafe.Pointer(h))
		return fail(name, err)
	}
	putHandle(unsafe.Pointer(out), handles.addGroup(&group{g: &extGroup{ExternalGroup: g, h: h}, ops: map[uintptr]*op{}}))
	return C.TPRUN_OK
}
