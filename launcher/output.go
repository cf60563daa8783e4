package launcher

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// maxLine bounds how much of one unterminated line is held in memory; a
	// longer line is passed on in pieces of this size, each ended by "\n",
	// so a rank that never writes a newline cannot grow tprun without bound.
	maxLine = 1 << 20
	// maxTailLine bounds each line the report keeps.
	maxTailLine = 512
)

// output serializes whole lines from every rank onto tprun's stdout and
// stderr and into the log files. One lock for everything: a line is written
// with one Write call while holding it, so lines never interleave mid-line
// even when stdout and stderr are the same terminal.
type output struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
	buf            []byte // scratch for prefix+line+"\n", used under mu
	// broken gets one value, which of "stdout" or "stderr", the first time
	// a write there fails with EPIPE: whoever reads tprun's output has gone
	// (`tprun ... | head`), and the job is stopped as for a signal.
	broken     chan string
	brokenOnce sync.Once
	// A write that fails otherwise (a full disk, /dev/full, a log file)
	// does not stop the job. The destination is recorded in failed, in
	// the order of the failures, and nothing more is written there: a
	// later write could land after half a line. lost rings (capacity 1,
	// never blocks) so that the run loop announces what is new (announce).
	lost      chan struct{}
	failed    []lostOutput // under mu
	announced int          // failed[:announced] were announced; under mu
}

// lostOutput is the first failed write (or close) of one destination.
type lostOutput struct {
	what string // "stdout", "stderr" or "log" (then rank says whose)
	rank int
	err  error
}

func newOutput(stdout, stderr io.Writer) *output {
	return &output{stdout: stdout, stderr: stderr, broken: make(chan string, 1), lost: make(chan struct{}, 1)}
}

// dead reports whether a write to d failed before. Call with o.mu held.
func (o *output) dead(d lostOutput) bool {
	for _, l := range o.failed {
		if l.what == d.what && l.rank == d.rank {
			return true
		}
	}
	return false
}

// write writes b to what ("stdout" or "stderr", tprun's own; "log", rank's
// log file w) unless that failed before, and notes a failure: EPIPE on
// tprun's stdout or stderr on o.broken (whoever reads tprun's output has
// gone), any other error in o.failed. The caller names the destination:
// comparing writers would panic on one of an uncomparable type (a func).
// Call with o.mu held.
func (o *output) write(what string, w io.Writer, b []byte, rank int) {
	d := lostOutput{what: what, rank: -1}
	switch what {
	case "stdout":
		w = o.stdout
	case "stderr":
		w = o.stderr
	default:
		d.rank = rank
	}
	if o.dead(d) {
		return
	}
	_, err := w.Write(b)
	if err == nil {
		return
	}
	if errors.Is(err, syscall.EPIPE) && d.what != "log" {
		o.brokenOnce.Do(func() { o.broken <- d.what })
		return
	}
	d.err = err
	o.failed = append(o.failed, d)
	select {
	case o.lost <- struct{}{}:
	default: // rung already: announce takes everything new
	}
}

// closeLog closes rank's log file, noting an error as a failed write (a
// file system may report a lost write only then).
func (o *output) closeLog(f io.Closer, rank int) {
	err := f.Close()
	o.mu.Lock()
	defer o.mu.Unlock()
	if d := (lostOutput{what: "log", rank: rank, err: err}); err != nil && !o.dead(d) {
		o.failed = append(o.failed, d)
	}
}

// announce returns, described (describeLost), the failures not announced
// yet, and marks them announced.
func (o *output) announce() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	ls := o.failed[o.announced:]
	o.announced = len(o.failed)
	return describeLost(ls)
}

// lostOutputs describes every failure (describeLost).
func (o *output) lostOutputs() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return describeLost(o.failed)
}

// describeLost lists ls for people: "stdout (err)", "stderr (err)", and the
// log files grouped by cause, "the log files of ranks 0-3, 7 (write: no
// space left on device)", so that 250 ranks on a full disk make one entry,
// not 250.
func describeLost(ls []lostOutput) []string {
	var out []string
	var order []string
	logs := map[string][]int{}
	for _, l := range ls {
		if l.what != "log" {
			out = append(out, l.what+" ("+l.err.Error()+")")
			continue
		}
		// By cause, without the file's name: rank-K.log in --log-dir.
		e := l.err.Error()
		var pe *os.PathError
		if errors.As(l.err, &pe) {
			e = pe.Op + ": " + pe.Err.Error()
		}
		if _, ok := logs[e]; !ok {
			order = append(order, e)
		}
		logs[e] = append(logs[e], l.rank)
	}
	for _, e := range order {
		ranks := logs[e]
		slices.Sort(ranks)
		if len(ranks) == 1 {
			out = append(out, fmt.Sprintf("the log file of rank %d (%s)", ranks[0], e))
		} else {
			out = append(out, fmt.Sprintf("the log files of ranks %s (%s)", rankRanges(ranks), e))
		}
	}
	return out
}

// writeLine writes prefix+line+"\n" to tprun's stream ("stdout" or
// "stderr") and line+"\n" to log (if any, rank's log file). A failed write
// does not stop the pump, which must keep draining the pipe, or the rank
// would block on a full pipe and the job would hang: it is noted (write)
// and the line is lost there.
func (o *output) writeLine(stream string, prefix, line []byte, log io.Writer, rank int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(append(append(o.buf[:0], prefix...), line...), '\n')
	o.write(stream, nil, o.buf, rank)
	if log != nil {
		o.write("log", log, o.buf[len(prefix):], rank)
	}
}

// writeErr writes tprun's own messages to its stderr under the same lock.
func (o *output) writeErr(s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.write("stderr", nil, []byte(s), -1)
}

// tail keeps the last n lines written to it.
type tail struct {
	mu    sync.Mutex
	lines []string
	next  int
	full  bool
}

func newTail(n int) *tail { return &tail{lines: make([]string, n)} }

func (t *tail) add(line []byte) {
	if len(line) > maxTailLine {
		line = append(line[:maxTailLine:maxTailLine], "..."...)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.lines[t.next] = string(line)
	t.next++
	if t.next == len(t.lines) {
		t.next, t.full = 0, true
	}
}

// get returns the kept lines, oldest first.
func (t *tail) get() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.full {
		return append([]string(nil), t.lines[:t.next]...)
	}
	return append(append([]string(nil), t.lines[t.next:]...), t.lines[:t.next]...)
}

// pump copies one of a rank's pipes to tprun's output, line by line.
type pump struct {
	out    *output
	stream string // "stdout" or "stderr": where its lines go
	prefix []byte
	log    io.Writer // the rank's log file, or nil
	rank   int
	tail   *tail // nil for stdout
}

func rankPrefix(rank int) []byte { return []byte("[rank " + strconv.Itoa(rank) + "] ") }

// run reads f until EOF or error. A final line without "\n" is still passed
// on. bufio.Reader rather than bufio.Scanner: Scanner gives up on lines over
// its buffer size, and a rank's long line must not stop its output.
//
// When tprun stops waiting for EOF (child.stopReading sets a read deadline
// that has passed), run reads the bytes the pipe holds at that moment, so
// that nothing written before then is lost, and returns.
func (p *pump) run(f *os.File) {
	br := bufio.NewReaderSize(f, 64<<10)
	var line []byte
	final := false
	for {
		frag, err := br.ReadSlice('\n')
		line = append(line, frag...)
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(line) >= maxLine {
				p.emit(line)
				line = line[:0]
			}
			continue
		}
		if !final && errors.Is(err, os.ErrDeadlineExceeded) {
			// ReadSlice hands back everything it buffered with the
			// error, so the reader can start over on what is left.
			final = true
			br.Reset(pending(f))
			continue
		}
		if len(line) > 0 {
			p.emit(line)
			line = line[:0]
		}
		if err != nil {
			// io.EOF, or the end of what the pipe held when tprun stopped
			// reading.
			return
		}
	}
}

// pending is a reader of the bytes pipe f holds now (FIONREAD, which Linux
// also names TIOCINQ); what is written later is not read. Empty when the
// count cannot be had.
func pending(f *os.File) io.Reader {
	if err := f.SetReadDeadline(time.Time{}); err != nil {
		return strings.NewReader("")
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return strings.NewReader("")
	}
	n := 0
	cerr := rc.Control(func(fd uintptr) { n, err = unix.IoctlGetInt(int(fd), unix.TIOCINQ) })
	if cerr != nil || err != nil || n <= 0 {
		return strings.NewReader("")
	}
	return io.LimitReader(f, int64(n))
}

func (p *pump) emit(line []byte) {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	p.out.writeLine(p.stream, p.prefix, line, p.log, p.rank)
	if p.tail != nil {
		p.tail.add(line)
	}
}
