package tp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tprun/tprun/kernel"
)

// groupCollectives lends a Group's collectives to NewExternalGroup, as a
// framework's process group would: the ranks of the tests below are
// processes, and the hub is the framework they share. Nothing of the hub
// reaches the ops made from the ExternalGroup: they watch the job through
// the ExternalGroup alone.
type groupCollectives struct{ g *Group }

func (c groupCollectives) AllGather(ctx context.Context, in, out []byte) error {
	all, err := c.g.AllGather(ctx, in)
	if err != nil {
		return err
	}
	return concatGathered(out, in, all)
}

func (c groupCollectives) Barrier(ctx context.Context) error { return c.g.Barrier(ctx) }

// watchRank is what a rank process of the tests below does (the parent
// passes it as JSON in envWatchRank): join, make an ExternalGroup and a
// host op on it, run steps, and end as Mode says.
type watchRank struct {
	Rank, Size       int
	Tmp, Job         string
	Seed             uint64
	Hidden, Latent   int
	Ms               []int
	Deadline         time.Duration
	Mode             string        // see watchModes
	SlowLast         time.Duration // "step": wait this long before the last step
	ExpectLastToFail bool          // "step": the last step must fail, promptly
}

// The modes of a rank process. Each prints "stepped" once it has run
// every step but the last.
const (
	// watchStep runs the last step too (after SlowLast), reports
	// "result ok" (its blocks matched the reference) or "result <ms>
	// <error>", closes its groups and exits.
	watchStep = "step"
	// watchKill then waits to be killed.
	watchKill = "kill"
	// watchClose runs the last step, closes its op and groups, prints
	// "closed" and exits.
	watchClose = "close"
	// watchAbort waits for a line on stdin, aborts its ExternalGroup with
	// that line as the reason, prints "aborted" and lives on until stdin
	// closes.
	watchAbort = "abort"
)

const envWatchRank = "TPRUN_EXTWATCH_TEST_RANK"

// TestExternalWatchHelperProcess is no test of its own: the tests below
// run the test binary through it as a rank process (envWatchRank).
func TestExternalWatchHelperProcess(t *testing.T) {
	spec := os.Getenv(envWatchRank)
	if spec == "" {
		return
	}
	var w watchRank
	err := json.Unmarshal([]byte(spec), &w)
	if err == nil {
		err = w.run(t, os.Stdin, os.Stdout)
	}
	if err != nil {
		fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " | "))
		os.Exit(2)
	}
	os.Exit(0)
}

// run is a rank's life in a watch test; rank 0 runs it in the test's own
// process, the others in their own (TestExternalWatchHelperProcess).
// Its lines go to out.
func (w watchRank) run(t *testing.T, in io.Reader, out io.Writer) (err error) {
	ctx := context.Background()
	g, err := Join(ctx, WithEnv(srunEnv(w.Tmp, w.Job, w.Rank, w.Size)), WithTimeout(30*time.Second))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, g.Close()) }()
	ext, err := NewExternalGroup(ctx, w.Rank, w.Size, w.Rank, 0, groupCollectives{g})
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, ext.Close()) }()
	if ext.jobContext() == nil {
		return errors.New("the ExternalGroup of processes on one node watches no job (no pidfds here?)")
	}
	const maxM = 9
	up, err := ext.NewUpProjection(ctx, w.Hidden, w.Latent, maxM, WithBackend(BackendHost), WithDeadline(w.Deadline))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, up.Close()) }()
	steps := newUpSteps(t, w.Seed, w.Hidden, w.Latent, w.Ms)
	var got [][]kernel.BF16
	step := func(i int) error {
		o := poisonBlock(maxM*w.Hidden + 3)
		if err := up.Step(ctx, hostInputs(steps[i], w.Rank, w.Size, w.Hidden, w.Latent), o); err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		return keepBlock(i, steps[i].m, w.Hidden, o, &got)
	}
	last := len(steps) - 1
	for i := range last {
		if err := step(i); err != nil {
			return err
		}
	}
	fmt.Fprintln(out, "stepped")
	switch w.Mode {
	case watchKill:
		time.Sleep(time.Minute)
		return errors.New("not killed within a minute")
	case watchClose:
		if err := step(last); err != nil {
			return err
		}
		if err := errors.Join(up.Close(), ext.Close(), g.Close()); err != nil {
			return err
		}
		fmt.Fprintln(out, "closed")
		return nil
	case watchAbort:
		reason, err := bufio.NewReader(in).ReadString('\n')
		if err != nil {
			return fmt.Errorf("reading the abort's reason: %w", err)
		}
		if err := ext.Abort(strings.TrimSpace(reason)); err != nil {
			return err
		}
		fmt.Fprintln(out, "aborted")
		_, _ = io.Copy(io.Discard, in)
		return nil
	case watchStep:
	default:
		return fmt.Errorf("no mode %q", w.Mode)
	}
	time.Sleep(w.SlowLast)
	start := time.Now()
	err = step(last)
	took := time.Since(start)
	switch {
	case err != nil && !w.ExpectLastToFail:
		return err
	case err != nil:
		fmt.Fprintf(out, "result %d %s\n", took.Milliseconds(), strings.ReplaceAll(err.Error(), "\n", " | "))
		return nil
	case w.ExpectLastToFail:
		return errors.New("the last step succeeded")
	}
	for i, d := range steps {
		res, err := d.want.Check(got[i], w.Hidden)
		if err != nil {
			return err
		}
		if res.Wrong > 0 || res.Checked != d.m*w.Hidden {
			return fmt.Errorf("step %d (M=%d): %d of %d wrong, first %v", i, d.m, res.Wrong, res.Checked, res.First)
		}
	}
	fmt.Fprintln(out, "result ok")
	return nil
}

// watchProc is a rank process of a watch test: its lines, and its end.
type watchProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string   // closed when its stdout closes
	exited chan struct{} // closed when it has been waited for
	exitAt time.Time     // when Wait returned; read after exited
	err    error         // Wait's; read after exited
}

// startWatchRank starts rank w.Rank's process; it is killed and waited
// for when the test ends, if it has not ended before.
func startWatchRank(t *testing.T, w watchRank) *watchProc {
	t.Helper()
	spec, err := json.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	p := &watchProc{cmd: exec.Command(os.Args[0], "-test.run=^TestExternalWatchHelperProcess$"),
		lines: make(chan string, 16), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), envWatchRank+"="+string(spec))
	p.cmd.Stderr = os.Stderr
	if p.stdin, err = p.cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		// The lines first, then Wait, which closes stdout.
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
		close(p.lines)
		p.err = p.cmd.Wait()
		p.exitAt = time.Now()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.stdin.Close()
		select {
		case <-p.exited:
		case <-time.After(10 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// line waits for the process's next line (its "error" lines fail t).
func (p *watchProc) line(t *testing.T, rank int) string {
	t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.exited
			t.Fatalf("rank %d's process ended (%v) without a line", rank, p.err)
		}
		if strings.HasPrefix(l, "error ") {
			t.Fatalf("rank %d's process: %s", rank, l)
		}
		return l
	case <-time.After(60 * time.Second):
		t.Fatalf("rank %d's process said nothing for a minute", rank)
	}
	return ""
}

// expectLine fails t unless the process's next line is want.
func (p *watchProc) expectLine(t *testing.T, rank int, want string) {
	t.Helper()
	if l := p.line(t, rank); l != want {
		t.Fatalf("rank %d's process said %q, want %q", rank, l, want)
	}
}

// watchFailure checks a step's error that the job watch ended: it matches
// ErrAborted, names the rank (errors.As a *RankError) and says each of
// words.
func watchFailure(err error, rank int, words ...string) error {
	var re *RankError
	if !errors.Is(err, ErrAborted) || !errors.As(err, &re) || re.Rank != rank {
		return fmt.Errorf("%v: want an error matching ErrAborted that names rank %d (*RankError)", err, rank)
	}
	for _, w := range words {
		if !strings.Contains(err.Error(), w) {
			return fmt.Errorf("%v: want %q in it", err, w)
		}
	}
	return nil
}

// TestExternalGroupWatch: on one node, an op made from an ExternalGroup
// (how framework-spawned workers join) ends a step that waits for a peer
// well under a second after the peer's process is SIGKILLed, or after the
// peer aborts its group (its process living on), or after this rank's own
// Abort, with an error that matches ErrAborted and names the rank (and the
// abort's reason), on every surviving rank; the op's deadline is several
// seconds. A peer that closes its group and exits after its last step,
// while rank 0 still waits for a slower live rank's slice, is no failure:
// the step completes with the right block. The ranks are processes, each
// with fresh inputs drawn from one seed and checked against the float64
// reference.
func TestExternalGroupWatch(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	const deadline = 5 * time.Second
	const prompt = time.Second
	base := watchRank{Seed: seed, Hidden: 96, Latent: 40, Ms: []int{9, 2, 5}, Deadline: deadline}
	// ranks starts ranks 1.. of a group of size in the modes given, and
	// returns rank 0's spec and the processes (index = rank; 0 is nil).
	ranks := func(t *testing.T, modes ...watchRank) (watchRank, []*watchProc) {
		tmp, job := shortTempDir(t), newJobID()
		size := len(modes) + 1
		procs := make([]*watchProc, size)
		spec := func(r int, w watchRank) watchRank {
			s := base
			s.Rank, s.Size, s.Tmp, s.Job = r, size, tmp, job
			s.Mode, s.SlowLast, s.ExpectLastToFail = w.Mode, w.SlowLast, w.ExpectLastToFail
			return s
		}
		for i, m := range modes {
			procs[i+1] = startWatchRank(t, spec(i+1, m))
		}
		return spec(0, watchRank{}), procs
	}
	// rank0 runs rank 0 in this process up to its last step and returns
	// the op's last step, which the caller runs.
	type rank0 struct {
		last func() error
		ext  *ExternalGroup
		done func() error // closes everything
	}
	start0 := func(t *testing.T, w watchRank) rank0 {
		ctx := context.Background()
		g, err := Join(ctx, WithEnv(srunEnv(w.Tmp, w.Job, 0, w.Size)), WithTimeout(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ext, err := NewExternalGroup(ctx, 0, w.Size, 0, 0, groupCollectives{g})
		if err != nil {
			t.Fatal(errors.Join(err, g.Close()))
		}
		up, err := ext.NewUpProjection(ctx, w.Hidden, w.Latent, 9, WithBackend(BackendHost), WithDeadline(w.Deadline))
		if err != nil {
			t.Fatal(errors.Join(err, ext.Close(), g.Close()))
		}
		steps := newUpSteps(t, w.Seed, w.Hidden, w.Latent, w.Ms)
		var got [][]kernel.BF16
		step := func(i int) error {
			o := poisonBlock(9*w.Hidden + 3)
			if err := up.Step(ctx, hostInputs(steps[i], 0, w.Size, w.Hidden, w.Latent), o); err != nil {
				return err
			}
			return keepBlock(i, steps[i].m, w.Hidden, o, &got)
		}
		done := func() error { return errors.Join(up.Close(), ext.Close(), g.Close()) }
		for i := range len(steps) - 1 {
			if err := step(i); err != nil {
				t.Fatal(errors.Join(fmt.Errorf("rank 0: step %d: %w", i, err), done()))
			}
		}
		return rank0{ext: ext, done: done, last: func() error {
			if err := step(len(steps) - 1); err != nil {
				return err
			}
			checkBlocks(t, steps, [][][]kernel.BF16{got}, w.Hidden)
			return nil
		}}
	}
	// lastFails runs rank 0's last step, which act (run once the step
	// waits) makes fail, and checks that it failed within prompt of act,
	// naming rank and words.
	lastFails := func(t *testing.T, r0 rank0, act func(), rank int, words ...string) {
		t.Helper()
		actedAt := make(chan time.Time, 1)
		timer := time.AfterFunc(200*time.Millisecond, func() {
			actedAt <- time.Now()
			act()
		})
		defer timer.Stop()
		err := r0.last()
		ended := time.Now()
		var acted time.Time
		select {
		case acted = <-actedAt:
		default:
			t.Fatalf("rank 0's last step ended before the failure: %v", err)
		}
		if err := watchFailure(err, rank, words...); err != nil {
			t.Error(err)
		}
		if took := ended.Sub(acted); took > prompt {
			t.Errorf("rank 0's last step failed %v after the failure, want under %v (the op's deadline is %v): %v", took, prompt, deadline, err)
		} else {
			t.Logf("rank 0's last step failed %v after the failure: %v", took.Round(time.Millisecond), err)
		}
	}
	// survivor checks the "result" line of a rank process whose last step
	// was to fail: promptly (well before the deadline), naming rank.
	survivor := func(t *testing.T, p *watchProc, r, rank int, words ...string) {
		t.Helper()
		var ms int
		var msg string
		l := p.line(t, r)
		if _, err := fmt.Sscanf(l, "result %d", &ms); err != nil {
			t.Fatalf("rank %d's process said %q, want its last step's failure", r, l)
		}
		msg = l
		for _, w := range append([]string{fmt.Sprintf("rank %d (pid", rank)}, words...) {
			if !strings.Contains(msg, w) {
				t.Errorf("rank %d's last step: %q, want %q in it", r, msg, w)
			}
		}
		if time.Duration(ms)*time.Millisecond > deadline/2 {
			t.Errorf("rank %d's last step failed after %d ms; the op's deadline is %v", r, ms, deadline)
		}
	}

	t.Run("peer killed", func(t *testing.T) {
		before := openFDs(t)
		w0, p := ranks(t, watchRank{Mode: watchKill}, watchRank{Mode: watchStep, ExpectLastToFail: true})
		r0 := start0(t, w0)
		p[1].expectLine(t, 1, "stepped")
		p[2].expectLine(t, 2, "stepped")
		pid := p[1].cmd.Process.Pid
		lastFails(t, r0, func() { _ = p[1].cmd.Process.Signal(syscall.SIGKILL) }, 1,
			fmt.Sprintf("rank 1 (pid %d) exited without closing its group", pid))
		survivor(t, p[2], 2, 1, "exited without closing its group")
		if err := r0.done(); err != nil {
			t.Error(err)
		}
		for _, q := range p[1:] {
			<-q.exited
		}
		sameFDs(t, before)
	})

	t.Run("peer aborted", func(t *testing.T) {
		before := openFDs(t)
		w0, p := ranks(t, watchRank{Mode: watchAbort}, watchRank{Mode: watchStep, ExpectLastToFail: true})
		r0 := start0(t, w0)
		p[1].expectLine(t, 1, "stepped")
		p[2].expectLine(t, 2, "stepped")
		reason := fmt.Sprintf("test: the engine of rank 1 shuts down (%x)", seed)
		lastFails(t, r0, func() { _, _ = fmt.Fprintln(p[1].stdin, reason) }, 1,
			fmt.Sprintf("rank 1 (pid %d) aborted its group: %s", p[1].cmd.Process.Pid, reason))
		p[1].expectLine(t, 1, "aborted")
		survivor(t, p[2], 2, 1, "aborted its group: "+reason)
		// The aborted rank's process lives on until it is done.
		select {
		case <-p[1].exited:
			t.Errorf("rank 1's process ended (%v) before it was told to", p[1].err)
		default:
		}
		if err := r0.done(); err != nil {
			t.Error(err)
		}
		_ = p[1].stdin.Close()
		for _, q := range p[1:] {
			<-q.exited
		}
		sameFDs(t, before)
	})

	t.Run("own abort", func(t *testing.T) {
		before := openFDs(t)
		w0, p := ranks(t, watchRank{Mode: watchStep, SlowLast: 1500 * time.Millisecond, ExpectLastToFail: true})
		r0 := start0(t, w0)
		p[1].expectLine(t, 1, "stepped")
		reason := fmt.Sprintf("test: rank 0 stops (%x)", seed)
		lastFails(t, r0, func() { _ = r0.ext.Abort(reason) }, 0, "rank 0 (pid", "aborted its group: "+reason)
		// Rank 1 comes to its last step only after its SlowLast: by then
		// the job has failed, and the step fails at once.
		survivor(t, p[1], 1, 0, "aborted its group: "+reason)
		if err := r0.done(); err != nil {
			t.Error(err)
		}
		<-p[1].exited
		sameFDs(t, before)
	})

	t.Run("peer closed and exited", func(t *testing.T) {
		before := openFDs(t)
		const slow = 1500 * time.Millisecond
		w0, p := ranks(t, watchRank{Mode: watchClose}, watchRank{Mode: watchStep, SlowLast: slow})
		r0 := start0(t, w0)
		p[1].expectLine(t, 1, "stepped")
		p[2].expectLine(t, 2, "stepped")
		start := time.Now()
		if err := r0.last(); err != nil {
			t.Fatalf("rank 0's last step, while rank 2 was slow: %v", err)
		}
		if took := time.Since(start); took < slow/2 {
			t.Fatalf("rank 0's last step took %v: it did not wait for the slow rank", took)
		}
		// Every rank's last step ends once the slow rank's slice has
		// landed: rank 1 closes and exits within moments of rank 0's
		// step ending, while rank 2 has still to close. Once rank 0's
		// watch has judged rank 1's exit, its job must still stand.
		p[1].expectLine(t, 1, "closed")
		<-p[1].exited
		if p[1].err != nil {
			t.Fatalf("rank 1's process: %v", p[1].err)
		}
		judged := time.Now()
		for r0.ext.watch.judged.Load() < 1 {
			if time.Since(judged) > 5*time.Second {
				t.Fatal("rank 0's job watch did not judge rank 1's exit within 5s")
			}
			time.Sleep(time.Millisecond)
		}
		if err := r0.ext.jobContext().Err(); err != nil {
			t.Fatalf("rank 1 closed its group and exited, and rank 0's job failed: %v", context.Cause(r0.ext.jobContext()))
		}
		p[2].expectLine(t, 2, "result ok")
		if err := r0.done(); err != nil {
			t.Error(err)
		}
		<-p[2].exited
		if p[2].err != nil {
			t.Errorf("rank 2's process: %v", p[2].err)
		}
		sameFDs(t, before)
	})
}

// TestFDWatchDrain: the job watch takes what arrives while this rank is in
// no descriptor call (its listener wakes it) and keeps it exactly as a
// call would: descriptors sent for later calls (a root that runs ahead)
// are delivered to those calls, in order, with the sender's contents; and
// calls that run while the watch drains (a rank ahead of or behind the
// other, at random) all complete right. A watched rank's process that
// then ends without its notice fails the job at once, naming it. Nothing
// leaks.
//
// Both ranks are this process; the watch is given a child process to
// watch as rank 1's, so that it runs while the route's calls do.
func TestFDWatchDrain(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	before := openFDs(t)
	r0, key, peers := selfRoute(t, 10*time.Second)
	r1, err := listenFDs(1, peers, key, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r1.close()
	stand := holdProcess(t)
	pidfd, err := unix.PidfdOpen(stand.Process.Pid, 0)
	if err != nil {
		t.Skipf("no pidfds here: %v", err)
	}
	r0.pidfds[1] = pidfd // the route closes it
	w := watchFDs(r0)
	if w == nil {
		t.Fatal("no job watch on a route with a pidfd")
	}
	defer w.stop()
	ctx := context.Background()
	content := func() []byte {
		b := make([]byte, 1+rng.IntN(300))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		return b
	}

	// Rank 1 broadcasts three calls ahead of rank 0, which makes no call
	// meanwhile: the watch takes them from the backlog.
	const ahead = 3
	want := make([][]byte, ahead)
	srcs := make([]int, 0, ahead)
	t.Cleanup(func() { closeAll(srcs) })
	for i := range want {
		want[i] = content()
		fd, err := memfd(want[i])
		if err != nil {
			t.Fatal(err)
		}
		srcs = append(srcs, fd)
		got, err := r1.broadcast(ctx, 1, []int{srcs[i]})
		if err != nil {
			t.Fatalf("rank 1's broadcast #%d: %v", i, err)
		}
		closeAll(got)
	}
	start := time.Now()
	for {
		r0.mu.Lock()
		kept, queued := len(r0.early), r0.queued()
		r0.mu.Unlock()
		if kept == ahead && !queued {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("the watch kept %d of %d calls sent early (backlog not empty: %v) after 5s", kept, ahead, queued)
		}
		time.Sleep(time.Millisecond)
	}
	for i := range want {
		got, err := r0.broadcast(ctx, 1, nil)
		if err != nil {
			t.Fatalf("broadcast #%d, sent early and drained by the watch: %v", i, err)
		}
		if len(got) != 1 {
			closeAll(got)
			t.Fatalf("broadcast #%d: %d descriptors, want 1", i, len(got))
		}
		err = sameFile(got[0], srcs[i], want[i])
		closeAll(got)
		if err != nil {
			t.Fatalf("broadcast #%d: %v", i, err)
		}
	}

	// Calls of both ranks, one or the other ahead, while the watch drains.
	routes := []*fdRoute{r0, r1}
	for round := range 20 {
		data := [][]byte{content(), content()}
		root := rng.IntN(2)
		lag := []time.Duration{time.Duration(rng.IntN(3)) * time.Millisecond, time.Duration(rng.IntN(3)) * time.Millisecond}
		errs := make([]error, 2)
		var wg sync.WaitGroup
		for r := range 2 {
			wg.Go(func() {
				errs[r] = func() error {
					time.Sleep(lag[r])
					fd, err := memfd(data[r])
					if err != nil {
						return err
					}
					defer unix.Close(fd)
					got, err := routes[r].allGather(ctx, fd)
					if err != nil {
						return fmt.Errorf("AllGatherFDs: %w", err)
					}
					defer closeAll(got)
					for q, g := range got {
						b, err := pread(g)
						if err != nil || !bytes.Equal(b, data[q][:min(len(data[q]), len(b))]) || len(b) != min(len(data[q]), 128) {
							return fmt.Errorf("AllGatherFDs: rank %d's descriptor reads %d bytes that differ (%v)", q, len(b), err)
						}
					}
					time.Sleep(lag[1-r])
					var pass []int
					if r == root {
						pass = []int{fd}
					}
					bc, err := routes[r].broadcast(ctx, root, pass)
					if err != nil {
						return fmt.Errorf("BroadcastFDs from %d: %w", root, err)
					}
					defer closeAll(bc)
					if len(bc) != 1 {
						return fmt.Errorf("BroadcastFDs from %d: %d descriptors", root, len(bc))
					}
					if b, err := pread(bc[0]); err != nil || !bytes.Equal(b, data[root][:len(b)]) || len(b) != min(len(data[root]), 128) {
						return fmt.Errorf("BroadcastFDs from %d: reads %d bytes that differ (%v)", root, len(b), err)
					}
					return nil
				}()
			})
		}
		wg.Wait()
		for r, err := range errs {
			if err != nil {
				t.Fatalf("round %d, rank %d: %v", round, r, err)
			}
		}
	}
	if err := w.job.Err(); err != nil {
		t.Fatalf("the job failed while every rank ran: %v", context.Cause(w.job))
	}

	// The process watched as rank 1's ends without its notice.
	killed := time.Now()
	if err := stand.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-w.job.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the job did not fail within 5s of rank 1's process ending")
	}
	if took := time.Since(killed); took > time.Second {
		t.Errorf("the job failed %v after rank 1's process ended", took)
	}
	if err := watchFailure(context.Cause(w.job), 1, "rank 1 (pid", "exited without closing its group"); err != nil {
		t.Error(err)
	}
	w.stop()
	if err := errors.Join(r1.close(), r0.close()); err != nil {
		t.Fatal(err)
	}
	_ = stand.Wait()
	closeAll(srcs)
	srcs = nil
	sameFDs(t, before)
}

// FuzzDecodeFDHeader: a connection's header, whatever its bytes, decodes
// without a panic; one that is accepted encodes back to the same bytes,
// names a kind a rank sends, and announces a body only for an abort, of
// at most maxReason bytes.
func FuzzDecodeFDHeader(f *testing.F) {
	secret := make([]byte, fdKeyLen/2)
	for i := range secret {
		secret[i] = byte(rand.Uint32())
	}
	for _, h := range []fdHeader{{seq: 3, kind: fdAllGather, count: 1}, {seq: 9, kind: fdBroadcast, root: 2, count: 4},
		{kind: fdLeft}, {seq: 1, kind: fdAborted, body: 12}, {kind: fdGaveUp}, {kind: 9}, {kind: fdLeft, body: 5}} {
		f.Add(h.encode(secret, 1))
	}
	old := fdHeader{kind: fdLeft}.encode(secret, 1)
	old[len(fdMagic)-1] = '1'
	f.Add(old)
	f.Fuzz(func(t *testing.T, b []byte) {
		h, from, why := decodeFDHeader(b, secret)
		if why != "" {
			return
		}
		if back := h.encode(secret, from); !bytes.Equal(back, b) {
			t.Fatalf("%x decodes to %+v from %d, which encodes to %x", b, h, from, back)
		}
		if h.kind < fdAllGather || h.kind > fdAborted || (h.body != 0 && h.kind != fdAborted) || h.body > maxReason {
			t.Fatalf("%x accepted as %+v", b, h)
		}
	})
}

// TestFDHeaderRefusals: a header of another version of the route, or with
// the wrong secret, or one that announces a body other than an abort's
// reason, is refused, saying why; an abort's reason is announced.
func TestFDHeaderRefusals(t *testing.T) {
	secret := make([]byte, fdKeyLen/2)
	for i := range secret {
		secret[i] = byte(rand.Uint32())
	}
	old := fdHeader{kind: fdLeft}.encode(secret, 1)
	old[len(fdMagic)-1]--
	other := bytes.Clone(secret)
	other[rand.IntN(len(other))] ^= 1 << rand.IntN(8)
	for _, tc := range []struct {
		desc string
		b    []byte
		why  string
	}{
		{"another version", old, "speaks version"},
		{"another secret", fdHeader{kind: fdLeft}.encode(other, 1), "did not present the group's secret"},
		{"a body after a close", fdHeader{kind: fdLeft, body: 3}.encode(secret, 1), "announced 3 bytes after a header of a group's end"},
		{"a reason too long", fdHeader{kind: fdAborted, body: maxReason + 1}.encode(secret, 1), "announced"},
		{"an unknown kind", fdHeader{kind: fdAborted + 1}.encode(secret, 1), "unknown kind"},
		{"an abort", fdHeader{seq: 7, kind: fdAborted, body: 40}.encode(secret, 2), ""},
	} {
		h, from, why := decodeFDHeader(tc.b, secret)
		switch {
		case tc.why == "" && (why != "" || h.kind != fdAborted || h.body != 40 || h.seq != 7 || from != 2):
			t.Errorf("%s: %+v from %d, refused as %q", tc.desc, h, from, why)
		case tc.why != "" && !strings.Contains(why, tc.why):
			t.Errorf("%s: refused as %q, want %q", tc.desc, why, tc.why)
		}
	}
}

// TestExternalGroupInterruptedCallNotice: Close or Abort while this rank's
// descriptor call waits tells the peers what it is (a closed group, or an
// abort with its reason), not that the interrupted call gave up: a peer's
// job watch takes a closed group's later exit for the job's end, and
// names an abort's reason.
func TestExternalGroupInterruptedCallNotice(t *testing.T) {
	for _, how := range []string{"Close", "Abort"} {
		t.Run(how, func(t *testing.T) {
			before := openFDs(t)
			reason := fmt.Sprintf("test: the engine stops (%x)", rand.Uint64())
			want := notice{kind: fdLeft}
			if how == "Abort" {
				want = notice{kind: fdAborted, reason: reason}
			}
			site := func(int) externalSite { return externalSite{host: "h", node: "one node", timeout: 20 * time.Second} }
			left := make(chan struct{}) // rank 0 closed or aborted its group
			errs := onExternalRanksAt(2, same, site, func(r int, g *ExternalGroup) error {
				if r == 1 {
					select {
					case <-left:
					case <-time.After(10 * time.Second):
						return errors.New("rank 0 did not leave within 10s")
					}
					// What rank 0 said is in this rank's backlog: take it as
					// the job watch would.
					g.fds.mu.Lock()
					defer g.fds.mu.Unlock()
					g.fds.drain()
					if got, ok := g.fds.left[0]; !ok || got != want {
						return fmt.Errorf("rank 0's %s during its call told this rank %q (noted: %v), want %q", how, got, ok, want)
					}
					// A call that waits for rank 0 fails, naming it, its pid and
					// what it said.
					err := g.fds.hasLeft([]int{0}, map[int][]int{})
					if says := fmt.Sprintf("rank 0 (pid %d) took no part in this call: it %s", os.Getpid(), want); err == nil || !strings.Contains(err.Error(), says) {
						return fmt.Errorf("a call waiting for rank 0 after its %s: %v, want %q in it", how, err, says)
					}
					return nil
				}
				defer close(left)
				fd, err := memfd([]byte{byte(rand.Uint32())})
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				called := make(chan error, 1)
				go func() {
					got, err := g.AllGatherFDs(context.Background(), fd)
					closeAll(got)
					called <- err
				}()
				time.Sleep(200 * time.Millisecond)
				herr := closeOrAbort(g, how, reason)
				if err := <-called; err == nil {
					return fmt.Errorf("AllGatherFDs interrupted by %s succeeded", how)
				}
				return herr
			})
			noErrors(t, errs)
			sameFDs(t, before)
		})
	}
}

// TestFDRouteOlderVersionNamed: a rank of a build whose route speaks the
// first version, whose header is shorter than this one's, is refused as a
// rank of another build, not as one that sent no header.
func TestFDRouteOlderVersionNamed(t *testing.T) {
	r0, _, _ := selfRoute(t, 10*time.Second)
	old := fdHeader{seq: rand.Uint64(), kind: fdLeft}.encode(r0.secret, 1)
	old = old[:len(old)-4] // the first version had no body length
	old[len(fdMagic)-1] = '1'
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: r0.name(0), Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write(old); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := r0.ln.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	a, err := r0.ln.AcceptUnix()
	if err != nil {
		t.Fatal(err)
	}
	_, fds, _, why, err := r0.admit(context.Background(), time.Now().Add(5*time.Second), a)
	closeAll(fds)
	if err != nil || !strings.Contains(why, `speaks version '1' of the descriptor route, this rank '2'`) {
		t.Fatalf("a first-version header refused as %q (%v), want it named as another version", why, err)
	}
}
