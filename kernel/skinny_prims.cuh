// Primitives of the skinny kernel (skinny.cu) and the receive (receive.cu):
// loads, the L2 prefetch plan, the cluster sum, PDL and cluster helpers,
// the slot rotation, the MMA, and the epilogue with its stores. Nothing here knows a tile shape beyond its template
// arguments; the tile code and its families are in skinny.cu.
#ifndef TPRUN_SKINNY_PRIMS_CUH
#define TPRUN_SKINNY_PRIMS_CUH

#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <stdint.h>

#include "skinny.h"

namespace cg = cooperative_groups;

namespace tprun {

// ---------------------------------------------------------------- loads

// All global accesses are volatile asm so that the compiler keeps them in
// program order around griddepcontrol.wait: weights before, the rest after.
// A predicated 16-byte load by the instruction OP (a string literal): zeros
// when !pred.
#define TPRUN_LD_V4_PRED(OP, v, p, pred)                                         \
  asm volatile(                                                                  \
      "{\n\t.reg .pred p;\n\t"                                                   \
      "setp.ne.b32 p, %5, 0;\n\t"                                                \
      "mov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t" \
      "@p " OP " {%0, %1, %2, %3}, [%4];\n\t}"                                   \
      : "=r"((v).x), "=r"((v).y), "=r"((v).z), "=r"((v).w)                       \
      : "l"(p), "r"((int)(pred)))

// The weight: read once, never written while a kernel runs, so through
// the non-coherent path, not kept in L1. No L2::256B prefetch hint: it made
// the large shards slower.
__device__ __forceinline__ uint4 ld_weight(const uint16_t* p, bool pred) {
  uint4 v;
  TPRUN_LD_V4_PRED("ld.global.nc.L1::no_allocate.v4.u32", v, p, pred);
  return v;
}

// Latent and shared: ordinary (coherent) loads, issued after
// griddepcontrol.wait, cached in L1 so CTAs on one SM share the latent.
// L2ONLY: `.cg`, cached in L2 only (still coherent: the latent may be
// written by the previous grid, so `.nc` is not allowed). Only the fused
// step's family takes it: there it is faster at middle M, while as the
// only form it cost other shapes time.
template <bool L2ONLY = false>
__device__ __forceinline__ uint4 ld_act(const uint16_t* p, bool pred) {
  uint4 v;
  if constexpr (L2ONLY)
    TPRUN_LD_V4_PRED("ld.global.cg.v4.u32", v, p, pred);
  else
    TPRUN_LD_V4_PRED("ld.global.v4.u32", v, p, pred);
  return v;
}

__device__ __forceinline__ void st_v4(uint16_t* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// ---------------------------------------------------------------- L2 prefetch

// Ask for bytes at p to be brought into L2 (a hint: no landing space, no
// completion to wait for).
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

__device__ __forceinline__ void prefetch_line_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p) : "memory");
}

// What both forms of the plan need: the helper count, the tile limit, and
// where tile t starts and how many bytes it has. The tiles are counted from
// the shard, not the grid, which may carry receive CTAs after them. A tile
// is one contiguous block of the packed layout, rows padded to 16 and k to
// 32.
template <int ROWS>
struct PfPlan {
  int helpers;        // TPRUN_PF_HELPERS
  int lim;            // tiles t < lim are prefetched by the helpers
  size_t row_bytes;   // bytes of one padded weight row (all of K)
  int shard_rows;     // rows the weight buffer holds
  const char* w;

  __device__ __forceinline__ explicit PfPlan(const tprun_skinny_params& p) {
    const int s16 = TPRUN_PF_SIXTEENTHS(p.l2_prefetch);
    const int ntiles = (p.shard + ROWS - 1) / ROWS;
    helpers = TPRUN_PF_HELPERS(p.l2_prefetch);
    lim = s16 == 0 ? ntiles : min(ntiles, (ntiles * s16 + 15) / 16);
    row_bytes = (size_t)((p.latent_dim + 31) / 32) * 64;
    shard_rows = (p.shard + 15) / 16 * 16;
    w = reinterpret_cast<const char*>(p.weight);
  }
  __device__ __forceinline__ const char* tile_base(int t) const { return w + (size_t)t * ROWS * row_bytes; }
  __device__ __forceinline__ size_t tile_bytes(int t) const {
    return (size_t)min(ROWS, shard_rows - t * ROWS) * row_bytes;
  }
};

// The L2 prefetch plan of skinny.h (l2_prefetch), run by warp 0 of a
// cluster's leader CTA before its weight loads: tile t (ROWS weight rows,
// all of K: one contiguous block) is prefetched with one instruction per
// tile, the helpers' tiles spread over the lanes.
template <int ROWS>
__device__ __forceinline__ void l2_prefetch_tiles(const tprun_skinny_params& p, int tile, int lane) {
  const PfPlan<ROWS> pl(p);
  auto one = [&](int t) { prefetch_l2(pl.tile_base(t), (uint32_t)pl.tile_bytes(t)); };
  if (tile < pl.helpers) {
    for (int t = tile + lane * pl.helpers; t < pl.lim; t += 32 * pl.helpers) one(t);
    if (lane == 0 && tile >= pl.lim) one(tile);
  } else if (TPRUN_PF_OWN(p.l2_prefetch) && lane == 0) {
    one(tile);
  }
}

// The LSU form of the plan (TPRUN_PF_LSU): every thread of the leader CTA
// prefetches a share of whole tiles' 128-byte lines; nothing is held in
// registers or shared memory, so a CTA can have its whole tile (and, for a
// helper, other CTAs' tiles) in flight however small its ring.
template <int ROWS>
__device__ __forceinline__ void l2_prefetch_lsu(const tprun_skinny_params& p, int tile) {
  const PfPlan<ROWS> pl(p);
  auto range = [&](int t) {
    const char* base = pl.tile_base(t);
    const size_t bytes = pl.tile_bytes(t);
    for (size_t off = (size_t)threadIdx.x * 128; off < bytes; off += (size_t)blockDim.x * 128)
      prefetch_line_l2(base + off);
  };
  if (TPRUN_PF_OWN(p.l2_prefetch)) range(tile);
  if (tile < pl.helpers)
    for (int t = tile + pl.helpers; t < pl.lim; t += pl.helpers) range(t);
}

// ---------------------------------------------------------------- cluster sum

// The cluster sum (clusters of 2..8 CTAs that split K): each non-leader
// CTA sends its partial sums into its slot of the LEADER's shared memory
// with st.async, which counts the bytes on an mbarrier of the leader; only
// the leader's epilogue threads wait, on that barrier. One-way: no cluster
// barrier round trip at the end, and the senders leave as soon as their
// stores are issued (a cluster barrier at the end measured slower at every
// shard that splits K).
// The barrier is set up at the kernel's start (cluster_sum_init); every
// thread's barrier.cluster.wait in reduce_store, long after, orders that
// before the first st.async.
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return (uint32_t)__cvta_generic_to_shared(p);
}
// The address of local shared address a in CTA rank r of the cluster.
__device__ __forceinline__ uint32_t mapa_u32(uint32_t a, uint32_t r) {
  uint32_t d;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(r));
  return d;
}
__device__ __forceinline__ void st_async_v4(uint32_t dst, const float4& v, uint32_t mbar) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.f32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(dst),
      "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w), "r"(mbar)
      : "memory");
}
// The barrier: 8 bytes in the padding of red's first row (columns
// ROWS..ROWS+1 of warp 0's latent row 0, which nothing else reads or
// writes), so the entry points have no static shared memory.
template <int ROWS>
__device__ __forceinline__ uint64_t* cluster_sum_bar(float* red) {
  return reinterpret_cast<uint64_t*>(red + ROWS);
}
// Thread 0 of the leader: a barrier of one arrival that also expects
// tx_bytes (its own arrival comes first, so only the bytes complete the
// phase); then every thread of every CTA arrives at the cluster barrier
// (relaxed: the init's fence orders the init before it).
__device__ __forceinline__ void cluster_sum_init(uint64_t* mbar, int crank, uint32_t tx_bytes) {
  if (crank == 0 && threadIdx.x == 0) {
    const uint32_t a = smem_u32(mbar);
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(a) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(tx_bytes) : "memory");
  }
  asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
// Waits for phase 0 of the barrier, acquiring at cluster scope the bytes
// that completed it.
__device__ __forceinline__ void mbar_wait_cluster(uint64_t* mbar) {
  const uint32_t a = smem_u32(mbar);
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n\t.reg .pred p;\n\t"
        "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], 0;\n\t"
        "selp.u32 %0, 1, 0, p;\n\t}"
        : "=r"(done)
        : "r"(a)
        : "memory");
  }
}

// ---------------------------------------------------------------- cluster shape

// Which launches an instance of the tile code serves, and so what it knows
// of the cluster shape at compile time (template parameter CL):
// - kNoCluster: launches without a cluster (one CTA per cluster); no
//   cluster instruction is compiled into it;
// - kCluster: clusters of 2..8;
// - kAny: both, the cluster size read at run time (the families with
//   OneInstance).
// Most families hold two instances and pick by %cluster_nctarank
// (in_cluster): that is faster for most shapes, but not all (ptxas orders
// the prologue differently in the two forms, for reasons not understood),
// hence the OneInstance families for the shapes where one instance wins.
constexpr int kNoCluster = 0;
constexpr int kCluster = 1;
constexpr int kAny = 2;
template <int CL>
struct ClusterShape {
  int csize;  // CTAs per cluster
  int crank;  // this CTA's rank in it
  __device__ __forceinline__ ClusterShape() {
    if constexpr (CL != kNoCluster) {
      cg::cluster_group c = cg::this_cluster();
      csize = (int)c.num_blocks();
      crank = (int)c.block_rank();
    } else {
      csize = 1;
      crank = 0;
    }
  }
};

// Whether this launch has clusters of 2..8 CTAs, as instance CL knows it.
template <int CL>
__device__ __forceinline__ bool cluster_launch(int csize) {
  return CL == kCluster || (CL == kAny && csize > 1);
}

// Whether this launch has clusters of more than one CTA: which instance of
// the tile code (ClusterShape) an entry point runs. Uniform over the grid.
__device__ __forceinline__ bool in_cluster() {
  uint32_t n;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n > 1;
}

// ---------------------------------------------------------------- PDL

// griddepcontrol.wait behind a branch that ptxas cannot resolve (the SM
// count is never 0): without it, ptxas hoists the wait (SASS ACQBULK) above
// the weight loads of the prologue and PDL overlaps nothing.
__device__ __forceinline__ void griddep_wait() {
  uint32_t nsm;
  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsm));
  if (nsm != 0) asm volatile("griddepcontrol.wait;" ::: "memory");
}

__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// ---------------------------------------------------------------- slot rotation

// Slot rotation (skinny.h, "Slot rotation"): the counter pair {slot,
// arrivals} is read and written as one 64-bit word (little endian: word 0
// is the low half).
//
// rotation_arrive reads the pair and counts this CTA in word 1 in one
// atomic; rotation_settle, called later by the same thread with what it
// returned, is where the CTA that completed the count (the target-th
// arrival) stores {(s + 1) % slots, 0}. Why that is correct with no fence,
// also when the CTAs of a grid are not all resident at once and under PDL:
// - Within the grid every access to the 8 bytes is an atomic on them or
//   that one store, so all are in a single coherence order: every arrival
//   comes before the last arrival's atomic, which comes before its store
//   (program order, same address). So every CTA reads the same s, and no
//   CTA ever waits for another: which CTAs are resident when is
//   irrelevant, and the store may come as late as the last arrival likes.
// - The next step's kernels read the pair only after griddepcontrol.wait,
//   which returns once this whole grid has completed and its memory
//   operations are performed and visible (as does an ordinary kernel
//   boundary without PDL). A plain relaxed store at any point in the grid
//   therefore reaches them: no release or fence is needed, and none is
//   paid for.
// The atomic is issued right after griddepcontrol.wait, beside the latent
// loads, and its value is needed only by the epilogue stores (or the
// receive): its round trip to L2 is off the critical path.
__device__ __forceinline__ unsigned long long rotation_arrive(unsigned long long counter) {
  unsigned long long v;
  asm volatile("atom.relaxed.gpu.global.add.u64 %0, [%1], %2;" : "=l"(v) : "l"(counter), "l"(1ull << 32) : "memory");
  return v;
}

// The slot of the step from rotation_arrive's value v; the last of target
// arrivals advances the counter.
__device__ __forceinline__ uint32_t rotation_settle(unsigned long long counter, unsigned long long v, int slots,
                                                    uint32_t target) {
  const uint32_t s = (uint32_t)v;
  if ((uint32_t)(v >> 32) + 1 == target) {
    const unsigned long long next = (unsigned long long)((s + 1) % (uint32_t)slots);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(counter), "l"(next) : "memory");
  }
  return s;
}

// Word 0 alone, for a kernel that reads the slot without ending the step.
__device__ __forceinline__ uint32_t rotation_read(unsigned long long counter) {
  uint32_t s;
  asm volatile("ld.relaxed.gpu.global.u32 %0, [%1];" : "=r"(s) : "l"(counter) : "memory");
  return s;
}

// The receive's slot with rotation: thread 0 arrives for the CTA (one of
// target) and hands the slot to the others through *word (shared memory).
// Every thread of the CTA calls it.
__device__ __forceinline__ unsigned long long rotated_receive_slot(unsigned long long slot, unsigned long long counter,
                                                                   unsigned long long stride, int slots,
                                                                   uint32_t target, uint32_t* word) {
  if (threadIdx.x == 0) *word = rotation_settle(counter, rotation_arrive(counter), slots, target);
  __syncthreads();
  return slot + (unsigned long long)*word * stride;
}

// ---------------------------------------------------------------- MMA

// D += A·B for one m16n8k16 tile; see the PTX ISA for the fragment layouts.
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// ---------------------------------------------------------------- epilogue

// bf16 round to nearest even of x, as the 16 bits.
__device__ __forceinline__ uint32_t bf16_bits(float x) {
  return (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(x));
}

// One output element: bf16(f32(bf16(s)) + f32(sh)), -0 as +0.
__device__ __forceinline__ uint32_t finish1(float s, uint32_t sh_bits) {
  const float r = __uint_as_float(bf16_bits(s) << 16) + __uint_as_float(sh_bits << 16);
  const uint32_t b = bf16_bits(r);
  return b == 0x8000u ? 0u : b;
}

__device__ __forceinline__ uint32_t finish2(float lo, float hi, uint32_t sh) {
  return finish1(lo, sh & 0xffffu) | (finish1(hi, sh >> 16) << 16);
}

// bf16 rounding, `shared` and the stores of one 16-byte output vector: the
// 8 sums s of latent row em, columns n0+ec..n0+ec+7, one 16-byte store per
// destination: whole words, as the receiver checks words. With ROT (slot
// rotation), rot is the bytes from slot 0 to this step's slot, added to the
// destinations that are slots (skinny.h, rot_dst_mask).
template <bool ROT>
__device__ __forceinline__ void store_vector(const tprun_skinny_params& p, const float (&s)[8], const uint4& shv,
                                             int n0, int em, int ec, unsigned long long rot) {
  uint4 o;
  o.x = finish2(s[0], s[1], shv.x);
  o.y = finish2(s[2], s[3], shv.y);
  o.z = finish2(s[4], s[5], shv.z);
  o.w = finish2(s[6], s[7], shv.w);
  const size_t off = (size_t)em * (size_t)p.hidden + (size_t)p.rank * (size_t)p.shard + n0 + ec;
  if constexpr (ROT) {
    for (int d = 0; d < p.ndst; ++d)
      st_v4(reinterpret_cast<uint16_t*>(p.dst[d] + (((unsigned)p.rot_dst_mask >> d) & 1u ? rot : 0ull)) + off, o);
  } else {
    for (int d = 0; d < p.ndst; ++d) st_v4(reinterpret_cast<uint16_t*>(p.dst[d]) + off, o);
  }
}

// The bytes from slot 0 to the tile's slot, which thread 0 left in *word
// before the barrier the caller has passed (reduce_store).
__device__ __forceinline__ unsigned long long rot_bytes(const tprun_skinny_params& p, const uint32_t* word) {
  return (unsigned long long)*word * p.rot_stride;
}

// The word of shared memory that hands the tile's slot from thread 0 to the
// epilogue threads: in the padding of red's first row (column ROWS+2 of
// warp 0's latent row 0, beside the cluster sum's barrier), which nothing
// else reads or writes.
template <int ROWS>
__device__ __forceinline__ uint32_t* rot_slot_word(float* red) {
  return reinterpret_cast<uint32_t*>(red + ROWS + 2);
}

// The tile's slot from rotation_read's or rotation_arrive's value rv
// (tile_rotation in skinny.cu), by the thread that issued it: with the
// fused receive the launch ends the step, and its arrivals are the tiles'
// cluster leaders and the receive CTAs.
__device__ __forceinline__ uint32_t tile_slot(const tprun_skinny_params& p, unsigned long long rv, int csize) {
  if (p.recv_slot == 0) return (uint32_t)rv;
  const uint32_t ntiles = (uint32_t)((p.shard + p.tile_rows - 1) / p.tile_rows);
  return rotation_settle(p.rot_counter, rv, p.rot_slots, ntiles + (gridDim.x - ntiles * (uint32_t)csize));
}

// Whether a CTA takes the warp-per-vector epilogue of reduce_store: no
// cluster, never more than one output vector per warp, and at most
// max(4, warps/2) vectors. With 16 warps, where the other epilogue sums 16
// partials per output serially, it is faster up to 8 vectors and slower
// from 10; with 8 warps it gains up to 4 vectors and could not be told
// apart from the other above that.
__device__ __forceinline__ bool warp_epilogue(int nv, int csize) {
  const int nwarps = (int)(blockDim.x >> 5);
  const int lim = max(4, nwarps / 2);
  return csize == 1 && nv <= lim && nv <= nwarps;
}

// Reduction and epilogue shared by every entry point. acc[r][q] is one
// warp's MMA accumulator for tile r, k half q: c0,c1 -> row 16r+g, latent
// rows 2tig and 2tig+1; c2,c3 -> row 16r+g+8. The warps' sums go through
// red[warp][m][n]. Then either
// - (warp_epilogue) warp v sums output vector v: lane l adds column l/4 of
//   the warps l%4, l%4+4, ... in order, two xor shuffles combine the four
//   lanes, lane 0 gathers the 8 columns, rounds and stores (one barrier,
//   no serial pass over the warps; `shared` was fetched by that lane); or
// - each thread of the first M*ROWS/4 sums four outputs over the warps
//   into slot crank of the LEADER CTA's parts (the leader by plain stores,
//   the others by st.async into its shared memory, see cluster_sum_init);
//   the leader's first NV threads wait for the other slots on the cluster
//   sum's barrier, add the slots in rank order, add `shared` (shv,
//   prefetched by them) and store.
// Both orders are fixed: bit-identical reruns. With ROT (slot rotation),
// thread 0 of the leader settles the slot from rv (tile_rotation in
// skinny.cu) and hands it to the epilogue threads across the first
// barrier; without it, rv is not looked at.
template <int M, int TR, int CL, bool ROT>
__device__ __forceinline__ void reduce_store(const tprun_skinny_params& p, float* red, float* parts,
                                             const float (&acc)[TR][2][4], int n0, const uint4& shv,
                                             bool eok, int em, int ec, unsigned long long rv) {
  constexpr int ROWS = 16 * TR;
  constexpr int SP = ROWS + 4;
  constexpr int NV = M * ROWS / 8;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int nwarps = blockDim.x >> 5;
  const int g = lane >> 2;
  const int tig = lane & 3;
  const ClusterShape<CL> cl;
  const int csize = cl.csize, crank = cl.crank;
  {
    float* mine = red + warp * 8 * SP;
#pragma unroll
    for (int r = 0; r < TR; ++r) {
      mine[(2 * tig) * SP + 16 * r + g] = acc[r][0][0] + acc[r][1][0];
      mine[(2 * tig + 1) * SP + 16 * r + g] = acc[r][0][1] + acc[r][1][1];
      mine[(2 * tig) * SP + 16 * r + g + 8] = acc[r][0][2] + acc[r][1][2];
      mine[(2 * tig + 1) * SP + 16 * r + g + 8] = acc[r][0][3] + acc[r][1][3];
    }
  }
  if constexpr (ROT) {
    if (crank == 0 && threadIdx.x == 0) *rot_slot_word<ROWS>(red) = tile_slot(p, rv, csize);
  }
  __syncthreads();
  if (CL != kCluster && warp_epilogue(NV, csize)) {
    if (warp >= NV) return;
    const int vm = warp / (ROWS / 8), vc = (warp % (ROWS / 8)) * 8;
    const float* col = red + vm * SP + vc + (lane >> 2);
    float t = 0.f;
    for (int w = lane & 3; w < nwarps; w += 4) t += col[w * 8 * SP];
    t += __shfl_xor_sync(0xffffffffu, t, 1);
    t += __shfl_xor_sync(0xffffffffu, t, 2);
    float s[8];
#pragma unroll
    for (int c = 0; c < 8; ++c) s[c] = __shfl_sync(0xffffffffu, t, 4 * c);
    if (eok) store_vector<ROT>(p, s, shv, n0, em, ec, ROT ? rot_bytes(p, rot_slot_word<ROWS>(red)) : 0ull);  // lane 0 only (see the callers)
    return;
  }
  // Each CTA's sum over its warps goes to slot crank of the LEADER's parts,
  // four columns per thread: the leader's own by plain stores, the others'
  // by st.async into the leader's shared memory (cluster_sum_init).
  uint32_t rslot = 0, rbar = 0;
  if (cluster_launch<CL>(csize)) {
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // the leader's barrier is set up
    if (crank != 0) {
      rslot = mapa_u32(smem_u32(parts + crank * 8 * SP), 0);
      rbar = mapa_u32(smem_u32(cluster_sum_bar<ROWS>(red)), 0);
    }
  }
  for (int e = threadIdx.x; e < M * ROWS / 4; e += blockDim.x) {
    const int i = (e / (ROWS / 4)) * SP + (e % (ROWS / 4)) * 4;
    float4 s = *reinterpret_cast<const float4*>(red + i);
    for (int w = 1; w < nwarps; ++w) {
      const float4 t = *reinterpret_cast<const float4*>(red + w * 8 * SP + i);
      s.x += t.x; s.y += t.y; s.z += t.z; s.w += t.w;
    }
    if (CL == kNoCluster || crank == 0) {
      *reinterpret_cast<float4*>(parts + i) = s;
    } else {
      st_async_v4(rslot + 4 * i, s, rbar);
    }
  }
  // A sender leaves with its st.async possibly in flight: their data comes
  // from registers, and the shared memory they write is the leader's, which
  // stays resident until the barrier has counted every byte. (The PTX ISA
  // neither requires nor forbids waiting here; the CUDA guide asks that
  // distributed shared memory accesses end before the TARGET block exits.)
  if (CL != kNoCluster && crank != 0) return;
  __syncthreads();         // the leader's own slot

  // Epilogue (the leader's first NV threads): 8 consecutive columns of one
  // latent row per thread, slots added in rank order.
  // Only the epilogue threads wait for the other slots; the leader stays
  // resident (its shared memory the target of those stores) because thread
  // 0 is always one of them: vector 0 (em 0, ec 0) exists for every tile.
  if (!eok) return;
  if (cluster_launch<CL>(csize)) mbar_wait_cluster(cluster_sum_bar<ROWS>(red));
  float s[8];
  {
    const float4 a = *reinterpret_cast<const float4*>(parts + em * SP + ec);
    const float4 b = *reinterpret_cast<const float4*>(parts + em * SP + ec + 4);
    s[0] = a.x; s[1] = a.y; s[2] = a.z; s[3] = a.w;
    s[4] = b.x; s[5] = b.y; s[6] = b.z; s[7] = b.w;
  }
  for (int q = 1; q < csize; ++q) {
    const float* pq = parts + q * 8 * SP + em * SP + ec;
    const float4 a = *reinterpret_cast<const float4*>(pq);
    const float4 b = *reinterpret_cast<const float4*>(pq + 4);
    s[0] += a.x; s[1] += a.y; s[2] += a.z; s[3] += a.w;
    s[4] += b.x; s[5] += b.y; s[6] += b.z; s[7] += b.w;
  }
  store_vector<ROT>(p, s, shv, n0, em, ec, ROT ? rot_bytes(p, rot_slot_word<ROWS>(red)) : 0ull);
}

}  // namespace tprun

#endif  // TPRUN_SKINNY_PRIMS_CUH
