package cuda

/*
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
*/
import "C"

import (
	"errors"
	"runtime"
	"unsafe"
)

// library is a dlopen handle, kept apart from the binding in the manner of
// go-nvml's pkg/dl.
type library struct {
	path   string
	handle unsafe.Pointer
}

// dlerror's text is per thread, so every dl call and the dlerror that
// follows it must run on one OS thread.
func withOSThread(f func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return f()
}

func dlError() error {
	msg := C.dlerror()
	if msg == nil {
		return nil
	}
	return errors.New(C.GoString(msg))
}

// openLibrary dlopens path with RTLD_NOW|RTLD_LOCAL: everything resolves
// now (a broken driver fails here, not mid-run) and nothing leaks into the
// global namespace where it could shadow another library's symbols.
func openLibrary(path string) (*library, error) {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	l := &library{path: path}
	err := withOSThread(func() error {
		_ = dlError()
		h := C.dlopen(cpath, C.RTLD_NOW|C.RTLD_LOCAL)
		if h == nil {
			if err := dlError(); err != nil {
				return err
			}
			return errors.New("dlopen failed")
		}
		l.handle = h
		return nil
	})
	if err != nil {
		return nil, err
	}
	return l, nil
}

// lookup returns the address of symbol, or an error with dlerror's text.
func (l *library) lookup(symbol string) (unsafe.Pointer, error) {
	csym := C.CString(symbol)
	defer C.free(unsafe.Pointer(csym))
	var p unsafe.Pointer
	err := withOSThread(func() error {
		_ = dlError()
		p = C.dlsym(l.handle, csym)
		if p == nil {
			if err := dlError(); err != nil {
				return err
			}
			return errors.New("symbol is NULL")
		}
		return nil
	})
	return p, err
}

func (l *library) close() error {
	if l.handle == nil {
		return nil
	}
	return withOSThread(func() error {
		_ = dlError()
		if C.dlclose(l.handle) != 0 {
			return dlError()
		}
		l.handle = nil
		return nil
	})
}
