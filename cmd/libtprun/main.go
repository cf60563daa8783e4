// Command libtprun is tprun's C interface: built with
//
//	go build -buildmode=c-shared -o libtprun.so ./cmd/libtprun
//
// it is the shared library whose functions include/tprun.h declares and
// documents (that header is the reference; the libtprun.h the build writes
// beside the library is cgo's own). The Python package python/tprun loads
// it with ctypes.
//
// The functions are thin: each turns its C arguments into a call of package
// tp, and the call's error into a status code and the calling thread's last
// error. Handles are integer ids looked up in a registry (registry.go), so
// no Go pointer crosses the interface, a stale or foreign handle is an
// error rather than a crash, and closing a group closes its ops.
//
// What this package must not do: keep state per call outside the registry
// and the C thread-locals (lasterror.c), block a call on anything but the
// tp call it makes, or let a Go panic reach the caller (each exported
// function turns one into TPRUN_EINTERNAL).
package main

func main() {}
