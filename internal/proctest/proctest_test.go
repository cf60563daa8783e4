package proctest

import (
	"os"
	"os/exec"
	"testing"
	"time"
)

// TestGone: a running child is not gone, an ended one is (zombie, then
// reaped), this process is not.
func TestGone(t *testing.T) {
	c := exec.Command("sleep", "30")
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	pid := c.Process.Pid
	if Gone(pid) || Gone(os.Getpid()) {
		t.Fatal("a running process reads as gone")
	}
	_ = c.Process.Kill()
	WaitGone(t, "sleep", []int{pid}, 2*time.Second) // a zombie until Wait
	_ = c.Wait()
	if !Gone(pid) {
		t.Error("a reaped process reads as alive")
	}
}
