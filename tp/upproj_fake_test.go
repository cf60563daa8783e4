package tp

import (
	"github.com/tprun/tprun/internal/exchangetest"
	"github.com/tprun/tprun/mailbox"
)

// The in-process stand-in for the rendezvous hub, for running up-projection
// ranks as goroutines, lives in internal/exchangetest.
var _ mailbox.Exchanger = (*exchangetest.Rank)(nil)

type upHub struct{ *exchangetest.Hub }

func newUpHub(size int) upHub { return upHub{exchangetest.NewHub(size)} }

// rank returns rank r's Exchanger; each is used by one goroutine.
func (h upHub) rank(r int) *exchangetest.Rank { return h.Rank(r) }

// onUpRanks runs fn for every rank of a fresh fake hub, each on its own
// goroutine, and returns the errors, index = rank.
func onUpRanks(size int, fn func(r int, ex mailbox.Exchanger) error) []error {
	return exchangetest.Run(size, func(r int, ex *exchangetest.Rank) error { return fn(r, ex) })
}
