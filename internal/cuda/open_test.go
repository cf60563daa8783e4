package cuda

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"
)

// On the CPU-only CI machine there is no libcuda: Open must say so cleanly.
func TestOpenWithoutDriver(t *testing.T) {
	d, err := Open()
	if err == nil {
		_ = d.Close()
		t.Skip("libcuda.so.1 is loadable here; this test is for machines without a driver")
	}
	if !errors.Is(err, ErrNoDriver) {
		t.Fatalf("Open() error %v does not wrap ErrNoDriver", err)
	}
	if !strings.Contains(err.Error(), "libcuda.so.1") {
		t.Errorf("error %q does not name the library", err)
	}
	if d != nil {
		t.Error("Open returned a Driver together with an error")
	}
}

func TestOpenLibraryErrors(t *testing.T) {
	tests := []struct {
		desc    string
		path    string
		want    error
		mention string
	}{
		{"missing file", filepath.Join(t.TempDir(), "libcuda.so.1"), ErrNoDriver, "No such file"},
		{"not a shared object", "/etc/hostname", ErrNoDriver, "/etc/hostname"},
		// libc loads fine but has none of the driver's functions: the error
		// names the first one looked up.
		{"library without the driver API", "libc.so.6", ErrMissingSymbol, "cuGetErrorName"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			d, err := OpenLibrary(tc.path)
			if err == nil {
				_ = d.Close()
				t.Fatalf("OpenLibrary(%q) succeeded", tc.path)
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("error %v is not %v", err, tc.want)
			}
			if !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("error %q does not mention %q", err, tc.mention)
			}
		})
	}
}

// A zero Driver (never opened) behaves like a closed one instead of
// calling through nil function pointers.
func TestZeroDriverIsClosed(t *testing.T) {
	var d Driver
	if err := d.Init(); !errors.Is(err, ErrClosed) {
		t.Errorf("Init on zero Driver: %v", err)
	}
	if _, err := d.MemAlloc(16); !errors.Is(err, ErrClosed) {
		t.Errorf("MemAlloc on zero Driver: %v", err)
	}
	if d.HasMulticast() {
		t.Error("zero Driver has multicast")
	}
	if err := d.Close(); err != nil {
		t.Errorf("Close on zero Driver: %v", err)
	}
}

func TestSymbolTableComplete(t *testing.T) {
	seen := map[string]bool{}
	for i, s := range symbolTable() {
		if s.name == "" {
			t.Errorf("sym %d has no name", i)
		}
		if !strings.HasPrefix(s.name, "cu") {
			t.Errorf("sym %d: %q is not a driver API name", i, s.name)
		}
		if seen[s.name] {
			t.Errorf("%s listed twice", s.name)
		}
		seen[s.name] = true
		if s.optional != strings.HasPrefix(s.name, "cuMulticast") {
			t.Errorf("%s optional=%v; only the multicast calls may be missing", s.name, s.optional)
		}
	}
}
