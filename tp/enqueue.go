package tp

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tprun/tprun/internal/cuda"
	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
)

// Stream-ordered steps: Enqueue queues a step on the caller's stream and
// returns; nothing on the host waits for it. What the host would have
// learnt in that wait comes through the host-mapped status page the
// receives write on a timeout (Err, Synchronize, a watch goroutine that
// fails the job on a stall) and the job watch (jobFailed), which ends the
// queued receives through the abort word when the job fails.

// Enqueue queues one step on stream and returns without waiting for it:
// latent [M, latent_dim], shared [M, shard] at in.SharedStride and out
// [M, hidden_dim], all in device memory in the primary context of
// Device(), as for StepDevice; a zero in.Weight uses the op's own weight
// (SetWeight). When stream reaches the step, the kernels wait for what
// was queued on it before (the latent and shared written by the caller's
// kernels, say) and leave the whole block at out for the work queued after
// it. Stream 0 is the legacy default stream; any other is a CUstream (a
// cudaStream_t, torch.cuda.current_stream().cuda_stream).
//
// Enqueue can be captured into the caller's CUDA graph (stream capture in
// any mode): a graph holding one step of the op, or one step of each of
// many ops, replays any number of times, since the mailbox slot advances on
// the device. Every rank must queue the same steps, with the same M, in the
// same order, replays included. The steps of one op must reach the device
// in the order they were queued: queue them on one stream (or on streams
// the caller orders), and synchronize (Synchronize) before Step,
// StepDevice, Capture's graphs or SetWeight run beside them.
//
// It binds the device's primary context itself, and restores what was
// current. It fails before queuing anything on a bad argument (ErrShape,
// ErrNoWeight), with ErrBusy beside another call of the op, with
// ErrBackendUnavailable on the host backend, and with the op's failure
// once one is known (see Err).
func (u *UpProjection) Enqueue(in DeviceInputs, out DevicePtr, stream Stream) error {
	leave, err := u.enter("enqueue")
	if err != nil {
		return err
	}
	defer leave()
	s := u.shape
	s.M = in.M
	e, err := u.cudaEngine("enqueue")
	if err == nil {
		err = u.validateDevice(s, in, out)
		if u.checks != nil {
			// Step checks take part in the group's collectives; they wait
			// at most the op's deadline. The call is a step, however it
			// runs.
			ctx, cancel := context.WithTimeout(context.Background(), cmp.Or(u.checkWait, mailbox.DefaultDeadline))
			err = u.checkCall(ctx, "step", []int{in.M}, err)
			cancel()
		}
	}
	if err == nil {
		err = u.failure()
	}
	if err == nil {
		err = e.enqueue(u.next, s, in, cuda.DevicePtr(out), cuda.Stream(stream))
	}
	if err != nil {
		return fmt.Errorf("tp: rank %d: up-projection enqueue of step %d (%v): %w", u.rank, u.next, s, err)
	}
	u.next++
	return nil
}

// Err reports, without waiting, a failure of the op that has become
// known: a receive of a queued step that timed out (a *TimeoutError naming
// the missing ranks, its Step the first step queued since the last
// Synchronize that found none), the job's failure (ErrAborted, a
// *RankError naming the rank), or an earlier failed step. It is nil while
// none is known. Once it is not nil the op refuses further steps, and
// every later Err returns the same failure.
//
// A receive whose peers' slices do not come waits out the deadline
// (WithDeadline) before it reports; on an op made from a Group the rank
// then fails the job, so that every rank's queued steps end at once instead
// of each waiting out the deadline too.
func (u *UpProjection) Err() error {
	if err := u.failure(); err != nil {
		return fmt.Errorf("tp: rank %d: up-projection: %w", u.rank, err)
	}
	return nil
}

// failure is Err's finding, unwrapped.
func (u *UpProjection) failure() error {
	if e, ok := u.eng.(*cudaEngine); ok {
		if err := e.asyncFailure(); err != nil {
			return err
		}
	}
	if u.job != nil && u.job.Err() != nil {
		return fmt.Errorf("the job has failed: %w", context.Cause(u.job))
	}
	return nil
}

// Synchronize waits until the work queued on stream (the steps Enqueue
// queued there among it) has finished, and returns the op's failure as Err
// does, or nil. Cancelling ctx ends the wait for the peers within about
// 200 µs and breaks the op (later steps fail with ErrBroken). On the host
// backend, whose steps finish before they return, it is Err.
func (u *UpProjection) Synchronize(ctx context.Context, stream Stream) error {
	e, ok := u.eng.(*cudaEngine)
	if ok {
		if err := e.synchronize(ctx, cuda.Stream(stream)); err != nil {
			return fmt.Errorf("tp: rank %d: up-projection: synchronizing stream %#x: %w", u.rank, uintptr(stream), err)
		}
	}
	return u.Err()
}

// enqueue queues step t on stream (see Enqueue).
func (e *cudaEngine) enqueue(t uint64, s kernel.Shape, in DeviceInputs, out cuda.DevicePtr, stream cuda.Stream) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	unbind, err := e.bound()
	if err != nil {
		return err
	}
	defer unbind()
	if !e.enqueued.Load() {
		e.pendingFrom.Store(t)
	}
	// Close sets closing before it looks at everEnqueued, and we set
	// everEnqueued before we look at closing: one of the two sees the
	// other, so a step queued now is ended by Close's abort.
	e.enqueued.Store(true)
	e.everEnqueued.Store(true)
	if e.closing.Load() {
		return mailbox.ErrClosed
	}
	// The skinny kernel may start early (programmatic dependent launch)
	// behind the kernel before it on the caller's stream, as within a
	// captured graph; not when another rank shares the device (see chain).
	if err := e.launch(stream, s, in, out, e.chain); err != nil {
		// Part of the step may be queued: the slots no longer follow the
		// protocol.
		e.setFailure(err)
		return err
	}
	if e.watchStop == nil {
		e.watchStop = make(chan struct{})
		e.watchWG.Go(func() { e.watchEnqueued(e.watchStop) })
	}
	return nil
}

// synchronize waits for stream; cancelling ctx aborts the receives (see
// keepAborting) and breaks the op. It returns the failure of the wait
// itself, or nil: the caller reads the op's failure afterwards.
func (e *cudaEngine) synchronize(ctx context.Context, stream cuda.Stream) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed || e.closing.Load() {
		return mailbox.ErrClosed
	}
	unbind, err := e.drv.BindContext(e.cuctx)
	if err != nil {
		return err
	}
	defer unbind()
	w := e.startWatch(ctx, e.pendingFrom.Load(), false)
	err = e.drv.StreamSynchronize(stream)
	w.end()
	switch {
	case err != nil:
		e.setFailure(fmt.Errorf("the queued steps: %w", err))
		return err
	case e.closing.Load():
		return mailbox.ErrClosed
	case w.canceled.Load():
		err := fmt.Errorf("waiting for the queued steps: %w", context.Cause(ctx))
		e.setFailure(err)
		return errors.Join(err, w.abortErr)
	}
	if e.asyncFailure() == nil {
		e.enqueued.Store(false)
	}
	return nil
}

// asyncFailure is the op's failure as far as it is known without waiting:
// the one recorded, else a receive timeout the status page shows, which it
// records as a *mailbox.TimeoutError naming the missing ranks. A timeout
// seen while a step or replay of the host's own waits is left to that
// wait, as is one that follows the op's own abort (Close, a cancelled
// wait), which that caller names.
func (e *cudaEngine) asyncFailure() error {
	e.failMu.Lock()
	defer e.failMu.Unlock()
	if e.failure != nil || e.released {
		return e.failure
	}
	if e.statusWord(0) == 0 || e.inflight.Load() || e.closing.Load() || e.abortWord().Load() != 0 {
		return nil
	}
	// The timed-out threads write the missing ranks after word 0.
	time.Sleep(stallSettle)
	_, missing := e.readStatus()
	t := e.pendingFrom.Load()
	e.stall = &mailbox.TimeoutError{Rank: e.rank, Step: t, Slot: e.layout.Slot(t), Missing: missing, Waited: e.deadline}
	e.failure = e.stall
	return e.failure
}

// watchEnqueued looks at the status page every enqueueWatchEvery, from
// the first Enqueue until stop is closed: the host cannot tell when the
// caller's graphs replay the steps it queued. When a receive has timed out
// it records the failure (asyncFailure) and, on an op that can fail its
// job, fails it naming the missing ranks: every rank's job watch then ends
// its queued receives (jobFailed), which would otherwise each wait out the
// deadline, on every replay of a graph the caller keeps replaying. (The
// hazard startWatch describes holds here too.) A failure of a step or
// replay of the host's own is that call's to report.
func (e *cudaEngine) watchEnqueued(stop <-chan struct{}) {
	tick := time.NewTicker(enqueueWatchEvery)
	defer tick.Stop()
	for {
		select {
		case <-stop:
			return
		case <-tick.C:
		}
		if e.inflight.Load() || e.asyncFailure() == nil {
			continue
		}
		e.failMu.Lock()
		te := e.stall
		e.failMu.Unlock()
		if te == nil || e.failJob == nil || e.job.Err() != nil {
			return
		}
		// The abort goes out on its own goroutine, as in startWatch: a hub
		// that does not read would otherwise hold Close, which waits for
		// this watch. It ends when the write does, or when the group
		// closes the connection.
		sent := make(chan error, 1)
		go func() {
			sent <- e.failJob(stallReason(fmt.Sprintf("in the steps queued from step %d", te.Step), te.Missing, e.deadline))
		}()
		select {
		case <-stop:
		case err := <-sent:
			if err != nil {
				e.failMu.Lock()
				e.failure = errors.Join(e.failure, fmt.Errorf("failing the job after the timeout: %w", err))
				e.failMu.Unlock()
			}
		}
		return
	}
}
