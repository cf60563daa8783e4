package main

import (
	"context"
	"flag"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tprun/tprun/cmd/tprun/internal/job"
)

const cliDoc = "../../docs/cli.md"

// shBlocks returns the fenced code blocks of a Markdown text whose info
// string is "sh" followed by exactly the words given (none: plain "sh").
func shBlocks(text string, words ...string) [][]string {
	var blocks [][]string
	var cur []string
	in := false
	for _, line := range strings.Split(text, "\n") {
		switch {
		case !in && strings.HasPrefix(line, "```"):
			info := strings.Fields(strings.TrimPrefix(line, "```"))
			if len(info) > 0 && info[0] == "sh" && slices.Equal(info[1:], words) {
				in, cur = true, nil
			}
		case in && strings.HasPrefix(line, "```"):
			in = false
			blocks = append(blocks, cur)
		case in:
			cur = append(cur, line)
		}
	}
	return blocks
}

var exitNote = regexp.MustCompile(`#.*\bexits (\d+)`)

// TestDocsCommands runs every command of the "sh runnable" blocks of
// docs/cli.md and README.md as written, with this build of tprun first in
// PATH, one block per fresh working directory, and checks its exit status:
// 0, or the status a trailing "# exits N" gives. docs/cli.md's plain "sh"
// blocks need a GPU: each of their lines must say what it needs.
func TestDocsCommands(t *testing.T) {
	for _, doc := range []struct {
		path      string
		minBlocks int
		needsNote bool
	}{
		{cliDoc, 5, true},
		{"../../README.md", 1, false},
	} {
		t.Run(filepath.Base(doc.path), func(t *testing.T) {
			runDocCommands(t, doc.path, doc.minBlocks, doc.needsNote)
		})
	}
}

func runDocCommands(t *testing.T, docPath string, minBlocks int, needsNote bool) {
	b, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	runnable := shBlocks(string(b), "runnable")
	if len(runnable) < minBlocks {
		t.Fatalf("%d runnable blocks in %s", len(runnable), docPath)
	}
	if needsNote {
		for _, block := range shBlocks(string(b)) {
			for _, line := range block {
				if strings.TrimSpace(line) != "" && !strings.Contains(line, "# needs") {
					t.Errorf("%s: %q is not runnable here and does not say what it needs", docPath, line)
				}
			}
		}
	}
	path := filepath.Dir(tprunBin) + string(os.PathListSeparator) + os.Getenv("PATH")
	for i, block := range runnable {
		dir := t.TempDir()
		tmp := shortTempDir(t)
		for _, line := range block {
			cmd := strings.TrimSpace(line)
			if cmd == "" || strings.HasPrefix(cmd, "#") {
				continue
			}
			t.Run(strconv.Itoa(i)+": "+cmd, func(t *testing.T) {
				want := 0
				if m := exitNote.FindStringSubmatch(cmd); m != nil {
					want, _ = strconv.Atoi(m[1])
				}
				ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
				defer cancel()
				c := exec.CommandContext(ctx, "sh", "-c", cmd)
				c.Dir = dir
				c.Env = append(os.Environ(), "PATH="+path, "TMPDIR="+tmp)
				out, err := c.CombinedOutput()
				if ctx.Err() != nil {
					t.Fatalf("still running after 2 minutes: %v\n%s", err, out)
				}
				if got := c.ProcessState.ExitCode(); got != want {
					t.Errorf("exit status %d, want %d:\n%s", got, want, out)
				}
			})
		}
		assertEmptyDir(t, tmp)
	}
}

// TestDocsCoverFlagsAndEnvironment: docs/cli.md names every flag of every
// command, every exit status of the help, and every TPRUN_ variable the
// Go and Python sources name.
func TestDocsCoverFlagsAndEnvironment(t *testing.T) {
	b, err := os.ReadFile(cliDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	mainFS, _, _, _ := newFlagSet()
	topoFS, _, _, _ := newTopoFlagSet()
	benchFS, _, _, _, _ := newBenchFlagSet()
	for _, fset := range []*flag.FlagSet{mainFS, topoFS, benchFS} {
		fset.VisitAll(func(f *flag.Flag) {
			if !job.Hidden(f.Name) && !strings.Contains(doc, "`--"+f.Name) {
				t.Errorf("%s: no `--%s (a flag of %s)", cliDoc, f.Name, fset.Name())
			}
		})
	}
	for _, e := range jobExits {
		status := strings.TrimSuffix(strings.SplitN(e[0], "-", 2)[0], "+N")
		if !strings.Contains(doc, "| "+status) && !strings.Contains(doc, status+" ") {
			t.Errorf("%s: no exit status %s", cliDoc, e[0])
		}
	}
	// Go names a variable in a string constant; Python where it reads it.
	goName := regexp.MustCompile(`"(TPRUN_[A-Z_]+)"`)
	pyName := regexp.MustCompile(`(?:environ\.get\(|environ\[|getenv\()\s*["'](TPRUN_[A-Z_]+)["']`)
	seen := map[string]bool{}
	err = filepath.WalkDir("../..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && p != "../.." || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if d.IsDir() || !(strings.HasSuffix(p, ".go") || strings.HasSuffix(p, ".py")) ||
			strings.HasSuffix(p, "_test.go") || strings.HasPrefix(d.Name(), "test_") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		name := goName
		if strings.HasSuffix(p, ".py") {
			name = pyName
		}
		for _, m := range name.FindAllStringSubmatch(string(src), -1) {
			seen[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) < 5 {
		t.Fatalf("found only %v in the sources", seen)
	}
	for v := range seen {
		if !strings.Contains(doc, "`"+v) {
			t.Errorf("%s does not document %s", cliDoc, v)
		}
	}
}
