package tp

import "github.com/tprun/tprun/internal/hub"

// The errors a Group's calls return when the job fails, matched with
// errors.Is and errors.As. They are the hub's own (the hub package is
// internal to tprun), given here so that a rank program can name them.
var (
	// ErrAborted is matched by every error that ends the job: a rank died,
	// left before a collective a peer waits in, called something else,
	// aborted, or gave up on a collective it had sent; the rendezvous did
	// not complete; the connection to the hub broke. The concrete error is
	// a *RankError when one rank is to blame.
	ErrAborted = hub.ErrAborted
	// ErrRendezvous: not every rank joined in time, or a rank ended before
	// it joined (also ErrAborted; the concrete error is a
	// *RendezvousError).
	ErrRendezvous = hub.ErrRendezvous
	// ErrHubLost: this rank's connection to the hub broke (also
	// ErrAborted).
	ErrHubLost = hub.ErrHubLost
	// ErrRefused: the hub refused this rank at Join (wrong job token, rank
	// out of range or taken, another world size).
	ErrRefused = hub.ErrRefused
	// ErrGroupClosed: the call came after Group.Close.
	ErrGroupClosed = hub.ErrClosed
	// ErrTooLarge: an AllGather or Broadcast contribution over MaxBlob, or
	// more descriptors than one message carries.
	ErrTooLarge = hub.ErrTooLarge
)

// RankError is the job failure one rank is to blame for: Rank, and Reason
// in words ("connection lost (the process exited or was killed)", "left
// before ...", "aborted: ..."). It matches ErrAborted.
type RankError = hub.RankError

// RendezvousError is a rendezvous that did not complete: the ranks that
// never joined. It matches ErrRendezvous and ErrAborted.
type RendezvousError = hub.RendezvousError

// Peer is what a rank told the others when it joined: its rank, the world
// size, its local rank, pid, hostname and device. Group.Peers returns one
// per rank.
type Peer = hub.Hello

// MaxBlob is the most bytes one rank may contribute to an AllGather in a
// group of n ranks (MaxBlob(1) for Broadcast), so that the result fits in
// one message.
func MaxBlob(n int) int { return hub.MaxBlob(n) }
