// Command tprun starts N tensor-parallel rank processes on this node and
// supervises them; without a command it runs its own default job.
//
//	tprun --tp N [flags] [-- CMD ARGS...]
//	tprun topo [--devices LIST] [--json] [--strict]
//	tprun bench --tp N [flags]
//	tprun help [topo|bench]
//	tprun version
//
// This file only parses flags and wires packages together: supervision is
// in package launcher, the default job and the benchmark in
// cmd/tprun/internal/job, the topology check in cmd/tprun/internal/topo.
// docs/cli.md is the manual.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
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

// subcommands are the words that may come first; the rest of a command
// line is the launcher's.
var subcommands = []string{"topo", "bench", "help", "version"}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		switch args[0] {
		case "topo":
			return runTopo(context.Background(), args[1:], stdout, stderr)
		case "bench":
			return runBenchCommand(args[1:], stdout, stderr, nil)
		case "help":
			return runHelp(args[1:], stdout, stderr)
		case "version":
			if len(args) > 1 {
				return usageFailure(stderr, "tprun", fmt.Sprintf("version takes no arguments, got %q", args[1]))
			}
			fmt.Fprintln(stdout, versionLine())
			return 0
		case rankCommand:
			return runRank(args[1:], stdout, stderr)
		case benchCommand:
			return runBench(args[1:], stdout, stderr)
		}
	}
	return launch(args, stdout, stderr)
}

// runHelp is `tprun help [topo|bench]`.
func runHelp(args []string, stdout, stderr io.Writer) int {
	var page *helpPage
	switch {
	case len(args) == 0:
		fs, _, _, _ := newFlagSet()
		page = mainHelp(fs)
	case len(args) == 1 && args[0] == "topo":
		fs, _, _, _ := newTopoFlagSet()
		page = topoHelp(fs)
	case len(args) == 1 && args[0] == "bench":
		fs, _, _, _, _ := newBenchFlagSet()
		page = benchHelp(fs)
	default:
		return usageFailure(stderr, "tprun", fmt.Sprintf("no help for %q: try tprun help, tprun help topo or tprun help bench", strings.Join(args, " ")))
	}
	return showHelp(stdout, stderr, page)
}

func showHelp(stdout, stderr io.Writer, page *helpPage) int {
	if err := page.write(stdout); err != nil {
		fmt.Fprintf(stderr, "tprun: writing the help: %v\n", err)
		return exitInternal
	}
	return 0
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

// launcherFlagNames is the order the help lists the launcher flags in.
var launcherFlagNames = []string{"tp", "devices", "log-dir", "timeout", "grace", "rendezvous-timeout", "strict", "skip-topology-check"}

// jobFlagNames is the order the help lists the default job's flags in.
var jobFlagNames = []string{"backend", "mailbox", "m", "iters", "hidden", "latent", "slots", "seed", "deadline"}

// addLauncherFlags defines the launcher's flags on fs: tprun and tprun
// bench share them.
func addLauncherFlags(fs *flag.FlagSet, maxTP string) *launchFlags {
	lf := &launchFlags{tp: 1, grace: launcher.DefaultGrace, rendezvousTimeout: launcher.DefaultRendezvousTimeout}
	fs.Var(intFlag{&lf.tp}, "tp", "number of ranks (the tensor-parallel size): "+maxTP)
	fs.Var(stringFlag{&lf.devices}, "devices", "GPU of each rank, a comma list of indices and ranges such as 0,1 or 0-3; "+
		"a GPU may repeat (those ranks share it); ranks take the first --tp entries (default: rank K uses GPU K)")
	fs.Var(stringFlag{&lf.logDir}, "log-dir", "also write each rank's output, unprefixed, to DIR/rank-K.log")
	fs.Var(durationFlag{&lf.timeout}, "timeout", "stop the job after this long, and exit 124 (0: no limit)")
	fs.Var(durationFlag{&lf.grace}, "grace", "time between SIGTERM and SIGKILL when stopping ranks (0: kill at once)")
	fs.Var(durationFlag{&lf.rendezvousTimeout}, "rendezvous-timeout", "how long the hub waits for every rank to join, once one has")
	fs.Var(boolFlag{&lf.strict}, "strict", "treat topology warnings as errors")
	fs.Var(boolFlag{&lf.skipTopologyCheck}, "skip-topology-check", "do not check the GPU topology before starting")
	return lf
}

// config is the launcher's configuration for these flags (Command and
// Preflight are the caller's).
func (lf *launchFlags) config(stdout, stderr io.Writer) (launcher.Config, error) {
	devs, err := topo.ParseDeviceList(lf.devices)
	if err != nil {
		return launcher.Config{}, err
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
	if cfg.Grace == 0 {
		// --grace 0 means "kill at once", not the default.
		cfg.Grace = time.Nanosecond
	}
	return cfg, nil
}

// newFlagSet defines the launcher flags, the job flags and --version on
// one set; it also returns the job flags' own set, used to tell the kinds
// apart.
func newFlagSet() (*flag.FlagSet, *launchFlags, *job.Config, *flag.FlagSet) {
	fs := flag.NewFlagSet("tprun", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	lf := addLauncherFlags(fs, "1..16 for the default job, up to 250 with -- CMD")
	jobFS := flag.NewFlagSet("job", flag.ContinueOnError)
	jc := job.RegisterFlags(jobFS)
	copyFlags(fs, jobFS)
	var version bool
	fs.Var(boolFlag{&version}, "version", "print tprun's version and exit")
	return fs, lf, jc, jobFS
}

func launch(args []string, stdout, stderr io.Writer) int {
	fs, lf, jc, jobFS := newFlagSet()
	p, err := parseArgs(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return showHelp(stdout, stderr, mainHelp(fs))
	case err != nil:
		return usageFailure(stderr, "tprun", err.Error())
	}
	if v := fs.Lookup("version"); v.Value.String() == "true" {
		fmt.Fprintln(stdout, versionLine())
		return 0
	}
	command := p.args
	switch {
	case len(command) > 0 && !p.dashDash && slices.Contains(subcommands, command[0]):
		return usageFailure(stderr, "tprun", fmt.Sprintf("%q comes first: tprun %s [flags]", command[0], command[0]))
	case len(command) > 0 && !p.dashDash:
		return usageFailure(stderr, "tprun", fmt.Sprintf("unexpected argument %q: put the command after --", command[0]))
	case p.dashDash && len(command) == 0:
		return usageFailure(stderr, "tprun", "missing command after --")
	}

	cfg, err := lf.config(stdout, stderr)
	if err != nil {
		return usageFailure(stderr, "tprun", err.Error())
	}
	if len(command) > 0 {
		if set := setFlags(fs, jobFS); len(set) > 0 {
			var names []string
			for _, s := range set {
				name, _, _ := strings.Cut(s, "=")
				names = append(names, name)
			}
			return usageFailure(stderr, "tprun", fmt.Sprintf("%s: job flags apply only to the default job, not to -- %s", strings.Join(names, ", "), command[0]))
		}
		cfg.Command = command
		cfg.Preflight = preflight(nil)
		return runJob(cfg, stderr)
	}
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "tprun: cannot find own executable for the default job: %v\n", err)
		return exitInternal
	}
	cfg.Command = append([]string{self, rankCommand}, jc.Args()...)
	// Launcher settings first: "--tp 3 with 2 devices" says more than
	// what follows from --tp 3.
	if err := cfg.Validate(); err != nil {
		return usageFailure(stderr, "tprun", err.Error())
	}
	for _, check := range []func() error{
		func() error { return jc.Validate(lf.tp) },
		func() error { return job.CheckShape(jc, lf.tp) },
		func() error { return job.CheckMailbox(jc, lf.tp) },
	} {
		if err := check(); err != nil {
			return usageFailure(stderr, "tprun", err.Error())
		}
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
	return runJob(cfg, stderr)
}

// runJob runs a job under the launcher with tprun's signal handling, and
// returns tprun's exit status.
func runJob(cfg launcher.Config, stderr io.Writer) int {
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
			return usageFailure(stderr, "tprun", err.Error())
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

// usageFailure reports bad input on one line, with where the help is, and
// returns status 2. cmd is the command as typed ("tprun", "tprun bench").
func usageFailure(w io.Writer, cmd, msg string) int {
	fmt.Fprintf(w, "%s: %s (see %s --help)\n", cmd, msg, cmd)
	return exitUsage
}

// refused reports a job this machine will not run, though the input was
// valid: a usage hint would mislead.
func refused(w io.Writer, msg string) int {
	fmt.Fprintf(w, "tprun: %s\n", msg)
	return exitRefused
}
