package job

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/kernel"
	"github.com/tprun/tprun/mailbox"
	"github.com/tprun/tprun/tp"
)

// ErrCheck is matched when a received block was wrong or the ranks did not
// all receive the same blocks.
var ErrCheck = errors.New("job: check failed")

// progressEvery is how often rank 0 says how far a long job has come (the
// inputs, the steps); tests shorten it.
var progressEvery = 10 * time.Second

// timeLeft estimates the rest of a run from the current M's pace: took for
// its first done steps, iters steps per M, ms the current M and those after
// it. A later M is taken to cost in proportion to its rows (the check and
// the copies on the host grow with M).
func timeLeft(took time.Duration, done, iters int, ms []int) time.Duration {
	per := float64(took) / float64(done) // per step of the current M
	left := per * float64(iters-done)
	for _, m := range ms[1:] {
		left += per * float64(m) / float64(ms[0]) * float64(iters)
	}
	return time.Duration(left)
}

// StepError is a step of the run that failed (or was cancelled): which
// rank, M and step of the whole run, and why.
type StepError struct {
	Rank, M, Step int
	Err           error
}

func (e *StepError) Error() string {
	return fmt.Sprintf("job: rank %d: M=%d, step %d of the run: %v", e.Rank, e.M, e.Step, e.Err)
}

func (e *StepError) Unwrap() error { return e.Err }

// CPUNotice is the line rank 0 prints when --backend auto falls back to
// the CPU.
const CPUNotice = "no usable GPU: running the CPU backend (a functional path, not the product's speed)"

// group is what the job needs from *tp.Group: the collectives the mailbox
// uses, and all-gather for the results.
type group interface {
	mailbox.Exchanger
}

var _ group = (*tp.Group)(nil)

// poisonValue fills an output block before a step: an element the step
// fails to write stays a NaN, which the check counts as wrong.
const poisonValue = kernel.QuietNaN

// runHooks are the process-level actions a test replaces.
type runHooks struct {
	// die ends this rank abruptly for --inject-fault. It returns only if
	// it could not, or, in tests, to stand for a rank that vanished.
	die func() error
	// gpu says why no GPU is usable here, or nil (tp.CheckGPU). A nil
	// gpu stands for a machine without one.
	gpu func() error
}

// Run runs the default job on this rank of g (issue 3, DESIGN.md "The
// operation"): every rank draws the same seeded inputs, runs cfg.Iters
// steps of the fused up-projection for each M of cfg.M, checks every
// received [M, hidden] block against a float64 reference of the whole
// block, and compares per-step hashes of the blocks across ranks through
// the group. Rank 0 prints the results table on stdout; every rank prints
// its own wrong values. A wrong value or a block that differs between ranks
// makes Run return an error matching ErrCheck; a bad combination of flags
// is refused before any work with a one-line *FlagError.
//
// --inject-fault RANK:STEP counts steps from 0 across the whole run (M by
// M, in the order of --m). At that step the rank kills itself with SIGKILL
// before it sends its slice: a crash, with no cleanup and no goodbye to the
// hub, is what the fault is meant to look like. That is the one place this
// package ends the process, on request of a hidden test flag.
func Run(ctx context.Context, g *tp.Group, cfg *Config, stdout io.Writer) error {
	return run(ctx, g, cfg, stdout, runHooks{die: killSelf, gpu: tp.CheckGPU})
}

// killSelf sends SIGKILL to this process. The kernel delivers a signal sent
// to oneself before kill returns, so the error return is only a belt.
func killSelf() error {
	if err := unix.Kill(os.Getpid(), unix.SIGKILL); err != nil {
		return fmt.Errorf("job: injected fault: SIGKILL to self: %w", err)
	}
	time.Sleep(time.Second)
	return errors.New("job: injected fault: still alive a second after SIGKILL to self")
}

// plan is a checked Config for a group size.
type plan struct {
	cfg      *Config
	size     int
	shape    kernel.Shape // M = the largest M of cfg.M
	backend  string       // "cpu" or "cuda"; "auto" until pickBackend
	mailbox  mailbox.Kind // asked for, then resolved by pickBackend
	reason   string       // why this mailbox
	notice   string       // printed by rank 0 when the backend was picked for the user
	rows     int          // rows of the latent and shared pools
	steps    int          // steps in the whole run
	latScale float32
	wScale   float32
}

// CheckMailboxAllowed applies the multicast safety rule of DESIGN.md to
// the job flags: --mailbox multicast is refused, naming the variable, while
// any of the safety variables is set, before anything else is tried (even
// on a machine with no GPU, the variable is the first thing to fix).
func CheckMailboxAllowed(cfg *Config, getenv func(string) string) error {
	if k, err := mailbox.ParseKind(cfg.Mailbox); err != nil || k != mailbox.KindMulticast {
		return nil // a bad value is Config.Validate's to report
	}
	if err := mailbox.CheckMulticastAllowed(getenv); err != nil {
		return fmt.Errorf("--mailbox %q: %w", cfg.Mailbox, err)
	}
	return nil
}

// CheckShape reports, as a one-line *FlagError, the first rule of the
// kernel that the job flags break for worldSize ranks (M, hidden_dim,
// latent_dim, shard alignment), or nil. The launcher may call it before it
// starts any rank; Run checks it again.
func CheckShape(cfg *Config, worldSize int) error {
	// The largest M stands for all, unless one is out of range.
	s := kernel.Shape{M: 1, Hidden: cfg.Hidden, Latent: cfg.Latent, TP: worldSize}
	for _, m := range cfg.M {
		if m < 1 || m > kernel.MaxM {
			s.M = m
			break
		}
		s.M = max(s.M, m)
	}
	err := s.Validate()
	if err == nil {
		return nil
	}
	var se *kernel.ShapeError
	if !errors.As(err, &se) {
		return fmt.Errorf("job: %s: %s", s, oneLine(err))
	}
	flag, value := "hidden", strconv.Itoa(cfg.Hidden)
	switch se.Field {
	case "M":
		flag, value = "m", mList(cfg.M).String()
	case "latent_dim":
		flag, value = "latent", strconv.Itoa(cfg.Latent)
	case "tp":
		flag, value = "tp", strconv.Itoa(worldSize)
	}
	return &FlagError{Flag: flag, Value: value, Rule: fmt.Sprintf("%s = %d: %s", se.Field, se.Value, se.Rule)}
}

// CheckMailbox reports, as a *FlagError, a mailbox that the job's shape
// and --slots make too large (mailbox.NewLayout's rules), so that the
// launcher can refuse it before any rank starts: on --slots, or on --hidden
// when even two slots would not fit. It assumes CheckShape passed.
func CheckMailbox(cfg *Config, worldSize int) error {
	mc := mailbox.Config{Hidden: cfg.Hidden, Capacity: cfg.maxM(), Slots: cfg.Slots}
	_, err := mailbox.NewLayout(mc, worldSize)
	if err == nil {
		return nil
	}
	rule := strings.TrimPrefix(err.Error(), "mailbox: ")
	// When even the fewest slots do not fit, the row size is to blame.
	if mc.Slots = 2; cfg.Slots > 2 {
		if _, err2 := mailbox.NewLayout(mc, worldSize); err2 == nil {
			return &FlagError{Flag: "slots", Value: strconv.Itoa(cfg.Slots), Rule: rule}
		}
	}
	return &FlagError{Flag: "hidden", Value: strconv.Itoa(cfg.Hidden), Rule: fmt.Sprintf("with M up to %d: %s", cfg.maxM(), rule)}
}

// maxM is the largest M of the job (1 when none is set: Run refuses that).
func (c *Config) maxM() int {
	if len(c.M) == 0 {
		return 1
	}
	return slices.Max(c.M)
}

// HostBytes is about how much host memory one rank of the default job
// allocates at a time (newInputs, the steppers): its weight shard, and as
// much again for a peer's shard while it builds the reference of the whole
// block, with one kernel.Expect's float64 buffers; the pools of latent and
// residual rows; the float64 reference and tolerances of every pool row of
// the whole block; the step's block and its mailbox. It assumes CheckShape
// and CheckMailbox passed (latent at most kernel.MaxLatent, hidden below
// 2^29 by the mailbox's size limit), so that the products fit in an int64.
func HostBytes(cfg *Config, worldSize int) int64 {
	H, K := int64(cfg.Hidden), int64(cfg.Latent)
	m := int64(cfg.maxM())
	rows := 2 * m // newPlan
	shard := H / int64(worldSize)
	expect := min(int64(kernel.MaxM), rows) * (2*shard + K) * 8
	mb, _ := mailbox.NewLayout(mailbox.Config{Hidden: cfg.Hidden, Capacity: cfg.maxM(), Slots: cfg.Slots}, worldSize)
	// Per step of one M: its time (and the copy the percentiles sort) and
	// block hash, and every rank's hash once gathered.
	results := stepRecordBytes(cfg, worldSize)
	return 2*shard*K*2 + expect + rows*(K+H)*2 + rows*H*16 + m*H*2 + int64(mb.Bytes) + results
}

// stepRecordBytes is what a rank keeps per M for its steps' records.
func stepRecordBytes(cfg *Config, worldSize int) int64 {
	return int64(cfg.Iters) * (24 + 8*int64(worldSize))
}

// MaxIters bounds --iters: a billion steps of one M take hours even on a
// GPU, and their per-step records would need tens of GB.
const MaxIters = 1_000_000_000

// ErrMemory is matched when this machine has too little memory for the job.
var ErrMemory = errors.New("not enough host memory")

// CheckHostMemory reports when worldSize ranks of the job would need more
// host memory (HostBytes each) than available bytes, so that the launcher
// can refuse the job before the ranks run out of memory one by one.
func CheckHostMemory(cfg *Config, worldSize int, available int64) error {
	per := HostBytes(cfg, worldSize)
	if total := per * int64(worldSize); total > available {
		flags := fmt.Sprintf("--tp %d --hidden %d --latent %d", worldSize, cfg.Hidden, cfg.Latent)
		big := fmt.Sprintf("its weight shard alone is %s", byteSize(int64(cfg.Hidden/worldSize)*int64(cfg.Latent)*2))
		if rec := stepRecordBytes(cfg, worldSize); 4*rec >= per {
			// The steps' records are what is large: name --iters.
			flags += fmt.Sprintf(" --iters %d", cfg.Iters)
			big = fmt.Sprintf("the records of its %d steps per M alone are %s", cfg.Iters, byteSize(rec))
		}
		return fmt.Errorf("%w for %s: each rank needs about %s (%s), %s in all, and this machine has %s available",
			ErrMemory, flags, byteSize(per), big, byteSize(total), byteSize(available))
	}
	return nil
}

// byteSize prints n bytes with a binary unit, three significant digits.
func byteSize(n int64) string {
	const units = "KMGTPE"
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	f, u := float64(n)/1024, 0
	for f >= 1024 && u < len(units)-1 {
		f, u = f/1024, u+1
	}
	return fmt.Sprintf("%.3g %ciB", f, units[u])
}

// oneLine joins the lines of a multi-error (errors.Join) with "; ".
func oneLine(err error) string { return strings.ReplaceAll(err.Error(), "\n", "; ") }

func newPlan(cfg *Config, size int) (*plan, error) {
	if err := cfg.Validate(size); err != nil {
		return nil, err
	}
	if len(cfg.M) == 0 {
		return nil, &FlagError{Flag: "m", Value: "", Rule: "needs at least one M"}
	}
	if err := CheckShape(cfg, size); err != nil {
		return nil, err
	}
	p := &plan{cfg: cfg, size: size, steps: len(cfg.M) * cfg.Iters}
	p.shape = kernel.Shape{M: slices.Max(cfg.M), Hidden: cfg.Hidden, Latent: cfg.Latent, TP: size}
	// Twice the largest M: consecutive steps then use different rows, so a
	// stale slot read cannot pass for the right answer.
	p.rows = 2 * p.shape.M
	p.latScale = 1
	p.wScale = float32(1 / math.Sqrt(float64(cfg.Latent))) // keeps S about N(0, 1)

	switch cfg.Backend {
	case "cpu", "auto", "cuda":
		p.backend = cfg.Backend
	default:
		return nil, &FlagError{Flag: "backend", Value: cfg.Backend, Rule: "want one of auto, cpu, cuda"}
	}
	kind, err := mailbox.ParseKind(cfg.Mailbox)
	if err != nil {
		return nil, &FlagError{Flag: "mailbox", Value: cfg.Mailbox, Rule: "want one of auto, multicast, unicast, host"}
	}
	p.mailbox = kind
	switch {
	case p.backend == "auto" && kind == mailbox.KindHost:
		p.backend, p.reason = "cpu", "host asked for"
	case p.backend == "cpu" && kind != mailbox.KindHost && kind != mailbox.KindAuto:
		return nil, &FlagError{Flag: "mailbox", Value: cfg.Mailbox, Rule: "the CPU backend runs only the host mailbox (use --mailbox host or auto)"}
	case p.backend == "cpu":
		p.mailbox, p.reason = mailbox.KindHost, "the CPU backend runs the host mailbox"
	}
	if f := cfg.Fault; f != nil && f.Step >= p.steps {
		return nil, &FlagError{Flag: "inject-fault", Value: f.String(),
			Rule: fmt.Sprintf("step must be below the %d steps of this run (%d M values x %d iters)", p.steps, len(cfg.M), cfg.Iters)}
	}
	return p, nil
}

// inputs are this rank's operands and the yardstick of the whole block for
// every row of the pools.
type inputs struct {
	latent []kernel.BF16 // [rows, latent]
	shared []kernel.BF16 // [rows, hidden], the full tensor
	weight []kernel.BF16 // [shard, latent], this rank's rows
	ideal  []float64     // [rows, hidden]
	tol    []float64     // [rows, hidden]
}

// Streams of the seeded generators, so that the tensors never share draws.
const (
	streamLatent = 1
	streamShared = 2
	streamWeight = 3
)

// subSeed derives the seed of one generator from the job's seed, the
// tensor and an index (the weight row), so that any rank can draw any row
// of the weight alone and get what every other rank gets.
func subSeed(seed int64, stream, index uint64) uint64 {
	x := splitmix(uint64(seed) ^ splitmix(stream))
	return splitmix(x ^ splitmix(index+0x632BE59BD9B4E019))
}

func splitmix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

// fillWeight draws rows first.. of the full [hidden, latent] weight into
// dst, one generator per row. It stops with ctx's error when ctx ends (it
// looks every 64 rows).
func (p *plan) fillWeight(ctx context.Context, dst []kernel.BF16, first int) error {
	K := p.cfg.Latent
	for i := range len(dst) / K {
		if i%64 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		kernel.FillRandom(kernel.NewRand(subSeed(p.cfg.Seed, streamWeight, uint64(first+i))), dst[i*K:(i+1)*K], p.wScale)
	}
	return nil
}

// newInputs draws the pools and this rank's weight shard, and builds the
// yardstick of the whole block shard by shard, regenerating each peer's
// weight rows instead of holding the full weight. It returns ctx's error,
// wrapped, when ctx ends first (it looks before each weight shard, every
// 64 weight rows and between row groups of the reference: at large shapes
// this takes minutes).
func (p *plan) newInputs(ctx context.Context, rank int) (*inputs, error) {
	H, K, shard := p.cfg.Hidden, p.cfg.Latent, p.shape.Shard()
	in := &inputs{
		latent: make([]kernel.BF16, p.rows*K),
		shared: make([]kernel.BF16, p.rows*H),
		weight: make([]kernel.BF16, shard*K),
		ideal:  make([]float64, p.rows*H),
		tol:    make([]float64, p.rows*H),
	}
	stopped := func(err error) error { return fmt.Errorf("job: rank %d: drawing the inputs: %w", rank, err) }
	if err := ctx.Err(); err != nil {
		return nil, stopped(err)
	}
	kernel.FillRandom(kernel.NewRand(subSeed(p.cfg.Seed, streamLatent, 0)), in.latent, p.latScale)
	kernel.FillRandom(kernel.NewRand(subSeed(p.cfg.Seed, streamShared, 0)), in.shared, 1)
	if err := p.fillWeight(ctx, in.weight, rank*shard); err != nil {
		return nil, stopped(err)
	}
	peer := make([]kernel.BF16, shard*K)
	for q := range p.size {
		w := in.weight
		if q != rank {
			if err := p.fillWeight(ctx, peer, q*shard); err != nil {
				return nil, stopped(err)
			}
			w = peer
		}
		// Each column of the reference is its own dot product, so the shard
		// goes to kernel.Expect a few columns at a time (about 2^24
		// products per call), with a look at ctx before each.
		step := max(kernel.ShardAlign, (1<<24)/(kernel.MaxM*K)/kernel.ShardAlign*kernel.ShardAlign)
		for r0 := 0; r0 < p.rows; r0 += kernel.MaxM {
			for c0 := 0; c0 < shard; c0 += step {
				if err := ctx.Err(); err != nil {
					return nil, fmt.Errorf("job: rank %d: building the reference: %w", rank, err)
				}
				cols := min(step, shard-c0)
				s := kernel.Shape{M: min(kernel.MaxM, p.rows-r0), Hidden: cols, Latent: K, TP: 1}
				e, err := kernel.Expect(s, in.latent[r0*K:], w[c0*K:], in.shared[r0*H+q*shard+c0:], H)
				if err != nil {
					return nil, fmt.Errorf("job: reference for rank %d's columns %d..%d, rows %d..%d: %w",
						q, q*shard+c0, q*shard+c0+cols-1, r0, r0+s.M-1, err)
				}
				for m := range s.M {
					copy(in.ideal[(r0+m)*H+q*shard+c0:][:cols], e.Ideal[m*cols:][:cols])
					copy(in.tol[(r0+m)*H+q*shard+c0:][:cols], e.Tol[m*cols:][:cols])
				}
			}
		}
	}
	return in, nil
}

// offset is the first pool row step t uses with m rows: consecutive steps
// use different rows (rows >= 2m, so there are at least two offsets).
func (p *plan) offset(t, m int) int { return t % (p.rows - m + 1) }

// expected is the yardstick for m rows from row o, as a TP=1 Expected of
// the whole block.
func (in *inputs) expected(p *plan, o, m int) *kernel.Expected {
	H := p.cfg.Hidden
	return &kernel.Expected{
		Shape: kernel.Shape{M: m, Hidden: H, Latent: p.cfg.Latent, TP: 1},
		Ideal: in.ideal[o*H : (o+m)*H],
		Tol:   in.tol[o*H : (o+m)*H],
	}
}

func run(ctx context.Context, g group, cfg *Config, stdout io.Writer, hooks runHooks) (err error) {
	rank, size := g.Rank(), g.Size()
	p, err := newPlan(cfg, size)
	if err != nil {
		return err
	}
	if err := p.pickBackend(ctx, g, hooks.gpu); err != nil {
		return err
	}
	out := &printer{w: stdout, on: rank == 0}
	if p.notice != "" {
		out.printf("%s\n", p.notice)
	}
	out.header(p)
	out.printf("# mailbox %v: %s\n", p.mailbox, p.reason)

	start := time.Now()
	stopNotes := out.every(progressEvery, func(d time.Duration) string {
		return fmt.Sprintf("# still drawing the inputs and the float64 reference (%.0fs)\n", d.Seconds())
	})
	in, err := p.newInputs(ctx, rank)
	stopNotes()
	if err != nil {
		return err
	}
	out.printf("# inputs (seed %d) and the float64 reference ready in %.2fs\n", cfg.Seed, time.Since(start).Seconds())

	var st stepper
	if p.backend == "cuda" {
		st, err = newCUDAStepper(ctx, g, p, in)
	} else {
		st, err = newHostStepper(ctx, g, p, in)
	}
	if err != nil {
		return fmt.Errorf("job: rank %d: %w", rank, err)
	}
	defer func() {
		if cerr := st.close(); cerr != nil && err == nil {
			err = fmt.Errorf("job: rank %d: %w", rank, cerr)
		}
	}()
	mbName := st.mailboxName()
	out.columns()
	stepsStart := time.Now()
	lastNote := stepsStart

	var failures []string
	t := 0 // step of the whole run
	block := make([]kernel.BF16, p.shape.M*cfg.Hidden)
	hashBuf := make([]byte, 0, 2*len(block))
	for mi, m := range cfg.M {
		// Room for the records grows with the steps run: a long run that
		// is stopped early never holds all of them.
		pre := min(cfg.Iters, 1<<16)
		res := mResult{times: make([]time.Duration, 0, pre), hashes: make([]uint64, 0, pre)}
		mStart := time.Now()
		for i := range cfg.Iters {
			if f := cfg.Fault; f != nil && f.Rank == rank && f.Step == t {
				fmt.Fprintf(stdout, "rank %d: injected fault at step %d (--inject-fault %v): dying now\n", rank, t, f)
				return hooks.die()
			}
			o := p.offset(t, m)
			got := block[:m*cfg.Hidden]
			for i := range got {
				got[i] = kernel.QuietNaN // an element the step failed to fill is wrong
			}
			took, err := st.step(ctx, m, o, got)
			if err != nil {
				return &StepError{Rank: rank, M: m, Step: t, Err: err}
			}
			res.times = append(res.times, took)
			c, err := in.expected(p, o, m).Check(got, cfg.Hidden)
			if err != nil {
				return fmt.Errorf("job: rank %d: checking step %d: %w", rank, t, err)
			}
			res.add(c, t)
			hashBuf = hashBuf[:0]
			for _, v := range got {
				hashBuf = binary.LittleEndian.AppendUint16(hashBuf, uint16(v))
			}
			sum := sha256.Sum256(hashBuf)
			res.hashes = append(res.hashes, binary.LittleEndian.Uint64(sum[:8]))
			t++
			if now := time.Now(); out.on && now.Sub(lastNote) >= progressEvery && t < p.steps {
				lastNote = now
				out.printf("# %d of %d steps (M=%d) in %.0fs; about %.0fs left\n", t, p.steps, m, now.Sub(stepsStart).Seconds(),
					timeLeft(now.Sub(mStart), i+1, cfg.Iters, cfg.M[mi:]).Seconds())
			}
		}
		if res.wrong > 0 {
			fmt.Fprintf(stdout, "rank %d: M=%d: %d of %d values wrong; first at step %d, row %d, column %d: %v\n",
				rank, m, res.wrong, res.checked, res.firstStep, res.first.M, res.first.N, res.first)
		}
		all, err := gatherResults(ctx, g, &res)
		if err != nil {
			return fmt.Errorf("job: rank %d: gathering the results of M=%d: %w", rank, m, err)
		}
		row := summarize(p, m, mbName, all)
		out.row(row)
		if row.wrong > 0 {
			failures = append(failures, fmt.Sprintf("M=%d: %d wrong values (ranks %s)", m, row.wrong, intList(row.wrongRanks)))
		}
		if row.differ != "" {
			failures = append(failures, fmt.Sprintf("M=%d: %s", m, row.differ))
		}
	}
	if len(failures) > 0 {
		out.printf("# FAILED: %s\n", strings.Join(failures, "; "))
		return fmt.Errorf("job: rank %d: %w: %s", rank, ErrCheck, strings.Join(failures, "; "))
	}
	same := fmt.Sprintf("identical on all %d ranks", size)
	if size == 1 {
		same = "one rank, so nothing to compare across ranks"
	}
	out.printf("# every block within tolerance, %s (%d steps in %.2fs, checks included)\n", same, t, time.Since(stepsStart).Seconds())
	return nil
}

// stepper runs one step of the job on some backend.
type stepper interface {
	// step runs one step with m rows from pool row o and leaves the whole
	// block in got; took is the time of the step itself (no copies).
	step(ctx context.Context, m, o int, got []kernel.BF16) (took time.Duration, err error)
	mailboxName() string
	close() error
}

// hostStepper runs steps through UpProjection.Step on host operands.
type hostStepper struct {
	up   *tp.UpProjection
	p    *plan
	in   *inputs
	rank int
}

func newHostStepper(ctx context.Context, g group, p *plan, in *inputs) (*hostStepper, error) {
	up, err := tp.NewUpProjection(ctx, g, p.cfg.Hidden, p.cfg.Latent, p.shape.M,
		tp.WithBackend(mailbox.KindHost), tp.WithSlots(p.cfg.Slots), tp.WithDeadline(p.cfg.Deadline))
	if err != nil {
		return nil, err
	}
	return &hostStepper{up: up, p: p, in: in, rank: g.Rank()}, nil
}

func (h *hostStepper) step(ctx context.Context, m, o int, got []kernel.BF16) (time.Duration, error) {
	c := h.p.cfg
	stepIn := tp.UpInputs{M: m, Latent: h.in.latent[o*c.Latent : (o+m)*c.Latent], Weight: h.in.weight,
		Shared: h.in.shared[o*c.Hidden+h.rank*h.p.shape.Shard():], SharedStride: c.Hidden}
	t0 := time.Now()
	err := h.up.Step(ctx, stepIn, got)
	return time.Since(t0), err
}

func (h *hostStepper) mailboxName() string { return h.up.Backend() }
func (h *hostStepper) close() error        { return h.up.Close() }

// pickBackend settles p.backend and p.mailbox. For the CPU backend it
// does nothing more. Otherwise it asks gpu whether a GPU is usable here
// (nil: none is) and refuses, before any collective, what cannot work
// without one; then every rank resolves the mailbox together
// (tp.ResolveMailbox), a rank without a GPU taking part as tp.NoDevice.
// It sets the one-line notice when auto fell back to the CPU.
func (p *plan) pickBackend(ctx context.Context, g group, gpu func() error) error {
	if p.backend == "cpu" {
		return nil
	}
	if err := CheckMailboxAllowed(p.cfg, os.Getenv); err != nil {
		return fmt.Errorf("job: rank %d: %w", g.Rank(), err)
	}
	noGPU := errors.New("no GPU probe")
	if gpu != nil {
		noGPU = gpu()
	}
	device := deviceOf(g)
	if noGPU != nil {
		switch {
		case p.backend == "cuda":
			return fmt.Errorf("job: %w: --backend cuda: no CUDA engine can run here: no usable GPU (%w)", tp.ErrBackendUnavailable, noGPU)
		case p.mailbox == mailbox.KindUnicast || p.mailbox == mailbox.KindMulticast:
			return &FlagError{Flag: "mailbox", Value: p.cfg.Mailbox,
				Rule: fmt.Sprintf("no usable GPU here (%v), and the CPU backend runs only the host mailbox", noGPU)}
		}
		if gpu == nil {
			// A machine without a GPU, whatever this one has. (Otherwise
			// the probe finds what gpu found, and says why.)
			device = tp.NoDevice
		}
	}
	kind, reason, err := tp.ResolveMailbox(ctx, g, p.mailbox, device)
	if err == nil && kind == mailbox.KindHost && p.backend == "cuda" {
		err = fmt.Errorf("%w: --backend cuda: no GPU mailbox: %s", tp.ErrBackendUnavailable, reason)
	}
	if err != nil {
		return fmt.Errorf("job: rank %d: %w", g.Rank(), err)
	}
	p.mailbox, p.reason = kind, reason
	if kind == mailbox.KindHost {
		p.backend, p.notice = "cpu", CPUNotice
		return nil
	}
	p.backend = "cuda"
	return nil
}

// deviceOf is the group's device for this rank (a *tp.Group knows it from
// --devices or the local rank), or 0.
func deviceOf(g group) int {
	if d, ok := g.(interface{ Device() int }); ok {
		return d.Device()
	}
	return 0
}
