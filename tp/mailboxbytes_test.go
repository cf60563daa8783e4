package tp

import (
	"errors"
	"math/rand/v2"
	"testing"
)

// TestMailboxBytes holds MailboxBytes to the layout written out in its
// documentation, counted here row by row on random shapes, and to its
// refusals.
func TestMailboxBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for range 200 {
		hidden := ShardAlign * (1 + rng.IntN(2048))
		maxM := 1 + rng.IntN(MaxM)
		slots := rng.IntN(6) // 0: the default
		got, err := MailboxBytes(hidden, maxM, slots)
		if slots == 1 {
			if !errors.Is(err, ErrConfig) {
				t.Errorf("MailboxBytes(%d, %d, 1) = %d, %v, want ErrConfig: one slot breaks the protocol", hidden, maxM, got, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("MailboxBytes(%d, %d, %d): %v", hidden, maxM, slots, err)
		}
		rows := 0
		for m := 1; m <= min(maxM, 8); m++ {
			rows += m // a region of its own for every M up to 8
		}
		if maxM > 8 {
			rows += maxM // one region that every larger M shares
		}
		slot := (rows*hidden*2 + 63) / 64 * 64
		n := slots
		if n == 0 {
			n = 3
		}
		if want := n * slot; got != want {
			t.Errorf("MailboxBytes(%d, %d, %d) = %d, want %d", hidden, maxM, slots, got, want)
		}
	}
	for _, c := range []struct {
		desc         string
		hidden, maxM int
		field        string
	}{
		{"hidden not a multiple of 8", 7172, 4, "hidden"},
		{"hidden zero", 0, 4, "hidden"},
		{"maxM zero", 7168, 0, "maxM"},
		{"maxM past the largest", 7168, MaxM + 1, "maxM"},
	} {
		_, err := MailboxBytes(c.hidden, c.maxM, 0)
		var se *ShapeError
		if !errors.Is(err, ErrShape) || !errors.As(err, &se) || se.Field != c.field {
			t.Errorf("%s: MailboxBytes(%d, %d, 0): %v, want a *ShapeError naming %s", c.desc, c.hidden, c.maxM, err, c.field)
		}
	}
}
