package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"regexp"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tprun/tprun/cmd/tprun/internal/job"
)

// runIn runs tprun's main in this process: for what ends before any rank
// would start (help, version, bad input).
func runIn(args ...string) (stdout, stderr string, status int) {
	var o, e bytes.Buffer
	status = run(args, &o, &e)
	return o.String(), e.String(), status
}

// sections are a help page's titled sections, in order.
func sections(page string) []string {
	var s []string
	for _, line := range strings.Split(page, "\n") {
		if line != "" && line[0] != ' ' && strings.HasSuffix(line, ":") {
			s = append(s, strings.TrimSuffix(line, ":"))
		}
	}
	return s
}

// TestHelpPages: every way to ask for help shows the page on stdout with
// status 0; the pages share one layout (usage lines, paragraphs, examples,
// flag sections, exit statuses), list every flag of their command, and
// fit 80 columns.
func TestHelpPages(t *testing.T) {
	mainFS, _, _, _ := newFlagSet()
	topoFS, _, _, _ := newTopoFlagSet()
	benchFS, _, _, _, _ := newBenchFlagSet()
	tests := []struct {
		args     [][]string
		usage    string
		fs       *flag.FlagSet
		sections []string
		has      []string
	}{
		{
			args:     [][]string{{"-h"}, {"--help"}, {"-help"}, {"help"}, {"--tp", "2", "-h"}},
			usage:    "usage: tprun [--tp N] [flags] [-- CMD ARGS...]\n",
			fs:       mainFS,
			sections: []string{"Examples", "Launcher flags", "Job flags (the default job only)", "Other flags", "Exit status", "Environment"},
			has: []string{"  tprun --tp 4\n", " -- ./rank", "--devices 0,0,1,1", "  tprun topo\n", "  tprun bench --tp 2\n",
				"\n  0      every rank", "\n  1-255  ", "\n  128+N  ", "\n  141    ", "\n  124    ", "\n  1      ", "\n  2      ", "\n  3      ",
				"TPRUN_CHECK_STEPS", "TPRUN_MULTICAST=0"},
		},
		{
			args:     [][]string{{"topo", "-h"}, {"topo", "--help"}, {"help", "topo"}},
			usage:    "usage: tprun topo [--devices LIST] [--json] [--strict]\n",
			fs:       topoFS,
			sections: []string{"Examples", "Flags", "Exit status"},
			has:      []string{"  tprun topo --devices 0-3 --json\n", "\n  3  no NVIDIA driver"},
		},
		{
			args:     [][]string{{"bench", "-h"}, {"bench", "--help"}, {"help", "bench"}, {"bench", "--m", "1", "--help"}},
			usage:    "usage: tprun bench [--tp N] [flags] [--json]\n",
			fs:       benchFS,
			sections: []string{"Examples", "Launcher flags", "Shape and mailbox", "Benchmark flags", "Exit status"},
			has:      []string{"  tprun bench --tp 2\n", "--json", "(default 1,2,3,4,5,6,7,8)", "\n  141    "},
		},
	}
	for _, tc := range tests {
		var first string
		for _, args := range tc.args {
			t.Run(strings.Join(args, " "), func(t *testing.T) {
				out, errOut, status := runIn(args...)
				if status != 0 || errOut != "" {
					t.Fatalf("status %d, stderr %q", status, errOut)
				}
				if first == "" {
					first = out
				} else if out != first {
					t.Errorf("differs from %q's page", tc.args[0])
				}
				if !strings.HasPrefix(out, tc.usage) {
					t.Errorf("page starts %q, want %q", out[:min(len(out), 80)], tc.usage)
				}
				if got := sections(out); !slices.Equal(got, tc.sections) {
					t.Errorf("sections %q, want %q", got, tc.sections)
				}
				for _, w := range tc.has {
					if !strings.Contains(out, w) {
						t.Errorf("page lacks %q", w)
					}
				}
				tc.fs.VisitAll(func(f *flag.Flag) {
					listed := strings.Contains(out, "\n  --"+f.Name+" ") || strings.Contains(out, "\n  --"+f.Name+"\n")
					if listed == job.Hidden(f.Name) {
						t.Errorf("--%s listed: %v", f.Name, listed)
					}
				})
				for i, line := range strings.Split(out, "\n") {
					if n := utf8.RuneCountInString(line); n > helpWidth {
						t.Errorf("line %d is %d columns: %q", i+1, n, line)
					}
					// A flag's text starts at flagIndent, on its line or the next.
					if gap := strings.Index(line[min(len(line), 3):], "  "); strings.HasPrefix(line, "  --") && gap >= 0 &&
						len(line)-len(strings.TrimLeft(line[3+gap:], " ")) != flagIndent {
						t.Errorf("line %d: text not at column %d: %q", i+1, flagIndent, line)
					}
				}
			})
		}
	}
}

func TestVersion(t *testing.T) {
	want := regexp.MustCompile(`^tprun \S+( [0-9a-f]{12}(\+dirty)?)? go1\.\d+\S* [a-z0-9]+/[a-z0-9]+\n$`)
	var first string
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}, {"--tp", "3", "--version"}} {
		out, errOut, status := runIn(args...)
		if status != 0 || errOut != "" || !want.MatchString(out) {
			t.Errorf("%q: status %d, stdout %q, stderr %q", args, status, out, errOut)
		}
		if first == "" {
			first = out
		} else if out != first {
			t.Errorf("%q printed %q, --version %q", args, out, first)
		}
	}
}

func TestFormatVersion(t *testing.T) {
	settings := func(kv ...string) []debug.BuildSetting {
		var s []debug.BuildSetting
		for i := 0; i < len(kv); i += 2 {
			s = append(s, debug.BuildSetting{Key: kv[i], Value: kv[i+1]})
		}
		return s
	}
	rev := fmt.Sprintf("%040x", rand.Uint64())
	tests := []struct {
		desc string
		bi   *debug.BuildInfo
		want string
	}{
		{"a release", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.4.0"},
			Settings: settings("GOOS", "linux", "GOARCH", "arm64")}, "tprun v1.4.0 go1.26.8 linux/arm64"},
		{"a pseudo-version holds the commit", &debug.BuildInfo{GoVersion: "go1.26.8",
			Main:     debug.Module{Version: "v0.0.0-20261201120000-" + rev[:12] + "+dirty"},
			Settings: settings("vcs.revision", rev, "vcs.modified", "true", "GOOS", "linux", "GOARCH", "amd64")},
			"tprun v0.0.0-20261201120000-" + rev[:12] + "+dirty go1.26.8 linux/amd64"},
		{"devel with a commit", &debug.BuildInfo{GoVersion: "go1.27", Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", rev, "vcs.modified", "true", "GOOS", "linux", "GOARCH", "amd64")},
			"tprun devel " + rev[:12] + "+dirty go1.27 linux/amd64"},
		{"devel, clean", &debug.BuildInfo{GoVersion: "go1.27", Main: debug.Module{Version: "(devel)"},
			Settings: settings("vcs.revision", rev, "vcs.modified", "false", "GOOS", "linux", "GOARCH", "amd64")},
			"tprun devel " + rev[:12] + " go1.27 linux/amd64"},
		{"devel without vcs", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"},
			Settings: settings("GOOS", "linux", "GOARCH", "amd64")}, "tprun devel go1.26.8 linux/amd64"},
	}
	for _, tc := range tests {
		if got := formatVersion(tc.bi, true); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.desc, got, tc.want)
		}
	}
	if got := formatVersion(nil, false); !strings.HasPrefix(got, "tprun (no build information) go") {
		t.Errorf("no build info: %q", got)
	}
}

// TestFlagErrors: bad command lines exit 2 with one line on stderr that
// names flags as the help writes them and says where the help is; nothing
// on stdout.
func TestFlagErrors(t *testing.T) {
	singleDash := regexp.MustCompile(`(^|[^-\w])-[a-z]`)
	tests := []struct {
		args []string
		cmd  string // the command the message and its hint name
		want string
	}{
		{[]string{"-tp"}, "tprun", "--tp needs a value: --tp N"},
		{[]string{"--tp"}, "tprun", "--tp needs a value: --tp N"},
		{[]string{"-tp", "two"}, "tprun", `--tp "two": not an integer`},
		{[]string{"--tp=2.5"}, "tprun", `--tp "2.5": not an integer`},
		{[]string{"--bogus"}, "tprun", "unknown flag --bogus"},
		{[]string{"--tps", "2"}, "tprun", "unknown flag --tps: did you mean --tp?"},
		{[]string{"--dead", "1s"}, "tprun", "unknown flag --dead: did you mean --deadline?"},
		{[]string{"---tp", "2"}, "tprun", `bad flag syntax "---tp"`},
		{[]string{"--grace", "5"}, "tprun", `--grace "5": not a duration such as 5s`},
		{[]string{"--strict=maybe"}, "tprun", `--strict "maybe": want true or false`},
		{[]string{"--backend", "tpu"}, "tprun", `--backend "tpu": want one of auto, cpu, cuda`},
		{[]string{"--seed", "x"}, "tprun", `--seed "x": not an integer`},
		{[]string{"--json"}, "tprun", "--json is tprun topo's and tprun bench's"},
		{[]string{"--nproc-per-node", "2", "--", "true"}, "tprun", "--nproc-per-node is torchrun's; tprun's is --tp N"},
		{[]string{"--nproc_per_node=2"}, "tprun", "--nproc_per_node is torchrun's; tprun's is --tp N"},
		{[]string{"--nnodes", "2"}, "tprun", "--nnodes is torchrun's; tprun starts the ranks of one node"},
		{[]string{"bench", "--nproc-per-node", "2"}, "tprun bench", "--nproc-per-node is torchrun's; tprun's is --tp N"},
		{[]string{"topo", "--nnodes", "2"}, "tprun topo", "unknown flag --nnodes"},
		{[]string{"--tp", "3"}, "tprun", `--hidden "7168": must be divisible by --tp 3`},
		{[]string{"--tp", "2", "bench"}, "tprun", `"bench" comes first: tprun bench [flags]`},
		{[]string{"--tp", "2", "sh"}, "tprun", `unexpected argument "sh": put the command after --`},
		{[]string{"--iters", "5", "--", "true"}, "tprun", "--iters: job flags apply only to the default job"},
		{[]string{"version", "x"}, "tprun", `version takes no arguments, got "x"`},
		{[]string{"help", "nope"}, "tprun", `no help for "nope"`},
		{[]string{"topo", "--dev", "0"}, "tprun topo", "unknown flag --dev: did you mean --devices?"},
		{[]string{"topo", "--devices", "0,x"}, "tprun topo", `"x"`},
		{[]string{"topo", "--json=maybe"}, "tprun topo", `--json "maybe": want true or false`},
		{[]string{"topo", "all"}, "tprun topo", `unexpected argument "all"`},
		{[]string{"bench", "--iters", "5"}, "tprun bench", "--iters is the default job's; tprun bench times --replays"},
		{[]string{"bench", "--replays", "0"}, "tprun bench", `--replays "0": must be at least 1`},
		{[]string{"bench", "--m", "129"}, "tprun bench", `--m "129": M 129 is outside 1..128`},
		{[]string{"bench", "--mailbox", "host"}, "tprun bench", `--mailbox "host": the step benchmark runs the CUDA engine on a GPU mailbox`},
		{[]string{"bench", "--tp", "3"}, "tprun bench", `--hidden "7168": must be divisible by --tp 3`},
		{[]string{"bench", "--", "x"}, "tprun bench", `unexpected argument "x"`},
		{[]string{"__bench", "--bogus"}, "tprun __bench", "unknown flag --bogus (see tprun bench --help)"},
		{[]string{"__rank", "--tp", "2"}, "tprun __rank", "unknown flag --tp (see tprun --help)"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			out, errOut, status := runIn(tc.args...)
			line := strings.TrimSuffix(errOut, "\n")
			hint := " (see " + tc.cmd + " --help)"
			if strings.HasPrefix(tc.cmd, "tprun __") {
				hint = ""
			}
			if status != exitUsage || out != "" || strings.Contains(line, "\n") || !strings.HasPrefix(line, tc.cmd+": ") ||
				!strings.HasSuffix(line, hint) || !strings.Contains(line, tc.want) {
				t.Errorf("status %d, stdout %q, stderr %q; want 2, one line %q ... %q ...%s", status, out, errOut, tc.cmd+": ", tc.want, hint)
			}
			if singleDash.MatchString(line) {
				t.Errorf("names a flag with one dash: %q", line)
			}
		})
	}
}

// TestAcceptedForms: the forms the flag package accepts still work.
func TestAcceptedForms(t *testing.T) {
	tests := []struct {
		args     []string
		tp       int
		strict   bool
		rest     []string
		dashDash bool
	}{
		{[]string{"-tp", "2"}, 2, false, nil, false},
		{[]string{"--tp", "3"}, 3, false, nil, false},
		{[]string{"-tp=4"}, 4, false, nil, false},
		{[]string{"--tp=5", "--strict"}, 5, true, nil, false},
		{[]string{"-strict", "--tp", "-1"}, -1, true, nil, false},
		{[]string{"--strict=true", "--strict=false"}, 1, false, nil, false},
		{[]string{"--strict", "false"}, 1, true, []string{"false"}, false},
		{[]string{"--tp", "2", "--", "sh", "-h", "--tp", "9"}, 2, false, []string{"sh", "-h", "--tp", "9"}, true},
		{[]string{"--tp", "2", "sh", "--tp", "9"}, 2, false, []string{"sh", "--tp", "9"}, false},
		{[]string{"-", "--tp", "9"}, 1, false, []string{"-", "--tp", "9"}, false},
		{[]string{"--", "--"}, 1, false, []string{"--"}, true},
	}
	for _, tc := range tests {
		fs, lf, _, _ := newFlagSet()
		p, err := parseArgs(fs, tc.args)
		if err != nil || lf.tp != tc.tp || lf.strict != tc.strict || !slices.Equal(p.args, tc.rest) || p.dashDash != tc.dashDash {
			t.Errorf("%q: tp %d strict %v rest %q dashDash %v, %v; want %d %v %q %v", tc.args, lf.tp, lf.strict, p.args, p.dashDash, err,
				tc.tp, tc.strict, tc.rest, tc.dashDash)
		}
	}
}

// TestParseArgsLikeFlagPackage: on random command lines, parseArgs accepts
// and refuses what flag.FlagSet.Parse does, sets the same values and
// leaves the same arguments.
func TestParseArgsLikeFlagPackage(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 11))
	words := []string{"--tp", "-tp", "2", "x", "--tp=3", "-tp=", "--strict", "-strict", "--strict=false", "-strict=maybe",
		"--dir", "-dir=a b", "--", "-", "cmd", "---tp", "-=1", "--=", "--bogus", "-h", "--help", "-"}
	type set struct {
		fs     *flag.FlagSet
		tp     int
		strict bool
		dir    string
	}
	newSet := func() *set {
		s := &set{fs: flag.NewFlagSet("t", flag.ContinueOnError)}
		s.fs.SetOutput(io.Discard)
		s.fs.Var(intFlag{&s.tp}, "tp", "")
		s.fs.Var(boolFlag{&s.strict}, "strict", "")
		s.fs.Var(stringFlag{&s.dir}, "dir", "")
		return s
	}
	for range 5000 {
		args := make([]string, rng.IntN(7))
		for i := range args {
			args[i] = words[rng.IntN(len(words))]
		}
		a, b := newSet(), newSet()
		errA := a.fs.Parse(args)
		p, errB := parseArgs(b.fs, args)
		if (errA == nil) != (errB == nil) || (errA == flag.ErrHelp) != (errB == flag.ErrHelp) {
			t.Fatalf("%q: flag package %v, parseArgs %v", args, errA, errB)
		}
		if errA != nil {
			continue
		}
		// "--" ended the flags when it came right before the rest, unless
		// it may have been the value of --dir: the flag package does not
		// say which.
		pos := len(args) - len(a.fs.Args())
		dd := pos > 0 && args[pos-1] == "--"
		unsure := pos > 1 && slices.Contains([]string{"--dir", "-dir"}, args[pos-2])
		if a.tp != b.tp || a.strict != b.strict || a.dir != b.dir || !slices.Equal(a.fs.Args(), p.args) || (dd != p.dashDash && !unsure) {
			t.Fatalf("%q: flag package %+v %q, parseArgs %+v %q %v", args, *a, a.fs.Args(), *b, p.args, p.dashDash)
		}
	}
}
