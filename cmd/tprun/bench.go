package main

// `tprun bench`: the step benchmark as a job of its own. The launcher
// starts `tprun __bench` on every rank; with --json, rank 0 writes its
// report to a file this process prints once the job has ended, so that
// stdout holds one JSON document and nothing else.

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"

	"github.com/tprun/tprun/cmd/tprun/internal/job"
)

// newBenchFlagSet defines the launcher flags, the benchmark's job and own
// flags and --json; benchFS is the set the ranks take.
func newBenchFlagSet() (fs *flag.FlagSet, lf *launchFlags, bc *job.BenchConfig, benchFS *flag.FlagSet, asJSON *bool) {
	fs = flag.NewFlagSet("tprun bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	lf = addLauncherFlags(fs, "one per GPU, or more sharing GPUs with --devices")
	benchFS = flag.NewFlagSet("tprun "+benchCommand, flag.ContinueOnError)
	bc = job.RegisterBenchFlags(benchFS)
	copyFlags(fs, benchFS)
	asJSON = new(bool)
	fs.Var(boolFlag{asJSON}, "json", "print one JSON document on stdout instead of the table (the ranks' lines go to stderr)")
	return fs, lf, bc, benchFS, asJSON
}

// runBenchCommand is `tprun bench`. worker is the command every rank runs
// before the bench flags; nil means this executable's benchCommand.
func runBenchCommand(args []string, stdout, stderr io.Writer, worker []string) int {
	const cmd = "tprun bench"
	fs, lf, bc, benchFS, asJSON := newBenchFlagSet()
	p, err := parseArgs(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return showHelp(stdout, stderr, benchHelp(fs))
	case err != nil:
		return usageFailure(stderr, cmd, err.Error())
	case len(p.args) > 0:
		return usageFailure(stderr, cmd, fmt.Sprintf("unexpected argument %q", p.args[0]))
	}
	ranksOut := stdout
	if *asJSON {
		ranksOut = stderr
	}
	cfg, err := lf.config(ranksOut, stderr)
	if err != nil {
		return usageFailure(stderr, cmd, err.Error())
	}
	if worker == nil {
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "tprun: cannot find own executable for the benchmark: %v\n", err)
			return exitInternal
		}
		worker = []string{self, benchCommand}
	}
	cfg.Command = append(slices.Clip(worker), setFlags(fs, benchFS)...)
	if err := cfg.Validate(); err != nil {
		return usageFailure(stderr, cmd, err.Error())
	}
	for _, check := range []func() error{
		func() error { return bc.Job.Validate(lf.tp) },
		func() error { return job.CheckBenchMailbox(bc.Job) },
		func() error { return job.CheckShape(bc.Job, lf.tp) },
		func() error { return job.CheckMailbox(bc.Job, lf.tp) },
	} {
		if err := check(); err != nil {
			return usageFailure(stderr, cmd, err.Error())
		}
	}
	if err := job.CheckMailboxAllowed(bc.Job, os.Getenv); err != nil {
		return refused(stderr, err.Error())
	}
	// With --json, rank 0 writes to a file of this run's own (a later
	// --json-out wins over an earlier one), never to one a failed run
	// could leave stale; this process copies it to --json-out.
	var report string
	if *asJSON {
		dir, err := os.MkdirTemp("", "tprun-bench-")
		if err != nil {
			fmt.Fprintf(stderr, "tprun: a folder for the JSON report: %v\n", err)
			return exitInternal
		}
		defer os.RemoveAll(dir)
		report = filepath.Join(dir, "report.json")
		cfg.Command = append(cfg.Command, "--json-out="+report)
	}
	cfg.Preflight = gpuCheck(bc.Job.Mailbox, "tprun bench", "")
	status := runJob(cfg, stderr)
	if !*asJSON {
		return status
	}
	// Rank 0 writes the report after the last M, failed checks or not, and
	// when a failure stops it before (the rows so far and the error): it
	// is printed whenever it is there and whole.
	b, err := os.ReadFile(report)
	if err == nil {
		var r job.BenchReport
		if err = json.Unmarshal(b, &r); err == nil && r.Schema != job.BenchSchema {
			err = fmt.Errorf("schema %q, want %q", r.Schema, job.BenchSchema)
		}
	}
	switch {
	case err != nil && status == 0:
		fmt.Fprintf(stderr, "tprun: the benchmark's JSON report: %v\n", err)
		return exitInternal
	case err != nil:
		return status
	}
	if bc.JSONOut != "" {
		if err := os.WriteFile(bc.JSONOut, b, 0o644); err != nil {
			fmt.Fprintf(stderr, "tprun: --json-out: %v\n", err)
			if status == 0 {
				status = exitInternal
			}
		}
	}
	if _, err := stdout.Write(b); err != nil {
		fmt.Fprintf(stderr, "tprun: writing the JSON report: %v\n", err)
		if status == 0 {
			status = exitInternal
		}
	}
	return status
}
