package launcher

import (
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestPumpStopReading: a pump told to stop reading (a read deadline that
// has passed) while its pipe is still held open forwards every byte the
// pipe holds at that moment, the unterminated last line too, and returns
// without waiting for an EOF that would never come.
func TestPumpStopReading(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close() // held open until the pump is done
	var want []string
	var sent strings.Builder
	for i := 0; sent.Len() < 40<<10; i++ {
		l := fmt.Sprintf("line %d %s", i, strings.Repeat("x", rand.IntN(200)))
		want = append(want, l)
		sent.WriteString(l + "\n")
	}
	last := fmt.Sprintf("unterminated %d", rand.Int())
	want = append(want, last)
	sent.WriteString(last)
	if _, err := w.WriteString(sent.String()); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr lockedBuffer
	p := &pump{out: newOutput(&stdout, &stderr), stream: "stdout", prefix: rankPrefix(3), rank: 3}
	if err := r.SetReadDeadline(time.Now()); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { p.run(r); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the pump still reads 5s after it was told to stop")
	}
	got := splitRankLines(t, stdout.String())
	checkLines(t, "stdout", got[3], want)
	if len(got) != 1 || stderr.String() != "" {
		t.Errorf("stray output: %q, stderr %q", got[-1], stderr.String())
	}
}

// TestFindLeftovers: a process of the group and one outside it that hold
// the pipes are named with their command line and which pipe they hold;
// a member of the group holding neither is named too; a process in
// another group holding neither is not.
func TestFindLeftovers(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc here:", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer outR.Close()
	errR, errW, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer errR.Close()
	secs := fmt.Sprint(30 + rand.IntN(30))
	start := func(stdout, stderr *os.File, attr *syscall.SysProcAttr) *exec.Cmd {
		t.Helper()
		c := exec.Command("sleep", secs)
		c.Stdout, c.Stderr, c.SysProcAttr = stdout, stderr, attr
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Process.Kill(); _ = c.Wait() })
		return c
	}
	leader := start(outW, errW, &syscall.SysProcAttr{Setpgid: true})
	pgid := leader.Process.Pid
	quiet := start(nil, nil, &syscall.SysProcAttr{Setpgid: true, Pgid: pgid})
	escaped := start(nil, errW, &syscall.SysProcAttr{Setsid: true})
	stranger := start(nil, nil, &syscall.SysProcAttr{Setpgid: true})
	outW.Close()
	errW.Close()
	pipes := [2]uint64{pipeInode(outR), pipeInode(errR)}
	if pipes[0] == 0 || pipes[1] == 0 {
		t.Fatalf("pipe inodes %v", pipes)
	}
	got := map[int]Leftover{}
	for _, l := range findLeftovers(pgid, pipes) {
		got[l.PID] = l
	}
	cmd := "sleep " + secs
	for _, want := range []Leftover{
		{PID: pgid, Command: cmd, Holds: "stdout and stderr", Killed: true},
		{PID: quiet.Process.Pid, Command: cmd, Killed: true},
		{PID: escaped.Process.Pid, Command: cmd, Holds: "stderr"},
	} {
		if got[want.PID] != want {
			t.Errorf("pid %d: got %+v, want %+v", want.PID, got[want.PID], want)
		}
	}
	if l, ok := got[stranger.Process.Pid]; ok || len(got) != 3 {
		t.Errorf("found %d processes (want 3), the stranger %+v", len(got), l)
	}
	if s := got[escaped.Process.Pid].String(); s != fmt.Sprintf("pid %d (%s) holding its stderr", escaped.Process.Pid, cmd) {
		t.Errorf("String() = %q", s)
	}
}

// TestCommandLine: arguments joined by spaces, control bytes blanked,
// long ones shortened; the name when the line cannot be read.
func TestCommandLine(t *testing.T) {
	arg := fmt.Sprintf("a\nb\x7f%d", rand.Int())
	long := strings.Repeat("é", maxCommand)
	c := exec.Command(os.Args[0], "idle", arg, long)
	c.Env = helperEnviron()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = c.Process.Kill(); _ = c.Wait() }()
	// Start returns once the child has exec'd, which can be before the
	// kernel shows its arguments in /proc: until then commandLine rightly
	// gives the name, so wait for them.
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", c.Process.Pid)); err == nil && len(b) > 0 {
			break
		}
	}
	full := os.Args[0] + " idle " + strings.NewReplacer("\n", " ", "\x7f", " ").Replace(arg) + " " + long
	var want strings.Builder
	for _, r := range full {
		if want.Len()+len(string(r)) > maxCommand {
			break
		}
		want.WriteRune(r)
	}
	want.WriteString("...")
	if got := commandLine(c.Process.Pid, "comm"); got != want.String() {
		t.Errorf("commandLine = %q, want %q", got, want.String())
	}
	if got := commandLine(1<<30, "comm"); got != "comm" {
		t.Errorf("commandLine of no process = %q, want its comm", got)
	}
}
