package launcher

import (
	"context"
	"time"
)

// hubServer is what the launcher needs from the rendezvous hub: where its
// socket is, a loop to run, a way to fail every rank's pending calls when a
// rank dies, and cleanup. *hub.Server has it.
type hubServer interface {
	Path() string
	Serve(ctx context.Context) error
	Abort(rank int, reason string)
	Close() error
}

// hubConfig is the part of hub.ServerConfig the launcher decides.
type hubConfig struct {
	WorldSize         int
	Token             string
	RendezvousTimeout time.Duration
	Logf              func(format string, args ...any)
}

type listenFunc func(hubConfig) (hubServer, error)
