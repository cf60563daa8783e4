package launcher

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tprun/tprun/internal/hub"
)

// Exit statuses Run picks when no rank failed on its own: tprun stopped the
// job, or (ExitOutputLost) lost some of its output.
const (
	ExitTimeout  = 124 // --timeout ran out, as timeout(1)
	ExitInternal = 1   // ctx cancelled, or the hub failed
	// ExitOutputLost: every rank succeeded, but some of the job's output
	// could not be written (Result.OutputLost), as cat(1) exits 1 on a
	// write error.
	ExitOutputLost = 1
)

// Result is how a job ended.
type Result struct {
	// ExitStatus is what tprun should exit with: 0 when every rank
	// succeeded; else the first failing rank's exit code (128+signal when a
	// signal killed it); 128+signal when tprun was signalled (141, SIGPIPE,
	// when its stdout or stderr was closed); ExitTimeout after --timeout;
	// ExitInternal for a cancelled ctx or a hub failure; ExitOutputLost
	// when every rank succeeded but some output could not be written.
	ExitStatus int
	// FirstFailed is the first rank whose own end was a failure: it exited
	// non-zero or died by a signal, and not because tprun was stopping the
	// job. That is the first such rank tprun reaped, unless the hub saw
	// another one fail earlier (its connection dropped before that rank
	// was reaped) and that one's end was a failure of its own too. A rank
	// that left the hub cleanly or exited 0 is never named, nor one tprun
	// signalled while it still ran. -1 when no rank failed on its own.
	FirstFailed int
	// StopReason says why tprun stopped the job; empty when the ranks ran
	// to their end.
	StopReason string
	// Ranks holds one entry per rank, index = rank.
	Ranks []RankResult
	// NeverJoined lists the ranks that never said hello to the hub, when
	// some other rank did (the job uses the hub): a rendezvous that could
	// not complete names them. Nil otherwise.
	NeverJoined []int
	// OutputLost lists, in the order they failed, the destinations of the
	// job's output (the ranks' lines and tprun's own messages) that a write
	// failed on, with the first error: "stdout (write /dev/stdout: no
	// space left on device)", "the log files of ranks 0-3 (...)". A closed
	// pipe is not one of them (it stops the job). Nothing more was written
	// there, and the job went on; when no rank failed and tprun did not
	// stop the job, ExitStatus is ExitOutputLost.
	OutputLost []string
}

// RankResult is how one rank ended.
type RankResult struct {
	Rank, PID int
	Status    Status
	Duration  time.Duration
	Ended     time.Time // when tprun saw its process end
	Stopped   bool      // tprun sent its process group SIGTERM while it ran
	Killed    bool      // tprun sent its process group SIGKILL while it ran
	// Suspended: how its process, or another of its process group, was
	// suspended when tprun began to stop the job, as /proc showed it
	// ("state T: stopped by SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU", "state
	// t: stopped by a tracer (...)", or "pid N (comm) of its process group:
	// state T: ..."); "" when none was. tprun sends SIGCONT with its
	// SIGTERM, so a rank suspended by a stop signal still ends gracefully.
	Suspended string
	Tail      []string // its last stderr lines, oldest first
	// AfterHubFailure: when it ended, the hub had already ended the job
	// for the failure of rank HubBlamed (and so failed the calls it waited
	// in). HubBlamed means nothing without it.
	AfterHubFailure bool
	HubBlamed       int
	// Leftovers: what it left running when it ended (killed with its
	// process group, or out of its reach) and which of them held its
	// output open; tprun also says so on stderr the moment it reaps the
	// rank. What a rank tprun stopped left in its group is not listed:
	// tprun's SIGTERM went to it too.
	Leftovers []Leftover
}

// Run starts cfg.WorldSize ranks, supervises them to the end and writes the
// exit report on cfg.Stderr. It returns an error only when the job could not
// start: wrapped ErrConfig for bad input (no rank started), ErrPreflight,
// an *InterruptedError (a signal during Preflight) or ctx's error when ctx
// ended during it, ErrStart, or a hub failure. Every rank it started is
// reaped and the hub directory removed before it returns.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	logs, err := openLogs(cfg.LogDir, cfg.WorldSize)
	if err != nil {
		return nil, err
	}
	defer closeLogs(logs)
	out := newOutput(cfg.Stdout, cfg.Stderr)
	if len(cfg.Devices) > cfg.WorldSize {
		out.writeErr(fmt.Sprintf("tprun: --devices lists %d GPUs; the %d ranks use the first %d (%s)\n",
			len(cfg.Devices), cfg.WorldSize, cfg.WorldSize, strings.Join(cfg.Devices[:cfg.WorldSize], ",")))
	}
	if cfg.Preflight != nil && !cfg.SkipTopologyCheck {
		notice, err := runPreflight(ctx, cfg)
		if notice != "" {
			out.writeErr("tprun: " + notice + "\n")
		}
		var ie *InterruptedError
		if errors.As(err, &ie) || (err != nil && ctx.Err() != nil) {
			return nil, err
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrPreflight, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	// Set once tprun stops the job (job.stop). From then on the hub's
	// failure lines are the stop's own doing (ranks leaving, or giving up
	// the collectives tprun's signal cancelled), and the report says what
	// happened: they are not printed.
	stopping := new(atomic.Bool)
	srv, err := cfg.listen(hubConfig{
		WorldSize:         cfg.WorldSize,
		Token:             token,
		RendezvousTimeout: cfg.RendezvousTimeout,
		Logf: func(format string, args ...any) {
			// The hub logs a job failure as the error itself
			// (hub.ErrAborted matches every kind of it).
			if stopping.Load() && len(args) == 1 {
				if e, ok := args[0].(error); ok && errors.Is(e, hub.ErrAborted) {
					return
				}
			}
			msg := fmt.Sprintf(format, args...)
			// The hub's messages name the hub themselves.
			out.writeErr("tprun: " + msg + "\n")
		},
	})
	if err != nil {
		return nil, fmt.Errorf("open rendezvous hub: %w", err)
	}
	// The hub outlives a cancelled ctx: ranks still being stopped must get
	// clean errors from it rather than a vanished socket.
	hubCtx, stopHub := context.WithCancel(context.WithoutCancel(ctx))
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(hubCtx) }()

	j := &job{cfg: cfg, out: out, srv: srv, firstSeen: -1, hubFirst: -1, serveErr: serveErr, stopping: stopping}
	res, runErr := j.run(ctx, token, logs)

	stopHub()
	if !j.serveDone {
		if err := <-serveErr; err != nil && !errors.Is(err, context.Canceled) {
			out.writeErr(fmt.Sprintf("tprun: hub: %v\n", err))
		}
	}
	if err := srv.Close(); err != nil {
		out.writeErr(fmt.Sprintf("tprun: closing hub: %v\n", err))
	}
	return res, runErr
}

// runPreflight runs cfg.Preflight on a goroutine of its own and returns
// early, with an *InterruptedError, when a signal arrives first (or ctx's
// error when ctx ends first). The check calls NVML, whose calls cannot be
// cancelled: on a GPU in a bad state its init can take minutes, and tprun,
// which catches SIGINT, could not be stopped by Ctrl-C meanwhile. The
// goroutine is then left to finish or to end with the process; it touches
// nothing of Run's but its buffered channel.
func runPreflight(ctx context.Context, cfg Config) (string, error) {
	type result struct {
		notice string
		err    error
	}
	done := make(chan result, 1)
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		notice, err := cfg.Preflight(pctx, cfg)
		done <- result{notice, err}
	}()
	sigs := cfg.Signals
	for {
		select {
		case r := <-done:
			return r.notice, r.err
		case s, ok := <-sigs:
			if !ok {
				sigs = nil // closed: no signal will come
				continue
			}
			sig, _ := s.(syscall.Signal)
			return "", &InterruptedError{Signal: sig}
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
}

func newToken() (string, error) {
	b := make([]byte, 16)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("job token: %w", err)
	}
	return hex.EncodeToString(b), nil
}

func openLogs(dir string, n int) ([]*os.File, error) {
	if dir == "" {
		return nil, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, &ConfigError{Field: "--log-dir", Value: dir, Rule: "cannot create directory", Err: err}
	}
	logs := make([]*os.File, 0, n)
	for r := 0; r < n; r++ {
		name := filepath.Join(dir, "rank-"+strconv.Itoa(r)+".log")
		f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			closeLogs(logs)
			return nil, &ConfigError{Field: "--log-dir", Value: dir, Rule: "not writable", Err: err}
		}
		logs = append(logs, f)
	}
	return logs, nil
}

func closeLogs(logs []*os.File) {
	for _, f := range logs {
		_ = f.Close()
	}
}

// job is the supervisor's state; only the goroutine running job.run
// touches it.
type job struct {
	cfg      Config
	out      *output
	srv      hubServer
	children []*child
	running  int

	stopping   *atomic.Bool // tprun is stopping the job; the hub's log callback reads it too
	stopReason string
	stopStatus int  // exit status when no rank failed first
	firstSeen  int  // first rank reaped with a failure before the stop, or -1
	hubFirst   int  // the rank the hub blamed by then, or -1; see firstFailed
	hubLeft    bool // the hub blamed hubFirst only for leaving

	serveErr  <-chan error // the hub's Serve result; nil once received
	serveDone bool         // serveErr was received by supervise
}

func (j *job) printf(format string, args ...any) {
	j.out.writeErr("tprun: " + fmt.Sprintf(format, args...) + "\n")
}

func (j *job) run(ctx context.Context, token string, logs []*os.File) (*Result, error) {
	sp := newSpawner()
	defer sp.close()
	done := make(chan *child, j.cfg.WorldSize)
	for r := 0; r < j.cfg.WorldSize; r++ {
		spec := childSpec{
			rank: r, path: j.cfg.path, argv: j.cfg.Command,
			env: rankEnv(j.cfg.Env, r, j.cfg.WorldSize, j.srv.Path(), token, j.cfg.Devices),
			dir: j.cfg.Dir, out: j.out,
		}
		if j.cfg.exitHold != nil {
			spec.exitHold = j.cfg.exitHold(r)
		}
		if logs != nil {
			spec.log = logs[r]
		}
		c, err := startChild(sp, spec)
		if err != nil {
			// Nothing useful can run with a rank missing: kill what started.
			j.stopping.Store(true)
			j.stopReason = "a rank failed to start"
			j.killAll()
			j.reap(done)
			j.drain()
			return nil, fmt.Errorf("%w: %w", ErrStart, err)
		}
		j.children = append(j.children, c)
		j.running++
		go c.wait(done)
	}
	j.supervise(ctx, done)
	j.drain()
	// Every pump is done: the log files are closed here, so that an error
	// only their close reports is in the result too.
	for r, f := range logs {
		j.out.closeLog(f, r)
	}
	res := j.result()
	j.report(res)
	return res, nil
}

// killLeftovers kills what rank c left running in its process group (its
// command's background processes) once c itself has been reaped, and says
// so, naming them and which of them hold c's stdout or stderr open: a job
// leaves nothing behind, whether it succeeded or not. Right after the
// reap, so that the group id (c's pid) cannot have been reused yet. A
// process outside the group that holds c's output open is named too but
// not signalled; its output is forwarded until the job ends (job.drain).
// It costs one scan of /proc, and only when c's group still has a member
// or c's pipes did not reach EOF at once.
func (j *job) killLeftovers(c *child) {
	alive := c.groupAlive()
	if !alive && c.drainedWithin(settleTimeout) {
		return
	}
	// Before the kill: a killed process may vanish from /proc at once.
	found := findLeftovers(c.pid, c.pipes)
	if alive {
		c.signalGroup(syscall.SIGKILL)
	}
	var killed, outside []Leftover
	for _, l := range found {
		switch {
		case !l.Killed:
			outside = append(outside, l)
		case !c.stopped:
			// tprun's SIGTERM went to the whole group of a rank it
			// stopped: what is left there was told to go and may simply
			// not have died yet. Not worth a line.
			killed = append(killed, l)
		}
	}
	c.leftovers = append(killed, outside...)
	if alive && !c.stopped {
		j.printf("rank %d left processes running in its process group when it ended; killed them", c.rank)
		for _, l := range killed {
			j.out.writeErr("tprun:   " + l.String() + "\n")
		}
	}
	if len(outside) > 0 {
		j.printf("rank %d left processes running outside its process group, not killed; their output is forwarded until the job ends: %s",
			c.rank, joinLeftovers(outside))
	}
}

// joinLeftovers lists ls on one line.
func joinLeftovers(ls []Leftover) string {
	parts := make([]string, len(ls))
	for i, l := range ls {
		parts[i] = l.String()
	}
	return strings.Join(parts, ", ")
}

// drain ends the output pumps once every rank was reaped, so that every
// line is out before the report. A pipe held by a process outside the
// rank's group (which tprun did not kill) would never reach EOF: it is read
// to its end at once. The others get up to drainTimeout to reach EOF; one
// still held then is read to its end too, and its holders are named.
func (j *job) drain() {
	cut := make([]bool, len(j.children))
	for i, c := range j.children {
		for _, l := range c.leftovers {
			if !l.Killed && l.Holds != "" {
				c.stopReading()
				cut[i] = true
				break
			}
		}
	}
	timer := time.NewTimer(drainTimeout)
	defer timer.Stop()
	expired := false
	for i, c := range j.children {
		if !cut[i] && !expired {
			select {
			case <-c.drained:
				continue
			case <-timer.C:
				expired = true
			}
		}
		select {
		case <-c.drained:
			continue
		default:
		}
		if !cut[i] {
			var holders []Leftover
			for _, l := range findLeftovers(-1, c.pipes) {
				if l.Holds != "" {
					holders = append(holders, l)
				}
			}
			who := "a process tprun cannot see in /proc"
			if len(holders) > 0 {
				who = joinLeftovers(holders)
			}
			j.printf("rank %d's output was still held open %s after the job ended, by %s; stopped reading it", c.rank, drainTimeout, who)
			c.stopReading()
		}
		<-c.drained
	}
}

// reap waits for every running child without supervising it.
func (j *job) reap(done <-chan *child) {
	for ; j.running > 0; j.running-- {
		c := <-done
		c.exited = true
	}
}

func (j *job) supervise(ctx context.Context, done <-chan *child) {
	var timeout <-chan time.Time
	if j.cfg.Timeout > 0 {
		t := time.NewTimer(j.cfg.Timeout)
		defer t.Stop()
		timeout = t.C
	}
	var grace <-chan time.Time
	var graceTimer *time.Timer
	defer func() {
		if graceTimer != nil {
			graceTimer.Stop()
		}
	}()
	startStop := func(reason string, status int) {
		if j.stop(reason, status) {
			graceTimer = time.NewTimer(j.cfg.Grace)
			grace = graceTimer.C
		}
	}
	ctxDone := ctx.Done()
	sigs := j.cfg.Signals
	for j.running > 0 {
		select {
		case c := <-done:
			j.running--
			c.exited = true
			// Asked before this rank's own failure reaches the hub (Abort
			// below): a hub that already blames another rank has failed
			// the calls this rank waited in, if it joined the hub at all
			// (ranks that never use the hub fail on their own).
			if r, _ := hubBlame(j.srv); r >= 0 && r != c.rank && hubJoined(j.srv, c.rank) {
				c.afterHub, c.hubBlamed = true, r
			}
			if c.err != nil {
				j.printf("rank %d: wait: %v", c.rank, c.err)
			}
			if c.status.Failed() {
				// Peers blocked in hub calls must not wait for a rank that
				// will never answer. A rank tprun stopped is not blamed:
				// its peers are being stopped too, and an abort would
				// reach them as a failure instead of their own stop.
				if !c.stopped {
					j.srv.Abort(c.rank, c.status.String())
				}
				if !j.stopping.Load() {
					// Nothing was signalled yet: this failure is c's own.
					j.firstSeen = c.rank
					j.hubFirst, j.hubLeft = hubBlame(j.srv)
					startStop(fmt.Sprintf("rank %d %s", c.rank, c.status), c.status.ExitStatus())
				}
			}
			// A rank that ended without joining (a failure is aborted
			// above) fails a rendezvous its peers would otherwise wait
			// out to the timeout; one that joined, or a job that never
			// uses the hub, the hub leaves alone.
			j.srv.Exited(c.rank, c.status.String())
			// Whatever the rank left running in its process group goes
			// with it, now: later, the group's id could be another's.
			j.killLeftovers(c)
		case <-grace:
			grace = nil
			j.killAll()
		case s, ok := <-sigs:
			if !ok {
				// A closed channel is no signal; without this it would
				// read as "signal 0" on every turn of the loop.
				sigs = nil
				continue
			}
			sig, _ := s.(syscall.Signal)
			if j.stopping.Load() {
				j.printf("got %s again, killing all ranks", signalName(sig))
				grace = nil
				j.killAll()
				continue
			}
			j.printf("got %s, stopping all ranks (again to kill at once)", signalName(sig))
			startStop("tprun got "+signalName(sig), 128+int(sig))
		case <-j.out.lost:
			// A full disk or /dev/full: nothing more is written there,
			// but the job goes on (the report and the exit status say so
			// at the end). Said on stderr, never on stdout, which may be
			// the job's data; if stderr is what failed, only the exit
			// status can tell.
			for _, l := range j.out.announce() {
				j.printf("output lost: %s; nothing more is written there, the job goes on", l)
			}
		case name := <-j.out.broken:
			// Whoever read tprun's output has gone (`tprun ... | head`):
			// stop as for SIGPIPE, which is what would have ended tprun
			// had it not caught it, and its ranks with it.
			if !j.stopping.Load() {
				j.printf("%s closed (broken pipe), stopping all ranks", name)
				startStop("tprun's "+name+" was closed (broken pipe)", 128+int(syscall.SIGPIPE))
			}
		case <-timeout:
			timeout = nil
			j.printf("job timed out after %s, stopping all ranks", j.cfg.Timeout)
			startStop("timed out after "+j.cfg.Timeout.String(), ExitTimeout)
		case <-ctxDone:
			ctxDone = nil
			startStop("cancelled: "+ctx.Err().Error(), ExitInternal)
		case err := <-j.serveErr:
			j.serveDone = true
			j.serveErr = nil
			if err != nil {
				j.printf("hub failed: %v", err)
				startStop("hub failed", ExitInternal)
			}
		}
	}
}

// stop begins a graceful stop unless one is under way: SIGTERM to the
// process group of every running rank. It reports whether it started one.
func (j *job) stop(reason string, status int) bool {
	if j.stopping.Load() {
		return false
	}
	j.stopping.Store(true)
	j.stopReason, j.stopStatus = reason, status
	// Which ranks' process groups hold a suspended process, read before
	// any signal: one scan of /proc for the whole job.
	var groups []int
	for _, c := range j.children {
		if !c.exited {
			groups = append(groups, c.pid)
		}
	}
	suspended := suspendedGroups(groups)
	for _, c := range j.children {
		if !c.exited {
			// A rank that already ended (not yet reaped) is not stopped
			// by tprun: how it ended is its own. Its group still gets the
			// signal, for whatever it left behind.
			c.stopped = c.running()
			if c.stopped {
				c.suspended = suspended[c.pid]
			}
			c.signalGroup(syscall.SIGTERM)
			// A stopped process (SIGSTOP, SIGTSTP) acts on SIGTERM only once
			// it runs again: without SIGCONT it would hold the job for
			// the whole grace period, then die by SIGKILL without
			// cleaning up. systemd does the same.
			c.signalGroup(syscall.SIGCONT)
		}
	}
	return true
}

// firstFailed picks the rank to name as failing first, once every rank is
// reaped. The first rank reaped with a failure failed on its own (tprun
// had signalled nobody yet), but the hub can know better: it sees a rank's
// connection drop (or its abort) the moment it happens and fails its
// peers' calls, and one of those peers may be reaped before the rank that
// caused it, which may still be tearing down when tprun stops the job. So
// the hub's rank wins when it ended in any failure, tprun's signal
// included, unless the hub blames it only for leaving: a clean goodbye is
// no failure, and that rank wins only when its end was a failure of its
// own (not tprun's signal, not exit 0). A hub rank that exited 0 never
// wins: its status would make tprun exit 0 for a failed job.
func (j *job) firstFailed() int {
	if r := j.hubFirst; r >= 0 && r < len(j.children) {
		c := j.children[r]
		if (j.hubLeft && c.failedOnItsOwn()) || (!j.hubLeft && c.status.Failed()) {
			return r
		}
	}
	return j.firstSeen
}

func (j *job) killAll() {
	for _, c := range j.children {
		if c.exited {
			continue
		}
		if c.running() {
			c.killed = true
		}
		c.signalGroup(syscall.SIGKILL)
	}
}

func (j *job) result() *Result {
	res := &Result{FirstFailed: j.firstFailed(), StopReason: j.stopReason}
	for _, c := range j.children {
		res.Ranks = append(res.Ranks, RankResult{
			Rank: c.rank, PID: c.pid, Status: c.status,
			Duration: c.ended.Sub(c.started), Ended: c.ended,
			Stopped: c.stopped, Killed: c.killed, Suspended: c.suspended,
			Tail:            c.tail.get(),
			AfterHubFailure: c.afterHub,
			HubBlamed:       c.hubBlamed,
			Leftovers:       c.leftovers,
		})
	}
	if h, ok := j.srv.(hubHellos); ok {
		var never []int
		for _, c := range j.children {
			if !h.SaidHello(c.rank) {
				never = append(never, c.rank)
			}
		}
		if len(never) < len(j.children) {
			res.NeverJoined = never
		}
	}
	res.OutputLost = j.out.lostOutputs()
	switch {
	case res.FirstFailed >= 0:
		res.ExitStatus = j.children[res.FirstFailed].status.ExitStatus()
	case j.stopping.Load():
		res.ExitStatus = j.stopStatus
	case len(res.OutputLost) > 0:
		res.ExitStatus = ExitOutputLost
	}
	return res
}
