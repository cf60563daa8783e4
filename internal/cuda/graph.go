package cuda

/*
#include <stdlib.h>
#include "trampolines.h"
*/
import "C"

import "unsafe"

// StreamBeginCapture starts capturing the work queued on s into a graph.
func (d *Driver) StreamBeginCapture(s Stream, mode CaptureMode) error {
	p, err := d.fn(symStreamBeginCapture)
	if err != nil {
		return err
	}
	if r := C.tp_cuStreamBeginCapture_v2(p, C.uintptr_t(s), C.int(mode)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuStreamBeginCapture_v2(stream=%#x, mode=%d)", uintptr(s), int(mode))
	}
	return nil
}

// StreamEndCapture ends the capture on s and returns the graph, which the
// caller destroys with GraphDestroy.
func (d *Driver) StreamEndCapture(s Stream) (Graph, error) {
	p, err := d.fn(symStreamEndCapture)
	if err != nil {
		return 0, err
	}
	var g C.uintptr_t
	if r := C.tp_cuStreamEndCapture(p, C.uintptr_t(s), &g); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuStreamEndCapture(stream=%#x)", uintptr(s))
	}
	return Graph(g), nil
}

// GraphInstantiate makes an executable graph (cuGraphInstantiateWithFlags).
func (d *Driver) GraphInstantiate(g Graph, flags GraphInstantiateFlags) (GraphExec, error) {
	p, err := d.fn(symGraphInstantiate)
	if err != nil {
		return 0, err
	}
	var e C.uintptr_t
	if r := C.tp_cuGraphInstantiateWithFlags(p, &e, C.uintptr_t(g), C.ulonglong(flags)); r != C.CUDA_SUCCESS {
		return 0, d.errorf(r, "cuGraphInstantiateWithFlags(graph=%#x, flags=%#x)", uintptr(g), uint64(flags))
	}
	return GraphExec(e), nil
}

// GraphUpload prepares e on s ahead of its first launch, so that the first
// GraphLaunch costs no more than the others.
func (d *Driver) GraphUpload(e GraphExec, s Stream) error {
	p, err := d.fn(symGraphUpload)
	if err != nil {
		return err
	}
	if r := C.tp_cuGraphUpload(p, C.uintptr_t(e), C.uintptr_t(s)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuGraphUpload(exec=%#x, stream=%#x)", uintptr(e), uintptr(s))
	}
	return nil
}

// GraphLaunch queues one replay of e on s.
func (d *Driver) GraphLaunch(e GraphExec, s Stream) error {
	p, err := d.fn(symGraphLaunch)
	if err != nil {
		return err
	}
	if r := C.tp_cuGraphLaunch(p, C.uintptr_t(e), C.uintptr_t(s)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuGraphLaunch(exec=%#x, stream=%#x)", uintptr(e), uintptr(s))
	}
	return nil
}

// GraphExecDestroy destroys an executable graph.
func (d *Driver) GraphExecDestroy(e GraphExec) error {
	p, err := d.fn(symGraphExecDestroy)
	if err != nil {
		return err
	}
	if r := C.tp_cuGraphExecDestroy(p, C.uintptr_t(e)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuGraphExecDestroy(exec=%#x)", uintptr(e))
	}
	return nil
}

// GraphDestroy destroys a graph (its executable instances stay valid).
func (d *Driver) GraphDestroy(g Graph) error {
	p, err := d.fn(symGraphDestroy)
	if err != nil {
		return err
	}
	if r := C.tp_cuGraphDestroy(p, C.uintptr_t(g)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuGraphDestroy(graph=%#x)", uintptr(g))
	}
	return nil
}

// GraphDebugDotPrint writes g as Graphviz DOT to path (cuGraphDebugDotPrint;
// flags: CU_GRAPH_DEBUG_DOT_FLAGS_*, 1 verbose), for measurements.
func (d *Driver) GraphDebugDotPrint(g Graph, path string, flags uint32) error {
	p, err := d.fn(symGraphDebugDotPrint)
	if err != nil {
		return err
	}
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	if r := C.tp_cuGraphDebugDotPrint(p, C.uintptr_t(g), cpath, C.uint(flags)); r != C.CUDA_SUCCESS {
		return d.errorf(r, "cuGraphDebugDotPrint(graph=%#x, %q, flags=%#x)", uintptr(g), path, flags)
	}
	return nil
}
