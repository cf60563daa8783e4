package kernel

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// sourcesHash recomputes scripts/build-kernels' stamp: for each file, its
// repository path, "\n", its size in decimal, "\n", its bytes; sha256 of
// the whole stream in hex.
func sourcesHash(root string, files []string) (string, error) {
	h := sha256.New()
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(f)))
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\n%d\n", f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

func TestFatbinStampMatchesSources(t *testing.T) {
	got, err := sourcesHash("..", FatbinSources[:])
	if err != nil {
		t.Fatalf("hashing the kernel sources: %v", err)
	}
	if got != FatbinStamp() {
		t.Fatalf("kernel sources changed: run scripts/build-kernels on a GPU machine and commit "+
			"kernel/kernels.fatbin* (sources hash %s, stamp %s)", got, FatbinStamp())
	}
}

func TestSourcesHashDetectsChanges(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files := []string{"a/x.cu", "b"}
	write("a/x.cu", "kernel")
	write("b", "script")
	base, err := sourcesHash(dir, files)
	if err != nil {
		t.Fatal(err)
	}
	// The stream format itself, as the shell script writes it.
	want := sha256.Sum256([]byte("a/x.cu\n6\nkernelb\n6\nscript"))
	if base != hex.EncodeToString(want[:]) {
		t.Fatalf("hash %s, want %x", base, want)
	}
	cases := []struct {
		desc  string
		name  string
		body  string
		files []string
	}{
		{"content change", "a/x.cu", "kernel ", files},
		{"bytes moved between files", "b", "lscript", files},
		{"order of files", "", "", []string{"b", "a/x.cu"}},
	}
	for _, tc := range cases {
		if tc.name != "" {
			write("a/x.cu", "kernel")
			write("b", "script")
			write(tc.name, tc.body)
		}
		got, err := sourcesHash(dir, tc.files)
		if err != nil {
			t.Fatalf("%s: %v", tc.desc, err)
		}
		if got == base {
			t.Errorf("%s: hash unchanged", tc.desc)
		}
	}
	if _, err := sourcesHash(dir, []string{"missing"}); err == nil {
		t.Error("a missing source file hashed without error")
	}
}

func TestFatbinIsAFatbin(t *testing.T) {
	b := Fatbin()
	// fatBinaryHeader: magic 0xBA55ED50, then version and header size.
	if len(b) < 16 || binary.LittleEndian.Uint32(b) != 0xBA55ED50 {
		t.Fatalf("embedded kernels.fatbin (%d bytes) does not start with the fatbin magic", len(b))
	}
	// Every entry point ConfigFor can name, as a whole symbol (the name
	// and its NUL: "tprun_skinny_m8_d8p" alone also matches "..._d8p1").
	for _, name := range append(mustSkinnyFunctions(), receiveName, receiveName+rotSuffix) {
		if !bytes.Contains(b, append([]byte(name), 0)) {
			t.Errorf("fatbin has no symbol %s", name)
		}
	}
	b[0] ^= 0xff
	if Fatbin()[0] == b[0] {
		t.Error("Fatbin returned the embedded bytes themselves, not a copy")
	}
}
