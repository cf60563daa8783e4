/*
 * tprun.h: the C interface of tprun's fused tensor-parallel up-projection.
 * This comment is the reference for every function below.
 *
 * WHAT IT COMPUTES
 *
 * Each of the N ranks of a job (N processes, one per GPU or several sharing
 * one; on one node, or across the nodes of one NVLink domain) holds its rows of an up-projection weight and its
 * columns of a residual. One step multiplies the same small bf16 activation
 * block by the rank's weight shard, adds the rank's residual slice, and
 * stores the result straight into every rank's mailbox, so that every rank
 * ends up holding the whole [M, hidden] block. With shard = hidden / N and
 * r this rank, for every m < M and n < shard:
 *
 *     S                 = sum_k latent[m,k] * weight[n,k]     (fp32 accumulation)
 *     out[m, r*shard+n] = bf16( f32(bf16(S)) + f32(shared[m,n]) )
 *
 * rounding to nearest even, and a negative zero stored as +0.
 *
 * SHAPES
 *
 *   hidden   a multiple of N, with shard = hidden / N a multiple of 8
 *   latent   a multiple of 8, at most 1048576
 *   max_m    1..128; every step's m is 1..max_m
 *   N        1..16
 *
 * DATA
 *
 * bf16 values are passed as their 16-bit patterns (uint16_t, the upper
 * half of an IEEE float32), row-major, in native (little-endian) order:
 *
 *   weight   [shard, latent], this rank's rows of the [hidden, latent] weight
 *            (a weight passed with a device step is in the packed layout
 *            instead: see "A WEIGHT PER STEP")
 *   latent   [m, latent], the same on every rank
 *   shared   [m, shard] at row stride shared_stride (elements): element
 *            (i, n) is shared[i*shared_stride + n]. Pass the full
 *            [m, hidden] residual advanced by r*shard elements with stride
 *            hidden, or a packed [m, shard] slice with stride shard. The
 *            stride is a multiple of 8 and at least shard.
 *   out      [m, hidden], receives the whole block, every rank's slice
 *
 * Device pointers and the weight must be 16-byte aligned (host buffers need
 * only uint16_t alignment). out must not overlap the operands.
 *
 * A WEIGHT PER STEP
 *
 * An op holds a weight of its own (tprun_op_set_weight_*), but a step may
 * name another one instead: tprun_op_step_weight and
 * tprun_op_step_host_weight. A model has tens of layers of one shape; one
 * op shared by them, each step naming its layer's weight, costs one
 * mailbox instead of one per layer, and a CUDA graph of many steps of one
 * op runs faster than one step on each of many ops (docs/performance.md,
 * "The stream-ordered step"). The two steps take the weight in different
 * layouts:
 *
 *   device   the PACKED layout (tprun_pack_weight, tprun_packed_weight_len
 *            elements), in device memory the caller keeps: the kernels
 *            read only that layout, there is no packing kernel, and a
 *            step queued on a stream (or replayed from a graph) must not
 *            do host work on the weight. Pack each layer's weight once,
 *            on the host with tprun_pack_weight and copy it over, or on
 *            the device with the permutation written out in
 *            python/tprun/_torch.py.
 *   host     row-major [shard, latent], like tprun_op_set_weight_host:
 *            the host backend's CPU kernel reads that layout, and on a
 *            CUDA backend the op packs it and copies it to the device at
 *            every such step (slow; for tests and small models).
 *
 * The packed layout (kernel/skinny.h is its reference): rows in groups of
 * 16, k in chunks of 32, G = ceil(shard/16), C = ceil(latent/32); element
 * (n, k) of the row-major weight is at
 *
 *     (g*C + c)*512 + (q*32 + l)*8 + e
 *
 * with g = n/16, c = k/32, l = 4*(n%8) + (k%32)/8, q = (k%8)/4 and
 * e = 2*(2*((k%4)/2) + (n%16)/8) + k%2; the G*C*512 elements not so
 * reached are zeros.
 *
 * STATUS AND THE LAST ERROR
 *
 * Every function that can fail returns an int: TPRUN_OK (0), or one of the
 * negative TPRUN_E* codes below. After a failure, tprun_last_error()
 * returns a message for a person (which call, which rank, which argument
 * and rule), and tprun_last_error_rank() the rank to blame where one is
 * known. The last error is kept per OS thread: a failure on one thread
 * never changes what another thread reads. A successful call leaves it as
 * it was (like errno), so read it only after a negative status.
 *
 * HANDLES AND OWNERSHIP
 *
 * tprun_group and tprun_op are opaque handles (small integer ids, never
 * memory addresses; no pointer into the library's managed memory crosses
 * this interface). Each is released by its close function. A handle used
 * after its close fails with TPRUN_ECLOSED; an id the library never issued
 * fails with TPRUN_EINVAL; neither crashes. Closing a group closes the
 * ops made from it. Strings returned by tprun_op_backend and
 * tprun_op_backend_reason belong to the op and stay valid until it is
 * closed; tprun_version's and tprun_last_error's belong to the library
 * (the latter until the next failure on the same thread). Caller buffers
 * are only read or written during the call that receives them, except the
 * device pointers given to tprun_op_step and tprun_op_step_weight (the
 * weight included), which the queued step uses when it runs on the stream
 * (as any kernel launch would).
 *
 * COLLECTIVES AND ORDER
 *
 * tprun_join, tprun_op_create(_ex), tprun_group_barrier and
 * tprun_group_allgather are collectives: every rank makes the same such
 * calls in the same order, with the same arguments where stated. Every
 * rank runs the same number of steps of an op, with the same m each time.
 *
 * THREADING
 *
 * Every function may be called from any thread. The steps, weight setting
 * and synchronizations of one op must not overlap: a call that starts
 * while another runs fails with TPRUN_EBUSY. Different ops may step from
 * different threads, as long as every rank issues them in one order.
 * tprun_op_close (or tprun_group_close) may be called from another thread
 * while a step waits; that step then fails with TPRUN_ECLOSED.
 *
 * FAILURES
 *
 * Nothing waits forever. A peer that dies or aborts (tprun_group_abort)
 * makes the calls that wait for it fail at once with TPRUN_EABORTED naming
 * it. A peer that stalls makes a step fail at the op's deadline (10 s
 * unless tprun_op_create_ex sets it) with TPRUN_ETIMEOUT naming the ranks
 * whose slices did not arrive; the job then fails on every rank. A peer
 * that leaves cleanly (tprun_group_close) fails at once only the
 * collectives it should have joined; a step waiting for its slice fails at
 * the deadline, as for a stall. A rank program that fails should therefore
 * abort rather than close. After any of these, the op is unusable and the
 * rank program should close it and exit.
 *
 * THE GO RUNTIME
 *
 * libtprun.so is written in Go. Loading it starts a Go runtime in the
 * process (a few threads); only one Go c-shared library can live in a
 * process. The runtime installs handlers for SIGSEGV, SIGBUS, SIGFPE,
 * SIGPIPE and SIGURG (with which it preempts its own threads), passing
 * signals that are not its own on to the handlers that were there, and
 * keeps every other existing handler, adding SA_ONSTACK; it installs none
 * for SIGINT or SIGTERM. A handler installed after loading must use
 * SA_ONSTACK. Do not fork() after loading unless the child only calls
 * exec.
 *
 * BUILD AND RUN
 *
 *   go build -buildmode=c-shared -o libtprun.so ./cmd/libtprun
 *   cc -I include app.c -L. -ltprun -Wl,-rpath,'$ORIGIN' -o app
 *   tprun --tp 2 -- ./app        (or torchrun, srun, mpirun; across nodes see docs/cli.md)
 *
 * The build also writes libtprun.h, a header generated for the Go side's
 * own use; this file is the one to include.
 */
#ifndef TPRUN_H
#define TPRUN_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The interface version: it changes when a signature or a meaning below
 * changes, not when a function is added (a program that calls a function
 * an older library lacks fails to load against it, naming the symbol).
 * tprun_abi_version() returns the library's. */
#define TPRUN_ABI_VERSION 1

/* Status codes. */
#define TPRUN_OK 0
#define TPRUN_EINVAL (-1)      /* a bad argument: a null pointer, a shape,
				  an alignment, m outside 1..max_m, an id
				  never issued, a bad launch environment */
#define TPRUN_EABORTED (-2)    /* the job failed: a peer died, left or
				  aborted, the ranks disagreed, or an earlier
				  failure broke the op */
#define TPRUN_ETIMEOUT (-3)    /* a peer's slice did not arrive within the
				  deadline (the ranks are named) */
#define TPRUN_EUNAVAILABLE (-4) /* the backend cannot run here: no GPU or
				  CUDA driver for a device call, a device
				  call on the host backend */
#define TPRUN_EBUSY (-5)       /* another call of the same op is running */
#define TPRUN_ECLOSED (-6)     /* the handle, its group or its mailbox was
				  closed */
#define TPRUN_EINTERNAL (-7)   /* anything else (the message says what) */

/* Device choices for tprun_op_create. */
#define TPRUN_DEVICE_GROUP (-1) /* the group's device: tprun_group_device() */
#define TPRUN_DEVICE_HOST (-2)  /* the host backend: CPU kernel, shared
				   memory mailbox, host pointers only */

typedef struct tprun_group tprun_group;
typedef struct tprun_op tprun_op;

/* ---- library ---------------------------------------------------------- */

/* tprun_version returns a line naming the library's version and build. */
const char *tprun_version(void);

/* tprun_abi_version returns TPRUN_ABI_VERSION as the library was built
 * with; a program built against another value must not use it. */
int tprun_abi_version(void);

/* tprun_last_error returns the message of the last failure on the calling
 * thread, or "" when there was none. */
const char *tprun_last_error(void);

/* tprun_last_error_rank returns the rank the last failure on the calling
 * thread blames (the peer that died, aborted or stalled; the first one when
 * several did), or -1 when it blames none. */
int tprun_last_error_rank(void);

/* tprun_last_error_ranks stores up to cap ranks the last failure on the
 * calling thread blames into ranks, ascending, and returns how many it
 * blames (which may exceed cap). */
int tprun_last_error_ranks(int *ranks, int cap);

/* tprun_status_name returns the name of a status code ("TPRUN_ETIMEOUT"),
 * or "unknown status". */
const char *tprun_status_name(int status);

/* ---- group ------------------------------------------------------------ */

/* tprun_join joins the job the environment describes (the tprun launcher's
 * TPRUN_* variables; torchrun's, srun's or mpirun's on one node, where rank
 * 0 opens the hub) and returns once every rank has joined, or fails after
 * the rendezvous timeout (60 s; tprun --rendezvous-timeout) naming the
 * ranks that did not come. A collective. */
int tprun_join(tprun_group **group);

/* This rank's index (0..size-1), the number of ranks, the rank's index on
 * its node, and the CUDA device it should use (TPRUN_DEVICES[local rank],
 * or the local rank). Each returns the value, or a negative status. */
int tprun_group_rank(const tprun_group *group);
int tprun_group_size(const tprun_group *group);
int tprun_group_local_rank(const tprun_group *group);
int tprun_group_device(const tprun_group *group);

/* tprun_group_barrier returns when every rank has called it. */
int tprun_group_barrier(tprun_group *group);

/* tprun_group_allgather: every rank contributes n bytes from in (the same
 * n on every rank); out receives size*n bytes, rank k's at out + k*n.
 * n is at most (4 MiB - 64) / size - 4 bytes (TPRUN_EINVAL beyond). */
int tprun_group_allgather(tprun_group *group, const void *in, size_t n, void *out);

/* tprun_group_abort fails the job on every rank, naming this rank and
 * reason (may be NULL). The peers' waiting calls fail with TPRUN_EABORTED. */
int tprun_group_abort(tprun_group *group, const char *reason);

/* tprun_group_close closes the group's remaining ops and leaves the job
 * (call it after this rank's last collective). NULL is a no-op. */
int tprun_group_close(tprun_group *group);

/* ---- group through the caller's framework ----------------------------- */

/* tprun_collectives is a framework's process group as tprun uses it, for a
 * rank process that already belongs to one (PyTorch's torch.distributed,
 * MPI): the group's collectives then go through it instead of tprun's
 * rendezvous. Both functions are collectives of that framework, over the
 * same ranks numbered the same way; each returns 0 on success, anything
 * else on failure.
 *
 *   allgather  every rank passes n bytes at in (the same n on every rank);
 *              out, size*n bytes, receives rank k's bytes at out + k*n.
 *   barrier    returns when every rank has called it.
 *
 * user is passed to both as it was given. in and out are valid only during
 * the call; the callbacks must not keep them, and must not call into
 * tprun on the same group. */
typedef struct tprun_collectives {
	int (*allgather)(void *user, const void *in, size_t n, void *out);
	int (*barrier)(void *user);
} tprun_collectives;

/* tprun_group_from_collectives makes this rank's group on the caller's
 * framework: rank and size as the framework numbers its ranks, local_rank
 * among the ranks of this node, device the CUDA ordinal this rank uses
 * (tprun_group_device, the ops' default). It is a collective of the
 * framework (an all-gather of each rank's host, pid and device, and when
 * every rank is on this node a second one saying that each listens for
 * descriptors): ranks that disagree about size, or whose rank is not
 * their place in the framework's all-gather, fail with TPRUN_EINVAL
 * naming them. The struct
 * is copied; user must stay valid until tprun_group_close.
 *
 * The callbacks run only on the thread that made the tprun call needing
 * them (this one, tprun_group_barrier and tprun_group_allgather on the
 * group, tprun_op_create(_ex) on it, and the steps of its ops when step
 * checks are on), during that call, and never after tprun_group_close.
 *
 * Memory handles cannot travel as file descriptors through a framework's
 * collectives. When every rank runs on this node (one kernel, the same
 * network, pid and user namespaces), the group passes them itself: each
 * rank listens on an abstract Unix socket named from a random key that
 * rank 0 drew (the framework's all-gather carries the key), and accepts
 * only this uid, the ranks' pids and the key's secret. There the group
 * acts as tprun_join's on one node: the GPU mailbox shares POSIX
 * descriptor handles (no IMEX channel needed) and the host backend
 * (TPRUN_DEVICE_HOST) runs. There the group also watches the job for its
 * ops: a waiting step fails at once with TPRUN_EABORTED naming the rank
 * and its pid when a peer's process ends without having closed its group
 * (tprun_group_close), when a peer aborts its group (the reason is named;
 * tprun_group_abort tells the peers), or when this rank aborts its own. A
 * peer that closed its group and then exited is no failure: close the
 * group before the process ends.
 *
 * What differs from tprun_join:
 *   - Across nodes (or where TPRUN_FORCE_NODE makes a rank act so) the GPU
 *     mailbox shares CUDA fabric handles, which travel as bytes: every
 *     node needs an IMEX channel (without one, tprun_op_create fails with
 *     a message naming what the administrator must provide), and the host
 *     backend, whose mailbox is a shared memory descriptor, cannot run:
 *     tprun_op_create fails with TPRUN_EUNAVAILABLE.
 *   - Across nodes, or where the kernel refuses pidfds, there is no job
 *     watch: a peer that dies is noticed by a waiting step at the op's
 *     deadline (TPRUN_ETIMEOUT naming it), not at once, and
 *     tprun_group_abort only marks this rank's group failed; the peers
 *     are not told (the framework's own abort does that). On one node the
 *     peers' descriptor exchanges that wait for this rank or send to it
 *     fail at once, as they do when its process ends or it closes its
 *     group.
 *   - A callback that fails makes the call fail with TPRUN_EABORTED, and
 *     every later collective of the group too: the framework's group is in
 *     an unknown state.
 *   - tprun_group_close leaves the framework's group as it is. */
int tprun_group_from_collectives(int rank, int size, int local_rank, int device,
				 const tprun_collectives *collectives, void *user, tprun_group **group);

/* ---- the packed weight layout ----------------------------------------- */

/* tprun_packed_weight_len stores in *len the number of elements of a
 * [shard, latent] weight in the packed layout ("A WEIGHT PER STEP"):
 * ceil(shard/16) * ceil(latent/32) * 512. shard is a positive multiple of
 * 8 and latent a multiple of 8 in 1..1048576 (the op's rules for one
 * rank's rows); TPRUN_EINVAL otherwise. Not a collective; needs no group. */
int tprun_packed_weight_len(int shard, int latent, size_t *len);

/* tprun_pack_weight writes src, a row-major [shard, latent] weight in host
 * memory, into dst (tprun_packed_weight_len elements of host memory, every
 * one written, padding with zeros) in the packed layout, the form
 * tprun_op_step_weight takes once copied to the device. dst and src must
 * not overlap. The shape rules are tprun_packed_weight_len's. */
int tprun_pack_weight(uint16_t *dst, const uint16_t *src, int shard, int latent);

/* ---- memory ----------------------------------------------------------- */

/* tprun_mailbox_bytes stores in *bytes the size of one rank's mailbox for
 * an op of hidden and max_m (tprun_op_create's): 3 slots, each holding a
 * region of m rows for every m in 1..min(max_m, 8) and, when max_m is
 * larger, one region of max_m rows that every larger m shares, each row
 * hidden bf16 elements, each slot rounded up to 64 bytes. Every rank holds
 * one per op (the unicast backend also maps every peer's, which takes
 * address space, not memory); a GPU backend rounds the allocation up to
 * the driver's allocation granularity. The op's other memory is its weight
 * (tprun_packed_weight_len elements on a GPU, shard*latent on the host
 * backend) and a few small buffers (python/tprun/README.md, "Memory").
 * hidden is a positive multiple of 8 and max_m in 1..128; TPRUN_EINVAL
 * otherwise. Not a collective; needs no group. */
int tprun_mailbox_bytes(int hidden, int max_m, size_t *bytes);

/* ---- op --------------------------------------------------------------- */

/* tprun_op_create sets up the fused up-projection for [hidden, latent] and
 * up to max_m rows per step on device (a CUDA ordinal, TPRUN_DEVICE_GROUP
 * or TPRUN_DEVICE_HOST). A collective: every rank passes the same hidden,
 * latent and max_m. With a device, the mailbox backend is chosen by all
 * ranks together (tprun_op_backend says which and why): the host backend
 * when some rank has no usable GPU. Give the weight (tprun_op_set_weight_*)
 * before the first step. */
int tprun_op_create(tprun_group *group, int hidden, int latent, int max_m, int device, tprun_op **op);

/* tprun_op_create_ex is tprun_op_create with two settings more: the
 * deadline of a step's wait for the peers' slices, in seconds (0: the
 * default, 10 s), and the mailbox backend asked for by name: "auto" (or
 * NULL or ""; what tprun_op_create does), "unicast" or "multicast" (the
 * CUDA engine, or TPRUN_EUNAVAILABLE), or "host". Every rank asks for the
 * same backend. Multicast is refused (TPRUN_EUNAVAILABLE, naming the
 * variable) while the environment forbids it (NCCL_NVLS_ENABLE=0 and the
 * like), and auto then does not pick it. */
int tprun_op_create_ex(tprun_group *group, int hidden, int latent, int max_m, int device,
		       double deadline_seconds, const char *backend, tprun_op **op);

/* tprun_op_set_weight_host gives the op this rank's weight shard from host
 * memory: count = shard*latent elements, row-major [shard, latent]. The op
 * keeps its own copy (packed into the layout its kernels prefer; on the
 * device for a CUDA backend); weight may be freed after the call. Not a
 * collective; may be called again between steps. */
int tprun_op_set_weight_host(tprun_op *op, const uint16_t *weight, size_t count);

/* tprun_op_set_weight_device is tprun_op_set_weight_host from device memory
 * in the primary context of the op's device (cudaMalloc, a PyTorch
 * tensor's data_ptr()), row-major [shard, latent], 16-byte aligned. The op
 * copies it; the caller may free it afterwards. TPRUN_EUNAVAILABLE on the
 * host backend. */
int tprun_op_set_weight_device(tprun_op *op, const void *weight);

/* tprun_op_step queues one step on stream (a cudaStream_t / CUstream of
 * the op's device; NULL is the legacy default stream) and returns without
 * waiting: latent, shared and out are device pointers in the primary
 * context of the op's device, ordered by the stream like any kernel's
 * operands. The step may be captured into the caller's CUDA graph; a graph
 * holding one step (or one step of each of several ops) can be replayed
 * any number of times. A failure of a queued step (a peer that stalled or
 * died) is reported by tprun_op_check and tprun_op_synchronize, and by the
 * next tprun_op_step; out then holds no valid block.
 * TPRUN_EUNAVAILABLE on the host backend. */
int tprun_op_step(tprun_op *op, int m, const void *latent, const void *shared, size_t shared_stride,
		  void *out, void *stream);

/* tprun_op_step_host runs one step with host buffers and returns when out
 * holds the whole block: latent has m*latent elements, shared
 * (m-1)*shared_stride + shard, out m*hidden. On a CUDA backend the op
 * stages the operands through the device; on the host backend this is
 * the only step. */
int tprun_op_step_host(tprun_op *op, int m, const uint16_t *latent, const uint16_t *shared,
		       size_t shared_stride, uint16_t *out);

/* tprun_op_step_weight is tprun_op_step with this step's weight: weight is
 * this rank's [shard, latent] rows in the PACKED layout ("A WEIGHT PER
 * STEP"), tprun_packed_weight_len elements of device memory in the
 * primary context of the op's device, 16-byte aligned, not overlapping
 * out; NULL uses the op's own (tprun_op_step is this with NULL). The op
 * does not copy it: the queued step reads it when it runs, so it must
 * stay valid and unchanged until then (for a graph, for every replay).
 * The layout cannot be checked: a row-major weight here gives wrong
 * blocks. Same checks, failures and graph capture as tprun_op_step;
 * every rank may pass its own weight or none, independently. */
int tprun_op_step_weight(tprun_op *op, int m, const void *latent, const void *weight, const void *shared,
			 size_t shared_stride, void *out, void *stream);

/* tprun_op_step_host_weight is tprun_op_step_host with this step's weight:
 * weight is this rank's [shard, latent] rows, ROW-MAJOR, shard*latent
 * host elements ("A WEIGHT PER STEP"), read during the call only; NULL
 * uses the op's own (tprun_op_step_host is this with NULL). On a CUDA
 * backend the op packs it and copies it to the device for this step. */
int tprun_op_step_host_weight(tprun_op *op, int m, const uint16_t *latent, const uint16_t *weight,
			      const uint16_t *shared, size_t shared_stride, uint16_t *out);

/* tprun_op_synchronize waits for every step queued on stream to finish
 * and returns the first failure among them (as tprun_op_check). */
int tprun_op_synchronize(tprun_op *op, void *stream);

/* tprun_op_check reports, without waiting, a failure of steps queued
 * earlier that has become known: TPRUN_OK while none is. */
int tprun_op_check(tprun_op *op);

/* tprun_op_backend names the mailbox backend ("host", "unicast",
 * "multicast"); tprun_op_backend_reason says why it was chosen. NULL on a
 * bad handle (see tprun_last_error). Owned by the op. */
const char *tprun_op_backend(const tprun_op *op);
const char *tprun_op_backend_reason(const tprun_op *op);

/* tprun_op_close releases the op (its mailbox and device memory). A step
 * waiting in another thread fails. NULL is a no-op. */
int tprun_op_close(tprun_op *op);

#ifdef __cplusplus
}
#endif

#endif /* TPRUN_H */
