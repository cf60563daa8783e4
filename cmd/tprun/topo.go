package main

// `tprun topo` and the launcher's preflight hook: wiring only, the check
// lives in cmd/tprun/internal/topo.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/tprun/tprun/cmd/tprun/internal/job"
	"github.com/tprun/tprun/cmd/tprun/internal/topo"
	"github.com/tprun/tprun/launcher"
)

// newTopoFlagSet defines `tprun topo`'s flags.
func newTopoFlagSet() (fs *flag.FlagSet, devices *string, asJSON, strict *bool) {
	fs = flag.NewFlagSet("tprun topo", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	devices, asJSON, strict = new(string), new(bool), new(bool)
	fs.Var(stringFlag{devices}, "devices", "CUDA ordinals to check, a comma list of indices and ranges such as 0,1 or 0-3 (default: every GPU CUDA sees)")
	fs.Var(boolFlag{asJSON}, "json", "print the report as one JSON document (schema "+topo.Schema+")")
	fs.Var(boolFlag{strict}, "strict", "treat warnings as reasons to refuse")
	return fs, devices, asJSON, strict
}

// runTopo implements `tprun topo [--devices LIST] [--json] [--strict]`:
// exit 0 usable, 1 refused, 2 usage, 3 no NVIDIA driver.
func runTopo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs, devices, asJSON, strict := newTopoFlagSet()
	p, err := parseArgs(fs, args)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return showHelp(stdout, stderr, topoHelp(fs))
	case err != nil:
		return usageFailure(stderr, "tprun topo", err.Error())
	case len(p.args) > 0:
		return usageFailure(stderr, "tprun topo", fmt.Sprintf("unexpected argument %q", p.args[0]))
	}
	devs, err := topo.ParseDevices(*devices)
	if err != nil {
		return usageFailure(stderr, "tprun topo", err.Error())
	}
	return topo.Main(ctx, topo.Flags{Devices: devs, JSON: *asJSON, Strict: *strict}, stdout, stderr, nvml.New(), os.LookupEnv)
}

// preflight returns the launcher's topology hook (launcher.Config.Preflight)
// for a launch; jc is the default job's flags, nil when the user gave
// -- CMD. nil means no check: the default job told to stay on the CPU
// touches no GPU. The launcher skips the hook under --skip-topology-check
// and passes --strict in its Config argument.
func preflight(jc *job.Config) func(ctx context.Context, cfg launcher.Config) (notice string, err error) {
	if jc == nil {
		// A command's ranks decide for themselves what to do without a GPU.
		return gpuCheck("", "", "the ranks start without a GPU")
	}
	if jc.Backend == "cpu" || jc.Mailbox == "host" {
		return nil
	}
	needGPU := "" // the flag that asks for a GPU, if any
	switch {
	case jc.Backend == "cuda":
		needGPU = "--backend cuda"
	case jc.Mailbox == "unicast" || jc.Mailbox == "multicast":
		needGPU = "--mailbox " + jc.Mailbox
	}
	return gpuCheck(jc.Mailbox, needGPU, "continuing on the CPU")
}

// gpuCheck is the topology hook for a job on the GPUs: mailbox is the
// --mailbox asked for ("" for a command's job), needGPU what asks for a
// GPU ("" when the job may run without one), withoutGPU what the notice
// says the job does when there is no driver.
func gpuCheck(mailbox, needGPU, withoutGPU string) func(ctx context.Context, cfg launcher.Config) (notice string, err error) {
	return func(ctx context.Context, cfg launcher.Config) (string, error) {
		var devs []int
		for _, d := range cfg.Devices {
			n, err := strconv.Atoi(strings.TrimSpace(d))
			if err != nil {
				return "", fmt.Errorf("--devices entry %q: %w", d, err)
			}
			devs = append(devs, n)
		}
		opts := topo.Options{
			TP:        cfg.WorldSize,
			Devices:   devs,
			Strict:    cfg.Strict,
			LookupEnv: topo.EnvLookup(cfg.Env),
			Mailbox:   mailbox,
		}
		return topo.PreflightNotice(ctx, nvml.New(), opts, needGPU, withoutGPU)
	}
}
