// Command tprun starts N tensor-parallel rank processes on this node and
// supervises them; without a command it runs its own default job.
//
//	tprun --tp N [launcher flags] [job flags] [-- CMD ARGS...]
//	tprun topo
//
// This file only parses flags and wires packages together: supervision is
// in package launcher, the default job in cmd/tprun/internal/job.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tprun/tprun/cmd/tprun/internal/job"
	"github.com/tprun/tprun/cmd/tprun/internal/topo"
	"github.com/tprun/tprun/launcher"
)

// Exit statuses of tprun itself; a job's own status comes from launcher.
const (
	exitUsage    = 2 // bad input; nothing was started
	exitRefused  = 3 // the machine refuses the job (topology check, multicast safety rule); nothing was started
	exitInternal = 1
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "topo":
			return runTopo(context.Background(), args[1:], stdout, stderr)
		case rankCommand:
			return runRank(args[1:], stdout, stderr)
		case benchCommand:
			return runBench(args[1:], stdout, stderr)
		}
	}
	return launch(args, stdout, stderr)
}

// launchFlags are the launcher's own flags.
type launchFlags struct {
	tp                int
	devices           string
	logDir            string
	grace             time.Duration
	timeout           time.Duration
	rendezvousTimeout time.Duration
	strict            bool
	skipTopologyCheck bool
}

// newFlagSet defines the launcher flags and the job flags on one set; it
// also returns the job flags' own set, used to tell the two kinds apart.
func newFlagSet() (*flag.FlagSet, *launchFlags, *job.Config, *flag.FlagSet) {
	fs := flag.NewFlagSet("tprun", flag.ContinueOnError)
	// The flag package prints the whole usage on every error; we print
	// one line instead.
	fs.SetOutput(io.Discard)
	lf := &launchFlags{}
	fs.IntVar(&lf.tp, "tp", 1, "number of ranks (tensor-parallel size): 1..16 for the default job, up to 250 with -- CMD")
	fs.StringVar(&lf.devices, "devices", "", "comma list of GPU indices or ranges (0-3), one per rank; a GPU may repeat (ranks then share it); ranks take the first --tp entries (default: rank K uses GPU K)")
	fs.StringVar(&lf.logDir, "log-dir", "", "also write each rank's output to `DIR`/rank-K.log")
	fs.DurationVar(&lf.grace, "grace", launcher.DefaultGrace, "time between SIGTERM and SIGKILL when stopping ranks")
	fs.DurationVar(&lf.timeout, "timeout", 0, "stop the job after this long (0: no limit)")
	fs.DurationVar(&lf.rendezvousTimeout, "rendezvous-timeout", launcher.DefaultRendezvousTimeout, "how long the hub waits for every rank to join, once one has (0: the default)")
	fs.BoolVar(&lf.strict, "strict", false, "treat topology warnings as errors")
	fs.BoolVar(&lf.skipTopologyCheck, "skip-topology-check", false, "do not check the GPU topology before starting")

	jobFS := flag.NewFlagSet("job", flag.ContinueOnError)
	jc := job.RegisterFlags(jobFS)
	jobFS.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	return fs, lf, jc, jobFS
}

func launch(args []string, stdout, stderr io.Writer) int {
	fs, lf, jc, jobFS := newFlagSet()
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout, fs, jobFS)
			return 0
		}
		return usageError(stderr, err.Error())
	}
	command := fs.Args()
	dashDash := len(args) > len(command) && args[len(args)-len(command)-1] == "--"
	switch {
	case len(command) > 0 && !dashDash:
		return usageError(stderr, fmt.Sprintf("unexpected argument %q: put the command after --", command[0]))
	case dashDash && len(command) == 0:
		return usageError(stderr, "missing command after --")
	}

	devs, err := topo.ParseDeviceList(lf.devices)
	if err != nil {
		return usageError(stderr, err.Error())
	}
	cfg := launcher.Config{
		WorldSize:         lf.tp,
		Devices:           deviceStrings(devs),
		LogDir:            lf.logDir,
		Grace:             lf.grace,
		Timeout:           lf.timeout,
		RendezvousTimeout: lf.rendezvousTimeout,
		Strict:            lf.strict,
		SkipTopologyCheck: lf.skipTopologyCheck,
		Stdout:            stdout,
		Stderr:            stderr,
	}
	if len(command) > 0 {
		var set []string
		fs.Visit(func(f *flag.Flag) {
			if jobFS.Lookup(f.Name) != nil {
				set = append(set, "--"+f.Name)
			}
		})
		if len(set) > 0 {
			return usageError(stderr, fmt.Sprintf("%s: job flags apply only to the default job, not to -- %s", strings.Join(set, ", "), command[0]))
		}
		cfg.Command = command
		cfg.Preflight = preflight(nil)
	} else {
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "tprun: cannot find own executable for the default job: %v\n", err)
			return exitInternal
		}
		cfg.Command = append([]string{self, rankCommand}, jc.Args()...)
		// Launcher settings first: "--tp 3 with 2 devices" says more than
		// what follows from --tp 3.
		if err := cfg.Validate(); err != nil {
			return usageError(stderr, err.Error())
		}
		if err := jc.Validate(lf.tp); err != nil {
			return usageError(stderr, err.Error())
		}
		if err := job.CheckShape(jc, lf.tp); err != nil {
			return usageError(stderr, err.Error())
		}
		if err := job.CheckMailbox(jc, lf.tp); err != nil {
			return usageError(stderr, err.Error())
		}
		if err := job.CheckMailboxAllowed(jc, os.Getenv); err != nil {
			return refused(stderr, err.Error())
		}
		if avail, ok := availableMemory(); ok {
			if err := job.CheckHostMemory(jc, lf.tp, avail); err != nil {
				return refused(stderr, err.Error())
			}
		}
		cfg.Preflight = preflight(jc)
	}
	if cfg.Grace == 0 {
		// --grace 0 means "kill at once", not the default.
		cfg.Grace = time.Nanosecond
	}

	// SIGHUP (the terminal or ssh session went away) and SIGQUIT stop the
	// job as SIGINT and SIGTERM do (torchrun does the same): left to their
	// default, they would end tprun alone, and the ranks' children (the
	// ranks have a parent-death signal, what they start has not) would
	// run on.
	// A signal tprun was started with ignored (nohup, a background job of
	// a shell without job control) stays ignored, for tprun and its ranks:
	// catching it would replace the ignore.
	sigs := make(chan os.Signal, 2)
	for _, sig := range []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT} {
		if !signal.Ignored(sig) {
			signal.Notify(sigs, sig)
		}
	}
	defer signal.Stop(sigs)
	cfg.Signals = sigs
	// A write to a closed stdout or stderr (`tprun ... | head`) raises
	// SIGPIPE, which would end tprun the same way. Caught, the write fails
	// with EPIPE instead, and the launcher stops the job. Nobody reads the
	// channel: Notify drops what does not fit. Caught signals are reset to
	// the default in the ranks at exec.
	pipe := make(chan os.Signal, 1)
	signal.Notify(pipe, syscall.SIGPIPE)
	defer signal.Stop(pipe)

	res, err := launcher.Run(context.Background(), cfg)
	if err != nil {
		switch {
		case errors.Is(err, launcher.ErrConfig):
			return usageError(stderr, err.Error())
		case errors.Is(err, launcher.ErrPreflight):
			return refused(stderr, err.Error())
		}
		var ie *launcher.InterruptedError
		if errors.As(err, &ie) {
			fmt.Fprintf(stderr, "tprun: %v\n", err)
			return ie.ExitStatus()
		}
		fmt.Fprintf(stderr, "tprun: %v\n", err)
		return exitInternal
	}
	return res.ExitStatus
}

// deviceStrings is --devices as the launcher takes it, one entry per rank.
func deviceStrings(devs []int) []string {
	var out []string
	for _, d := range devs {
		out = append(out, strconv.Itoa(d))
	}
	return out
}

func usageError(w io.Writer, msg string) int {
	fmt.Fprintf(w, "tprun: %s (see tprun -h)\n", msg)
	return exitUsage
}

// refused reports a job this machine will not run, though the input was
// valid: a usage hint would mislead.
func refused(w io.Writer, msg string) int {
	fmt.Fprintf(w, "tprun: %s\n", msg)
	return exitRefused
}

func usage(w io.Writer, fs, jobFS *flag.FlagSet) {
	fmt.Fprint(w, `usage: tprun --tp N [launcher flags] [job flags] [-- CMD ARGS...]
       tprun topo

Starts N rank processes on this node, each with TPRUN_RANK, TPRUN_WORLD_SIZE,
TPRUN_LOCAL_RANK, TPRUN_HUB, TPRUN_JOB_TOKEN, RANK, WORLD_SIZE, LOCAL_RANK and
LOCAL_WORLD_SIZE set, and prefixes their output with [rank K]. The first rank
that fails stops the others, as do SIGINT, SIGTERM, SIGHUP or SIGQUIT to tprun
and a closed stdout or stderr (exit 128+signal). Output that cannot be
written (a full disk) is reported and makes a job that succeeded exit 1.
Without -- CMD it runs the default job, the fused tensor-parallel
up-projection, checked against a float64 reference.

launcher flags:
`)
	var launcherFlags, jobFlags []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) {
		switch {
		case jobFS.Lookup(f.Name) == nil:
			launcherFlags = append(launcherFlags, f)
		case !job.Hidden(f.Name):
			jobFlags = append(jobFlags, f)
		}
	})
	printFlags(w, launcherFlags)
	fmt.Fprint(w, "\njob flags (default job only):\n")
	printFlags(w, jobFlags)
}

func printFlags(w io.Writer, flags []*flag.Flag) {
	for _, f := range flags {
		name, text := flag.UnquoteUsage(f)
		if name == "value" {
			name = strings.ToUpper(f.Name)
		}
		line := "  --" + f.Name
		if name != "" {
			line += " " + name
		}
		if f.DefValue != "" && f.DefValue != "0" && f.DefValue != "0s" && f.DefValue != "false" {
			text += " (default " + f.DefValue + ")"
		}
		if len(line) > 26 {
			fmt.Fprintf(w, "%s\n%-26s %s\n", line, "", text)
			continue
		}
		fmt.Fprintf(w, "%-26s %s\n", line, text)
	}
}
