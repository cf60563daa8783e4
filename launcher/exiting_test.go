package launcher

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
	"time"
)

func TestStatExiting(t *testing.T) {
	for _, tc := range []struct {
		desc, stat string
		want       bool
	}{
		{"running", "1234 (tprun) S 1 1234 1234 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 3 0", false},
		{"exiting: PF_EXITING set", "1234 (tprun) R 1 1234 1234 0 -1 4194564 120 0 0 0 1 2 0 0 20 0 3 0", true},
		{"zombie", "1234 (tprun) Z 1 1234 1234 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 3 0", true},
		{"dead", "1234 (tprun) X 1 1234 1234 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 3 0", true},
		{"name with spaces and parentheses", "1234 (a ) (b) R 1 1234 1234 0 -1 4 120 0", true},
		{"name with spaces, running", "1234 (a ) (b) S 1 1234 1234 0 -1 8 120 0", false},
		{"truncated", "1234 (tprun) R 1 1234", false},
		{"garbage", "no parenthesis here", false},
	} {
		if got := statExiting([]byte(tc.stat)); got != tc.want {
			t.Errorf("%s: statExiting(%q) = %v, want %v", tc.desc, tc.stat, got, tc.want)
		}
	}
}

// A live process counts as running; one that exited but is not reaped yet
// (a zombie) does not.
func TestRunningSeesExit(t *testing.T) {
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc here:", err)
	}
	if statExiting(b) {
		t.Fatalf("this test process reads as exiting: %q", b)
	}
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{pid: cmd.Process.Pid}
	if !c.running() {
		t.Errorf("a sleeping child reads as not running")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for c.running() {
		if time.Now().After(deadline) {
			t.Fatal("the killed child (not reaped) still reads as running after 5s")
		}
		time.Sleep(time.Millisecond)
	}
	st, _ := os.ReadFile("/proc/" + strconv.Itoa(c.pid) + "/stat")
	t.Logf("killed child, not reaped: %q", st)
	_ = cmd.Wait()
}

// This test process has several threads (the Go runtime's), none exiting.
func TestProcExitingSelf(t *testing.T) {
	exiting, known := procExiting(os.Getpid())
	if !known {
		t.Skip("no /proc here")
	}
	if exiting {
		t.Fatal("this running test process reads as exiting")
	}
	if _, known := procExiting(1 << 30); known {
		t.Error("a pid that cannot exist reads as known")
	}
}
