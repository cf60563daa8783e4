// Parameter blocks of tprun's CUDA kernels (kernel ABI).
//
// Each kernel takes exactly ONE by-value parameter: one of the structs below.
// The Go launcher mirrors them byte for byte (kernel/launch.go, checked
// against this file by kernel/launch_test.go), so the layout is spelled
// out: only 8-byte and 4-byte fields, 8-byte aligned, no implicit padding,
// sizes checked by the static_asserts below.
// Device addresses are plain 64-bit integers (CUdeviceptr on the Go side).
#ifndef TPRUN_SKINNY_H
#define TPRUN_SKINNY_H

#define TPRUN_MAX_DST 16
#define TPRUN_MAX_RANKS 16
#define TPRUN_RECEIVE_STATUS_WORDS (1 + TPRUN_MAX_RANKS)
// With TPRUN_RECEIVE_ABORTABLE in tprun_receive_params.flags, status[32] is
// the abort word: the host sets it to end a receive early (status then holds
// at least TPRUN_RECEIVE_ABORT_WORD + 1 words, in host-mapped memory).
#define TPRUN_RECEIVE_ABORT_WORD 32
#define TPRUN_RECEIVE_ABORTABLE 1
// With TPRUN_RECEIVE_SKIP in the receive flags, the receive leaves the
// columns of rank TPRUN_RECEIVE_SKIP_RANK(flags) (flags bits 8-15) alone: it
// neither polls, copies nor re-arms them, and never reports that rank
// missing. The rank's own skinny kernel stores that slice straight into
// out instead of its local slot (out is then one of its dst).
#define TPRUN_RECEIVE_SKIP 2
#define TPRUN_RECEIVE_SKIP_RANK(x) (((x) >> 8) & 0xff)
// tprun_skinny_params.l2_prefetch fields (0: no L2 prefetch).
#define TPRUN_PF_HELPERS(x) ((x) & 0xffff)
#define TPRUN_PF_SIXTEENTHS(x) (((x) >> 16) & 0xff)
#define TPRUN_PF_OWN(x) (((x) >> 24) & 1)
#define TPRUN_PF_LSU(x) (((x) >> 25) & 1)
// tprun_skinny_params.flags: the weight is in the packed layout below.
// Every entry point reads that layout and traps without this bit.
#define TPRUN_SKINNY_PACKED 1
// tprun_skinny_params.flags bits 8-15: the row count M of a larger-M entry
// point (tprun_bigm_mt<MT>_<family>, 1 <= M <= MT); 0 for the skinny ones,
// whose M is their name's.
#define TPRUN_SKINNY_ROWS_SHIFT 8
#define TPRUN_SKINNY_ROWS(x) (((x) >> TPRUN_SKINNY_ROWS_SHIFT) & 0xff)

// tprun_skinny_m<M>_<family> (M = 1..8; the families are the rows of
// kernel/families.tsv, see kernel/skinny.cu): rank `rank` of the fused
// up-projection
//   out[m][n] = bf16(f32(bf16(sum_k latent[m][k]*weight[n][k])) + shared[m][n])
// for m < M and n < shard, stored (negative zero as +0) at element
// m*hidden + rank*shard + n of every dst[0..ndst).
//
// Launch (kernel/config.go, LaunchConfig, computes all of these):
//   function = "tprun_skinny_m" M "_" family; p.tile_rows must be the
//              family's tile_rows and p.flags must have
//              TPRUN_SKINNY_PACKED (the kernel traps otherwise)
//   block    = (32*warps, 1, 1); warps 1..the family's warps
//   cluster  = (cluster, 1, 1) through the cluster-dimension launch
//              attribute, cluster 1..8: the CTAs of a cluster split K
//   grid     = (ceil(shard / tile_rows) * cluster, 1, 1)
//   dynamic shared memory = (warps + cluster) * 8 * (tile_rows + 4) * 4 bytes
//              (at most 27,648: under the 48 KiB every function gets)
//   programmatic stream serialization allowed (PDL): weight loads are issued
//   before griddepcontrol.wait, latent and shared are read after it, and
//   griddepcontrol.launch_dependents comes right after the weight loads.
// L2 prefetch (l2_prefetch != 0): before its weight loads, the leader CTA
// of tile t (a tile: tile_rows weight rows, all of K, one contiguous
// block) asks for whole tiles to be brought into L2 with
// cp.async.bulk.prefetch.L2, so that HBM keeps streaming while this
// kernel's later CTAs are not yet resident:
//   H = TPRUN_PF_HELPERS: the tiles t < H ("helpers", the CTAs the GPU
//       places first) prefetch tiles t, t+H, t+2H, ... below the limit;
//   S = TPRUN_PF_SIXTEENTHS: the limit is ceil(ntiles*S/16) (S 0: ntiles),
//       ntiles = ceil(shard/tile_rows) (receive CTAs are not tiles);
//   O = TPRUN_PF_OWN: every other tile prefetches itself.
//   L = TPRUN_PF_LSU: instead of one cp.async.bulk.prefetch.L2 per tile by
//       one thread, every thread of the leader CTA issues prefetch.global.L2
//       for a share of the tile's 128-byte lines, after its own weight
//       loads; helpers skip their own tile unless O is set, and with O
//       every tile (helpers included) prefetches itself.
// Prefetches are hints: the result never depends on them.
// tprun_bigm_mt<MT>_<family> (MT = 16, 32, 64, 128; the families are the
// rows of kernel/families.tsv with latent "smem", see kernel/bigm.cu): the
// same op for M = TPRUN_SKINNY_ROWS(flags) rows, 1 <= M <= MT (the launch
// picks the smallest MT >= M; it serves M 9..128), with this parameter
// block, the packed weight and slot rotation (read only: word 0, never
// advanced; the tprun_receive that follows ends the step). No fused
// receive (recv_slot must be 0) and no L2 prefetch plan: l2_prefetch != 0
// makes each CTA prefetch its own weight range into L2 (a hint).
// Launch (kernel/config.go, BigmConfigFor):
//   block    = (32*warps, 1, 1), warps 1..the family's warps, in ksplit
//              groups that split K inside the CTA (ksplit divides warps,
//              and ksplit * the family's depth divides 1024/MT, the
//              chunks of a latent window; the kernel traps otherwise)
//   p.tile_rows = warps / ksplit * the family's tile_rows (output columns
//              per CTA; the kernel derives ksplit from it and the block)
//   cluster  = (cluster, 1, 1), cluster 1..8: the CTAs of a cluster split K
//   grid     = (ceil(shard / p.tile_rows) * cluster, 1, 1)
//   dynamic shared memory = max(2 * 65536, ksplit * MT * (p.tile_rows + 4)
//              * 4) + 16 bytes (over 48 KiB: the function's max dynamic
//              shared size attribute must allow it)
//   PDL as above: weight loads and the L2 prefetch before
//   griddepcontrol.wait, latent, shared and the counter after it.
// Packed weight layout (flags & TPRUN_SKINNY_PACKED):
// rows in groups of 16, k in chunks of 32 (G = ceil(shard/16) groups,
// C = ceil(latent_dim/32) chunks); block (g, c) is 512 elements (1 KB) at
// element (g*C + c)*512, and within it element (q*32 + l)*8 + e holds
// weight[16g + l/4 + 8(a%2)][32c + 8(l%4) + 4q + 2(a/2) + e%2] with
// a = e/2 (q 0..1, l 0..31, e 0..7): lane l's 16 bytes q are the A
// fragment {a0, a1, a2, a3} of its chunk's MMA q in register order (rows
// l/4 and l/4 + 8, k pairs 4q and 4q + 2 of its 8 k), so a load is an
// operand with no register moves, and every 16-byte load of a warp reads
// 512 contiguous bytes. Rows >= shard and k >= latent_dim are zeros; the
// buffer holds G*C*512 elements.
// Requirements: all pointers 16-byte aligned; latent_dim % 8 == 0;
// shard % 8 == 0; hidden % 8 == 0; shared_stride % 8 == 0; 1 <= ndst <= 16.
typedef struct tprun_skinny_params {
  unsigned long long latent;   // offset   0: bf16 [M][latent_dim], row stride latent_dim
  unsigned long long weight;   // offset   8: bf16, this rank's [shard][latent_dim] rows in the packed layout
  unsigned long long shared;   // offset  16: bf16, element (m,n) at shared[m*shared_stride + n]
  unsigned long long dst[TPRUN_MAX_DST];  // offset 24: bf16 [M][hidden] each; first ndst used
  int latent_dim;              // offset 152
  int shard;                   // offset 156
  int hidden;                  // offset 160
  int rank;                    // offset 164
  int shared_stride;           // offset 168: in elements
  int ndst;                    // offset 172
  int tile_rows;               // offset 176: 16 or 32 (the family's), columns per CTA
  int l2_prefetch;             // offset 180: see above; 0 = none
  // The fused receive (recv_slot != 0): the grid has R extra CTAs after the
  // tiles' (grid = ceil(shard/tile_rows)*cluster + R, R >= 1 a multiple of
  // cluster). They compute nothing: they do this step's Lamport receive,
  // exactly as tprun_receive would with slot = recv_slot, out = recv_out,
  // status = recv_status, timeout_ns = recv_timeout_ns, flags = recv_flags,
  // m = M, hidden, shard (see below), after griddepcontrol.wait like every
  // CTA. The kernel then completes only when the whole block has arrived
  // (or the deadline or the abort word ended the wait), so the next kernel
  // in the stream can follow it directly: one launch and one grid hand-off
  // per step fewer. The slot, out and status rules are tprun_receive's;
  // out must not overlap any dst or input, except that with
  // TPRUN_RECEIVE_SKIP of this rank out may be one of dst (the tiles store
  // this rank's columns, the receive the others'); slot is normally the
  // local dst, or with TPRUN_RECEIVE_SKIP the local slot that is not in dst.
  unsigned long long recv_slot;        // offset 184: 0 = no fused receive
  unsigned long long recv_out;         // offset 192
  unsigned long long recv_status;      // offset 200
  unsigned long long recv_timeout_ns;  // offset 208
  int recv_flags;                      // offset 216: TPRUN_RECEIVE_ABORTABLE, TPRUN_RECEIVE_SKIP (rank in bits 8-15) or 0
  int flags;                           // offset 220: TPRUN_SKINNY_PACKED, and TPRUN_SKINNY_ROWS for the larger-M entry points (other bits 0)
  // Slot rotation (rot_counter != 0, see "Slot rotation" below): dst[d]
  // for the bits d of rot_dst_mask, and recv_slot, are the addresses of
  // slot 0; the kernel adds s * rot_stride to them. A launch with the fused
  // receive advances the counter; one without only reads it.
  unsigned long long rot_counter;      // offset 224: 0 = no rotation (the addresses as given)
  unsigned long long rot_stride;       // offset 232: bytes from one slot to the next
  int rot_slots;                       // offset 240: slots in the rotation, >= 2
  int rot_dst_mask;                    // offset 244: bit d: dst[d] is a mailbox slot (rotated)
} tprun_skinny_params;         // size 248, alignment 8

// tprun_receive: the Lamport receive of one rank. Polls the first m*hidden
// elements of the local slot with volatile 16-byte loads until no 32-bit word
// is the sentinel 0x80000000, copies them to out, and writes the sentinel
// back. Each thread gives up timeout_ns after it started (clock: %globaltimer)
// and then records which ranks' slices (rank = column / shard) it found
// incomplete:
//   status[0]     = 1 when any part timed out,
//   status[1 + r] = 1 when some word of rank r's slice never arrived (r < 16).
// The kernel only ever writes 1s (plain 32-bit stores, no atomics, so status
// may live in host-mapped memory); the caller zeroes the 17 words before the
// launch. Words that arrived are copied and re-armed even on a timeout.
// With flags & TPRUN_RECEIVE_ABORTABLE, a thread that has polled for 200 µs
// also reads status[TPRUN_RECEIVE_ABORT_WORD] (system scope) every 200 µs;
// nonzero ends its wait as the deadline would (status[0] and the missing
// ranks are reported the same way). The caller zeroes that word too.
// With flags & TPRUN_RECEIVE_SKIP, rank TPRUN_RECEIVE_SKIP_RANK(flags)'s
// columns of slot and out are neither read nor written (see above); the
// vectors are then numbered over the other ranks' columns only.
// Launch: any grid and block (block a multiple of 32, at most 1024; see
// ReceiveConfigFor); PDL allowed: it lets the next kernel launch first
// (griddepcontrol.launch_dependents), then waits with griddepcontrol.wait.
// Requirements: slot and out 16-byte aligned; hidden % 8 == 0; shard % 8 == 0;
// hidden % shard == 0.
typedef struct tprun_receive_params {
  unsigned long long slot;        // offset  0: bf16 [m][hidden], local mailbox slot
  unsigned long long out;         // offset  8: bf16 [m][hidden]
  unsigned long long status;      // offset 16: uint32 [17], see above
  unsigned long long timeout_ns;  // offset 24
  int m;                          // offset 32
  int hidden;                     // offset 36
  int shard;                      // offset 40
  int flags;                      // offset 44: TPRUN_RECEIVE_ABORTABLE, TPRUN_RECEIVE_SKIP (rank in bits 8-15) or 0
  // Slot rotation (rot_counter != 0, see "Slot rotation" below): slot is
  // the address of slot 0; the kernel receives slot s at slot + s *
  // rot_stride and advances the counter.
  unsigned long long rot_counter; // offset 48: 0 = no rotation (slot as given)
  unsigned long long rot_stride;  // offset 56: bytes from one slot to the next
  int rot_slots;                  // offset 64: slots in the rotation, >= 2
  int rot_reserved;               // offset 68: 0
} tprun_receive_params;           // size 72, alignment 8

// Slot rotation. A graph that holds one step of the op and is replayed
// must use the next mailbox slot at every replay, so the slot index lives
// on the device: rot_counter is the address of two uint32 words, 8-byte
// aligned and both zero when the op is set up: word 0 is the slot index s
// of the next step (0..rot_slots-1), word 1 counts the CTAs of the current
// step that have read s (zero between steps). A kernel reads s after
// griddepcontrol.wait, before it touches a slot. The kernel that ends a
// step advances the counter: the skinny kernel with the fused receive, or
// else the tprun_receive that follows a skinny kernel without it (that
// skinny kernel only reads word 0). In the advancing kernel every CTA
// that needs s reads it and counts itself in word 1 with one 64-bit atomic
// on the pair; the CTA that completes the count (every CTA of
// tprun_receive; of the skinny kernel the cluster leaders of the tiles and
// the receive CTAs) stores word 0 = (s + 1) % rot_slots and word 1 = 0.
// The host may read word 0 back to learn which slot the next step uses.

#ifdef __cplusplus
#include <cstddef>
static_assert(sizeof(tprun_skinny_params) == 248, "tprun_skinny_params size");
static_assert(offsetof(tprun_skinny_params, rot_counter) == 224, "rot_counter offset");
static_assert(offsetof(tprun_skinny_params, rot_dst_mask) == 244, "rot_dst_mask offset");
static_assert(offsetof(tprun_skinny_params, recv_slot) == 184, "recv_slot offset");
static_assert(offsetof(tprun_skinny_params, recv_flags) == 216, "recv_flags offset");
static_assert(offsetof(tprun_skinny_params, dst) == 24, "dst offset");
static_assert(offsetof(tprun_skinny_params, latent_dim) == 152, "latent_dim offset");
static_assert(offsetof(tprun_skinny_params, tile_rows) == 176, "tile_rows offset");
static_assert(alignof(tprun_skinny_params) == 8, "tprun_skinny_params alignment");
static_assert(sizeof(tprun_receive_params) == 72, "tprun_receive_params size");
static_assert(offsetof(tprun_receive_params, m) == 32, "m offset");
static_assert(offsetof(tprun_receive_params, rot_counter) == 48, "receive rot_counter offset");
static_assert(offsetof(tprun_receive_params, rot_slots) == 64, "receive rot_slots offset");
#endif

#endif  // TPRUN_SKINNY_H
