package mailbox

import (
	"context"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Sentinel is the word every mailbox word holds while it waits for data:
// +0 in the low bf16, -0 in the high one. Sanitized data never equals it.
const Sentinel uint32 = 0x80000000

// negZero is bf16 -0.
const negZero = 0x8000

// sanitizeWord turns each -0 half of a packed bf16 pair into +0, so that no
// stored word can be the Sentinel (whose high half is -0). -0 and +0 compare
// equal, so the data's meaning is unchanged.
func sanitizeWord(w uint32) uint32 {
	if w&0xFFFF == negZero {
		w &^= negZero
	}
	if w>>16 == negZero {
		w &^= negZero << 16
	}
	return w
}

// pack puts element 2i (lo) and 2i+1 (hi) into one word in memory order.
func pack(lo, hi uint16) uint32 { return uint32(lo) | uint32(hi)<<16 }

// wordsOf views a mapped region as 32-bit words. The region comes from mmap,
// so it is page aligned; its length is a multiple of 64 (Layout.Bytes).
// Every access through the result must be sync/atomic.
func wordsOf(region []byte) []uint32 {
	if len(region) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(region))), len(region)/4)
}

// slotWords is the part of a mailbox's words that step uses with m rows:
// the m-row region of its slot.
func (l Layout) slotWords(words []uint32, step uint64, m int) []uint32 {
	base := l.StepOffset(step, m) / 4
	return words[base : base+m*l.Hidden/2]
}

// sliceWords is the words of rank's slice in row row of region, the words
// of one region of a slot.
func (l Layout) sliceWords(region []uint32, rank, row int) []uint32 {
	return region[l.Element(row, rank, 0)/2:][:l.Shard/2]
}

// fillSentinel stores the Sentinel into every word.
func fillSentinel(words []uint32) {
	for i := range words {
		atomic.StoreUint32(&words[i], Sentinel)
	}
}

// storeSlice stores rank's slice (m rows of l.Shard elements) into slot, the
// first m*Hidden/2 words of a slot. One atomic store per word: a reader
// sees the whole pair or the Sentinel.
func (l Layout) storeSlice(slot []uint32, rank, m int, slice []uint16) {
	for row := 0; row < m; row++ {
		dst := l.sliceWords(slot, rank, row)
		src := slice[row*l.Shard:][:l.Shard]
		for j := range dst {
			atomic.StoreUint32(&dst[j], sanitizeWord(pack(src[2*j], src[2*j+1])))
		}
	}
}

// missingRanks lists, ascending, the ranks that still have a Sentinel word
// in the first m rows of slot.
func (l Layout) missingRanks(slot []uint32, m int) []int {
	var missing []int
	for r := 0; r < l.Size; r++ {
	rows:
		for row := 0; row < m; row++ {
			ws := l.sliceWords(slot, r, row)
			for j := range ws {
				if atomic.LoadUint32(&ws[j]) == Sentinel {
					missing = append(missing, r)
					break rows
				}
			}
		}
	}
	return missing
}

// OtherRows lists the ranks that stored a slice for another row count than
// m into slot: they ran the step with another M. slot is one whole slot of
// a mailbox (SlotBytes/4 words, read with plain loads, so a snapshot copied
// from a device will do). A rank is listed once, with the first other row
// count found. A word in another row count's own region names that count.
// In the shared region (row counts past OwnRegionRows) the rows a rank
// stored name it: rows 0..k-1 complete and nothing past them is a rank
// that ran k rows; it is listed when k is not m (a rank still storing
// could look the same, but the diagnosis is made only after a deadline).
func (l Layout) OtherRows(slot []uint32, m int) []RankRows {
	var other []RankRows
	for r := 0; r < l.Size; r++ {
		found := 0
	regions:
		for rows := 1; rows <= min(l.Capacity, OwnRegionRows); rows++ {
			if rows == m {
				continue
			}
			region := slot[l.RegionOffset(rows)/4:]
			for row := 0; row < rows; row++ {
				for _, w := range l.sliceWords(region, r, row) {
					if w != Sentinel {
						found = rows
						break regions
					}
				}
			}
		}
		if found == 0 && l.Capacity > OwnRegionRows {
			region := slot[l.RegionOffset(l.Capacity)/4:]
			if k := l.storedRows(region, r); k > 0 && k != m {
				found = k
			}
		}
		if found != 0 {
			other = append(other, RankRows{Rank: r, M: found})
		}
	}
	return other
}

// storedRows is k when rank r's slice in the shared region has rows
// 0..k-1 complete and no word stored past them, else 0.
func (l Layout) storedRows(region []uint32, r int) int {
	state := func(row int) (some, all bool) {
		all = true
		for _, w := range l.sliceWords(region, r, row) {
			written := w != Sentinel
			some = some || written
			all = all && written
		}
		return some, all
	}
	k := 0
	for ; k < l.Capacity; k++ {
		if _, all := state(k); !all {
			break
		}
	}
	for row := k; row < l.Capacity; row++ {
		if some, _ := state(row); some {
			return 0
		}
	}
	return k
}

// Waiting policy. A peer usually arrives within microseconds to a
// millisecond, so for spinFor the receiver only yields: runtime.Gosched to
// the goroutines of its process (goroutine ranks in tests, the rank's own
// helpers) and sched_yield to other processes (rank processes outnumbering
// the cores of a 2-core CI box). Past spinFor a peer is probably stuck or
// gone, so it sleeps in the kernel, doubling from minSleep to maxSleep,
// to stop burning a core for the rest of the deadline. nanosleep is used
// because Go timers round short sleeps up to about a millisecond; maxSleep
// bounds how late a cancellation or Close is noticed.
const (
	spinFor  = 2 * time.Millisecond
	minSleep = 20 * time.Microsecond
	maxSleep = time.Millisecond
)

// yield gives the CPU to whoever else wants it: every time to the
// goroutines of this process, every osYieldEvery-th time to other processes
// too (a syscall per poll would hand the core away to unrelated work on a
// busy machine far more often than a peer rank needs it).
func yield(n int) {
	runtime.Gosched()
	if n%osYieldEvery == 0 {
		// sched_yield cannot fail on Linux.
		_, _, _ = unix.Syscall(unix.SYS_SCHED_YIELD, 0, 0, 0)
	}
}

const osYieldEvery = 8

// deadlineError is receiveSlot's internal "deadline passed"; the caller turns
// it into a *TimeoutError with the missing ranks.
type deadlineError struct{ waited time.Duration }

func (deadlineError) Error() string { return "deadline" }

// receiveSlot polls slot until no word is the Sentinel, copying each word
// into out as soon as it has arrived (an arrived word stays final until we
// re-arm it), then re-arms the slot. It gives up on ctx, on stop, or once
// deadline has passed since start with some word still missing.
func receiveSlot(ctx context.Context, slot []uint32, out []uint16, start time.Time, deadline time.Duration, stop *atomic.Bool) error {
	i, n := 0, len(slot)
	sleep := minSleep
	polls := 0
	for {
		for ; i < n; i++ {
			w := atomic.LoadUint32(&slot[i])
			if w == Sentinel {
				break
			}
			out[2*i] = uint16(w)
			out[2*i+1] = uint16(w >> 16)
		}
		if i == n {
			break
		}
		if stop.Load() {
			return ErrClosed
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx) // ctx.Err(), or why ctx was cancelled
		default:
		}
		waited := time.Since(start)
		if waited >= deadline {
			return deadlineError{waited}
		}
		if waited < spinFor {
			polls++
			yield(polls)
			continue
		}
		d := min(sleep, deadline-waited)
		ts := unix.NsecToTimespec(int64(d))
		// EINTR (Go's preemption signal) only shortens the nap.
		_ = unix.Nanosleep(&ts, nil)
		sleep = min(2*sleep, maxSleep)
	}
	fillSentinel(slot)
	return nil
}
