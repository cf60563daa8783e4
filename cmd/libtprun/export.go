package main

/*
#cgo CFLAGS: -I${SRCDIR}/../../include
#include <stdlib.h>
#include "tprun.h"
#include "lasterror.h"
*/
import "C"

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"sync"
	"time"
	"unsafe"

	"github.com/tprun/tprun/tp"
)

// group is a joined tp.Group (or a tp.ExternalGroup, external.go) and the
// ops made from it (guarded by handles.mu), which its close closes.
type group struct {
	id  uintptr
	g   rankGroup
	ops map[uintptr]*op
}

// rankGroup is what the functions of a group handle call: the methods
// *tp.Group and *tp.ExternalGroup share.
type rankGroup interface {
	Rank() int
	Size() int
	LocalRank() int
	Device() int
	Barrier(ctx context.Context) error
	AllGather(ctx context.Context, b []byte) ([][]byte, error)
	Abort(reason string) error
	Close() error
	NewUpProjection(ctx context.Context, hidden, latent, maxM int, opts ...tp.UpOption) (*tp.UpProjection, error)
}

var (
	_ rankGroup = (*tp.Group)(nil)
	_ rankGroup = (*tp.ExternalGroup)(nil)
)

// op is an up-projection and what the C side reads from it.
type op struct {
	id                          uintptr
	g                           *group
	u                           *tp.UpProjection
	hidden, latent, maxM, shard int
	// backend and reason are C copies of u's, owned by the op until close.
	backend, reason *C.char
}

// maxStride bounds shared_stride so that buffer lengths computed from it
// cannot overflow.
const maxStride = 1 << 40

// The status codes status.go restates, held to tprun.h's: a constant index
// other than 0 into a one-element array does not compile.
var _ = [...]struct{}{
	[1]struct{}{}[statusOK-C.TPRUN_OK],
	[1]struct{}{}[statusInval-C.TPRUN_EINVAL],
	[1]struct{}{}[statusAborted-C.TPRUN_EABORTED],
	[1]struct{}{}[statusTimeout-C.TPRUN_ETIMEOUT],
	[1]struct{}{}[statusUnavailable-C.TPRUN_EUNAVAILABLE],
	[1]struct{}{}[statusBusy-C.TPRUN_EBUSY],
	[1]struct{}{}[statusClosed-C.TPRUN_ECLOSED],
	[1]struct{}{}[statusInternal-C.TPRUN_EINTERNAL],
}

// fail records err as the calling thread's last error, prefixed with the
// function's name, and returns its status.
func fail(name string, err error) C.int {
	msg := C.CString(name + ": " + err.Error())
	ranks := blamedRanks(err)
	var p *C.int
	if len(ranks) > 0 {
		cr := make([]C.int, len(ranks))
		for i, r := range ranks {
			cr[i] = C.int(r)
		}
		p = &cr[0]
	}
	C.tprun__set_error(msg, p, C.int(len(ranks)))
	return C.int(statusOf(err))
}

// ret is fail for a non-nil err, else TPRUN_OK.
func ret(name string, err error) C.int {
	if err != nil {
		return fail(name, err)
	}
	return C.TPRUN_OK
}

// guard, deferred first in every exported function with a status result,
// turns a panic into TPRUN_EINTERNAL: a Go panic must not unwind into C.
func guard(name string, st *C.int) {
	if r := recover(); r != nil {
		*st = fail(name, fmt.Errorf("internal error: %v\n%s", r, debug.Stack()))
	}
}

func argErr(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errArgument, fmt.Sprintf(format, args...))
}

// putHandle stores id where a tprun_group** or tprun_op** points.
func putHandle(out unsafe.Pointer, id uintptr) { *(*uintptr)(out) = id }

func bf16s(p unsafe.Pointer, n int) []tp.BF16 {
	return unsafe.Slice((*tp.BF16)(p), n)
}

var version = sync.OnceValue(func() *C.char {
	v := fmt.Sprintf("tprun (devel), C interface version %d", C.TPRUN_ABI_VERSION)
	if bi, ok := debug.ReadBuildInfo(); ok {
		v = fmt.Sprintf("tprun %s, C interface version %d, %s", bi.Main.Version, C.TPRUN_ABI_VERSION, bi.GoVersion)
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v += ", revision " + s.Value
			case "vcs.modified":
				if s.Value == "true" {
					v += " (modified)"
				}
			}
		}
	}
	return C.CString(v) // kept for the life of the process
})

//export tprun_version
func tprun_version() *C.tprun__cchar {
	return (*C.tprun__cchar)(unsafe.Pointer(version()))
}

//export tprun_join
func tprun_join(out **C.tprun_group) (st C.int) {
	const name = "tprun_join"
	defer guard(name, &st)
	if out == nil {
		return fail(name, argErr("group (the out pointer) is NULL"))
	}
	g, err := tp.Join(context.Background())
	if err != nil {
		return fail(name, err)
	}
	putHandle(unsafe.Pointer(out), handles.addGroup(&group{g: g, ops: map[uintptr]*op{}}))
	return C.TPRUN_OK
}

func groupInt(name string, h *C.tprun__cgroup, f func(rankGroup) int) (st C.int) {
	defer guard(name, &st)
	g, err := handles.group(uintptr(unsafe.Pointer(h)))
	if err != nil {
		return fail(name, err)
	}
	return C.int(f(g.g))
}

//export tprun_group_rank
func tprun_group_rank(h *C.tprun__cgroup) C.int {
	return groupInt("tprun_group_rank", h, rankGroup.Rank)
}

//export tprun_group_size
func tprun_group_size(h *C.tprun__cgroup) C.int {
	return groupInt("tprun_group_size", h, rankGroup.Size)
}

//export tprun_group_local_rank
func tprun_group_local_rank(h *C.tprun__cgroup) C.int {
	return groupInt("tprun_group_local_rank", h, rankGroup.LocalRank)
}

//export tprun_group_device
func tprun_group_device(h *C.tprun__cgroup) C.int {
	return groupInt("tprun_group_device", h, rankGroup.Device)
}

//export tprun_group_barrier
func tprun_group_barrier(h *C.tprun_group) (st C.int) {
	const name = "tprun_group_barrier"
	defer guard(name, &st)
	g, err := handles.group(uintptr(unsafe.Pointer(h)))
	if err == nil {
		err = g.g.Barrier(context.Background())
	}
	return ret(name, err)
}

//export tprun_group_allgather
func tprun_group_allgather(h *C.tprun_group, in C.tprun__cptr, n C.size_t, out unsafe.Pointer) (st C.int) {
	const name = "tprun_group_allgather"
	defer guard(name, &st)
	g, err := handles.group(uintptr(unsafe.Pointer(h)))
	if err != nil {
		return fail(name, err)
	}
	size := g.g.Size()
	switch {
	case n > 0 && (in == nil || out == nil):
		return fail(name, argErr("in or out is NULL with n = %d", n))
	case uint64(n) > uint64(tp.MaxBlob(size)):
		return fail(name, argErr("n = %d: must be at most %d bytes in a group of %d ranks", n, tp.MaxBlob(size), size))
	}
	var b []byte
	if n > 0 {
		b = unsafe.Slice((*byte)(unsafe.Pointer(in)), int(n))
	}
	all, err := g.g.AllGather(context.Background(), b)
	if err != nil {
		return fail(name, err)
	}
	for r, x := range all {
		if len(x) != int(n) {
			return fail(name, argErr("rank %d contributed %d bytes, this rank %d: every rank must pass the same n", r, len(x), n))
		}
	}
	if n > 0 {
		dst := unsafe.Slice((*byte)(out), size*int(n))
		for r, x := range all {
			copy(dst[r*int(n):], x)
		}
	}
	return C.TPRUN_OK
}

//export tprun_group_abort
func tprun_group_abort(h *C.tprun_group, reason *C.tprun__cchar) (st C.int) {
	const name = "tprun_group_abort"
	defer guard(name, &st)
	g, err := handles.group(uintptr(unsafe.Pointer(h)))
	if err != nil {
		return fail(name, err)
	}
	why := "aborted by the rank program"
	if reason != nil {
		why = C.GoString((*C.char)(unsafe.Pointer(reason)))
	}
	return ret(name, g.g.Abort(why))
}

//export tprun_group_close
func tprun_group_close(h *C.tprun_group) (st C.int) {
	const name = "tprun_group_close"
	defer guard(name, &st)
	if h == nil {
		return C.TPRUN_OK
	}
	g, err := handles.group(uintptr(unsafe.Pointer(h)))
	if err != nil {
		return fail(name, err)
	}
	ops, ok := handles.removeGroup(g)
	if !ok {
		return fail(name, fmt.Errorf("group handle %d: %w", g.id, errHandleClosed))
	}
	var errs []error
	for _, o := range ops {
		errs = append(errs, o.release())
	}
	if err := g.g.Close(); err != nil {
		errs = append(errs, fmt.Errorf("leaving the job: %w", err))
	}
	return ret(name, errors.Join(errs...))
}

// release closes the op's up-projection and frees its C strings; the op
// is out of the registry already.
func (o *op) release() error {
	err := o.u.Close()
	C.free(unsafe.Pointer(o.backend))
	C.free(unsafe.Pointer(o.reason))
	o.backend, o.reason = nil, nil
	if err != nil {
		return fmt.Errorf("op handle %d: %w", o.id, err)
	}
	return nil
}

//export tprun_op_create
func tprun_op_create(h *C.tprun_group, hidden, latent, maxM, device C.int, out **C.tprun_op) (st C.int) {
	const name = "tprun_op_create"
	defer guard(name, &st)
	return createOp(name, h, hidden, latent, maxM, device, 0, "", out)
}

//export tprun_op_create_ex
func tprun_op_create_ex(h *C.tprun_group, hidden, latent, maxM, device C.int, deadline C.double, backend *C.tprun__cchar, out **C.tprun_op) (st C.int) {
	const name = "tprun_op_create_ex"
	defer guard(name, &st)
	b := ""
	if backend != nil {
		b = C.GoString((*C.char)(unsafe.Pointer(backend)))
	}
	return createOp(name, h, hidden, latent, maxM, device, float64(deadline), b, out)
}

func createOp(name string, h *C.tprun_group, hidden, latent, maxM, device C.int, deadline float64, backend string, out **C.tprun_op) C.int {
	g, err := handles.group(uintptr(unsafe.Pointer(h)))
	if err != nil {
		return fail(name, err)
	}
	kind, err := tp.ParseBackend(backend)
	if err != nil {
		return fail(name, argErr("backend %q: %v", backend, err))
	}
	// The caller named the host device, not the host backend: the reason
	// says so rather than the "host asked for" of tp.WithBackend.
	hostDevice := device == C.TPRUN_DEVICE_HOST && kind == tp.BackendAuto
	var opts []tp.UpOption
	switch {
	case out == nil:
		return fail(name, argErr("op (the out pointer) is NULL"))
	case device == C.TPRUN_DEVICE_HOST && kind != tp.BackendAuto && kind != tp.BackendHost:
		return fail(name, argErr("backend %q with device TPRUN_DEVICE_HOST: the host device runs the host backend only", backend))
	case device == C.TPRUN_DEVICE_HOST:
		kind = tp.BackendHost
	case device >= 0:
		opts = append(opts, tp.WithDevice(int(device)))
	case device != C.TPRUN_DEVICE_GROUP:
		return fail(name, argErr("device = %d: must be a CUDA ordinal, TPRUN_DEVICE_GROUP (-1) or TPRUN_DEVICE_HOST (-2)", device))
	}
	opts = append(opts, tp.WithBackend(kind))
	switch {
	case math.IsNaN(deadline) || deadline < 0 || deadline > 1e6:
		return fail(name, argErr("deadline_seconds = %g: must be 0 (the default) or a positive number of seconds up to 1e6", deadline))
	case deadline > 0:
		opts = append(opts, tp.WithDeadline(max(time.Duration(deadline*float64(time.Second)), time.Microsecond)))
	}
	u, err := g.g.NewUpProjection(context.Background(), int(hidden), int(latent), int(maxM), opts...)
	if err != nil {
		return fail(name, err)
	}
	reason := u.BackendReason()
	if hostDevice {
		reason = "the op was made for the host (TPRUN_DEVICE_HOST; device=\"host\" in Python)"
	}
	o := &op{g: g, u: u, hidden: int(hidden), latent: int(latent), maxM: int(maxM), shard: u.Shape().Shard(),
		backend: C.CString(u.Backend()), reason: C.CString(reason)}
	id, err := handles.addOp(g, o)
	if err != nil {
		return fail(name, errors.Join(err, o.release()))
	}
	putHandle(unsafe.Pointer(out), id)
	return C.TPRUN_OK
}

//export tprun_op_set_weight_host
func tprun_op_set_weight_host(h *C.tprun_op, w *C.tprun__cu16, count C.size_t) (st C.int) {
	const name = "tprun_op_set_weight_host"
	defer guard(name, &st)
	o, err := handles.op(uintptr(unsafe.Pointer(h)))
	if err != nil {
		return fail(name, err)
	}
	want := o.shard * o.latent
	switch {
	case w == nil:
		return fail(name, argErr("weight is NULL"))
	case uintptr(unsafe.Pointer(w))%2 != 0:
		return fail(name, argErr("weight = %p: must be 2-byte aligned", w))
	case uint64(count) != uint64(want):
		return fail(name, argErr("count = %d: must be shard*latent = %d*%d = %d", count, o.shard, o.latent, want))
	}
	return ret(name, o.u.SetWeight(context.Background(), bf16s(unsafe.Pointer(w), want)))
}

//export tprun_op_set_weight_device
func tprun_op_set_weight_device(h *C.tprun_op, w C.tprun__cptr) (st C.int) {
	const name = "tprun_op_set_weight_device"
	defer guard(name, &st)
	o, err := handles.op(uintptr(unsafe.Pointer(h)))
	if err != nil {
		return fail(name, err)
	}
	if err := alignedPtrs(16, ptrArg{"weight", unsafe.Pointer(w)}); err != nil {
		return fail(name, err)
	}
	return ret(name, o.u.SetWeightDevice(context.Background(), tp.DevicePtr(uintptr(unsafe.Pointer(w)))))
}

// packShape checks a weight shape given to the packing functions by the
// op's rules for this rank's rows: shard a positive multiple of
// tp.ShardAlign, latent a multiple of tp.LatentAlign in 1..tp.MaxLatent.
func packShape(shard, latent C.int) error {
	var errs []error
	if shard < 1 || shard%tp.ShardAlign != 0 {
		errs = append(errs, argErr("shard = %d: must be a positive multiple of %d", shard, tp.ShardAlign))
	}
	if latent < 1 || latent > tp.MaxLatent || latent%tp.LatentAlign != 0 {
		errs = append(errs, argErr("latent = %d: must be a multiple of %d in 1..%d", latent, tp.LatentAlign, tp.MaxLatent))
	}
	return errors.Join(errs...)
}

//export tprun_packed_weight_len
func tprun_packed_weight_len(shard, latent C.int, n *C.size_t) (st C.int) {
	const name = "tprun_packed_weight_len"
	defer guard(name, &st)
	if n == nil {
		return fail(name, argErr("len (the out pointer) is NULL"))
	}
	if err := packShape(shard, latent); err != nil {
		return fail(name, err)
	}
	*n = C.size_t(tp.PackedWeightLen(int(shard), int(latent)))
	return C.TPRUN_OK
}

//export tprun_mailbox_bytes
func tprun_mailbox_bytes(hidden, maxM C.int, n *C.size_t) (st C.int) {
	const name = "tprun_mailbox_bytes"
	defer guard(name, &st)
	if n == nil {
		return fail(name, argErr("bytes (the out pointer) is NULL"))
	}
	b, err := tp.MailboxBytes(int(hidden), int(maxM), 0)
	if err != nil {
		return fail(name, err)
	}
	*n = C.size_t(b)
	return C.TPRUN_OK
}

//export tprun_pack_weight
func tprun_pack_weight(dst *C.uint16_t, src *C.tprun__cu16, shard, latent C.int) (st C.int) {
	const name = "tprun_pack_weight"
	defer guard(name, &st)
	if err := errors.Join(packShape(shard, latent),
		alignedPtrs(2, ptrArg{"dst", unsafe.Pointer(dst)}, ptrArg{"src", unsafe.Pointer(src)})); err != nil {
		return fail(name, err)
	}
	sh, k := int(shard), int(latent)
	d := bf16s(unsafe.Pointer(dst), tp.PackedWeightLen(sh, k))
	w := bf16s(unsafe.Pointer(src), sh*k)
	dp, wp := uintptr(unsafe.Pointer(dst)), uintptr(unsafe.Pointer(src))
	if dp < wp+2*uintptr(len(w)) && wp < dp+2*uintptr(len(d)) {
		return fail(name, argErr("dst overlaps src: the packed weight needs a buffer of its own"))
	}
	return ret(name, tp.PackWeight(d, w, sh, k))
}

type ptrArg struct {
	name string
	p    unsafe.Pointer
}

// alignedPtrs checks that every pointer is set and align-byte aligned: 16
// for device buffers, 2 (one bf16) for host ones.
func alignedPtrs(align uintptr, args ...ptrArg) error {
	var errs []error
	for _, a := range args {
		switch {
		case a.p == nil:
			errs = append(errs, argErr("%s is NULL", a.name))
		case uintptr(a.p)%align != 0:
			errs = append(errs, argErr("%s = %p: must be %d-byte aligned", a.name, a.p, align))
		}
	}
	return errors.Join(errs...)
}

// stepArgs checks m and shared_stride against the op before any buffer
// length is computed from them.
func (o *op) stepArgs(m C.int, stride C.size_t) error {
	switch {
	case m < 1 || int(m) > o.maxM:
		return argErr("m = %d: must be in 1..%d (the max_m given to tprun_op_create)", m, o.maxM)
	case uint64(stride) > maxStride:
		return argErr("shared_stride = %d: too large", stride)
	}
	return nil
}

//export tprun_op_step
func tprun_op_step(h *C.tprun_op, m C.int, latent, shared C.tprun__cptr, stride C.size_t, out, stream unsafe.Pointer) (st C.int) {
	const name = "tprun_op_step"
	defer guard(name, &st)
	return stepDevice(name, h, m, latent, nil, shared, stride, out, stream)
}

//export tprun_op_step_weight
func tprun_op_step_weight(h *C.tprun_op, m C.int, latent, weight, shared C.tprun__cptr, stride C.size_t, out, stream unsafe.Pointer) (st C.int) {
	const name = "tprun_op_step_weight"
	defer guard(name, &st)
	return stepDevice(name, h, m, latent, weight, shared, stride, out, stream)
}

// stepDevice is tprun_op_step and tprun_op_step_weight: weight, when not
// NULL, is this rank's weight in the packed layout (tp's Enqueue with
// DeviceInputs.WeightPacked), else the op's own.
func stepDevice(name string, h *C.tprun_op, m C.int, latent, weight, shared C.tprun__cptr, stride C.size_t, out, stream unsafe.Pointer) C.int {
	o, err := handles.op(uintptr(unsafe.Pointer(h)))
	if err != nil {
		return fail(name, err)
	}
	ptrs := []ptrArg{{"latent", unsafe.Pointer(latent)}, {"shared", unsafe.Pointer(shared)}, {"out", out}}
	if weight != nil {
		ptrs = append(ptrs, ptrArg{"weight", unsafe.Pointer(weight)})
	}
	if err := errors.Join(o.stepArgs(m, stride), alignedPtrs(16, ptrs...)); err != nil {
		return fail(name, err)
	}
	in := tp.DeviceInputs{M: int(m), Latent: tp.DevicePtr(uintptr(unsafe.Pointer(latent))),
		Shared: tp.DevicePtr(uintptr(unsafe.Pointer(shared))), SharedStride: int(stride)}
	if weight != nil {
		in.Weight, in.WeightPacked = tp.DevicePtr(uintptr(unsafe.Pointer(weight))), true
	}
	return ret(name, o.u.Enqueue(in, tp.DevicePtr(uintptr(out)), tp.Stream(uintptr(stream))))
}

//export tprun_op_step_host
func tprun_op_step_host(h *C.tprun_op, m C.int, latent, shared *C.tprun__cu16, stride C.size_t, out *C.uint16_t) (st C.int) {
	const name = "tprun_op_step_host"
	defer guard(name, &st)
	return stepHost(name, h, m, latent, nil, shared, stride, out)
}

//export tprun_op_step_host_weight
func tprun_op_step_host_weight(h *C.tprun_op, m C.int, latent, weight, shared *C.tprun__cu16, stride C.size_t, out *C.uint16_t) (st C.int) {
	const name = "tprun_op_step_host_weight"
	defer guard(name, &st)
	return stepHost(name, h, m, latent, weight, shared, stride, out)
}

// stepHost is tprun_op_step_host and tprun_op_step_host_weight: weight,
// when not NULL, is this rank's row-major [shard, latent] weight for this
// step (tp's UpInputs.Weight), else the op's own.
func stepHost(name string, h *C.tprun_op, m C.int, latent, weight, shared *C.tprun__cu16, stride C.size_t, out *C.uint16_t) C.int {
	o, err := handles.op(uintptr(unsafe.Pointer(h)))
	if err != nil {
		return fail(name, err)
	}
	ptrs := []ptrArg{{"latent", unsafe.Pointer(latent)}, {"shared", unsafe.Pointer(shared)}, {"out", unsafe.Pointer(out)}}
	if weight != nil {
		ptrs = append(ptrs, ptrArg{"weight", unsafe.Pointer(weight)})
	}
	if err := errors.Join(alignedPtrs(2, ptrs...), o.stepArgs(m, stride)); err != nil {
		return fail(name, err)
	}
	mm, s := int(m), int(stride)
	sharedLen := o.shard // the last row need not be padded to the stride
	if s >= o.shard {
		sharedLen += (mm - 1) * s
	}
	in := tp.UpInputs{M: mm, Latent: bf16s(unsafe.Pointer(latent), mm*o.latent),
		Shared: bf16s(unsafe.Pointer(shared), sharedLen), SharedStride: s}
	if weight != nil {
		in.Weight = bf16s(unsafe.Pointer(weight), o.shard*o.latent)
	}
	return ret(name, o.u.Step(context.Background(), in, bf16s(unsafe.Pointer(out), mm*o.hidden)))
}

//export tprun_op_synchronize
func tprun_op_synchronize(h *C.tprun_op, stream unsafe.Pointer) (st C.int) {
	const name = "tprun_op_synchronize"
	defer guard(name, &st)
	o, err := handles.op(uintptr(unsafe.Pointer(h)))
	if err == nil {
		err = o.u.Synchronize(context.Background(), tp.Stream(uintptr(stream)))
	}
	return ret(name, err)
}

//export tprun_op_check
func tprun_op_check(h *C.tprun_op) (st C.int) {
	const name = "tprun_op_check"
	defer guard(name, &st)
	o, err := handles.op(uintptr(unsafe.Pointer(h)))
	if err == nil {
		err = o.u.Err()
	}
	return ret(name, err)
}

func opString(name string, h *C.tprun__cop, pick func(*op) *C.char) (s *C.tprun__cchar) {
	defer func() {
		if r := recover(); r != nil {
			fail(name, fmt.Errorf("internal error: %v", r))
			s = nil
		}
	}()
	o, err := handles.op(uintptr(unsafe.Pointer(h)))
	if err != nil {
		fail(name, err)
		return nil
	}
	return (*C.tprun__cchar)(unsafe.Pointer(pick(o)))
}

//export tprun_op_backend
func tprun_op_backend(h *C.tprun__cop) *C.tprun__cchar {
	return opString("tprun_op_backend", h, func(o *op) *C.char { return o.backend })
}

//export tprun_op_backend_reason
func tprun_op_backend_reason(h *C.tprun__cop) *C.tprun__cchar {
	return opString("tprun_op_backend_reason", h, func(o *op) *C.char { return o.reason })
}

//export tprun_op_close
func tprun_op_close(h *C.tprun_op) (st C.int) {
	const name = "tprun_op_close"
	defer guard(name, &st)
	if h == nil {
		return C.TPRUN_OK
	}
	o, err := handles.op(uintptr(unsafe.Pointer(h)))
	if err != nil {
		return fail(name, err)
	}
	if !handles.removeOp(o) {
		return fail(name, fmt.Errorf("op handle %d: %w", o.id, errHandleClosed))
	}
	return ret(name, o.release())
}
