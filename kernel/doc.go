// Package kernel holds the numerics of tprun's fused up-projection: the bf16
// type and its roundings, the shape and layout rules every backend obeys,
// the float64 reference (the yardstick every result is checked against, with
// a tolerance derived from the roundings the operation is allowed to make),
// and the CPU implementation the host backend runs.
//
// The operation, for every m < M and n < shard:
//
//	S        = sum_k f32(latent[m,k]) * f32(weight[n,k])   (fp32 accumulation)
//	out[m,n] = bf16( f32(bf16(S)) + f32(shared[m,n]) )     (round to nearest even)
//
// with negative zero stored as +0 so that a written word is never the
// mailbox sentinel.
//
// The CUDA sources (skinny.h: the parameter blocks; skinny_prims.cuh: the
// primitives; skinny.cu: the tile template for M up to 8; bigm.cu: the
// tensor-core tile for M 9..128; receive.cu), the spec of the entry point
// families (families.tsv, from which scripts/build-kernels writes the
// instance list), the embedded compiled kernels (fatbin.go), their launch
// tables (config.go: config_table.tsv, step_table.tsv for launches that
// carry the fused receive, bigm_table.tsv for M above 8) and the Go launch of them
// (launch.go, through internal/cuda and so cgo) live in this package too. Among them is the GPU half of the Lamport receive (receive.cu,
// LaunchReceive, DecodeReceiveStatus): it polls a slot it is given for the
// sentinel word, copies it out and re-arms it; where the slot lives and
// which step uses it is the mailbox package's business. The numeric files
// (bf16, shape, reference, cpu, random) are pure Go and must stay so: no
// cgo, no device calls, no package state. Everything validates its shape
// and buffer lengths and returns an error wrapping ErrShape instead of
// panicking, because shapes come from command-line flags and other ranks.
//
// The kernels can also take the mailbox slot from a counter on the device
// and advance it there (SlotRotation), so that a graph holding one step can
// be replayed; the caller sets the counter up and says how many slots there
// are and how far apart.
//
// What this package must not do: talk to other ranks, allocate, map or
// choose mailbox slots, order steps (the Lamport protocol's rules live in
// the mailbox package; the kernels only promise that a store never
// produces the sentinel word and that the receive ends at its deadline),
// or pick a backend.
package kernel
