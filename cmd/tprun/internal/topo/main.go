package topo

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Exit statuses of `tprun topo`.
const (
	ExitOK       = 0 // the check passed; the verdict names the backend
	ExitRefused  = 1 // the check refused the job, or NVML failed
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

// Flags are `tprun topo`'s flags, parsed (cmd/tprun parses them, so that
// their help and errors read as the rest of tprun's).
type Flags struct {
	Devices []int // CUDA ordinals to check; nil: every GPU CUDA sees
	JSON    bool  // the report as a JSON document instead of text
	Strict  bool  // warnings are reasons to refuse
}

// Main is `tprun topo`. It prints the report on stdout (text, or JSON
// with f.JSON), messages on stderr, and returns the exit status.
// lookupEnv nil means os.LookupEnv.
func Main(ctx context.Context, f Flags, stdout, stderr io.Writer, lib nvml.Interface, lookupEnv func(string) (string, bool)) int {
	r, err := Preflight(ctx, lib, Options{Devices: f.Devices, Strict: f.Strict, LookupEnv: lookupEnv})
	switch {
	case errors.Is(err, ErrNoDriver):
		fmt.Fprintf(stderr, "tprun topo: %v\n", err)
		if f.JSON {
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
	if f.JSON {
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
