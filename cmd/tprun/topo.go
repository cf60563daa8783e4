package main

// This file belongs to the topology work (package internal/topo): it wires
// `tprun topo` and the launcher's preflight hook. Both are stubs until then.

import (
	"context"
	"fmt"
	"io"

	"github.com/tprun/tprun/internal/job"
	"github.com/tprun/tprun/launcher"
)

// exitNotImplemented is what the `topo` stub exits with.
const exitNotImplemented = 3

// runTopo implements `tprun topo`: print the topology check on its own.
func runTopo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fmt.Fprintln(stderr, "tprun topo: not implemented yet")
	return exitNotImplemented
}

// preflight returns the launcher's topology hook (launcher.Config.Preflight)
// for a launch; jc is the default job's flags, nil when the user gave
// -- CMD. nil means no check. The launcher skips the hook under
// --skip-topology-check and passes --strict in its Config argument.
func preflight(jc *job.Config) func(ctx context.Context, cfg launcher.Config) (notice string, err error) {
	return nil
}
