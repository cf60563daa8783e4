package hub

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Sentinels for errors.Is. Every error that ends the job (a rank failed,
// left, was aborted, the rendezvous timed out, the hub went away) matches
// ErrAborted, so a rank can tell "the job is over" from its own bugs with
// one check.
var (
	// ErrAborted: the job failed; the concrete error says why and names the
	// rank when one is to blame.
	ErrAborted = errors.New("hub: job aborted")
	// ErrRendezvous: not every rank said hello in time (also ErrAborted).
	ErrRendezvous = errors.New("hub: rendezvous failed")
	// ErrRefused: the hub refused this connection (wrong token, rank out of
	// range, duplicate rank, world size mismatch, foreign uid).
	ErrRefused = errors.New("hub: connection refused")
	// ErrHubLost: the connection to the hub broke (also ErrAborted).
	ErrHubLost = errors.New("hub: connection to hub lost")
	// ErrClosed: the Client or Server was closed.
	ErrClosed = errors.New("hub: closed")
	// ErrProtocol: bytes on the socket that are not a valid frame.
	ErrProtocol = errors.New("hub: protocol error")
	// ErrTooLarge: a blob or descriptor list does not fit in one frame.
	ErrTooLarge = errors.New("hub: message too large")
	// ErrCollectiveTimeout: a collective was not joined by every rank in
	// time (also ErrAborted; the concrete error is a
	// *CollectiveTimeoutError).
	ErrCollectiveTimeout = errors.New("hub: collective timed out")
	// ErrCrossNode: a descriptor collective in a job whose ranks reach the
	// hub over TCP; descriptors do not cross nodes.
	ErrCrossNode = errors.New("hub: descriptors do not cross nodes")
	// ErrSecret: the TCP handshake failed: a wrong job secret on either
	// side (the hub refused us, or the hub could not prove it knows ours).
	ErrSecret = errors.New("hub: job secret mismatch")
)

// RankError is the job failure caused by one rank: it died (its connection
// dropped), left before a collective it had to join, sent a malformed or
// mismatched request, or was aborted by the launcher or by itself.
type RankError struct {
	Rank   int
	Reason string
	// Left: the rank said goodbye (closed cleanly) before a collective a
	// peer waits in. It need not have failed: a launcher should look at how
	// its process ended before naming it.
	Left bool
	// Host is the node the rank runs on, in a job across nodes ("" on one
	// node, where it goes without saying).
	Host string
}

func (e *RankError) Error() string {
	if e.Host != "" {
		return fmt.Sprintf("hub: job aborted: rank %d on %s: %s", e.Rank, e.Host, e.Reason)
	}
	return fmt.Sprintf("hub: job aborted: rank %d: %s", e.Rank, e.Reason)
}

// NodeError is the job failure caused by one node of a job across nodes:
// the connections of its ranks went silent (the node is cut off, stalled
// or gone without its kernel closing the connections).
type NodeError struct {
	Host   string
	Ranks  []int // the node's ranks that went silent
	Silent time.Duration
}

func (e *NodeError) Error() string {
	return fmt.Sprintf("hub: job aborted: node %s (%s) silent for %v: it is cut off from the network, stalled or down",
		e.Host, rankList(e.Ranks), e.Silent)
}

// Is makes errors.Is(err, ErrAborted) true.
func (e *NodeError) Is(target error) bool { return target == ErrAborted }

// Is makes errors.Is(err, ErrAborted) true.
func (e *RankError) Is(target error) bool { return target == ErrAborted }

// RendezvousError: the rendezvous did not complete, because it timed out
// or because a rank's process ended before it said hello.
type RendezvousError struct {
	Missing []int // ranks that had not said hello
	// Hosts, when not empty, is where each missing rank should run
	// (index-aligned with Missing; "" when not known), as the launcher's
	// node list says.
	Hosts []string
	After time.Duration
	// Exited lists the ranks whose process ended before they said hello
	// (the launcher tells the hub through Server.Exited), in the order the
	// hub learned of them. When it is not empty the rendezvous failed at
	// once, not after the timeout, and After is 0.
	Exited []ExitedRank
	// Knob names what sets the timeout ("tprun --rendezvous-timeout"), for
	// the message; empty when the host did not say (ServerConfig.TimeoutKnob).
	Knob string
}

// ExitedRank is a rank whose process ended before it said hello, and how
// it ended, in the launcher's words ("exit status 0").
type ExitedRank struct {
	Rank int
	How  string
}

func (e *RendezvousError) Error() string {
	if len(e.Exited) > 0 {
		s := make([]string, len(e.Exited))
		for i, x := range e.Exited {
			s[i] = fmt.Sprintf("rank %d exited (%s)", x.Rank, x.How)
		}
		return "hub: rendezvous failed: " + strings.Join(s, ", ") + " before joining"
	}
	who := rankList(e.Missing)
	if len(e.Hosts) == len(e.Missing) && slices.ContainsFunc(e.Hosts, func(h string) bool { return h != "" }) {
		who = rankHostList(e.Missing, e.Hosts)
	}
	msg := fmt.Sprintf("hub: rendezvous timed out after %v: %s never connected", e.After, who)
	if e.Knob != "" {
		msg += " (" + e.Knob + " sets this limit)"
	}
	return msg
}

// Is makes errors.Is true for both ErrRendezvous and ErrAborted.
func (e *RendezvousError) Is(target error) bool {
	return target == ErrRendezvous || target == ErrAborted
}

// CollectiveTimeoutError: some ranks, connected and alive, never joined a
// collective that the others waited in, and the first waiting rank's
// collective timeout ran out. The hub, which knows who arrived, ends the
// job and tells every rank, so a call whose ctx has no deadline ends too.
type CollectiveTimeoutError struct {
	Collective string // "Barrier", "AllGather", "Broadcast", "AllGatherFDs", "BroadcastFDs"
	Seq        uint64 // the collective's number: the how-manyth call of each rank
	Missing    []int  // the ranks that never joined it
	// Hosts and PIDs say where each missing rank runs (index-aligned
	// with Missing), as it said when it joined.
	Hosts []string
	PIDs  []int
	// After is the timeout that ran out: how long the waiting rank whose
	// deadline came first had waited.
	After time.Duration
	// Knob names what sets the timeout, for the message; empty when
	// nobody said.
	Knob string
}

func (e *CollectiveTimeoutError) Error() string {
	where := make([]string, len(e.Missing))
	for i, r := range e.Missing {
		where[i] = strconv.Itoa(r)
		if i < len(e.Hosts) && i < len(e.PIDs) {
			where[i] += fmt.Sprintf(" (pid %d on %s)", e.PIDs[i], e.Hosts[i])
		}
	}
	who := "rank "
	if len(e.Missing) != 1 {
		who = "ranks "
	}
	msg := fmt.Sprintf("hub: job aborted: %s #%d timed out after %v: %s%s never joined it",
		e.Collective, e.Seq, e.After, who, strings.Join(where, ", "))
	if e.Knob != "" {
		msg += " (" + e.Knob + " sets this limit)"
	}
	return msg
}

// Is makes errors.Is true for both ErrCollectiveTimeout and ErrAborted.
func (e *CollectiveTimeoutError) Is(target error) bool {
	return target == ErrCollectiveTimeout || target == ErrAborted
}

// JobError is a job failure no single rank is to blame for (the hub ran out
// of descriptors, or was shut down while ranks still waited).
type JobError struct{ Reason string }

func (e *JobError) Error() string   { return "hub: job aborted: " + e.Reason }
func (e *JobError) Is(t error) bool { return t == ErrAborted }

// RefusedError is what Dial returns when the hub refused the hello.
type RefusedError struct {
	Path   string
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("hub: refused by hub at %s: %s", e.Path, e.Reason)
}
func (e *RefusedError) Is(t error) bool {
	return t == ErrRefused || (t == ErrSecret && e.Reason == wrongSecret)
}

// lostError wraps the I/O error that broke the connection to the hub.
type lostError struct{ err error }

func (e *lostError) Error() string { return fmt.Sprintf("%v: %v", ErrHubLost, e.err) }
func (e *lostError) Unwrap() error { return e.err }
func (e *lostError) Is(t error) bool {
	return t == ErrHubLost || t == ErrAborted
}

// rankHostList formats ranks with their hosts, grouped by host in the
// order hosts first appear: "ranks 2,3 (node-b), rank 6 (node-c)".
func rankHostList(ranks []int, hosts []string) string {
	var order []string
	by := map[string][]int{}
	for i, r := range ranks {
		h := hosts[i]
		if _, ok := by[h]; !ok {
			order = append(order, h)
		}
		by[h] = append(by[h], r)
	}
	parts := make([]string, len(order))
	for i, h := range order {
		parts[i] = rankList(by[h])
		if h != "" {
			parts[i] += " (" + h + ")"
		}
	}
	return strings.Join(parts, ", ")
}

// rankList formats ranks as "ranks 2,3" or "rank 2".
func rankList(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	if len(ranks) == 1 {
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s, ",")
}
