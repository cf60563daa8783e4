// Package cuda is tprun's binding of the CUDA driver API, loaded at run
// time: Open dlopens libcuda.so.1 and looks every function up by its exact
// (versioned) name, so nothing from the CUDA toolkit is needed to build,
// and a binary built here runs on machines with or without a GPU.
//
// What it covers: init, devices and their attributes, the primary context,
// streams, events, device and pinned host memory, copies and memset,
// modules from a fatbin, function attributes, cuLaunchKernelEx (with
// programmatic stream serialization and cluster dimensions), stream capture
// and graphs, the virtual memory management calls (create, export and
// import as POSIX FD or FABRIC handle, reserve, map, set access,
// granularity, release) and the multicast object calls (create, add device,
// bind, unbind, granularity). The multicast functions are optional: a
// driver without them still opens, HasMulticast reports false, and those
// methods fail with a *SymbolError.
//
// Errors: every failed call returns an *Error naming the operation and its
// arguments, wrapping the Result code; Result values are comparable, so
// errors.Is(err, cuda.ErrNotPermitted) works, and IsNotPermitted and
// friends are shorthands. Open without a driver fails with ErrNoDriver.
// Results print with a built-in name table before any library is loaded,
// and with the driver's own name and message after.
//
// Threads: CUDA's current context belongs to an OS thread. A goroutine
// that uses a device locks its thread and makes the context current first
// (BindContext does both).
//
// What it must not do:
//   - declare any CUDA function as a C extern: go-nvml links the whole
//     binary with --unresolved-symbols=ignore-in-object-files, so such a
//     declaration would link to nothing and crash at run time. Every call
//     goes through a dlsym'd pointer and a trampoline in trampolines.h;
//   - hold package-level state or touch the driver from init: everything
//     lives in the *Driver, and Close dlcloses it;
//   - let the driver keep Go memory past a call: host copies are
//     synchronous only, and kernel parameters and module images are copied
//     into C memory first;
//   - grow into a mirror of the whole driver API: callers declare small
//     interfaces over the methods they use, and fakes implement those.
//
// The struct layouts in cutypes.h are taken from cuda.h, pinned by
// abi_test.go, and compared with the GPU machine's real cuda.h by
// scripts/check-cuda-abi.
package cuda
