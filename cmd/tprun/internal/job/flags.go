package job

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// maxM is the largest M of the op (kernel.MaxM), on every backend, and
// maxTP the most ranks the default job runs (kernel.MaxTP, the mailbox
// destinations);
// repeated here so that flag parsing does not pull the kernel into the
// launcher's CLI.
const (
	maxM  = 128
	maxTP = 16
)

// ErrFlag marks an invalid job flag value; tprun exits with status 2.
var ErrFlag = errors.New("invalid job flag")

// FlagError names the flag, the value and the rule it broke.
type FlagError struct {
	Flag, Value, Rule string
}

func (e *FlagError) Error() string {
	return fmt.Sprintf("--%s %q: %s", e.Flag, e.Value, e.Rule)
}

// Is reports ErrFlag.
func (e *FlagError) Is(target error) bool { return target == ErrFlag }

// Fault is a --inject-fault request: rank Rank dies at step Step.
type Fault struct{ Rank, Step int }

// Config holds the default job's settings (the job flags). The launcher
// parses them, checks them against --tp and forwards them to every rank
// with Args.
type Config struct {
	Backend  string        // auto | cpu | cuda
	Mailbox  string        // auto | multicast | unicast | host
	M        []int         // the M values to run, each in 1..128
	Iters    int           // timed steps per M
	Hidden   int           // hidden_dim
	Latent   int           // latent_dim
	Slots    int           // mailbox slots, at least 2
	Seed     int64         // seed of the generated inputs
	Deadline time.Duration // receive deadline per step
	Fault    *Fault        // hidden --inject-fault; nil when not set
}

// Default returns the settings used when no job flag is given.
func Default() Config {
	return Config{
		Backend:  "auto",
		Mailbox:  "auto",
		M:        []int{1, 2, 4, 8},
		Iters:    100,
		Hidden:   7168,
		Latent:   3584,
		Slots:    3,
		Seed:     1,
		Deadline: 10 * time.Second,
	}
}

// Hidden reports whether the job flag name is for tests only and left out
// of the usage text.
func Hidden(name string) bool { return name == "inject-fault" }

// RegisterFlags defines the job flags on fs and returns the Config they
// fill in. Each value is checked as it is parsed; Validate checks the rules
// that involve several flags or the world size.
func RegisterFlags(fs *flag.FlagSet) *Config {
	c := Default()
	fs.Var(&enumValue{p: &c.Backend, allowed: []string{"auto", "cpu", "cuda"}}, "backend",
		"compute backend: auto, cpu or cuda (auto: cuda when a GPU is usable, else cpu)")
	fs.Var(&enumValue{p: &c.Mailbox, allowed: []string{"auto", "multicast", "unicast", "host"}}, "mailbox",
		"mailbox backend: auto, multicast, unicast or host")
	fs.Var((*mList)(&c.M), "m", "comma list of M values (rows per step), each 1..128")
	fs.Var(&intValue{p: &c.Iters, min: 1, max: MaxIters}, "iters", "timed steps per M, at most 1000000000")
	fs.Var(&intValue{p: &c.Hidden, min: 1}, "hidden", "hidden dimension (split across ranks)")
	fs.Var(&intValue{p: &c.Latent, min: 1}, "latent", "latent dimension")
	fs.Var(&intValue{p: &c.Slots, min: 2}, "slots", "mailbox slots (at least 2)")
	fs.Var(&int64Value{p: &c.Seed}, "seed", "seed of the generated inputs")
	fs.Var(&durationValue{p: &c.Deadline}, "deadline", "how long a receive waits for the peers' slices")
	fs.Var(&faultValue{p: &c.Fault}, "inject-fault", "RANK:STEP: that rank dies at that step (tests)")
	return &c
}

// Validate checks the rules between flags and against the number of ranks.
func (c *Config) Validate(worldSize int) error {
	switch {
	case c.Backend == "cpu" && (c.Mailbox == "multicast" || c.Mailbox == "unicast"):
		return &FlagError{Flag: "mailbox", Value: c.Mailbox, Rule: "needs --backend cuda or auto (--backend cpu runs only the host mailbox)"}
	case c.Backend == "cuda" && c.Mailbox == "host":
		return &FlagError{Flag: "mailbox", Value: c.Mailbox, Rule: "the host mailbox runs on the CPU; use --backend cpu or auto"}
	case worldSize > maxTP:
		return &FlagError{Flag: "tp", Value: strconv.Itoa(worldSize),
			Rule: fmt.Sprintf("the default job runs at most %d ranks (its mailbox's destinations); -- CMD jobs may have more", maxTP)}
	case worldSize >= 1 && c.Hidden%worldSize != 0:
		return &FlagError{Flag: "hidden", Value: strconv.Itoa(c.Hidden), Rule: fmt.Sprintf("must be divisible by --tp %d", worldSize)}
	case c.Fault != nil && worldSize >= 1 && c.Fault.Rank >= worldSize:
		return &FlagError{Flag: "inject-fault", Value: c.Fault.String(), Rule: fmt.Sprintf("rank must be below --tp %d", worldSize)}
	}
	return nil
}

// Args renders c as job flags for a rank's command line: only the values
// that differ from Default, in a fixed order, so that parsing them with
// RegisterFlags gives back c.
func (c *Config) Args() []string {
	d := Default()
	var a []string
	add := func(name, v, def string) {
		if v != def {
			a = append(a, "--"+name+"="+v)
		}
	}
	add("backend", c.Backend, d.Backend)
	add("mailbox", c.Mailbox, d.Mailbox)
	add("m", mList(c.M).String(), mList(d.M).String())
	add("iters", strconv.Itoa(c.Iters), strconv.Itoa(d.Iters))
	add("hidden", strconv.Itoa(c.Hidden), strconv.Itoa(d.Hidden))
	add("latent", strconv.Itoa(c.Latent), strconv.Itoa(d.Latent))
	add("slots", strconv.Itoa(c.Slots), strconv.Itoa(d.Slots))
	add("seed", strconv.FormatInt(c.Seed, 10), strconv.FormatInt(d.Seed, 10))
	add("deadline", c.Deadline.String(), d.Deadline.String())
	if c.Fault != nil {
		a = append(a, "--inject-fault="+c.Fault.String())
	}
	return a
}

func (f Fault) String() string { return fmt.Sprintf("%d:%d", f.Rank, f.Step) }

// flag.Value implementations. Their Set methods return plain errors: the
// flag package adds the flag's name itself.

type enumValue struct {
	p       *string
	allowed []string
}

func (v *enumValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v *enumValue) Set(s string) error {
	for _, a := range v.allowed {
		if s == a {
			*v.p = s
			return nil
		}
	}
	return fmt.Errorf("want one of %s", strings.Join(v.allowed, ", "))
}

type intValue struct {
	p   *int
	min int
	max int // 0: no bound
}

func (v *intValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.Itoa(*v.p)
}

func (v *intValue) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	if n < v.min {
		return fmt.Errorf("must be at least %d", v.min)
	}
	if v.max > 0 && n > v.max {
		return fmt.Errorf("must be at most %d", v.max)
	}
	*v.p = n
	return nil
}

type int64Value struct{ p *int64 }

func (v *int64Value) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatInt(*v.p, 10)
}

func (v *int64Value) Set(s string) error {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return errors.New("not an integer")
	}
	*v.p = n
	return nil
}

type stringValue struct{ p *string }

func (v *stringValue) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v *stringValue) Set(s string) error { *v.p = s; return nil }

type durationValue struct{ p *time.Duration }

func (v *durationValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}

func (v *durationValue) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration such as 10s")
	}
	if d <= 0 {
		return errors.New("must be positive")
	}
	*v.p = d
	return nil
}

// mList is a comma list of distinct M values in 1..maxM, in the given order.
type mList []int

func (m mList) String() string {
	s := make([]string, len(m))
	for i, v := range m {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

func (m *mList) Set(s string) error {
	var out []int
	seen := map[int]bool{}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		n, err := strconv.Atoi(f)
		if err != nil {
			return fmt.Errorf("%q is not an integer", f)
		}
		if n < 1 || n > maxM {
			//lint:ignore ST1005 M, the row count, as the tables spell it
			return fmt.Errorf("M %d is outside 1..%d", n, maxM)
		}
		if seen[n] {
			//lint:ignore ST1005 M, the row count, as the tables spell it
			return fmt.Errorf("M %d is listed twice", n)
		}
		seen[n] = true
		out = append(out, n)
	}
	*m = out
	return nil
}

type faultValue struct{ p **Fault }

func (v *faultValue) String() string {
	if v.p == nil || *v.p == nil {
		return ""
	}
	return (*v.p).String()
}

func (v *faultValue) Set(s string) error {
	rs, ss, ok := strings.Cut(s, ":")
	r, err1 := strconv.Atoi(rs)
	st, err2 := strconv.Atoi(ss)
	if !ok || err1 != nil || err2 != nil || r < 0 || st < 0 {
		return errors.New("want RANK:STEP, both non-negative integers")
	}
	*v.p = &Fault{Rank: r, Step: st}
	return nil
}
