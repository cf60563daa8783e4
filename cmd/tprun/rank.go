package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/cmd/tprun/internal/job"
	"github.com/tprun/tprun/tp"
)

// rankCommand is the hidden subcommand the launcher starts for the default
// job: `tprun __rank [job flags]`.
const rankCommand = "__rank"

// benchCommand is the hidden subcommand whose ranks run the fused-step
// benchmark: `tprun bench` starts `tprun __bench [bench flags]` on every
// rank, and scripts may do the same under a launcher of their own
// (`tprun --tp N -- tprun __bench ...`).
const benchCommand = "__bench"

func runRank(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tprun "+rankCommand, flag.ContinueOnError)
	cfg := job.RegisterFlags(fs)
	return runWorker(rankCommand, "tprun", fs, args, stderr, func(ctx context.Context) error {
		return job.Main(ctx, cfg, stdout)
	})
}

func runBench(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("tprun "+benchCommand, flag.ContinueOnError)
	bc := job.RegisterBenchFlags(fs)
	bc.Version = versionLine()
	return runWorker(benchCommand, "tprun bench", fs, args, stderr, func(ctx context.Context) error {
		return job.BenchMain(ctx, bc, stdout, stderr)
	})
}

// runWorker parses a rank worker's flags and runs it until it ends or the
// launcher signals it; help names the command whose help has its flags.
func runWorker(name, help string, fs *flag.FlagSet, args []string, stderr io.Writer, main func(context.Context) error) int {
	fs.SetOutput(io.Discard)
	p, err := parseArgs(fs, args)
	if err == nil && len(p.args) > 0 {
		err = usagef("unexpected argument %q", p.args[0])
	}
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			err = usagef("the ranks' side of %s", help)
		}
		fmt.Fprintf(stderr, "tprun %s: %v (see %s --help)\n", name, err, help)
		return exitUsage
	}
	// SIGTERM from the launcher cancels the job's ctx so it can leave the
	// hub and its shared memory cleanly within the grace period.
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigc)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got atomic.Value // the signal that cancelled ctx
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case s := <-sigc:
			got.Store(s)
			cancel()
		case <-ctx.Done():
		}
	}()
	err = main(ctx)
	if err == nil {
		return 0
	}
	// A signal that came as main returned counts too: a rank resumed from
	// SIGSTOP by the launcher's SIGCONT finds its SIGTERM and the job's
	// failure ready at once, and main may see the failure first.
	cancel()
	<-watched
	if got.Load() == nil {
		select {
		case s := <-sigc:
			got.Store(s)
		default:
		}
	}
	// Stopped, not failed, when the signal came: the step ended with this
	// rank's cancellation, or with the job's failure in the hub that the
	// other ranks' stop caused a moment before this rank's own signal
	// arrived. One line saying where, and the shell's status for a signal.
	if sig, ok := got.Load().(syscall.Signal); ok && (errors.Is(err, context.Canceled) || errors.Is(err, tp.ErrAborted)) {
		msg := "stopped by " + unix.SignalName(sig)
		if se := (*job.StepError)(nil); errors.As(err, &se) {
			msg += fmt.Sprintf(" at M=%d, step %d of the run", se.M, se.Step)
			// The job had failed a moment before the signal came.
			if re := (*tp.RankError)(nil); errors.As(err, &re) {
				msg += fmt.Sprintf(", after rank %d's failure: %s", re.Rank, re.Reason)
			} else if errors.Is(err, tp.ErrAborted) {
				msg += ", after the job failed: " + err.Error()
			}
		} else if what := strings.TrimSuffix(err.Error(), ": "+context.Canceled.Error()); what != err.Error() {
			msg += " (" + what + ")" // where it was, as the job says it
		}
		fmt.Fprintln(stderr, msg)
		return 128 + int(sig)
	}
	// The launcher prefixes the line with the rank; the error names the
	// job's operation itself.
	fmt.Fprintln(stderr, err)
	return exitInternal
}
