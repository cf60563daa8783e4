package launcher

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tprun/tprun/internal/hub"
)

// Defaults used when the matching Config field is zero.
const (
	DefaultGrace             = 5 * time.Second
	DefaultRendezvousTimeout = 60 * time.Second
	// TailLines is how many of a rank's last stderr lines the report keeps.
	TailLines = 20
)

// Sentinels for errors.Is on what Run returns.
var (
	// ErrConfig marks bad input found before any rank started: the caller
	// should print the one-line message and exit with status 2.
	ErrConfig = errors.New("invalid launch configuration")
	// ErrPreflight marks a refusal by Config.Preflight; no rank was started.
	ErrPreflight = errors.New("preflight check failed")
	// ErrStart marks a failure to start a rank process after validation
	// passed; ranks already started were stopped and reaped.
	ErrStart = errors.New("starting ranks failed")
	// ErrInterrupted marks a signal (Config.Signals) that arrived before any
	// rank was started, during Config.Preflight; *InterruptedError says
	// which. Nothing was started.
	ErrInterrupted = errors.New("interrupted before any rank started")
)

// InterruptedError is a signal that ended Run during the topology check
// (Config.Preflight), before any rank started.
type InterruptedError struct {
	Signal syscall.Signal
}

func (e *InterruptedError) Error() string {
	return fmt.Sprintf("got %s during the topology check; nothing was started", signalName(e.Signal))
}

// Unwrap makes errors.Is(err, ErrInterrupted) hold.
func (e *InterruptedError) Unwrap() error { return ErrInterrupted }

// ExitStatus is 128+signal, as for a job tprun stopped on that signal.
func (e *InterruptedError) ExitStatus() int { return 128 + int(e.Signal) }

// ConfigError names the offending setting, its value and the rule it broke.
// It matches ErrConfig with errors.Is.
type ConfigError struct {
	Field string // the flag or field, e.g. "--tp"
	Value string // the value as given
	Rule  string // what was expected
	Err   error  // underlying cause, if any
}

func (e *ConfigError) Error() string {
	msg := e.Field
	if e.Value != "" {
		msg += " " + strconv.Quote(e.Value)
	}
	msg += ": " + e.Rule
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *ConfigError) Unwrap() error { return e.Err }

// Is reports ErrConfig so callers need not know the concrete type.
func (e *ConfigError) Is(target error) bool { return target == ErrConfig }

// Config describes one job. The zero value of each optional field picks the
// documented default.
type Config struct {
	// WorldSize is the number of ranks (--tp); at least 1.
	WorldSize int
	// Devices, when non-empty (--devices), lists the GPU index each local
	// rank uses; it must hold at least WorldSize non-negative integers up
	// to 1023 (repeats allowed: those ranks share a GPU). The first
	// WorldSize entries reach the ranks as TPRUN_DEVICES.
	Devices []string
	// Command is the argv every rank runs; Command[0] is looked up in PATH
	// before anything starts.
	Command []string
	// Env is the base environment of every rank; nil means os.Environ().
	// The launcher's own variables replace any inherited ones.
	Env []string
	// Dir is the working directory of the ranks; empty means tprun's.
	Dir string
	// LogDir, when set, receives rank-K.log with each rank's output
	// (unprefixed, stdout and stderr in arrival order). It is created if
	// needed; failing to create a file there is a configuration error.
	LogDir string
	// Grace is how long ranks get between SIGTERM and SIGKILL; 0 means
	// DefaultGrace, a negative value is invalid.
	Grace time.Duration
	// Timeout limits the whole job; 0 means none.
	Timeout time.Duration
	// RendezvousTimeout bounds the hub's wait for all hellos; 0 means
	// DefaultRendezvousTimeout.
	RendezvousTimeout time.Duration

	// Strict and SkipTopologyCheck are passed through for Preflight (the
	// topology check of cmd/tprun/internal/topo); the launcher itself only honours
	// SkipTopologyCheck by not calling Preflight.
	Strict            bool
	SkipTopologyCheck bool

	// Preflight is the topology hook, run after validation and before the
	// hub or any rank starts (skipped when SkipTopologyCheck is set or it is
	// nil). A non-empty notice is printed as "tprun: <notice>" on Stderr;
	// an error aborts the launch and comes back wrapped with ErrPreflight.
	// It runs on a goroutine of its own: a signal on Signals (or the end of
	// ctx) makes Run return without waiting for it, and it may then still
	// run after Run has returned (NVML calls cannot be cancelled).
	//
	// HOOK: owned by the topology work (cmd/tprun/internal/topo, cmd/tprun/topo.go).
	Preflight func(ctx context.Context, cfg Config) (notice string, err error)

	// Stdout and Stderr receive the prefixed rank output and the launcher's
	// own messages; nil means os.Stdout / os.Stderr.
	Stdout, Stderr io.Writer

	// Signals delivers the signals the caller received that should stop the
	// job (tprun: SIGINT, SIGTERM, SIGHUP, SIGQUIT; the caller owns
	// signal.Notify). The first one stops the job gracefully, and tprun
	// exits 128+signal; a second one kills every rank at once. One that
	// arrives during Preflight ends Run there, before any rank starts
	// (*InterruptedError). Nil, or closed, means none.
	Signals <-chan os.Signal

	// listen opens the rendezvous hub; nil means the real internal/hub.
	// Tests replace it to watch Abort calls.
	listen listenFunc
	// exitHold, when set, gives a channel per rank (or nil) that holds the
	// report of that rank's exit to the supervisor until it is closed, as
	// when a process is slow to finish exiting after its files were
	// closed (which its peers and the hub may see first). Tests only.
	exitHold func(rank int) <-chan struct{}
	// path is Command[0] resolved through PATH by validate.
	path string
}

// Validate reports the first bad setting as a *ConfigError (errors.Is
// ErrConfig) without starting anything; Run makes the same checks, and also
// checks that the log directory is writable.
func (c Config) Validate() error {
	_, err := c.validate()
	return err
}

// validate checks the settings that need no side effects and fills in
// defaults. It returns the normalized copy.
func (c Config) validate() (Config, error) {
	if c.WorldSize < 1 || c.WorldSize > hub.MaxWorldSize {
		return c, &ConfigError{Field: "--tp", Value: strconv.Itoa(c.WorldSize), Rule: fmt.Sprintf("must be in 1..%d", hub.MaxWorldSize)}
	}
	if len(c.Devices) > 0 {
		if err := checkDevices(c.Devices, c.WorldSize); err != nil {
			return c, err
		}
	}
	if len(c.Command) == 0 || c.Command[0] == "" {
		return c, &ConfigError{Field: "command", Rule: "missing"}
	}
	switch {
	case c.Grace < 0:
		return c, &ConfigError{Field: "--grace", Value: c.Grace.String(), Rule: "must not be negative"}
	case c.Timeout < 0:
		return c, &ConfigError{Field: "--timeout", Value: c.Timeout.String(), Rule: "must not be negative"}
	case c.RendezvousTimeout < 0:
		return c, &ConfigError{Field: "--rendezvous-timeout", Value: c.RendezvousTimeout.String(), Rule: "must not be negative"}
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.RendezvousTimeout == 0 {
		c.RendezvousTimeout = DefaultRendezvousTimeout
	}
	if c.Env == nil {
		c.Env = os.Environ()
	}
	if c.Stdout == nil {
		c.Stdout = os.Stdout
	}
	if c.Stderr == nil {
		c.Stderr = os.Stderr
	}
	if c.listen == nil {
		c.listen = listenHub
	}
	// Copy the slices the caller may keep mutating.
	c.Command = append([]string(nil), c.Command...)
	c.Devices = append([]string(nil), c.Devices...)
	path, err := exec.LookPath(c.Command[0])
	if err != nil {
		return c, &ConfigError{Field: "command", Value: c.Command[0], Rule: "not found or not executable", Err: unwrapExecErr(err)}
	}
	c.path = path
	return c, nil
}

// unwrapExecErr drops exec.Error's own "exec: name:" prefix, which would
// repeat the name ConfigError already prints.
func unwrapExecErr(err error) error {
	var ee *exec.Error
	if errors.As(err, &ee) {
		return ee.Err
	}
	return err
}

func checkDevices(devs []string, worldSize int) error {
	list := strings.Join(devs, ",")
	// A GPU may be listed more than once: several ranks then share it
	// (their processes time-slice the GPU), which is how a one-GPU machine
	// runs --tp 4. Whether the GPU's compute mode allows that is the
	// topology check's business.
	for _, d := range devs {
		n, err := strconv.Atoi(strings.TrimSpace(d))
		if err != nil || n < 0 || n > maxRangeGPU {
			return &ConfigError{Field: "--devices", Value: list, Rule: fmt.Sprintf("entry %q is not a GPU index from 0 to %d", d, maxRangeGPU)}
		}
	}
	if worldSize > len(devs) {
		return &ConfigError{Field: "--tp", Value: strconv.Itoa(worldSize),
			Rule: fmt.Sprintf("is more than the %d GPUs in --devices %s", len(devs), list)}
	}
	return nil
}

// maxRangeGPU bounds a --devices entry (as tprun topo does).
const maxRangeGPU = 1023
