package tp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tprun/tprun/internal/hub"
)

// ErrEnv is matched by every error about the launch environment.
var ErrEnv = errors.New("tp: bad launch environment")

// EnvError names the variable that is missing, malformed or contradicts
// another one.
type EnvError struct {
	Var     string // the variable at fault
	Value   string // its value; empty when it is missing
	Problem string
}

func (e *EnvError) Error() string {
	if e.Value == "" {
		return fmt.Sprintf("tp: %s: %s", e.Var, e.Problem)
	}
	return fmt.Sprintf("tp: %s=%q: %s", e.Var, e.Value, e.Problem)
}

// Is makes errors.Is(err, ErrEnv) true.
func (e *EnvError) Is(t error) bool { return t == ErrEnv }

// JoinOption changes how Join finds its job.
type JoinOption func(*joinConfig)

type joinConfig struct {
	lookup  func(string) (string, bool)
	timeout time.Duration
	logf    func(format string, args ...any)
	// collective: WithCollectiveTimeout's d; 0 when not given.
	collective time.Duration
	// listener: rank 0's TCP listener, opened by the caller (tests);
	// nil: Join listens at the rendezvous address.
	listener net.Listener
}

// DefaultTimeout bounds the rendezvous when no WithTimeout is given.
const DefaultTimeout = 60 * time.Second

// DefaultCollectiveTimeout bounds each Group collective when neither
// WithCollectiveTimeout nor TPRUN_COLLECTIVE_TIMEOUT says otherwise. The
// collectives run at setup and shutdown, never in the step loop, so a
// rank that is alive but five minutes late to one has stalled; PyTorch's
// NCCL watchdog, the limit people who serve models know, waits ten
// minutes, and half of that frees a serving slot sooner while leaving
// room for a slow node's setup (loading and packing a weight shard).
const DefaultCollectiveTimeout = hub.DefaultCollectiveTimeout

// EnvCollectiveTimeout is the environment variable that sets every
// collective's timeout for a job without changing its code: a Go duration
// ("90s", "10m") or a number of seconds ("600"). WithCollectiveTimeout,
// when given, wins over it.
const EnvCollectiveTimeout = "TPRUN_COLLECTIVE_TIMEOUT"

// collectiveKnob names what sets the collective timeout, in the error a
// timeout gives.
const collectiveKnob = "tp.WithCollectiveTimeout or " + EnvCollectiveTimeout

// WithEnv makes Join read env instead of the process environment.
func WithEnv(env map[string]string) JoinOption {
	return func(c *joinConfig) {
		c.lookup = func(k string) (string, bool) {
			v, ok := env[k]
			return v, ok
		}
	}
}

// WithLookupEnv makes Join read variables through lookup (os.LookupEnv's
// shape).
func WithLookupEnv(lookup func(string) (string, bool)) JoinOption {
	return func(c *joinConfig) { c.lookup = lookup }
}

// WithTimeout bounds the rendezvous when rank 0 hosts the hub (srun,
// mpirun, torchrun): every rank must say hello within d. Under the tprun
// launcher the launcher's --rendezvous-timeout governs instead, and d only
// applies when it is shorter.
func WithTimeout(d time.Duration) JoinOption {
	return func(c *joinConfig) { c.timeout = d }
}

// WithCollectiveTimeout bounds each collective of the Group (Barrier,
// AllGather, Broadcast, AllGatherFDs, BroadcastFDs, and the handle
// exchange of the ops made from it): once this rank has arrived, the
// others must all arrive within d. When the first waiting rank's timeout
// runs out, the hub ends the job on every rank with a
// *CollectiveTimeoutError naming the collective and the ranks that never
// came, whether or not the callers' ctx has a deadline. It overrides
// TPRUN_COLLECTIVE_TIMEOUT; without either, DefaultCollectiveTimeout
// applies. d must be positive.
func WithCollectiveTimeout(d time.Duration) JoinOption {
	return func(c *joinConfig) { c.collective = d }
}

// WithLogf receives the hub's log lines (refused connections, the job's
// failure) on the rank that hosts it.
func WithLogf(logf func(format string, args ...any)) JoinOption {
	return func(c *joinConfig) { c.logf = logf }
}

// Launchers Join recognizes.
const (
	LauncherTprun    = "tprun"
	LauncherSrun     = "srun"
	LauncherMpirun   = "mpirun"
	LauncherTorchrun = "torchrun"
)

// launch is what the environment says about this rank.
type launch struct {
	launcher  string
	rank      int
	size      int
	localRank int
	localSize int
	devices   []int // empty: device = local rank

	// tprun: the launcher's hub.
	hubPath, token string
	// Other launchers: the job id the hub's path and token derive from.
	jobID string

	// node is the node this rank says it runs on: TPRUN_FORCE_NODE, else
	// the hostname (filled by Join).
	node string
	// cross: the job's ranks are on more than one node (or
	// TPRUN_FORCE_NODE makes this rank act so): they rendezvous over TCP
	// at rendezvous (host:port), which rendezvousFrom names for messages.
	cross          bool
	forcedNode     string
	rendezvous     string
	rendezvousFrom string
	// hostOf says on which host the launcher puts a rank ("" unknown);
	// nil when it does not say.
	hostOf func(rank int) string
}

// Join finds the job this process belongs to and returns once every rank
// has joined. ctx bounds the whole rendezvous.
//
// Under the tprun launcher the ranks meet at the launcher's hub. Started
// by srun, mpirun or torchrun on one node, rank 0 hosts a hub on a Unix
// socket that the others find by the job id. When the launcher's variables
// say the job spans nodes (a local size below the world size), or
// TPRUN_FORCE_NODE is set, rank 0 hosts the hub on TCP instead: at
// TPRUN_RENDEZVOUS, else at torchrun's MASTER_ADDR and MASTER_PORT+1, else
// on the first node of Slurm's node list at a port derived from the job
// id (mpirun needs TPRUN_RENDEZVOUS). Every rank must then present the
// same job secret (TPRUN_JOB_SECRET, or TPRUN_JOB_SECRET_FILE naming a
// file only the user can read); without one Join refuses. A rank whose
// node goes silent for TPRUN_NODE_TIMEOUT (default 10s) ends the job,
// naming the node and its ranks; the descriptor collectives fail with
// ErrCrossNode, and the GPU mailbox shares memory through CUDA fabric
// handles only.
func Join(ctx context.Context, opts ...JoinOption) (*Group, error) {
	cfg := joinConfig{lookup: os.LookupEnv, timeout: DefaultTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	if cfg.timeout <= 0 {
		cfg.timeout = DefaultTimeout
	}
	l, err := parseEnv(cfg.lookup)
	if err != nil {
		return nil, err
	}
	collective, err := collectiveTimeout(cfg)
	if err != nil {
		return nil, err
	}
	l.node = l.forcedNode
	if l.node == "" {
		l.node, _ = os.Hostname()
	}
	hello := hub.Hello{
		Rank: l.rank, WorldSize: l.size, LocalRank: l.localRank, PID: os.Getpid(),
		Hostname: l.node, Device: strconv.Itoa(l.device()),
	}
	var g *Group
	switch {
	case l.launcher == LauncherTprun:
		g, err = joinLauncher(ctx, cfg, l, hello)
	case l.cross:
		g, err = joinTCP(ctx, cfg, l, hello, collective)
	default:
		g, err = joinExternal(ctx, cfg, l, hello, collective)
	}
	if err != nil {
		return nil, err
	}
	g.c.SetCollectiveTimeout(collective, collectiveKnob)
	return g, nil
}

// collectiveTimeout is the collective timeout this rank asks for:
// WithCollectiveTimeout's, else TPRUN_COLLECTIVE_TIMEOUT's, else the
// default.
func collectiveTimeout(cfg joinConfig) (time.Duration, error) {
	if cfg.collective != 0 {
		if cfg.collective < 0 {
			return 0, fmt.Errorf("tp: WithCollectiveTimeout(%v): the timeout must be positive", cfg.collective)
		}
		return cfg.collective, nil
	}
	return envDuration(cfg.lookup, EnvCollectiveTimeout, DefaultCollectiveTimeout, "90s or 10m")
}

// envDuration reads the positive duration in variable k (parseSeconds),
// or def when k is unset or blank; example names Go durations for the
// error.
func envDuration(lookup func(string) (string, bool), k string, def time.Duration, example string) (time.Duration, error) {
	v, ok := lookup(k)
	if !ok || strings.TrimSpace(v) == "" {
		return def, nil
	}
	d, err := parseSeconds(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		return 0, &EnvError{Var: k, Value: v, Problem: "not a positive duration (a Go duration such as " + example + ", or a number of seconds)"}
	}
	return d, nil
}

// parseSeconds reads a Go duration, or a plain number as seconds (the unit
// NCCL's and PyTorch's timeout variables use).
func parseSeconds(v string) (time.Duration, error) {
	if f, err := strconv.ParseFloat(v, 64); err == nil {
		if math.IsNaN(f) || f > float64(math.MaxInt64)/float64(time.Second) {
			return 0, fmt.Errorf("%s seconds is too long", v)
		}
		return time.Duration(f * float64(time.Second)), nil
	}
	return time.ParseDuration(v)
}

func joinLauncher(ctx context.Context, cfg joinConfig, l launch, hello hub.Hello) (*Group, error) {
	// The launcher opens its hub before it starts any rank: a missing
	// socket means a stale environment, not a slow start.
	if _, err := os.Stat(l.hubPath); err != nil {
		return nil, &EnvError{Var: "TPRUN_HUB", Value: l.hubPath, Problem: fmt.Sprintf("no hub socket there (is the tprun launcher still running?): %v", err)}
	}
	hello.Token = l.token
	if cfg.timeout != DefaultTimeout {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.timeout)
		defer cancel()
	}
	c, err := hub.Dial(ctx, l.hubPath, hello)
	if err != nil {
		return nil, fmt.Errorf("tp: rank %d of %d joining the tprun launcher's hub: %w", l.rank, l.size, err)
	}
	return &Group{c: c, l: l}, nil
}

// joinExternal: rank 0 hosts the hub at the path derived from the job id;
// everyone, rank 0 included, dials it.
func joinExternal(ctx context.Context, cfg joinConfig, l launch, hello hub.Hello, collective time.Duration) (*Group, error) {
	tmp, _ := cfg.lookup("TMPDIR")
	path, err := hubPath(tmp, os.Getuid(), l.launcher, l.jobID)
	if err != nil {
		return nil, err
	}
	hello.Token = jobToken(os.Getuid(), l.launcher, l.jobID)
	g := &Group{l: l}
	if l.rank == 0 {
		if err := privateDir(filepath.Dir(path)); err != nil {
			return nil, err
		}
		srv, err := hub.Listen(hub.ServerConfig{
			WorldSize:         l.size,
			Token:             hello.Token,
			Path:              path,
			RendezvousTimeout: cfg.timeout,
			Logf:              cfg.logf,
			// Every call carries its rank's own timeout; the hub's
			// matters only for a call that carries none.
			CollectiveTimeout:     collective,
			CollectiveTimeoutKnob: collectiveKnob,
		})
		if err != nil {
			return nil, fmt.Errorf("tp: rank 0 of %s job %q opening the hub: %w", l.launcher, l.jobID, err)
		}
		sctx, stop := context.WithCancel(context.Background())
		g.srv, g.stopServe, g.served = srv, stop, make(chan error, 1)
		go func() { g.served <- srv.Serve(sctx) }()
	}
	// The hub host reports a rendezvous timeout naming the missing ranks;
	// the margin lets that report arrive before this rank gives up.
	dctx, cancel := context.WithTimeout(ctx, cfg.timeout+2*time.Second)
	defer cancel()
	c, err := hub.Dial(dctx, path, hello)
	if err != nil {
		if l.rank != 0 && errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("tp: rank %d of %s job %q: rank 0 did not open the hub at %s within %v: %w",
				l.rank, l.launcher, l.jobID, path, cfg.timeout, err)
		}
		err = fmt.Errorf("tp: rank %d of %d (%s job %q): %w", l.rank, l.size, l.launcher, l.jobID, blameHost(l, l.rank == 0, "", err))
		// On rank 0 the hub it opened goes too; a failure to remove its
		// socket is worth knowing beside the join's own error.
		if herr := g.stopHub(); herr != nil {
			err = errors.Join(err, fmt.Errorf("tp: rank 0 stopping the hub: %w", herr))
		}
		return nil, err
	}
	g.c = c
	return g, nil
}

// hubPath derives the socket path every rank of one job computes alike:
// $TMPDIR/tprun-UID/HASH.sock, or under /tmp when $TMPDIR is too long for
// a socket name.
func hubPath(tmp string, uid int, launcher, jobID string) (string, error) {
	sum := sha256.Sum256([]byte("tprun-hub\x00" + launcher + "\x00" + jobID))
	name := hex.EncodeToString(sum[:8]) + ".sock"
	user := fmt.Sprintf("tprun-%d", uid)
	if tmp == "" {
		tmp = "/tmp"
	}
	p := filepath.Join(tmp, user, name)
	if len(p) > 107 {
		p = filepath.Join("/tmp", user, name)
	}
	if !filepath.IsAbs(p) {
		return "", &EnvError{Var: "TMPDIR", Value: tmp, Problem: "not an absolute path"}
	}
	return p, nil
}

// jobToken is the hello token of a job without the launcher. Every rank
// derives it, so it is no secret: it keeps ranks of different jobs apart,
// while SO_PEERCRED and the 0700 directory keep other users out.
func jobToken(uid int, launcher, jobID string) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("tprun-token\x00%s\x00%s\x00%d", launcher, jobID, uid)))
	return hex.EncodeToString(sum[:])
}

// privateDir makes dir (0700) or checks that the existing one is a real
// directory of ours that nobody else can enter: otherwise another user
// could replace the socket in it.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("tp: making hub directory: %w", err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("tp: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("tp: hub directory %s is not a directory", dir)
	case !ok || int(st.Uid) != os.Getuid():
		return fmt.Errorf("tp: hub directory %s is not owned by uid %d", dir, os.Getuid())
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("tp: hub directory %s has mode %v; it must be private (0700)", dir, fi.Mode().Perm())
	}
	return nil
}

// parseEnv works out the launcher and this rank's place in the job.
func parseEnv(lookup func(string) (string, bool)) (launch, error) {
	e := envReader{lookup: lookup}
	var l launch
	switch {
	case e.has("TPRUN_HUB"):
		l = e.tprun()
	case e.has("RANK"):
		l = e.torchrun()
	case e.has("OMPI_COMM_WORLD_RANK"):
		l = e.mpirun()
	case e.has("SLURM_PROCID"):
		l = e.srun()
	default:
		return launch{}, &EnvError{Var: "TPRUN_HUB", Problem: "not set, nor SLURM_PROCID, OMPI_COMM_WORLD_RANK or RANK: " +
			"this process was not started by tprun, srun, mpirun or torchrun (try tprun --tp N -- CMD)"}
	}
	if e.err != nil {
		return launch{}, e.err
	}
	if devs, ok := e.lookup("TPRUN_DEVICES"); ok && devs != "" {
		l.devices = e.devices(devs)
	}
	if e.err == nil {
		e.check(&l)
	}
	if e.err == nil {
		e.crossNode(&l)
	}
	if e.err != nil {
		return launch{}, e.err
	}
	return l, nil
}

// envReader reads variables and keeps the first problem.
type envReader struct {
	lookup func(string) (string, bool)
	err    error
	// names of the variables rank, size, local rank and local size came
	// from, for error messages
	rankVar, sizeVar, localRankVar, localSizeVar string
}

func (e *envReader) has(k string) bool {
	_, ok := e.lookup(k)
	return ok
}

func (e *envReader) fail(k, v, format string, args ...any) {
	if e.err == nil {
		e.err = &EnvError{Var: k, Value: v, Problem: fmt.Sprintf(format, args...)}
	}
}

// str returns a required variable.
func (e *envReader) str(k, why string) string {
	v, ok := e.lookup(k)
	if !ok || v == "" {
		e.fail(k, "", "not set; %s", why)
	}
	return v
}

// num returns a required non-negative integer.
func (e *envReader) num(k, why string) int {
	v := e.str(k, why)
	if e.err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		e.fail(k, v, "not a non-negative integer")
	}
	return n
}

// optNum returns an optional integer, or def when it is absent.
func (e *envReader) optNum(k string, def int) int {
	if v, ok := e.lookup(k); !ok || v == "" {
		return def
	}
	return e.num(k, "")
}

// same checks that an optional variable, when present, agrees with want.
func (e *envReader) same(k string, want int, from string) {
	v, ok := e.lookup(k)
	if !ok || e.err != nil {
		return
	}
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err != nil || n != want {
		e.fail(k, v, "contradicts %s=%d", from, want)
	}
}

func (e *envReader) names(rank, size, localRank, localSize string) {
	e.rankVar, e.sizeVar, e.localRankVar, e.localSizeVar = rank, size, localRank, localSize
}

func (e *envReader) tprun() launch {
	const why = "the tprun launcher sets it with TPRUN_HUB"
	e.names("TPRUN_RANK", "TPRUN_WORLD_SIZE", "TPRUN_LOCAL_RANK", "LOCAL_WORLD_SIZE")
	l := launch{launcher: LauncherTprun}
	l.hubPath = e.str("TPRUN_HUB", why)
	l.rank = e.num("TPRUN_RANK", why)
	l.size = e.num("TPRUN_WORLD_SIZE", why)
	l.localRank = e.num("TPRUN_LOCAL_RANK", why)
	l.token = e.str("TPRUN_JOB_TOKEN", why)
	l.localSize = e.optNum("LOCAL_WORLD_SIZE", l.size)
	// The torchrun names are set alongside; a mismatch means something
	// between the launcher and us rewrote one set.
	e.same("RANK", l.rank, "TPRUN_RANK")
	e.same("WORLD_SIZE", l.size, "TPRUN_WORLD_SIZE")
	e.same("LOCAL_RANK", l.localRank, "TPRUN_LOCAL_RANK")
	return l
}

func (e *envReader) torchrun() launch {
	const why = "torchrun sets it with RANK"
	e.names("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")
	l := launch{launcher: LauncherTorchrun}
	l.rank = e.num("RANK", why)
	l.size = e.num("WORLD_SIZE", why)
	l.localRank = e.num("LOCAL_RANK", why)
	l.localSize = e.optNum("LOCAL_WORLD_SIZE", l.size)
	// The run id alone is "none" unless --rdzv-id is given, so the master
	// endpoint (a port bound on this node for this run) and the restart
	// count go into the job id too.
	var parts []string
	for _, k := range []string{"TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "MASTER_ADDR", "MASTER_PORT"} {
		v, _ := e.lookup(k)
		parts = append(parts, v)
	}
	if parts[0] == "" && parts[3] == "" {
		e.fail("TORCHELASTIC_RUN_ID", "", "not set, nor MASTER_PORT: no job id to find the hub by")
	}
	l.jobID = strings.Join(parts, "/")
	return l
}

func (e *envReader) mpirun() launch {
	const why = "Open MPI's mpirun sets it with OMPI_COMM_WORLD_RANK"
	e.names("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")
	l := launch{launcher: LauncherMpirun}
	l.rank = e.num("OMPI_COMM_WORLD_RANK", why)
	l.size = e.num("OMPI_COMM_WORLD_SIZE", why)
	l.localRank = e.num("OMPI_COMM_WORLD_LOCAL_RANK", why)
	l.localSize = e.num("OMPI_COMM_WORLD_LOCAL_SIZE", why)
	for _, k := range []string{"OMPI_MCA_orte_ess_jobid", "PMIX_NAMESPACE"} {
		if v, _ := e.lookup(k); v != "" {
			l.jobID = k + "=" + v
			break
		}
	}
	if l.jobID == "" {
		e.fail("OMPI_MCA_orte_ess_jobid", "", "not set, nor PMIX_NAMESPACE: no job id to find the hub by")
	}
	return l
}

func (e *envReader) srun() launch {
	const why = "srun sets it with SLURM_PROCID"
	e.names("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS")
	l := launch{launcher: LauncherSrun}
	l.rank = e.num("SLURM_PROCID", why)
	l.size = e.num("SLURM_NTASKS", why)
	l.localRank = e.num("SLURM_LOCALID", why)
	job := e.str("SLURM_JOB_ID", why)
	// Steps of one job may run side by side on a node.
	if step, _ := e.lookup("SLURM_STEP_ID"); step != "" {
		job += "." + step
	}
	l.jobID = job
	l.localSize = l.size
	node := e.optNum("SLURM_NODEID", 0)
	// The first of these that is set says how many tasks share this node.
	for _, k := range []string{"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"} {
		v, ok := e.lookup(k)
		if !ok || v == "" {
			continue
		}
		e.localSizeVar = k
		counts, err := parseTasksPerNode(v)
		switch {
		case err != nil:
			e.fail(k, v, "%v", err)
		case k == "SLURM_NTASKS_PER_NODE":
			l.localSize = counts[0]
		case node >= len(counts):
			e.fail("SLURM_NODEID", strconv.Itoa(node), "beyond the %d nodes %s lists", len(counts), k)
		default:
			l.localSize = counts[node]
		}
		return l
	}
	return l
}

// parseTasksPerNode expands Slurm's compressed list, e.g. "2(x3),1" into
// [2 2 2 1].
func parseTasksPerNode(s string) ([]int, error) {
	var out []int
	for _, item := range strings.Split(s, ",") {
		count, rep := item, "1"
		if i := strings.Index(item, "(x"); i >= 0 && strings.HasSuffix(item, ")") {
			count, rep = item[:i], item[i+2:len(item)-1]
		}
		c, err1 := strconv.Atoi(count)
		r, err2 := strconv.Atoi(rep)
		if err1 != nil || err2 != nil || c < 1 || r < 1 || r > 1<<16 {
			return nil, fmt.Errorf("cannot read %q as a task count", item)
		}
		for range r {
			out = append(out, c)
		}
	}
	return out, nil
}

func (e *envReader) devices(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		d, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || d < 0 {
			e.fail("TPRUN_DEVICES", s, "%q is not a device index", f)
			return nil
		}
		out = append(out, d)
	}
	return out
}

// check rejects numbers that contradict each other.
func (e *envReader) check(l *launch) {
	switch {
	case l.size < 1 || l.size > hub.MaxWorldSize:
		e.fail(e.sizeVar, strconv.Itoa(l.size), "world size must be in 1..%d", hub.MaxWorldSize)
	case l.rank >= l.size:
		e.fail(e.rankVar, strconv.Itoa(l.rank), "rank is not below %s=%d", e.sizeVar, l.size)
	case l.localSize < 1 || l.localSize > l.size:
		e.fail(e.localSizeVar, strconv.Itoa(l.localSize), "local size must be in 1..%s=%d", e.sizeVar, l.size)
	case l.localRank >= l.localSize:
		e.fail(e.localRankVar, strconv.Itoa(l.localRank), "local rank is not below the local size %d", l.localSize)
	case len(l.devices) > 0 && len(l.devices) < l.localSize:
		e.fail("TPRUN_DEVICES", "", "lists %d devices for %d local ranks", len(l.devices), l.localSize)
	}
}

// device is the GPU this rank should use.
func (l launch) device() int {
	if len(l.devices) > 0 {
		return l.devices[l.localRank]
	}
	return l.localRank
}
