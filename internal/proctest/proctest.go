// Package proctest holds the process checks that the tests of the launcher
// and of tprun share: whether a process is gone, and waiting until a set of
// them is.
package proctest

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Gone reports whether pid is absent or a zombie (ended, not yet reaped).
func Gone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	i := bytes.LastIndexByte(b, ')')
	return i < 0 || i+2 >= len(b) || b[i+2] == 'Z' || b[i+2] == 'X'
}

// WaitGone fails t for each of pids (what names them in the message) still
// alive after within, and kills it.
func WaitGone(t testing.TB, what string, pids []int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, pid := range pids {
		for !Gone(pid) {
			if time.Now().After(deadline) {
				t.Errorf("%s pid %d still alive %s later", what, pid, within)
				_ = syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
