package main

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/base64"
	"encoding/csv"
	"encoding/json"
	"io"
	"io/fs"
	"maps"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The package's build backend (python/_build/tprun_build.py), called the
// way pip calls it: build_wheel builds libtprun.so with the go command and
// packs it; the wheel, unpacked into a site folder of its own, runs the
// host-backend rank program with no TPRUN_LIB and no path to the sources.

// backendCall runs code in py with the backend importable as b, in the
// repository root; it returns the output and fails the test on a non-zero
// exit.
func backendCall(t *testing.T, py string, env []string, code string, args ...string) string {
	t.Helper()
	root := repoRoot(t)
	prelude := "import sys; sys.path.insert(0, sys.argv[1]); import tprun_build as b\n"
	cmd := exec.Command(py, append([]string{"-B", "-c", prelude + code, filepath.Join(root, "python", "_build")}, args...)...)
	cmd.Dir = root
	cmd.Env = append(cleanEnv(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("the backend (%s): %v\n%s", code, err, out)
	}
	return string(out)
}

// wheel is a wheel's files by name, checked against its RECORD.
type wheel struct {
	name  string
	files map[string][]byte
	info  string // NAME-VERSION.dist-info
}

// readWheel opens a wheel and checks that its RECORD lists every file
// with its sha256 and size, and nothing else.
func readWheel(t *testing.T, path string) wheel {
	t.Helper()
	zr, err := zip.OpenReader(path)
	if err != nil {
		t.Fatal(err)
	}
	defer zr.Close()
	w := wheel{name: filepath.Base(path), files: map[string][]byte{}}
	for _, f := range zr.File {
		rc, err := f.Open()
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			t.Fatalf("%s in %s: %v", f.Name, w.name, err)
		}
		if _, dup := w.files[f.Name]; dup {
			t.Errorf("%s: %s twice", w.name, f.Name)
		}
		w.files[f.Name] = b
		if strings.HasSuffix(f.Name, ".dist-info/RECORD") {
			w.info = strings.TrimSuffix(f.Name, "/RECORD")
		}
	}
	if w.info == "" {
		t.Fatalf("%s has no .dist-info/RECORD; it holds %v", w.name, names(w.files))
	}
	rows, err := csv.NewReader(bytes.NewReader(w.files[w.info+"/RECORD"])).ReadAll()
	if err != nil {
		t.Fatalf("%s/RECORD: %v", w.info, err)
	}
	recorded := map[string]bool{}
	for _, row := range rows {
		if len(row) != 3 {
			t.Errorf("RECORD row %q: want path,hash,size", row)
			continue
		}
		recorded[row[0]] = true
		data, ok := w.files[row[0]]
		switch {
		case !ok:
			t.Errorf("RECORD names %s, which the wheel lacks", row[0])
		case row[0] == w.info+"/RECORD":
			if row[1] != "" || row[2] != "" {
				t.Errorf("RECORD's own row %q: want no hash and no size", row)
			}
		default:
			sum := sha256.Sum256(data)
			if want := "sha256=" + base64.RawURLEncoding.EncodeToString(sum[:]); row[1] != want {
				t.Errorf("RECORD: %s has %s, its bytes %s", row[0], row[1], want)
			}
			if row[2] != strconv.Itoa(len(data)) {
				t.Errorf("RECORD: %s has size %s, its bytes %d", row[0], row[2], len(data))
			}
		}
	}
	for n := range w.files {
		if !recorded[n] {
			t.Errorf("RECORD does not list %s", n)
		}
	}
	return w
}

func names(m map[string][]byte) []string { return slices.Sorted(maps.Keys(m)) }

// header returns the value of a "Key: value" line of an email-style file.
func header(t *testing.T, file, text, key string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(key) + `: (.*)$`).FindStringSubmatch(text)
	if m == nil {
		t.Fatalf("%s has no %s line:\n%s", file, key, text)
	}
	return m[1]
}

// unpack writes the wheel's files under dir, as pip installs a wheel whose
// Root-Is-Purelib is false into a site folder.
func unpack(t *testing.T, w wheel, dir string) {
	t.Helper()
	for n, b := range w.files {
		p := filepath.Join(dir, filepath.FromSlash(n))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// treeNames lists the files under dir (the source tree the backend must
// leave as it was).
func treeNames(t *testing.T, dir string) []string {
	t.Helper()
	var s []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		s = append(s, p)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// imported prints where tprun is imported from, run outside the
// repository with only env's PYTHONPATH.
func imported(t *testing.T, py string, env []string) (libPath, version string) {
	t.Helper()
	cmd := exec.Command(py, "-c", "import tprun; print(tprun.library_path()); print(tprun.version())")
	cmd.Dir = t.TempDir()
	cmd.Env = append(cleanEnv(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("import tprun with %v: %v\n%s", env, err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("import tprun: want two lines, got:\n%s", out)
	}
	return lines[0], lines[1]
}

func TestPythonWheel(t *testing.T) {
	py, srcEnv := python(t)
	root := repoRoot(t)
	pkgDir := filepath.Join(root, "python")
	before := treeNames(t, pkgDir)
	defer func() {
		if after := treeNames(t, pkgDir); !slices.Equal(before, after) {
			t.Errorf("building changed the files under %s:\nbefore %v\nafter  %v", pkgDir, before, after)
		}
	}()
	// The library as the package loads it from the sources, for its
	// version line.
	_, srcVersion := imported(t, py, srcEnv)

	// The real build: the backend runs go build.
	wheelDir := t.TempDir()
	start := time.Now()
	name := lastLine([]byte(backendCall(t, py, nil, "print(b.build_wheel(sys.argv[2]))", wheelDir)))
	t.Logf("build_wheel: %s in %v", name, time.Since(start).Round(time.Millisecond))
	if entries, _ := os.ReadDir(wheelDir); len(entries) != 1 || entries[0].Name() != name {
		t.Fatalf("the wheel folder holds %v, want %s alone", entries, name)
	}
	w := readWheel(t, filepath.Join(wheelDir, name))

	// Every source file of the package, byte for byte, and the library.
	srcs, err := filepath.Glob(filepath.Join(pkgDir, "tprun", "*.py"))
	if err != nil || len(srcs) < 5 {
		t.Fatalf("python/tprun/*.py: %v %v", srcs, err)
	}
	for _, p := range append(srcs, filepath.Join(pkgDir, "tprun", "README.md")) {
		src, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		n := "tprun/" + filepath.Base(p)
		if got, ok := w.files[n]; !ok || !bytes.Equal(got, src) {
			t.Errorf("%s: %s missing or not the source's bytes (present: %v)", name, n, ok)
		}
	}
	lib, ok := w.files["tprun/libtprun.so"]
	if !ok {
		t.Fatalf("%s has no tprun/libtprun.so; it holds %v", name, names(w.files))
	}
	for n := range w.files {
		if strings.HasSuffix(n, ".pyc") || strings.Contains(n, "__pycache__") || strings.HasSuffix(n, ".h") {
			t.Errorf("%s holds %s, a build output", name, n)
		}
	}

	// The version: the one Go stamped into the packed library, in PEP 440's
	// words (the conversion is TestPythonWheelVersion's), in the file name,
	// METADATA and the dist-info folder.
	libFile := filepath.Join(t.TempDir(), "libtprun.so")
	if err := os.WriteFile(libFile, lib, 0o644); err != nil {
		t.Fatal(err)
	}
	bi, err := buildinfo.ReadFile(libFile)
	if err != nil {
		t.Fatalf("the packed library's build information: %v", err)
	}
	if bi.Path != "github.com/tprun/tprun/cmd/libtprun" {
		t.Errorf("the packed library was built from %s", bi.Path)
	}
	trimmed := false
	for _, s := range bi.Settings {
		trimmed = trimmed || s.Key == "-trimpath" && s.Value == "true"
	}
	if !trimmed {
		t.Errorf("the packed library was not built with -trimpath: %v", bi.Settings)
	}
	var conv []string
	if err := json.Unmarshal([]byte(lastLine([]byte(backendCall(t, py, nil,
		"import json; print(json.dumps([b.pep440(sys.argv[2]), b.platform_tag()]))", bi.Main.Version)))), &conv); err != nil {
		t.Fatal(err)
	}
	version, plat := conv[0], conv[1]
	if want := "tprun-" + version + "-py3-none-" + plat + ".whl"; name != want {
		t.Errorf("the wheel is %s, want %s (module version %s)", name, want, bi.Main.Version)
	}
	if w.info != "tprun-"+version+".dist-info" {
		t.Errorf("the wheel's dist-info is %s, want version %s", w.info, version)
	}
	meta := string(w.files[w.info+"/METADATA"])
	if v := header(t, "METADATA", meta, "Version"); v != version {
		t.Errorf("METADATA has version %s, want %s", v, version)
	}
	if n := header(t, "METADATA", meta, "Name"); n != "tprun" {
		t.Errorf("METADATA has name %s", n)
	}
	wh := string(w.files[w.info+"/WHEEL"])
	if tag := header(t, "WHEEL", wh, "Tag"); tag != "py3-none-"+plat {
		t.Errorf("WHEEL has tag %s, want py3-none-%s", tag, plat)
	}
	if p := header(t, "WHEEL", wh, "Root-Is-Purelib"); p != "false" {
		t.Errorf("WHEEL: Root-Is-Purelib %s, want false (the wheel holds a platform library)", p)
	}

	// Installed: the package finds the library beside itself, and a job of
	// two ranks runs on it.
	site := t.TempDir()
	unpack(t, w, site)
	env := []string{"PYTHONPATH=" + site, "PYTHONDONTWRITEBYTECODE=1"}
	libPath, libVersion := imported(t, py, env)
	if want := filepath.Join(site, "tprun", "libtprun.so"); libPath != want {
		t.Errorf("the installed package loads %s, want %s", libPath, want)
	}
	if libVersion != srcVersion {
		t.Errorf("the installed library says %q, the one built from the same sources %q", libVersion, srcVersion)
	}
	seed := rand.Uint32()
	j := launch(t, 2, env, 2*time.Minute, py, filepath.Join(root, "python", "tests", "host_rank.py"), strconv.FormatUint(uint64(seed), 10))
	if j.code != 0 {
		t.Fatalf("the installed package, tp 2, seed %d: exit status %d:\n%s", seed, j.code, j.out)
	}
	everyRankSays(t, j, 2, `(?m)^\[rank %d\] rank %[1]d: ok: \d+ steps, \d+ elements checked, 0 wrong, every block identical`)

	// pip, where this Python has it, with the library the other tests
	// built (TPRUN_PREBUILT_LIB): pip's own handling of the project.
	t.Run("pip", func(t *testing.T) {
		if out, err := exec.Command(py, "-m", "pip", "--version").CombinedOutput(); err != nil {
			t.Skipf("%s has no pip (%v): %s", py, err, lastLine(out))
		}
		prebuilt := filepath.Join(built(t), "libtprun.so")
		target := t.TempDir()
		cmd := exec.Command(py, "-m", "pip", "install", "--no-build-isolation", "--no-index", "--no-deps",
			"--target", target, "./python")
		cmd.Dir = root
		cmd.Env = append(cleanEnv(), "TPRUN_PREBUILT_LIB="+prebuilt, "PYTHONDONTWRITEBYTECODE=1",
			"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_CACHE_DIR=1", "PIP_NO_INPUT=1")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", strings.Join(cmd.Args, " "), err, out)
		}
		libPath, libVersion := imported(t, py, []string{"PYTHONPATH=" + target, "PYTHONDONTWRITEBYTECODE=1"})
		if want := filepath.Join(target, "tprun", "libtprun.so"); libPath != want {
			t.Errorf("the package pip installed loads %s, want %s", libPath, want)
		}
		if libVersion != srcVersion {
			t.Errorf("the library pip installed says %q, want %q", libVersion, srcVersion)
		}
		got, err := os.ReadFile(libPath)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(prebuilt)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("pip installed a libtprun.so other than %s", prebuilt)
		}
	})
}

// TestPythonWheelErrors: what the backend says when it cannot build, and
// that it then leaves no wheel behind.
func TestPythonWheelErrors(t *testing.T) {
	py, _ := python(t)
	root := repoRoot(t)
	gomod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	goLine := regexp.MustCompile(`(?m)^go (\S+)$`).FindSubmatch(gomod)
	if goLine == nil {
		t.Fatalf("go.mod has no go line")
	}
	need := "Go " + string(goLine[1]) + " or later is needed to build libtprun.so"
	tmp := t.TempDir()
	fakeGo := filepath.Join(tmp, "go")
	// An old go whose build fails.
	script := "#!/bin/sh\nif [ \"$1\" = env ]; then echo go1.20.1; exit 0; fi\necho \"cannot build: $*\" >&2\nexit 3\n"
	if err := os.WriteFile(fakeGo, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	notLib := filepath.Join(tmp, "libtprun.so")
	if err := os.WriteFile(notLib, []byte("not a shared library\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		desc     string
		hook     string // build_wheel or build_sdist
		settings string // config_settings, JSON
		env      []string
		want     []string
	}{
		{"config setting go names no file", "build_wheel", `{"go": "` + filepath.Join(tmp, "nothing") + `"}`, nil,
			[]string{"config setting go=" + filepath.Join(tmp, "nothing") + " is not an executable file", need, "https://go.dev/dl", "TPRUN_PREBUILT_LIB"}},
		{"the go build fails", "build_wheel", `{"go": "` + fakeGo + `"}`, nil,
			[]string{"failed with exit status 3", "cannot build: build -buildmode=c-shared -trimpath -o ", "./cmd/libtprun",
				"this go command is go1.20.1: " + need}},
		{"TPRUN_PREBUILT_LIB names no file", "build_wheel", `{}`, []string{"TPRUN_PREBUILT_LIB=" + filepath.Join(tmp, "none.so")},
			[]string{"TPRUN_PREBUILT_LIB=" + filepath.Join(tmp, "none.so") + ": no such file", "go build -buildmode=c-shared"}},
		{"TPRUN_PREBUILT_LIB names no library", "build_wheel", `{}`, []string{"TPRUN_PREBUILT_LIB=" + notLib},
			[]string{"the package cannot use " + notLib, "LibraryError", "loading libtprun.so from TPRUN_LIB=" + notLib}},
		{"no sdist", "build_sdist", `{}`, nil,
			[]string{"no source distribution", "pip install ./python", "#subdirectory=python", "pip wheel"}},
	} {
		t.Run(c.desc, func(t *testing.T) {
			out := t.TempDir()
			code := `import json
try:
    getattr(b, sys.argv[2])(sys.argv[3], json.loads(sys.argv[4]))
except b.BuildError as e:
    print("BuildError:", e)
else:
    print("no error")
`
			got := backendCall(t, py, c.env, code, c.hook, out, c.settings)
			if !strings.HasPrefix(got, "BuildError: ") {
				t.Fatalf("want a BuildError, got:\n%s", got)
			}
			for _, w := range c.want {
				if !strings.Contains(got, w) {
					t.Errorf("the error does not say %q:\n%s", w, got)
				}
			}
			if entries, _ := os.ReadDir(out); len(entries) != 0 {
				t.Errorf("a failed build left %v", entries)
			}
		})
	}
}

// TestPythonWheelVersion: the wheel's version from the library's version
// line, for every form of version Go stamps.
func TestPythonWheelVersion(t *testing.T) {
	py, _ := python(t)
	cases := []struct{ desc, line, want string }{
		{"no version control information", "tprun (devel), C interface version 1", "0+devel"},
		{"a release tag", "tprun v1.2.3, C interface version 1, go1.26.8, revision 0123456789abcdef0123456789abcdef01234567", "1.2.3"},
		{"a release candidate", "tprun v1.2.3-rc.2, C interface version 1, go1.26.8", "1.2.3rc2"},
		{"a beta, semver spelling", "tprun v0.4.0-beta.1, C interface version 1, go1.26.8", "0.4.0b1"},
		{"a pre-release PEP 440 has no word for", "tprun v1.0.0-nightly.7, C interface version 1, go1.26.8", "1.0.0.dev0+nightly.7"},
		{"a commit, no tag before it", "tprun v0.0.0-20250102030405-0123456789ab, C interface version 1, go1.26.8", "0.0.0.dev20250102030405+g0123456789ab"},
		{"a commit after a release", "tprun v1.2.4-0.20250102030405-0123456789ab, C interface version 1, go1.26.8", "1.2.4.dev20250102030405+g0123456789ab"},
		{"a commit after a release candidate", "tprun v1.2.3-rc.1.0.20250102030405-0123456789ab, C interface version 1, go1.26.8", "1.2.3rc1.post0.dev20250102030405+g0123456789ab"},
		{"uncommitted changes", "tprun v0.0.0-20250102030405-0123456789ab+dirty, C interface version 1, go1.26.8, revision x (modified)", "0.0.0.dev20250102030405+g0123456789ab.dirty"},
		{"a tag with uncommitted changes", "tprun v1.2.3+dirty, C interface version 1, go1.26.8", "1.2.3+dirty"},
		{"not a version line", "libfoo 1.0", "BuildError"},
		{"not a Go module version", "tprun 1.2, C interface version 1", "BuildError"},
	}
	var lines []string
	for _, c := range cases {
		lines = append(lines, c.line)
	}
	in, err := json.Marshal(lines)
	if err != nil {
		t.Fatal(err)
	}
	code := `import json
out = []
for line in json.loads(sys.argv[2]):
    try:
        out.append(b.wheel_version(line))
    except b.BuildError as e:
        out.append("BuildError")
print(json.dumps(out))
`
	var got []string
	if err := json.Unmarshal([]byte(lastLine([]byte(backendCall(t, py, nil, code, string(in))))), &got); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(cases) {
		t.Fatalf("got %d versions for %d lines: %v", len(got), len(cases), got)
	}
	for i, c := range cases {
		if got[i] != c.want {
			t.Errorf("%s: %q gives %q, want %q", c.desc, c.line, got[i], c.want)
		}
	}
}
