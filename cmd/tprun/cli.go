package main

// The command line's conventions, shared by every subcommand: flags are
// parsed as the flag package parses them (-name and --name, a value after
// = or as the next argument, a bool flag alone, parsing ends at -- or at
// the first argument that is not a flag), but every error names the flag
// the way the help writes it (--tp), and the help pages share one layout.

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/tprun/tprun/cmd/tprun/internal/job"
)

// usageError is a bad command line: the caller prints it on one line
// with a pointer to the help and exits with status 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{msg: fmt.Sprintf(format, args...)}
}

// parsedArgs is what parseArgs leaves: the arguments after the flags, and
// whether "--" ended the flags (then args is the command).
type parsedArgs struct {
	args     []string
	dashDash bool
}

// parseArgs parses args into fs. It returns flag.ErrHelp for -h, -help or
// --help, and a *usageError for anything else that is wrong.
func parseArgs(fs *flag.FlagSet, args []string) (parsedArgs, error) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return parsedArgs{args: args[i+1:], dashDash: true}, nil
		}
		if len(a) < 2 || a[0] != '-' {
			return parsedArgs{args: args[i:]}, nil
		}
		body := strings.TrimPrefix(a[1:], "-")
		if body == "" || body[0] == '-' || body[0] == '=' {
			return parsedArgs{}, usagef("bad flag syntax %q", a)
		}
		name, value, hasValue := strings.Cut(body, "=")
		f := fs.Lookup(name)
		if f == nil {
			if name == "h" || name == "help" {
				return parsedArgs{}, flag.ErrHelp
			}
			return parsedArgs{}, unknownFlag(fs, name)
		}
		if !hasValue {
			if isBoolFlag(f) {
				value = "true"
			} else {
				if i+1 == len(args) {
					return parsedArgs{}, usagef("--%s needs a value: --%s %s", name, name, metavar(f))
				}
				i++
				value = args[i]
			}
		}
		if err := fs.Set(name, value); err != nil {
			return parsedArgs{}, usagef("--%s %q: %v", name, value, err)
		}
	}
	return parsedArgs{}, nil
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// elsewhere explains flags that another of tprun's commands takes, by
// command (the flag set's name) and flag.
var elsewhere = map[string]map[string]string{
	"tprun bench": {
		"iters":   "the default job's; tprun bench times --replays CUDA graph replays per M",
		"backend": "the default job's; tprun bench always runs the CUDA engine",
	},
	"tprun": {
		"json":    "tprun topo's and tprun bench's",
		"replays": "tprun bench's",
	},
}

// torchrunFlags answers the flags a torchrun user types first, which no
// edit distance leads from to tprun's own.
var torchrunFlags = map[string]string{
	"nproc-per-node": "torchrun's; tprun's is --tp N",
	"nproc_per_node": "torchrun's; tprun's is --tp N",
	"nnodes":         "torchrun's; tprun starts the ranks of one node (across nodes, start them with torchrun, srun or mpirun: docs/cli.md)",
}

// unknownFlag names the flag and, when one of fs's flags is spelled
// almost the same or starts with it, that one.
func unknownFlag(fs *flag.FlagSet, name string) error {
	if why, ok := elsewhere[fs.Name()][name]; ok {
		return usagef("--%s is %s", name, why)
	}
	if why, ok := torchrunFlags[name]; ok && fs.Lookup("tp") != nil {
		return usagef("--%s is %s", name, why)
	}
	best, bestD := "", 3
	fs.VisitAll(func(f *flag.Flag) {
		if job.Hidden(f.Name) {
			return
		}
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) {
			d = 1
		} else if 2*d > len(name) {
			return // too far from a short name to be a slip
		}
		if d < bestD {
			best, bestD = f.Name, d
		}
	})
	if best != "" {
		return usagef("unknown flag --%s: did you mean --%s?", name, best)
	}
	return usagef("unknown flag --%s", name)
}

// editDistance is the Levenshtein distance of a and b (bytes).
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// setFlags lists the flags of fs that the command line set and that own
// also defines, as --name=value arguments: what a rank's command line
// repeats of the launcher's.
func setFlags(fs, own *flag.FlagSet) []string {
	var out []string
	fs.Visit(func(f *flag.Flag) {
		if own.Lookup(f.Name) != nil {
			out = append(out, "--"+f.Name+"="+f.Value.String())
		}
	})
	return out
}

// copyFlags defines every flag of from on to as well (sharing its value).
func copyFlags(to, from *flag.FlagSet) {
	from.VisitAll(func(f *flag.Flag) { to.Var(f.Value, f.Name, f.Usage) })
}

// Flag values of tprun's own flags, whose errors read well after
// "--name "value": ".

type intFlag struct{ p *int }

func (v intFlag) String() string {
	if v.p == nil {
		return "0"
	}
	return strconv.Itoa(*v.p)
}

func (v intFlag) Set(s string) error {
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New("not an integer")
	}
	*v.p = n
	return nil
}

type durationFlag struct{ p *time.Duration }

func (v durationFlag) String() string {
	if v.p == nil {
		return "0s"
	}
	return v.p.String()
}

func (v durationFlag) Set(s string) error {
	d, err := time.ParseDuration(s)
	if err != nil {
		return errors.New("not a duration such as 5s or 1m30s")
	}
	*v.p = d
	return nil
}

type boolFlag struct{ p *bool }

func (v boolFlag) String() string {
	if v.p == nil {
		return "false"
	}
	return strconv.FormatBool(*v.p)
}

func (v boolFlag) Set(s string) error {
	b, err := strconv.ParseBool(s)
	if err != nil {
		return errors.New("want true or false")
	}
	*v.p = b
	return nil
}

func (v boolFlag) IsBoolFlag() bool { return true }

type stringFlag struct{ p *string }

func (v stringFlag) String() string {
	if v.p == nil {
		return ""
	}
	return *v.p
}

func (v stringFlag) Set(s string) error { *v.p = s; return nil }

// metavars name the value each flag takes, as the help writes it.
var metavars = map[string]string{
	"tp": "N", "devices": "LIST", "log-dir": "DIR", "grace": "DUR", "timeout": "DUR",
	"rendezvous-timeout": "DUR",
	"backend":            "auto|cpu|cuda", "mailbox": "auto|multicast|unicast|host", "m": "LIST",
	"iters": "N", "hidden": "N", "latent": "N", "slots": "N", "seed": "N", "deadline": "DUR",
	"replays": "N", "warmup": "N", "rotate-mb": "MB", "graph": "HOW", "table": "FILE", "json-out": "FILE",
}

func metavar(f *flag.Flag) string {
	if isBoolFlag(f) {
		return ""
	}
	if m, ok := metavars[f.Name]; ok {
		return m
	}
	return strings.ToUpper(f.Name)
}

// helpPage is one command's help, in the layout every page shares.
type helpPage struct {
	usage    []string  // the command lines, without "usage: "
	about    []string  // paragraphs
	examples []example // the common invocations
	groups   []flagGroup
	exits    [][2]string // status, meaning
	env      [][2]string // variable, meaning
	more     string      // the last line
}

type example struct{ cmd, what string }

type flagGroup struct {
	title string
	fs    *flag.FlagSet
	names []string // in the order shown
}

const helpWidth = 80

func (h *helpPage) write(w io.Writer) error {
	var b strings.Builder
	for i, u := range h.usage {
		lead := "usage: "
		if i > 0 {
			lead = "       "
		}
		b.WriteString(lead + u + "\n")
	}
	for _, p := range h.about {
		b.WriteString("\n")
		wrap(&b, p, "", "")
	}
	if len(h.examples) > 0 {
		b.WriteString("\nExamples:\n")
		for i, e := range h.examples {
			if i > 0 {
				b.WriteString("\n")
			}
			wrap(&b, e.what, "  # ", "  # ")
			b.WriteString("  " + e.cmd + "\n")
		}
	}
	for _, g := range h.groups {
		fmt.Fprintf(&b, "\n%s:\n", g.title)
		for _, name := range g.names {
			f := g.fs.Lookup(name)
			if f == nil {
				return fmt.Errorf("help: no flag --%s in %q", name, g.title)
			}
			head := "  --" + f.Name
			if mv := metavar(f); mv != "" {
				head += " " + mv
			}
			text := f.Usage
			if d := f.DefValue; d != "" && d != "0" && d != "0s" && d != "false" {
				text += " (default " + d + ")"
			}
			writeItem(&b, head, text, flagIndent)
		}
	}
	writeTable(&b, "Exit status", h.exits)
	writeTable(&b, "Environment", h.env)
	if h.more != "" {
		b.WriteString("\n")
		wrap(&b, h.more, "", "")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// flagIndent is where the text of a flag starts.
const flagIndent = 28

// writeTable writes a titled list of name and meaning, the meanings lined
// up after the longest name.
func writeTable(b *strings.Builder, title string, rows [][2]string) {
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "\n%s:\n", title)
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	for _, r := range rows {
		writeItem(b, "  "+r[0], r[1], width+4)
	}
}

// writeItem writes head, then text wrapped at indent (on the next line
// when head is too long).
func writeItem(b *strings.Builder, head, text string, indent int) {
	pad := strings.Repeat(" ", indent)
	if len(head) >= indent-1 {
		b.WriteString(head + "\n")
		wrap(b, text, pad, pad)
		return
	}
	wrap(b, text, head+strings.Repeat(" ", indent-len(head)), pad)
}

// wrap writes text as lines of at most helpWidth columns (a longer word
// stands alone), the first after first and the rest after rest.
func wrap(b *strings.Builder, text, first, rest string) {
	line := first
	empty := true
	for _, word := range strings.Fields(text) {
		if !empty && len([]rune(line))+1+len([]rune(word)) > helpWidth {
			b.WriteString(line + "\n")
			line, empty = rest, true
		}
		if !empty {
			line += " "
		}
		line += word
		empty = false
	}
	b.WriteString(line + "\n")
}
