package main

// `tprun topo` and the launcher's preflight hook: wiring only, the check
// lives in cmd/tprun/internal/topo.

import (
	"context"
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

// runTopo implements `tprun topo [--devices LIST] [--json] [--strict]`:
// exit 0 usable, 1 refused, 2 usage, 3 no NVIDIA driver.
func runTopo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	return topo.Main(ctx, args, stdout, stderr, nvml.New(), os.LookupEnv)
}

// preflight returns the launcher's topology hook (launcher.Config.Preflight)
// for a launch; jc is the default job's flags, nil when the user gave
// -- CMD. nil means no check: the default job told to stay on the CPU
// touches no GPU. The launcher skips the hook under --skip-topology-check
// and passes --strict in its Config argument.
func preflight(jc *job.Config) func(ctx context.Context, cfg launcher.Config) (notice string, err error) {
	if jc != nil && (jc.Backend == "cpu" || jc.Mailbox == "host") {
		return nil
	}
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
		}
		needGPU := "" // the flag that asks for a GPU, if any
		if jc != nil {
			opts.Mailbox = jc.Mailbox
			switch {
			case jc.Backend == "cuda":
				needGPU = "--backend cuda"
			case jc.Mailbox == "unicast" || jc.Mailbox == "multicast":
				needGPU = "--mailbox " + jc.Mailbox
			}
		}
		return topo.PreflightNotice(ctx, nvml.New(), opts, needGPU)
	}
}
