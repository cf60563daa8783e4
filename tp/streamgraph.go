package tp

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tprun/tprun/internal/cuda"
)

// A CUDA graph of the caller's own, captured from a stream: for a program
// without a framework that queues steps with Enqueue (on one op or many,
// between kernels of its own) and replays them as one graph, as a
// PyTorch program does with torch.cuda.graph. Capture is the op's own
// way to the same graph for steps of one op alone.

// streamGraphDriver is the part of the driver a StreamGraph needs, with
// the device's context current.
type streamGraphDriver interface {
	StreamCreate(flags cuda.StreamFlags) (cuda.Stream, error)
	StreamDestroy(s cuda.Stream) error
	StreamSynchronize(s cuda.Stream) error
	StreamBeginCapture(s cuda.Stream, mode cuda.CaptureMode) error
	StreamEndCapture(s cuda.Stream) (cuda.Graph, error)
	GraphInstantiate(g cuda.Graph, flags cuda.GraphInstantiateFlags) (cuda.GraphExec, error)
	GraphUpload(e cuda.GraphExec, s cuda.Stream) error
	GraphLaunch(e cuda.GraphExec, s cuda.Stream) error
	GraphDestroy(g cuda.Graph) error
	GraphExecDestroy(e cuda.GraphExec) error
	EventCreate(flags cuda.EventFlags) (cuda.Event, error)
	EventDestroy(e cuda.Event) error
	EventRecord(e cuda.Event, s cuda.Stream) error
	EventSynchronize(e cuda.Event) error
	EventElapsedTime(start, end cuda.Event) (time.Duration, error)
}

var _ streamGraphDriver = (*cuda.Driver)(nil)

// StreamGraph is a CUDA graph captured from a stream of its own
// (CaptureStream), with that stream to replay it on.
type StreamGraph struct {
	mu     sync.Mutex
	device int
	// bind makes the device's context current on the calling thread.
	bind   func() (streamGraphDriver, func(), error)
	stream cuda.Stream
	exec   cuda.GraphExec
	events []cuda.Event
	closed bool
}

// CaptureStream creates a non-blocking stream on device (an ordinal), in
// its primary context, calls queue with it while the stream is being
// captured (thread-local mode, on the calling goroutine's OS thread,
// which it keeps meanwhile), and instantiates and uploads what queue put
// on it: Enqueue calls on that stream, say. Nothing queued runs until
// Replay. When queue fails, so does CaptureStream, with queue's error.
func CaptureStream(device int, queue func(Stream) error) (*StreamGraph, error) {
	bind := func() (streamGraphDriver, func(), error) {
		drv, unbind, err := primaries.bind(device)
		return drv, unbind, err
	}
	g, err := captureStream(bind, queue)
	if err != nil {
		return nil, fmt.Errorf("tp: device %d: capturing a stream: %w", device, err)
	}
	g.device = device
	return g, nil
}

func captureStream(bind func() (streamGraphDriver, func(), error), queue func(Stream) error) (_ *StreamGraph, err error) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	drv, unbind, err := bind()
	if err != nil {
		return nil, err
	}
	defer unbind()
	s, err := drv.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return nil, fmt.Errorf("creating a stream: %w", err)
	}
	g := &StreamGraph{bind: bind, stream: s}
	defer func() {
		if err != nil {
			err = errors.Join(err, drv.StreamDestroy(s))
		}
	}()
	if err := drv.StreamBeginCapture(s, cuda.CaptureModeThreadLocal); err != nil {
		return nil, fmt.Errorf("begin capture: %w", err)
	}
	qerr := queue(Stream(s))
	graph, cerr := drv.StreamEndCapture(s)
	if qerr != nil || cerr != nil {
		if cerr == nil && graph != 0 {
			cerr = drv.GraphDestroy(graph)
		}
		return nil, errors.Join(qerr, cerr)
	}
	if err := writeGraphDot(drv, graph); err != nil {
		return nil, errors.Join(err, drv.GraphDestroy(graph))
	}
	exec, err := drv.GraphInstantiate(graph, 0)
	if derr := drv.GraphDestroy(graph); derr != nil {
		if exec != 0 {
			derr = errors.Join(derr, drv.GraphExecDestroy(exec))
		}
		return nil, errors.Join(err, derr)
	}
	if err != nil {
		return nil, fmt.Errorf("instantiate: %w", err)
	}
	if err := errors.Join(drv.GraphUpload(exec, s), drv.StreamSynchronize(s)); err != nil {
		return nil, errors.Join(fmt.Errorf("upload: %w", err), drv.GraphExecDestroy(exec))
	}
	g.exec = exec
	return g, nil
}

// GraphDotEnv names a file prefix for measurements: with it set, every
// graph CaptureStream makes is also written as Graphviz DOT (verbose: each
// kernel node's function, grid and attributes, and the edges) to
// PREFIX.N.dot, N counting the captures of the process from 1.
const GraphDotEnv = "TPRUN_DEV_GRAPH_DOT"

var graphDots atomic.Int64

// writeGraphDot writes g as GraphDotEnv says, where the driver can.
func writeGraphDot(drv streamGraphDriver, g cuda.Graph) error {
	prefix := os.Getenv(GraphDotEnv)
	if prefix == "" {
		return nil
	}
	d, ok := drv.(interface {
		GraphDebugDotPrint(g cuda.Graph, path string, flags uint32) error
	})
	if !ok {
		return fmt.Errorf("%s is set, but this driver cannot write a graph", GraphDotEnv)
	}
	return d.GraphDebugDotPrint(g, fmt.Sprintf("%s.%d.dot", prefix, graphDots.Add(1)), 1)
}

// Stream is the stream the graph was captured from, on which it replays.
func (g *StreamGraph) Stream() Stream { return Stream(g.stream) }

// Replay launches the graph n times on its stream and waits for them.
// The ops whose steps it holds report their own failures (Synchronize on
// Stream(), or Err).
func (g *StreamGraph) Replay(n int) error {
	_, err := g.run(n, false)
	return err
}

// TimeReplays is Replay with a CUDA event before and after every replay,
// all queued back to back before it waits; it returns each replay's GPU
// time.
func (g *StreamGraph) TimeReplays(n int) ([]time.Duration, error) {
	return g.run(n, true)
}

func (g *StreamGraph) run(n int, timed bool) (_ []time.Duration, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	defer func() {
		if err != nil {
			err = fmt.Errorf("tp: device %d: %d replays of a stream's graph: %w", g.device, n, err)
		}
	}()
	switch {
	case g.closed:
		return nil, fmt.Errorf("%w: the graph is closed", ErrClosed)
	case n < 0:
		return nil, fmt.Errorf("%w: %d replays", ErrArgument, n)
	}
	drv, unbind, err := g.bind()
	if err != nil {
		return nil, err
	}
	defer unbind()
	if timed {
		for len(g.events) < n+1 {
			ev, err := drv.EventCreate(cuda.EventDefault)
			if err != nil {
				return nil, fmt.Errorf("timing events: %w", err)
			}
			g.events = append(g.events, ev)
		}
	}
	for i := range n {
		if timed {
			if err := drv.EventRecord(g.events[i], g.stream); err != nil {
				return nil, errors.Join(err, drv.StreamSynchronize(g.stream))
			}
		}
		if err := drv.GraphLaunch(g.exec, g.stream); err != nil {
			return nil, errors.Join(err, drv.StreamSynchronize(g.stream))
		}
	}
	if timed && n > 0 {
		if err := drv.EventRecord(g.events[n], g.stream); err != nil {
			return nil, errors.Join(err, drv.StreamSynchronize(g.stream))
		}
	}
	if err := drv.StreamSynchronize(g.stream); err != nil {
		return nil, err
	}
	if !timed {
		return nil, nil
	}
	times := make([]time.Duration, n)
	for i := range times {
		if times[i], err = drv.EventElapsedTime(g.events[i], g.events[i+1]); err != nil {
			return nil, fmt.Errorf("replay %d's time: %w", i, err)
		}
	}
	return times, nil
}

// Close waits for the graph's replays and frees it and its stream.
// Closing twice does nothing.
func (g *StreamGraph) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return nil
	}
	g.closed = true
	drv, unbind, err := g.bind()
	if err != nil {
		return fmt.Errorf("tp: device %d: closing a stream's graph: %w", g.device, err)
	}
	defer unbind()
	errs := []error{drv.StreamSynchronize(g.stream), drv.GraphExecDestroy(g.exec)}
	for _, ev := range g.events {
		errs = append(errs, drv.EventDestroy(ev))
	}
	errs = append(errs, drv.StreamDestroy(g.stream))
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("tp: device %d: closing a stream's graph: %w", g.device, err)
	}
	return nil
}
