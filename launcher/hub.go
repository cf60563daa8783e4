package launcher

import (
	"context"
	"errors"
	"time"

	"github.com/tprun/tprun/internal/hub"
)

// hubServer is what the launcher needs from the rendezvous hub: where its
// socket is, a loop to run, a way to fail every rank's pending calls when a
// rank dies, word of every rank's end (a rank that exits, even with 0,
// before it joins leaves the others' rendezvous nobody to wait for), and
// cleanup.
type hubServer interface {
	Path() string
	Serve(ctx context.Context) error
	Abort(rank int, reason string)
	Exited(rank int, how string)
	Close() error
}

var _ hubServer = (*hub.Server)(nil)

// hubVerdict is optional: a hub that knows the job's first failure. When a
// rank dies, the hub may notice its dropped connection, fail its peers and
// see one of them exit before the launcher reaps the dead rank; the hub's
// verdict then says who really failed first.
type hubVerdict interface {
	Err() error
}

var _ hubVerdict = (*hub.Server)(nil)

// hubHellos is optional: a hub that knows which ranks said hello to it.
type hubHellos interface {
	SaidHello(rank int) bool
}

var _ hubHellos = (*hub.Server)(nil)

// hubJoined reports whether rank said hello to the hub (admitted, or
// turned away by the job's failure); true for a hub that cannot say.
func hubJoined(s hubServer, rank int) bool {
	h, ok := s.(hubHellos)
	return !ok || h.SaidHello(rank)
}

// hubBlame returns the rank the hub holds responsible for the job's
// failure, or -1, and whether the hub blames it only for leaving (a clean
// goodbye before a peer's collective: no failure of its own by itself);
// job.firstFailed weighs that.
func hubBlame(s hubServer) (rank int, left bool) {
	v, ok := s.(hubVerdict)
	if !ok {
		return -1, false
	}
	var re *hub.RankError
	if errors.As(v.Err(), &re) {
		return re.Rank, re.Left
	}
	return -1, false
}

// hubConfig is the part of hub.ServerConfig the launcher decides.
type hubConfig struct {
	WorldSize         int
	Token             string
	RendezvousTimeout time.Duration
	Logf              func(format string, args ...any)
}

// timeoutKnob is what the hub's timeout message names as setting the limit.
const timeoutKnob = "tprun --rendezvous-timeout"

type listenFunc func(hubConfig) (hubServer, error)

// listenHub opens the real hub in a fresh private directory under
// os.TempDir() (or /tmp, when a socket path there would be too long); its
// Close removes the directory.
func listenHub(c hubConfig) (hubServer, error) {
	s, err := hub.Listen(hub.ServerConfig{
		WorldSize:         c.WorldSize,
		Token:             c.Token,
		RendezvousTimeout: c.RendezvousTimeout,
		Logf:              c.Logf,
		TimeoutKnob:       timeoutKnob,
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}
