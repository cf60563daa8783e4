package launcher

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Leftover is a process a rank left behind when it ended: one still in its
// process group, or one anywhere that held the rank's stdout or stderr
// open (a background process that inherited them), which would otherwise
// keep tprun reading that output after the rank was gone.
type Leftover struct {
	PID int
	// Command is its command line as /proc shows it (shortened), or its
	// name.
	Command string
	// Holds says which of the rank's outputs it held open: "stdout",
	// "stderr", "stdout and stderr", or "" for neither.
	Holds string
	// Killed: it was in the rank's process group, which tprun killed
	// (SIGKILL) when it reaped the rank. Else it had left that group
	// (setsid, setpgid) and tprun did not signal it; tprun forwarded what
	// it wrote until the job ended, then stopped reading.
	Killed bool
}

func (l Leftover) String() string {
	s := fmt.Sprintf("pid %d (%s)", l.PID, l.Command)
	if l.Holds != "" {
		s += " holding its " + l.Holds
	}
	return s
}

// maxCommand bounds a Leftover's Command.
const maxCommand = 120

// findLeftovers scans /proc once for the processes of process group pgid
// and those that hold one of pipes (a rank's stdout and stderr, by inode;
// 0 for unknown) open, but for tprun itself, which holds the read ends.
// Zombies are left out: they hold nothing and are gone once reaped. Nil
// when /proc cannot be read; a process whose files /proc does not show
// (another user's) counts only by its group.
func findLeftovers(pgid int, pipes [2]uint64) []Leftover {
	dir, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	self := os.Getpid()
	var targets [2]string
	for i, ino := range pipes {
		if ino != 0 {
			targets[i] = "pipe:[" + strconv.FormatUint(ino, 10) + "]"
		}
	}
	var out []Leftover
	for _, e := range dir {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone
		}
		ps, ok := parseStat(b)
		if !ok {
			continue
		}
		if f := statFields(b); len(f) > 0 && (f[0] == "Z" || f[0] == "X") {
			continue
		}
		holds := holdsPipes(pid, targets)
		if ps.pgrp != pgid && holds == "" {
			continue
		}
		out = append(out, Leftover{PID: pid, Command: commandLine(pid, ps.comm), Holds: holds, Killed: ps.pgrp == pgid})
	}
	return out
}

// holdsPipes says which of targets ("pipe:[inode]" for stdout, then
// stderr; "" for unknown) process pid has open.
func holdsPipes(pid int, targets [2]string) string {
	if targets[0] == "" && targets[1] == "" {
		return ""
	}
	fdDir := "/proc/" + strconv.Itoa(pid) + "/fd/"
	fds, err := os.ReadDir(fdDir)
	if err != nil {
		return ""
	}
	var held [2]bool
	for _, fd := range fds {
		link, err := os.Readlink(fdDir + fd.Name())
		if err != nil {
			continue
		}
		for i, t := range targets {
			if t != "" && link == t {
				held[i] = true
			}
		}
	}
	switch {
	case held[0] && held[1]:
		return "stdout and stderr"
	case held[0]:
		return "stdout"
	case held[1]:
		return "stderr"
	}
	return ""
}

// commandLine is pid's command line from /proc, its arguments joined by
// spaces and shortened to maxCommand bytes; comm when it has none (a
// kernel thread) or cannot be read.
func commandLine(pid int, comm string) string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	b = bytes.TrimRight(b, "\x00")
	if err != nil || len(b) == 0 {
		return comm
	}
	// Arguments may hold newlines or other control bytes, which would
	// break the report's lines.
	s := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, string(b))
	if len(s) > maxCommand {
		s = strings.ToValidUTF8(s[:maxCommand], "") + "..."
	}
	return s
}
