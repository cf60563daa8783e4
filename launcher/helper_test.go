package launcher

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tprun/tprun/internal/hub"
)

// The test binary doubles as the rank program (go-plugin's
// TestHelperProcess idea): with helperEnv set, TestMain runs helperMain
// instead of the tests. The helper's behaviour is chosen by its arguments
// and the HELPER_* variables of its environment.
const helperEnv = "TPRUN_LAUNCHER_TEST_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		os.Exit(helperMain(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// helperCommand is the argv that makes a child run helperMain(mode, args).
func helperCommand(mode string, args ...string) []string {
	return append([]string{os.Args[0], mode}, args...)
}

// helperEnviron is the base environment for helper ranks, plus extra.
func helperEnviron(extra ...string) []string {
	return append(append(os.Environ(), helperEnv+"=1"), extra...)
}

func helperMain(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "helper: no mode")
		return 99
	}
	rank, _ := strconv.Atoi(os.Getenv("TPRUN_RANK"))
	switch args[0] {
	case "env":
		for _, k := range []string{"TPRUN_RANK", "TPRUN_WORLD_SIZE", "TPRUN_LOCAL_RANK", "TPRUN_HUB",
			"TPRUN_JOB_TOKEN", "TPRUN_DEVICES", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE",
			"CUDA_VISIBLE_DEVICES", "HELPER_MARK"} {
			v, ok := os.LookupEnv(k)
			if !ok {
				v = "<unset>"
			}
			fmt.Printf("%s=%s\n", k, v)
		}
		return 0
	case "output":
		return helperOutput(rank, args[1:])
	case "job":
		return helperJob(rank)
	case "launch":
		return helperLaunch(args[1:])
	case "hub":
		return helperHub(rank)
	case "linger":
		return helperLinger(rank)
	case "idle":
		time.Sleep(30 * time.Second)
		return 0
	}
	fmt.Fprintf(os.Stderr, "helper: unknown mode %q\n", args[0])
	return 99
}

// pausedRank reports whether rank's pid file is in dir and /proc shows that
// process stopped.
func pausedRank(dir string, rank int) bool {
	b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("pid-%d", rank)))
	if err != nil {
		return false
	}
	if _, err := strconv.Atoi(string(b)); err != nil {
		return false
	}
	st, err := os.ReadFile("/proc/" + string(b) + "/stat")
	if err != nil {
		return false
	}
	ps, ok := parseStat(st)
	return ok && ps.suspended != ""
}

// helperOutput writes: a long line of n bytes on stdout, interleaved short
// lines on stdout and stderr from two goroutines, and an unterminated last
// line on each stream.
func helperOutput(rank int, args []string) int {
	n, _ := strconv.Atoi(args[0])
	w := bufio.NewWriterSize(os.Stdout, 4096) // small buffer: the long line arrives in pieces
	fmt.Fprintf(w, "long %d ", rank)
	for i := 0; i < n; i++ {
		w.WriteByte('a' + byte((i+rank)%26))
	}
	w.WriteByte('\n')
	w.Flush()
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 200; i++ {
			fmt.Fprintf(os.Stderr, "err %d line %d of rank %d\n", rank, i, rank)
		}
	}()
	for i := 0; i < 200; i++ {
		fmt.Fprintf(os.Stdout, "out %d line %d of rank %d\n", rank, i, rank)
	}
	<-done
	fmt.Fprintf(os.Stdout, "last out %d", rank)
	fmt.Fprintf(os.Stderr, "last err %d", rank)
	return 0
}

// helperJob is a configurable rank:
//
//	HELPER_IGNORE_TERM=1  ignore SIGTERM (only SIGKILL ends it)
//	HELPER_SYNC_DIR       each rank creates ready-R there once set up; the
//	                      failing rank waits for all of them first
//	HELPER_FAIL_RANK      the rank that fails (none when unset)
//	HELPER_FAIL_CODE      its exit code, or "kill" to SIGKILL itself
//	HELPER_SLEEP          how long the other ranks live (default 30s)
//	HELPER_PAUSE_RANK     a rank that writes its pid to pid-R in
//	                      HELPER_SYNC_DIR, then stops itself (SIGSTOP); the
//	                      failing rank waits until /proc shows it stopped
func helperJob(rank int) int {
	if os.Getenv("HELPER_IGNORE_TERM") == "1" {
		signal.Ignore(syscall.SIGTERM)
	}
	fmt.Printf("pid %d\n", os.Getpid())
	fmt.Printf("hub %s\n", os.Getenv("TPRUN_HUB"))
	n, _ := strconv.Atoi(os.Getenv("TPRUN_WORLD_SIZE"))
	dir := os.Getenv("HELPER_SYNC_DIR")
	if dir != "" {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("ready-%d", rank)), nil, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 98
		}
	}
	pauseRank, perr := strconv.Atoi(os.Getenv("HELPER_PAUSE_RANK"))
	if perr == nil && rank == pauseRank {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("pid-%d", rank)), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 98
		}
		syscall.Kill(os.Getpid(), syscall.SIGSTOP)
	}
	failRank, err := strconv.Atoi(os.Getenv("HELPER_FAIL_RANK"))
	if err == nil && rank == failRank {
		for dir != "" && !allReady(dir, n) {
			time.Sleep(5 * time.Millisecond)
		}
		for perr == nil && !pausedRank(dir, pauseRank) {
			time.Sleep(5 * time.Millisecond)
		}
		for i := 0; i < 25; i++ {
			fmt.Fprintf(os.Stderr, "failing line %d\n", i)
		}
		code := os.Getenv("HELPER_FAIL_CODE")
		if code == "kill" {
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
			time.Sleep(time.Minute)
		}
		c, _ := strconv.Atoi(code)
		return c
	}
	d := 30 * time.Second
	if s := os.Getenv("HELPER_SLEEP"); s != "" {
		d, _ = time.ParseDuration(s)
	}
	time.Sleep(d)
	return 0
}

// helperLinger: rank HELPER_LINGER_RANK starts a process that inherits its
// stdout and stderr and outlives it (helper mode "idle"): in its process
// group, or with HELPER_LINGER_SETSID=1 in a session of its own, out of
// the reach of a signal to the rank's group. It prints "holder <pid>",
// waits until every rank's ready-R is in HELPER_SYNC_DIR, writes
// HELPER_LINGER_LINES numbered lines on stdout and on stderr, prints
// "dying <unix ns>" and ends: exit 1, or SIGKILL with HELPER_LINGER_END=kill.
// Every other rank creates ready-R and waits for SIGTERM, then prints
// "term <unix ns>" and dies by it.
func helperLinger(rank int) int {
	dir := os.Getenv("HELPER_SYNC_DIR")
	victim, _ := strconv.Atoi(os.Getenv("HELPER_LINGER_RANK"))
	if rank != victim {
		term := make(chan os.Signal, 1)
		signal.Notify(term, syscall.SIGTERM)
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("ready-%d", rank)), nil, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 98
		}
		select {
		case <-term:
		case <-time.After(30 * time.Second):
			return 97
		}
		fmt.Printf("term %d\n", time.Now().UnixNano())
		signal.Reset(syscall.SIGTERM)
		syscall.Kill(os.Getpid(), syscall.SIGTERM)
		time.Sleep(time.Minute)
		return 96
	}
	hold := exec.Command(os.Args[0], "idle")
	hold.Stdout, hold.Stderr = os.Stdout, os.Stderr
	if os.Getenv("HELPER_LINGER_SETSID") == "1" {
		hold.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := hold.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "hold:", err)
		return 95
	}
	fmt.Printf("holder %d\n", hold.Process.Pid)
	n, _ := strconv.Atoi(os.Getenv("TPRUN_WORLD_SIZE"))
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("ready-%d", rank)), nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 98
	}
	for !allReady(dir, n) {
		time.Sleep(5 * time.Millisecond)
	}
	lines, _ := strconv.Atoi(os.Getenv("HELPER_LINGER_LINES"))
	for i := 0; i < lines; i++ {
		fmt.Fprintf(os.Stdout, "out line %d\n", i)
		fmt.Fprintf(os.Stderr, "err line %d\n", i)
	}
	fmt.Printf("dying %d\n", time.Now().UnixNano())
	if os.Getenv("HELPER_LINGER_END") == "kill" {
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
		time.Sleep(time.Minute)
	}
	return 1
}

func allReady(dir string, n int) bool {
	for r := 0; r < n; r++ {
		if _, err := os.Stat(filepath.Join(dir, fmt.Sprintf("ready-%d", r))); err != nil {
			return false
		}
	}
	return true
}

// helperLaunch is a launcher process (what tprun is) for tests that must
// signal or kill the launcher itself: Run with n helperJob ranks.
func helperLaunch(args []string) int {
	n, _ := strconv.Atoi(args[0])
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	res, err := Run(context.Background(), Config{
		WorldSize: n,
		Command:   helperCommand("job"),
		Grace:     500 * time.Millisecond,
		Signals:   sigs,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return res.ExitStatus
}

// helperHub is a rank that uses the hub the way tp.Join does: hello,
// barrier, all-gather of its pid (checked against the hellos). Then, with
// HELPER_VICTIM=V: rank V prints "killed-at <unix ns>" and SIGKILLs itself,
// and every other rank, blocked in a barrier V never joins, prints
// "barrier-failed <unix ns> rank <R named by the error>" and exits 3.
// HELPER_IGNORE_TERM=1 keeps them alive through the launcher's SIGTERM so
// that the hub's abort is what ends their call.
//
// HELPER_VICTIM_END changes how V ends: "exit5" (exit 5 without saying
// goodbye), "term" (SIGTERM to itself), "leave" (a clean Close, then it
// lives on until signalled), "leave-exit0" and "leave-exit7" (a clean
// Close, then that exit code).
// HELPER_PEER_DELAY makes the others wait that long after their barrier
// failed, so that V ends before they do.
// HELPER_NOJOIN_RANK=R makes rank R exit 0 at once, without a hello; the
// others then print "dial-failed <error>" and exit 10.
func helperHub(rank int) int {
	if r, err := strconv.Atoi(os.Getenv("HELPER_NOJOIN_RANK")); err == nil && r == rank {
		fmt.Println("leaving without a hello")
		return 0
	}
	if os.Getenv("HELPER_IGNORE_TERM") == "1" {
		signal.Ignore(syscall.SIGTERM)
	}
	if r, err := strconv.Atoi(os.Getenv("HELPER_LATE_RANK")); err == nil {
		if r == rank {
			fmt.Println("late")
			time.Sleep(30 * time.Second) // tprun stops the job first
			return 0
		}
		fmt.Println("dialing")
	}
	n, _ := strconv.Atoi(os.Getenv("TPRUN_WORLD_SIZE"))
	local, _ := strconv.Atoi(os.Getenv("TPRUN_LOCAL_RANK"))
	host, _ := os.Hostname()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := hub.Dial(ctx, os.Getenv("TPRUN_HUB"), hub.Hello{
		Rank: rank, WorldSize: n, LocalRank: local, PID: os.Getpid(),
		Hostname: host, Token: os.Getenv("TPRUN_JOB_TOKEN"),
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		fmt.Println("dial-failed", err)
		return 10
	}
	defer c.Close()
	if err := c.Barrier(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "barrier:", err)
		return 11
	}
	all, err := c.AllGather(ctx, []byte(strconv.Itoa(os.Getpid())))
	if err != nil {
		fmt.Fprintln(os.Stderr, "allgather:", err)
		return 12
	}
	peers := c.Peers()
	for r, b := range all {
		if string(b) != strconv.Itoa(peers[r].PID) {
			fmt.Fprintf(os.Stderr, "rank %d sent pid %s, said hello as %d\n", r, b, peers[r].PID)
			return 13
		}
	}
	fmt.Printf("gathered %d pids\n", len(all))
	if os.Getenv("HELPER_STOP_WAIT") == "1" {
		// Like a rank program stopped by tprun in a collective: SIGTERM
		// cancels the ctx of the barrier every rank but 0 waits in.
		sctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
		defer stop()
		fmt.Println("waiting")
		if rank == 0 {
			<-sctx.Done()
			return 4
		}
		err := c.Barrier(sctx)
		fmt.Fprintln(os.Stderr, "barrier:", err)
		return 5
	}
	victim, err := strconv.Atoi(os.Getenv("HELPER_VICTIM"))
	if err != nil {
		return 0
	}
	if rank == victim {
		time.Sleep(300 * time.Millisecond) // let the others block
		fmt.Printf("killed-at %d\n", time.Now().UnixNano())
		switch os.Getenv("HELPER_VICTIM_END") {
		case "exit5":
			os.Exit(5) // no deferred Close: no goodbye
		case "term":
			syscall.Kill(os.Getpid(), syscall.SIGTERM)
		case "leave", "leave-exit0", "leave-exit7":
			if err := c.Close(); err != nil {
				fmt.Fprintln(os.Stderr, "close:", err)
				return 16
			}
			if code, ok := strings.CutPrefix(os.Getenv("HELPER_VICTIM_END"), "leave-exit"); ok {
				n, _ := strconv.Atoi(code)
				return n
			}
		default:
			syscall.Kill(os.Getpid(), syscall.SIGKILL)
		}
		time.Sleep(time.Minute)
		return 17
	}
	err = c.Barrier(ctx)
	now := time.Now().UnixNano()
	if d, perr := time.ParseDuration(os.Getenv("HELPER_PEER_DELAY")); perr == nil {
		time.Sleep(d)
	}
	var re *hub.RankError
	if !errors.As(err, &re) || !errors.Is(err, hub.ErrAborted) {
		fmt.Fprintf(os.Stderr, "barrier without rank %d: %v\n", victim, err)
		return 14
	}
	fmt.Printf("barrier-failed %d rank %d\n", now, re.Rank)
	return 3
}

// splitRankLines groups "[rank K] text" lines by K; other lines go to -1.
func splitRankLines(t *testing.T, out string) map[int][]string {
	t.Helper()
	m := map[int][]string{}
	for _, l := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		rest, ok := strings.CutPrefix(l, "[rank ")
		if !ok {
			m[-1] = append(m[-1], l)
			continue
		}
		num, text, ok := strings.Cut(rest, "] ")
		k, err := strconv.Atoi(num)
		if !ok || err != nil {
			t.Fatalf("malformed prefix in %q", l)
		}
		m[k] = append(m[k], text)
	}
	return m
}
