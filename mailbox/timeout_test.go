package mailbox

import (
	"strings"
	"testing"
	"time"
)

// TestTimeoutErrorWaited: the wait is given in milliseconds, or finer when
// it was shorter than one (never "0s" for a wait that happened).
func TestTimeoutErrorWaited(t *testing.T) {
	for _, tc := range []struct {
		waited time.Duration
		want   string
	}{
		{1500 * time.Millisecond, "after 1.5s"},
		{10*time.Second + 400*time.Microsecond, "after 10s"},
		{2400 * time.Microsecond, "after 2ms"},
		{37 * time.Microsecond, "after 37µs"},
		{1234 * time.Nanosecond, "after 1µs"},
		{300 * time.Nanosecond, "after 300ns"},
	} {
		e := &TimeoutError{Rank: 0, Step: 3, Slot: 1, Missing: []int{1}, Waited: tc.waited}
		if got := e.Error(); !strings.HasSuffix(got, "no slice from rank 1 "+tc.want) {
			t.Errorf("waited %v: %q, want it to end %q", tc.waited, got, tc.want)
		}
	}
}
