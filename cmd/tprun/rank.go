package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/tprun/tprun/internal/job"
)

// rankCommand is the hidden subcommand the launcher starts for the default
// job: `tprun __rank [job flags]`.
const rankCommand = "__rank"

func runRank(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tprun "+rankCommand, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg := job.RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		fmt.Fprintf(stderr, "tprun %s: %v\n", rankCommand, err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tprun %s: unexpected argument %q\n", rankCommand, fs.Arg(0))
		return exitUsage
	}
	// SIGTERM from the launcher cancels the job's ctx so it can leave the
	// hub and its shared memory cleanly within the grace period.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := job.Main(ctx, cfg, stdout); err != nil {
		// The launcher prefixes the line with the rank; the error names
		// the job's operation itself.
		fmt.Fprintln(stderr, err)
		return exitInternal
	}
	return 0
}
