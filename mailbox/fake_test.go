package mailbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/exchangetest"
)

// The in-process stand-in for the rendezvous hub lives in
// internal/exchangetest; these names keep the package's tests short.
type fakeRank = exchangetest.Rank

var _ Exchanger = (*exchangetest.Rank)(nil)

type fakeHub struct{ *exchangetest.Hub }

func newFakeHub(size int) fakeHub { return fakeHub{exchangetest.NewHub(size)} }

// rank returns rank r's Exchanger; each is used by one goroutine.
func (h fakeHub) rank(r int) *fakeRank { return h.Rank(r) }

// onRanks runs fn for every rank of a fresh fake hub on its own goroutine
// and returns the errors, index = rank.
func onRanks(size int, fn func(r int, ex Exchanger) error) []error {
	return exchangetest.Run(size, func(r int, ex *exchangetest.Rank) error { return fn(r, ex) })
}

// newHosts creates a group of Hosts over a fake hub; they are closed when
// the test ends.
func newHosts(t testing.TB, size int, cfg Config) []*Host {
	t.Helper()
	hosts := make([]*Host, size)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	errs := onRanks(size, func(r int, ex Exchanger) error {
		h, err := NewHost(ctx, ex, cfg)
		hosts[r] = h
		return err
	})
	for _, h := range hosts {
		if h != nil {
			t.Cleanup(func() {
				if err := h.Close(); err != nil {
					t.Errorf("Close: %v", err)
				}
			})
		}
	}
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("NewHost: %v", err)
	}
	return hosts
}
