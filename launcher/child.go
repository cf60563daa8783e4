package launcher

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// settleTimeout is how long the supervisor, having reaped a rank whose
// process group is empty, waits for the rank's pipes to reach EOF before it
// looks for who else holds them. The rank closed its ends when it exited,
// so the pumps see EOF within a scheduling delay unless some other process
// still holds a copy.
const settleTimeout = 20 * time.Millisecond

// drainTimeout bounds how long, once every rank was reaped, tprun waits for
// a rank's pipes to reach EOF. What can still hold one then is a process of
// the rank's group that tprun has just SIGKILLed and that has not finished
// dying (a process in uninterruptible sleep, such as a driver call, closes
// its files only when that call returns). Everything it and the rank wrote
// is in the pipe already and is forwarded whether or not EOF comes: the
// wait only lets it close the pipe on its own, and a pipe still held after
// it is read to its end and closed, naming the holder.
const drainTimeout = 500 * time.Millisecond

// spawner starts every child from one OS thread locked for the lifetime of
// the job. The parent-death signal (Pdeathsig) fires when the *thread* that
// forked the child exits, not the process; an unlocked goroutine may fork
// from any thread, and the runtime ends a locked thread when its goroutine
// returns. So: one locked goroutine does every Start and returns only after
// the launcher reaped every child.
type spawner struct {
	reqs chan spawnReq
	quit chan struct{}
	done chan struct{}
}

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan<- error
}

func newSpawner() *spawner {
	s := &spawner{reqs: make(chan spawnReq), quit: make(chan struct{}), done: make(chan struct{})}
	go s.loop()
	return s
}

func (s *spawner) loop() {
	defer close(s.done)
	// Never unlocked: returning with the thread locked makes the runtime
	// end the thread, which is what sends Pdeathsig; by then no child is
	// left to receive it.
	runtime.LockOSThread()
	for {
		select {
		case r := <-s.reqs:
			r.errc <- r.cmd.Start()
		case <-s.quit:
			return
		}
	}
}

func (s *spawner) start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	s.reqs <- spawnReq{cmd: cmd, errc: errc}
	return <-errc
}

// close ends the locked thread; call it only once every child was reaped.
func (s *spawner) close() {
	close(s.quit)
	<-s.done
}

// Status is how a rank process ended.
type Status struct {
	Code       int            // exit code; -1 when killed by a signal
	Signal     syscall.Signal // the signal that killed it, or 0
	CoreDumped bool
}

// Failed reports whether the rank exited non-zero or died by a signal.
func (s Status) Failed() bool { return s.Signal != 0 || s.Code != 0 }

// ExitStatus is the shell convention: the exit code, or 128+signal.
func (s Status) ExitStatus() int {
	if s.Signal != 0 {
		return 128 + int(s.Signal)
	}
	return s.Code
}

func (s Status) String() string {
	if s.Signal != 0 {
		msg := "killed by signal " + signalName(s.Signal)
		if s.CoreDumped {
			msg += " (core dumped)"
		}
		return msg
	}
	return fmt.Sprintf("exit status %d", s.Code)
}

func signalName(sig syscall.Signal) string {
	if n := unix.SignalName(sig); n != "" {
		return n
	}
	return fmt.Sprintf("signal %d", int(sig))
}

func statusOf(ps *os.ProcessState) Status {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	if !ok {
		return Status{Code: ps.ExitCode()}
	}
	if ws.Signaled() {
		return Status{Code: -1, Signal: ws.Signal(), CoreDumped: ws.CoreDump()}
	}
	return Status{Code: ws.ExitStatus()}
}

// child is one rank process. Fields after start are written only by its
// waiter goroutine and read by the supervisor after the child arrives on
// the done channel (the channel send orders the accesses).
type child struct {
	rank    int
	cmd     *exec.Cmd
	pid     int
	tail    *tail
	started time.Time
	outR    *os.File
	errR    *os.File
	// pipes: the inodes of its stdout and stderr pipes (0 when unknown),
	// by which /proc shows who else holds them.
	pipes [2]uint64
	// drained is closed once both pumps have returned: each pipe reached
	// EOF (or was cut off by stopReading) and its lines were written.
	drained chan struct{}
	// exitHold, when set, holds the report of its exit until it is closed
	// (Config.exitHold).
	exitHold <-chan struct{}

	// Set by the waiter.
	ended  time.Time
	status Status
	err    error // a Wait failure other than a non-zero exit

	// Set by the supervisor.
	exited  bool
	stopped bool // tprun sent it SIGTERM while it still ran
	killed  bool // tprun sent it SIGKILL while it still ran
	// suspended: how a process of its group was held when tprun began to
	// stop the job ("" when none was; RankResult.Suspended).
	suspended string
	// afterHub: the hub already blamed another rank when this one was
	// reaped (RankResult.AfterHubFailure).
	afterHub  bool
	hubBlamed int
	// leftovers: what it left running when it ended (killLeftovers).
	leftovers []Leftover
}

// childSpec is what startChild needs to know about one rank.
type childSpec struct {
	rank      int
	path      string   // resolved executable
	argv, env []string // argv[0] as the user wrote it
	dir       string
	out       *output
	log       io.Writer       // the rank's log file, or nil
	exitHold  <-chan struct{} // Config.exitHold
}

// startChild starts the rank's process through sp and its two output
// pumps. The pumps outlive the process when something it started still
// holds a pipe; the job waits for them (job.drain) before its report.
func startChild(sp *spawner, spec childSpec) (*child, error) {
	rank := spec.rank
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("rank %d: stdout pipe: %w", rank, err)
	}
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		outW.Close()
		return nil, fmt.Errorf("rank %d: stderr pipe: %w", rank, err)
	}
	cmd := &exec.Cmd{
		Path:   spec.path,
		Args:   spec.argv,
		Env:    spec.env,
		Dir:    spec.dir,
		Stdout: outW,
		Stderr: errW,
		// Own process group: a terminal's Ctrl-C reaches only tprun, which
		// decides, and a stop signal reaches whatever the rank started.
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	err = sp.start(cmd)
	// The child holds its own copies; ours would keep the pipes from ever
	// reaching EOF.
	outW.Close()
	errW.Close()
	if err != nil {
		outR.Close()
		errR.Close()
		return nil, fmt.Errorf("rank %d: start %s: %w", rank, spec.path, err)
	}
	c := &child{
		rank:     rank,
		cmd:      cmd,
		pid:      cmd.Process.Pid,
		tail:     newTail(TailLines),
		started:  time.Now(),
		outR:     outR,
		errR:     errR,
		pipes:    [2]uint64{pipeInode(outR), pipeInode(errR)},
		drained:  make(chan struct{}),
		exitHold: spec.exitHold,
	}
	prefix := rankPrefix(rank)
	po := &pump{out: spec.out, stream: "stdout", prefix: prefix, log: spec.log, rank: rank}
	pe := &pump{out: spec.out, stream: "stderr", prefix: prefix, log: spec.log, rank: rank, tail: c.tail}
	var left atomic.Int32
	left.Store(2)
	for _, p := range []struct {
		p *pump
		f *os.File
	}{{po, outR}, {pe, errR}} {
		go func() {
			p.p.run(p.f)
			p.f.Close()
			if left.Add(-1) == 0 {
				close(c.drained)
			}
		}()
	}
	return c, nil
}

// pipeInode is f's inode number, or 0.
func pipeInode(f *os.File) uint64 {
	fi, err := f.Stat()
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}

// wait is the one goroutine that waits on the child. It reports the exit
// on done as soon as the process is reaped, whether or not its pipes have
// reached EOF: something the rank started may hold them open for as long
// as it runs, and the rank's peers must not wait for that. The pumps go
// on forwarding; the job waits for them before its report (job.drain),
// so no line the rank wrote is lost.
func (c *child) wait(done chan<- *child) {
	err := c.cmd.Wait()
	c.ended = time.Now()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		c.err = err
	}
	if c.cmd.ProcessState != nil {
		c.status = statusOf(c.cmd.ProcessState)
	} else {
		c.status = Status{Code: -1}
	}
	if c.exitHold != nil {
		<-c.exitHold
	}
	done <- c
}

// drainedWithin reports whether both pumps return within d.
func (c *child) drainedWithin(d time.Duration) bool {
	select {
	case <-c.drained:
		return true
	default:
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.drained:
		return true
	case <-t.C:
		return false
	}
}

// stopReading makes the pumps read what the pipes hold now and return,
// whoever still holds them open (pump.run).
func (c *child) stopReading() {
	now := time.Now()
	_ = c.outR.SetReadDeadline(now)
	_ = c.errR.SetReadDeadline(now)
}

// running reports whether the rank's process has not ended yet. The exit
// reaches the supervisor a moment after the process ended, so exited says
// too little: a rank that died on its own just before tprun stops the job
// must not count as stopped by tprun.
// waitid with WNOWAIT looks without reaping; ECHILD means the waiter has
// reaped it already.
// A process that is exiting has closed its files (so the hub may already
// have seen its connection drop) a moment before it becomes a zombie that
// waitid reports; /proc shows it as exiting from the start of that window.
func (c *child) running() bool {
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, c.pid, &info, unix.WEXITED|unix.WNOHANG|unix.WNOWAIT, nil)
	if err != nil {
		return !errors.Is(err, unix.ECHILD)
	}
	// With WNOHANG and nothing to report, Linux leaves si_signo zero.
	if info.Signo != 0 {
		return false
	}
	exiting, known := procExiting(c.pid)
	return !known || !exiting // without /proc, waitid's answer is all there is
}

// procExiting reports whether every thread of process pid is exiting, as
// /proc shows it, and whether /proc could tell. Every thread, not the
// process's own stat line: a main thread that ended with pthread_exit
// while others run shows as exiting too.
func procExiting(pid int) (exiting, known bool) {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return false, false
	}
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/stat")
		if err != nil {
			continue // the thread is gone: it has exited
		}
		if !statExiting(b) {
			return false, true
		}
	}
	return true, true
}

// pfExiting is the kernel's PF_EXITING task flag (include/linux/sched.h),
// set when a task starts to exit, before it closes its files.
const pfExiting = 0x4

// statFields is the fields of a /proc/PID/stat line after the command
// name (state, ppid, pgrp, ...): the name is in parentheses and may itself
// hold spaces and parentheses, so they start after the last ')'. Nil when
// the line has none.
func statFields(stat []byte) []string {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return nil
	}
	return strings.Fields(string(stat[i+1:]))
}

// statExiting reports whether a /proc/PID/stat line shows a task that is
// exiting or has exited: state Z or X, or PF_EXITING in its flags (the
// ninth field; the command name in parentheses may hold spaces and
// parentheses, so the fields are counted after the last ')').
func statExiting(stat []byte) bool {
	f := statFields(stat)
	if len(f) < 7 {
		return false
	}
	if f[0] == "Z" || f[0] == "X" || f[0] == "x" {
		return true
	}
	flags, err := strconv.ParseUint(f[6], 10, 64)
	return err == nil && flags&pfExiting != 0
}

// failedOnItsOwn reports whether the rank's end was a failure that tprun's
// stop did not cause. A rank tprun signalled while it ran ended because of
// that when it died by tprun's signal or exited (a rank that catches
// SIGTERM and exits non-zero); any other signal, a crash or a SIGKILL tprun
// did not send, is its own.
func (c *child) failedOnItsOwn() bool {
	if !c.status.Failed() {
		return false
	}
	switch c.status.Signal {
	case 0:
		return !c.stopped && !c.killed
	case syscall.SIGTERM:
		return !c.stopped
	case syscall.SIGKILL:
		return !c.killed
	}
	return true
}

// Suspended processes (RankResult.Suspended): state T is a stop signal
// (SIGSTOP, SIGTSTP, or SIGTTIN/SIGTTOU: terminal I/O from the background,
// such as a password prompt on /dev/tty); state t a ptrace stop (a
// debugger, or a profiler or strace for a moment). A suspended rank sends
// nothing, so its peers wait for it until their deadlines: it is often the
// cause of a job that timed out or failed.
const (
	suspendedBySignal = "state T: stopped by SIGSTOP, SIGTSTP, SIGTTIN or SIGTTOU"
	suspendedByTracer = "state t: stopped by a tracer (ptrace: a debugger or profiler)"
)

// procStat is what suspendedGroups reads of one /proc/PID/stat line.
type procStat struct {
	pid, pgrp int
	comm      string
	suspended string // suspendedBySignal, suspendedByTracer or ""
}

// parseStat reads a /proc/PID/stat line: the command name is in
// parentheses and may itself hold spaces and parentheses, so the fields
// are counted after the last ')': state, ppid, pgrp.
func parseStat(stat []byte) (procStat, bool) {
	open, i := bytes.IndexByte(stat, '('), bytes.LastIndexByte(stat, ')')
	if open < 0 || i < open {
		return procStat{}, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(stat[:open])))
	if err != nil {
		return procStat{}, false
	}
	f := statFields(stat)
	if len(f) < 3 {
		return procStat{}, false
	}
	pgrp, err := strconv.Atoi(f[2])
	if err != nil {
		return procStat{}, false
	}
	ps := procStat{pid: pid, pgrp: pgrp, comm: string(stat[open+1 : i])}
	switch f[0] {
	case "T":
		ps.suspended = suspendedBySignal
	case "t":
		ps.suspended = suspendedByTracer
	}
	return ps, true
}

// suspendedGroups scans /proc once and says, for each of the process groups
// pgids (a rank's group id is its pid), how a suspended member is held:
// the group leader (the rank's own process) first, else the lowest pid,
// which is then named ("pid 123 (python) of its process group: ..."), since
// a rank's command may be a wrapper around the process that does the work.
// Groups with no suspended member, or when /proc cannot be read, are not
// in the map.
func suspendedGroups(pgids []int) map[int]string {
	if len(pgids) == 0 {
		return nil
	}
	want := map[int]bool{}
	for _, g := range pgids {
		want[g] = true
	}
	found := map[int]procStat{}
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	for _, e := range dir {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone
		}
		ps, ok := parseStat(b)
		if !ok || ps.suspended == "" || !want[ps.pgrp] {
			continue
		}
		if old, seen := found[ps.pgrp]; !seen || (old.pid != ps.pgrp && (ps.pid == ps.pgrp || ps.pid < old.pid)) {
			found[ps.pgrp] = ps
		}
	}
	out := make(map[int]string, len(found))
	for g, ps := range found {
		if ps.pid == g {
			out[g] = ps.suspended
		} else {
			out[g] = fmt.Sprintf("pid %d (%s) of its process group: %s", ps.pid, ps.comm, ps.suspended)
		}
	}
	return out
}

// groupAlive reports whether the rank's process group still has a member
// (what its command started in the background, once the rank itself ended).
func (c *child) groupAlive() bool { return unix.Kill(-c.pid, 0) == nil }

// signalGroup sends sig to the child's process group, and to the child
// itself should the group be gone already.
func (c *child) signalGroup(sig syscall.Signal) {
	if err := unix.Kill(-c.pid, sig); err != nil {
		_ = c.cmd.Process.Signal(sig)
	}
}
