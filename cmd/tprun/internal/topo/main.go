package topo

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Exit statuses of `tprun topo`.
const (
	ExitOK       = 0 // the check passed; the verdict names the backend
	ExitRefused  = 1 // the check refused the job, or NVML failed
	ExitUsage    = 2 // bad flags
	ExitNoDriver = 3 // no NVIDIA driver: nothing to check
)

// noDriverReport is the JSON report of a node without an NVIDIA driver:
// no devices, and a verdict that is not OK and names the reason; a job
// there runs on the CPU with the host mailbox.
func noDriverReport(err error) *Report {
	msg := err.Error()
	return &Report{
		Schema:   Schema,
		CUDA:     CUDA{NVMLIndex: []int{}},
		Ranks:    []int{},
		Devices:  []Device{},
		Pairs:    []Pair{},
		Warnings: []string{},
		Verdict: Verdict{Requested: "auto", Reason: msg + "; without a GPU, tprun runs the CPU backend with the host mailbox",
			MulticastBlockers: []string{}, Problems: []string{msg}},
		CrossNode: CrossNode{IMEXDir: DefaultIMEXDir, Cliques: []string{}, IMEXChannels: []string{}, Reasons: []string{msg}},
	}
}

// Main is `tprun topo`; args are what follows "topo". It prints the report
// on stdout (text, or JSON with --json), messages on stderr, and returns
// the exit status. lookupEnv nil means os.LookupEnv.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, lib nvml.Interface, lookupEnv func(string) (string, bool)) int {
	fs := flag.NewFlagSet("tprun topo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	devices := fs.String("devices", "", "CUDA ordinals to check, e.g. 0,1 or 0-3 (default: every GPU CUDA sees)")
	asJSON := fs.Bool("json", false, "print the report as a JSON document (schema "+Schema+")")
	strict := fs.Bool("strict", false, "treat warnings as reasons to refuse")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: tprun topo [--devices LIST] [--json] [--strict]\n\n"+
			"Checks the GPUs through NVML and says which mailbox backend --mailbox auto picks, and why.\n"+
			"Exit status: 0 usable, 1 refused, 2 usage, 3 no NVIDIA driver.\n\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return ExitOK
		}
		return ExitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "tprun topo: unexpected argument %q\n", fs.Arg(0))
		return ExitUsage
	}
	devs, err := ParseDevices(*devices)
	if err != nil {
		fmt.Fprintf(stderr, "tprun topo: %v\n", err)
		return ExitUsage
	}

	r, err := Preflight(ctx, lib, Options{Devices: devs, Strict: *strict, LookupEnv: lookupEnv})
	switch {
	case errors.Is(err, ErrNoDriver):
		fmt.Fprintf(stderr, "tprun topo: %v\n", err)
		if *asJSON {
			// Scripts get a document whatever happens: nothing checked,
			// and why.
			if werr := noDriverReport(err).WriteJSON(stdout); werr != nil {
				fmt.Fprintf(stderr, "tprun topo: writing the report: %v\n", werr)
			}
		}
		return ExitNoDriver
	case r == nil:
		fmt.Fprintf(stderr, "tprun topo: %v\n", err)
		return ExitRefused
	}
	write := r.WriteText
	if *asJSON {
		write = r.WriteJSON
	}
	if werr := write(stdout); werr != nil {
		fmt.Fprintf(stderr, "tprun topo: writing the report: %v\n", werr)
		return ExitRefused
	}
	if err != nil {
		return ExitRefused
	}
	return ExitOK
}
