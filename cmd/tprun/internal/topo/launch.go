package topo

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// PreflightNotice is the check as the launcher runs it before starting GPU
// ranks: Preflight, turned into the one line the launcher prints
// ("tprun: <notice>") or the error that stops the launch.
//
//   - usable: the report's Summary, nil;
//   - no driver: a notice ending in withoutGPU (what the job does without
//     one: "continuing on the CPU" for the default job), nil; or, when
//     needGPU names what asked for a GPU (a flag such as "--backend cuda"),
//     an error with ErrNoDriver that names it;
//   - refused or NVML failure: "", the error, with a hint to run
//     `tprun topo` for the full report.
func PreflightNotice(ctx context.Context, lib nvml.Interface, opts Options, needGPU, withoutGPU string) (string, error) {
	r, err := Preflight(ctx, lib, opts)
	switch {
	case errors.Is(err, ErrNoDriver) && needGPU != "":
		return "", fmt.Errorf("%w, and %s needs a GPU", err, needGPU)
	case errors.Is(err, ErrNoDriver):
		return err.Error() + "; " + withoutGPU, nil
	case err != nil:
		return "", fmt.Errorf("%w (tprun topo shows the full report; --skip-topology-check starts anyway)", err)
	}
	return r.Summary(), nil
}

// EnvLookup returns a LookupEnv over an environment list in os.Environ
// form (the one the ranks will get); the last entry for a name wins, as
// in exec. A nil list means the process's own environment.
func EnvLookup(environ []string) func(string) (string, bool) {
	if environ == nil {
		return os.LookupEnv
	}
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}
