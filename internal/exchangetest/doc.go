// Package exchangetest is test support only: an in-process stand-in for the
// rendezvous hub, so the tests of mailbox and tp can run a group of ranks as
// goroutines of one process.
//
// A *Rank has the methods of mailbox.Exchanger (the interface is structural;
// this package imports neither mailbox nor tp, so it sits below both). Ranks
// meet in numbered rounds, one per collective call, and descriptors are
// passed as dups, as SCM_RIGHTS hands each receiver a new descriptor.
//
// It must not be imported by non-test code: it has no abort, no timeouts of
// its own and no peer checks, and descriptors of a round that a rank leaves
// early (ctx done) are never closed.
package exchangetest
