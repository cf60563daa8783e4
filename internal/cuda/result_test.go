package cuda

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

func TestResultError(t *testing.T) {
	tests := []struct {
		desc string
		r    Result
		want string
	}{
		{"known code prints name, code and message", ErrNotPermitted, "cuda: CUDA_ERROR_NOT_PERMITTED (800): operation not permitted"},
		{"invalid value", ErrInvalidValue, "cuda: CUDA_ERROR_INVALID_VALUE (1): invalid argument"},
		{"no device", ErrNoDevice, "cuda: CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected"},
		{"unknown code keeps its number", Result(917), "cuda: CUresult (917)"},
		{"negative code", Result(-3), "cuda: CUresult (-3)"},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := tc.r.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestResultString(t *testing.T) {
	if got := ErrStreamCaptureInvalidated.String(); got != "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED" {
		t.Errorf("String() = %q", got)
	}
	if got := Result(12345).String(); got != "CUresult(12345)" {
		t.Errorf("String() of unknown = %q", got)
	}
}

// Every built-in name must be unique and spelled like cuda.h's.
func TestResultTableNames(t *testing.T) {
	seen := map[string]Result{}
	for r := Result(-10); r < 1100; r++ {
		name, msg := r.builtin()
		if name == "" {
			if msg != "" {
				t.Errorf("code %d has a message but no name", int(r))
			}
			continue
		}
		if prev, dup := seen[name]; dup {
			t.Errorf("name %s used by %d and %d", name, int(prev), int(r))
		}
		seen[name] = r
		if !strings.HasPrefix(name, "CUDA_ERROR_") && name != "CUDA_SUCCESS" {
			t.Errorf("code %d: odd name %q", int(r), name)
		}
		if msg == "" {
			t.Errorf("%s has no message", name)
		}
	}
	if len(seen) < 90 {
		t.Errorf("only %d codes in the table, cuda.h 12.4 has 99", len(seen))
	}
}

func TestErrorFormattingAndIs(t *testing.T) {
	tests := []struct {
		desc string
		err  *Error
		want string
	}{
		{
			desc: "driver name and message win",
			err:  &Error{Op: "cuMemCreate(size=2097152, device=1)", Code: ErrNotPermitted, Name: "CUDA_ERROR_NOT_PERMITTED", Message: "driver says no"},
			want: "cuda: cuMemCreate(size=2097152, device=1): CUDA_ERROR_NOT_PERMITTED (800): driver says no",
		},
		{
			desc: "built-in table fills what the driver did not give",
			err:  &Error{Op: "cuInit(0)", Code: ErrNoDevice},
			want: "cuda: cuInit(0): CUDA_ERROR_NO_DEVICE (100): no CUDA-capable device is detected",
		},
		{
			desc: "unknown to both",
			err:  &Error{Op: "cuFoo", Code: Result(917)},
			want: "cuda: cuFoo: CUresult (917)",
		},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("Error() = %q, want %q", got, tc.want)
			}
			wrapped := fmt.Errorf("mailbox rank 3: %w", tc.err)
			if !errors.Is(wrapped, tc.err.Code) {
				t.Errorf("errors.Is(wrapped, %v) = false", tc.err.Code)
			}
			if errors.Is(wrapped, ErrOutOfMemory) {
				t.Errorf("errors.Is(wrapped, ErrOutOfMemory) = true for code %d", int(tc.err.Code))
			}
			if r, ok := Code(wrapped); !ok || r != tc.err.Code {
				t.Errorf("Code() = %v, %v", r, ok)
			}
		})
	}
}

func TestIsHelpers(t *testing.T) {
	mk := func(r Result) error { return fmt.Errorf("op: %w", &Error{Op: "x", Code: r}) }
	tests := []struct {
		desc string
		fn   func(error) bool
		yes  Result
		no   Result
	}{
		{"IsNotPermitted", IsNotPermitted, ErrNotPermitted, ErrNotSupported},
		{"IsNotSupported", IsNotSupported, ErrNotSupported, ErrNotPermitted},
		{"IsOutOfMemory", IsOutOfMemory, ErrOutOfMemory, ErrInvalidValue},
		{"IsNoDevice", IsNoDevice, ErrNoDevice, ErrInvalidDevice},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if !tc.fn(mk(tc.yes)) {
				t.Errorf("%s(%v) = false", tc.desc, tc.yes)
			}
			if !tc.fn(tc.yes) {
				t.Errorf("%s(bare %v) = false", tc.desc, tc.yes)
			}
			if tc.fn(mk(tc.no)) {
				t.Errorf("%s(%v) = true", tc.desc, tc.no)
			}
			if tc.fn(nil) || tc.fn(errors.New("other")) {
				t.Errorf("%s true for a non-CUDA error", tc.desc)
			}
		})
	}
	if _, ok := Code(errors.New("plain")); ok {
		t.Error("Code found a Result in a plain error")
	}
}

func TestSymbolError(t *testing.T) {
	err := fmt.Errorf("open: %w", &SymbolError{Library: "libcuda.so.1", Symbol: "cuMulticastCreate", Detail: "undefined symbol"})
	if !errors.Is(err, ErrMissingSymbol) {
		t.Error("errors.Is(err, ErrMissingSymbol) = false")
	}
	if errors.Is(err, ErrNoDriver) {
		t.Error("a missing symbol is not a missing driver")
	}
	if !strings.Contains(err.Error(), "cuMulticastCreate") {
		t.Errorf("message %q does not name the symbol", err)
	}
}
