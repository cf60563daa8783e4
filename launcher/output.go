package launcher

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"sync"
	"syscall"
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
	// lost gets one value per destination (tprun's stdout or stderr, a
	// rank's log file) the first time a write there fails with another
	// error (a full disk, /dev/full): the job goes on, tprun says so once,
	// and the report and the exit status say what was lost (failed).
	lost   chan lostOutput
	failed map[string]lostOutput // by lostOutput.what, under mu
}

// lostOutput is the first failed write to one destination.
type lostOutput struct {
	what string // "stdout", "stderr" or "rank 3's log file"
	err  error
}

func (l lostOutput) String() string { return l.what + " (" + l.err.Error() + ")" }

func newOutput(stdout, stderr io.Writer) *output {
	return &output{stdout: stdout, stderr: stderr, broken: make(chan string, 1),
		lost: make(chan lostOutput, 64), failed: map[string]lostOutput{}}
}

// check notes a write to w that failed: EPIPE on tprun's stdout or stderr
// on o.broken, any other error on o.lost (once per destination; what names
// w when it is neither). Call with o.mu held.
func (o *output) check(w io.Writer, err error, what string) {
	if err == nil {
		return
	}
	name := what
	switch w {
	case o.stdout:
		name = "stdout"
	case o.stderr:
		name = "stderr"
	}
	if errors.Is(err, syscall.EPIPE) && (w == o.stdout || w == o.stderr) {
		o.brokenOnce.Do(func() { o.broken <- name })
		return
	}
	if _, seen := o.failed[name]; seen || name == "" {
		return
	}
	l := lostOutput{what: name, err: err}
	o.failed[name] = l
	select {
	case o.lost <- l:
	default: // the run loop is behind; the report still lists it
	}
}

// lostOutputs lists every destination a write failed on, in no order.
func (o *output) lostOutputs() []lostOutput {
	o.mu.Lock()
	defer o.mu.Unlock()
	var ls []lostOutput
	for _, l := range o.failed {
		ls = append(ls, l)
	}
	return ls
}

// writeLine writes prefix+line+"\n" to w and line+"\n" to log (if any,
// named logName). A failed write does not stop the pump, which must keep
// draining the pipe, or the rank would block on a full pipe and the job
// would hang: it is reported (check) and the line is lost there.
func (o *output) writeLine(w io.Writer, prefix, line []byte, log io.Writer, logName string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.buf = append(append(append(o.buf[:0], prefix...), line...), '\n')
	_, err := w.Write(o.buf)
	o.check(w, err, "")
	if log != nil {
		_, err := log.Write(o.buf[len(prefix):])
		o.check(log, err, logName)
	}
}

// writeString writes tprun's own messages under the same lock.
func (o *output) writeString(w io.Writer, s string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	_, err := io.WriteString(w, s)
	o.check(w, err, "")
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
	out     *output
	w       io.Writer // tprun's stdout or stderr
	prefix  []byte
	log     io.Writer // the rank's log file, or nil
	logName string    // "rank 3's log file"
	tail    *tail     // nil for stdout
}

func rankPrefix(rank int) []byte { return []byte("[rank " + strconv.Itoa(rank) + "] ") }

// run reads r until EOF or error. A final line without "\n" is still passed
// on. bufio.Reader rather than bufio.Scanner: Scanner gives up on lines over
// its buffer size, and a rank's long line must not stop its output.
func (p *pump) run(r io.Reader) {
	br := bufio.NewReaderSize(r, 64<<10)
	var line []byte
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
		if len(line) > 0 {
			p.emit(line)
			line = line[:0]
		}
		if err != nil {
			// io.EOF, or os.ErrDeadlineExceeded after the drain timeout.
			return
		}
	}
}

func (p *pump) emit(line []byte) {
	if n := len(line); n > 0 && line[n-1] == '\n' {
		line = line[:n-1]
	}
	p.out.writeLine(p.w, p.prefix, line, p.log, p.logName)
	if p.tail != nil {
		p.tail.add(line)
	}
}
