package main

import (
	"context"
	"errors"
	"slices"

	"github.com/tprun/tprun/tp"
)

// Status codes, as tprun.h defines them (the cgo preamble does not reach
// this file, which stays pure Go so that its tests need no C).
const (
	statusOK          = 0
	statusInval       = -1
	statusAborted     = -2
	statusTimeout     = -3
	statusUnavailable = -4
	statusBusy        = -5
	statusClosed      = -6
	statusInternal    = -7
)

// errArgument is matched by the interface's own argument checks (a null
// pointer, a device out of range, a handle never issued).
var errArgument = errors.New("bad argument")

// errHandleClosed is matched by a call with a handle already closed.
var errHandleClosed = errors.New("handle closed")

// statusOf maps err to a status code. The order matters where one error
// matches several sentinels: a peer's bad argument is the peer's failure
// (aborted), not this rank's (invalid); a receive that timed out is a
// timeout even when the job's failure followed it.
func statusOf(err error) int {
	switch {
	case err == nil:
		return statusOK
	case errors.Is(err, tp.ErrBusy):
		return statusBusy
	case errors.Is(err, errHandleClosed), errors.Is(err, tp.ErrGroupClosed), errors.Is(err, tp.ErrClosed):
		return statusClosed
	case errors.Is(err, tp.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return statusTimeout
	case errors.Is(err, tp.ErrAborted), errors.Is(err, tp.ErrPeer), errors.Is(err, tp.ErrBroken),
		errors.Is(err, tp.ErrStepMismatch):
		return statusAborted
	case errors.Is(err, tp.ErrBackendUnavailable), errors.Is(err, tp.ErrNoDriver), errors.Is(err, tp.ErrNoGPU),
		errors.Is(err, tp.ErrMulticastDisabled):
		return statusUnavailable
	case errors.Is(err, errArgument), errors.Is(err, tp.ErrShape), errors.Is(err, tp.ErrConfig),
		errors.Is(err, tp.ErrArgument), errors.Is(err, tp.ErrEnv), errors.Is(err, tp.ErrRefused),
		errors.Is(err, tp.ErrTooLarge), errors.Is(err, tp.ErrNoWeight):
		return statusInval
	}
	return statusInternal
}

// blamedRanks returns the ranks err blames, ascending and without
// duplicates: the rank of a *tp.RankError, the ranks a receive missed
// (or, when none, those that ran another M), the ranks that did not join.
func blamedRanks(err error) []int {
	var ranks []int
	var re *tp.RankError
	if errors.As(err, &re) {
		ranks = append(ranks, re.Rank)
	}
	var te *tp.TimeoutError
	if errors.As(err, &te) {
		ranks = append(ranks, te.Missing...)
		if len(te.Missing) == 0 {
			for _, o := range te.OtherM {
				ranks = append(ranks, o.Rank)
			}
		}
	}
	var rv *tp.RendezvousError
	if errors.As(err, &rv) {
		for _, x := range rv.Exited {
			ranks = append(ranks, x.Rank)
		}
		ranks = append(ranks, rv.Missing...)
	}
	slices.Sort(ranks)
	return slices.Compact(ranks)
}
