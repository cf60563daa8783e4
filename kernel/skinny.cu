// The fused skinny up-projection: out = bf16(bf16(latent · weightᵀ) + shared)
// for M = 1..8 latent rows, written straight into 1..16 mailbox slots.
//
// Design (numbers in bench/NOTES-kernel.md):
// - Tensor cores, mma.sync m16n8k16 bf16 -> f32, with the WEIGHT as the A
//   operand (16 weight rows = 16 output columns n) and the latent as B (its
//   8 columns are the M latent rows; rows >= M are zero). The order of the k
//   summation is free as long as A and B use the same permutation, so every
//   thread takes 8 k of weight row g and of row g+8 as the A fragments of two
//   consecutive k16 MMAs (row-major: one 16-byte load per row; packed: one
//   per MMA, already in fragment order); its B fragment is the same 8 k of
//   latent row g, one 16-byte load.
// - One CTA owns tile_rows (16 or 32) output columns and one K slice; each
//   warp takes a contiguous run of 32-k chunks of that slice; the CTAs of a
//   cluster split K, send their partial sums into the leader CTA's shared
//   memory (st.async, counted on an mbarrier there), and the leader adds them in rank
//   order, adds `shared`, rounds and stores 16-byte vectors. Fixed order:
//   bit-identical reruns.
// - Each warp keeps a ring of U chunks of weight loads in flight (16-byte,
//   L1::no_allocate, streamed), the first U issued before
//   griddepcontrol.wait so they overlap the previous kernel (PDL); the
//   latent comes either through a small register ring from L2 or, in the
//   "_s" entry points, from a copy of the CTA's latent slice in shared
//   memory made right after the wait. The "_c" entry points instead copy
//   the CTA's whole weight slab into shared memory (cp.async) before the
//   wait: few registers, so several kernels' CTAs can share an SM.
// - Each entry point holds the tile code twice (ClusterShape): once for
//   launches without a cluster, with no cluster instruction in it, once for
//   clusters; it picks by the launch's cluster size. "_d8p1" is "_d8p"
//   compiled once for both, as every entry point was before (the sweep
//   picks it where that form is faster).
// - The "p" entry points read the weight in skinny.h's packed layout: the
//   same fragments, stored so that each 16-byte load of a warp reads 512
//   contiguous bytes (fewer L2 requests per byte than 8 rows x 64 bytes),
//   and so that each load is one MMA's A operand as it lands (no register
//   moves: 0.14-0.19 us at shard 3584 in a timing-only build, 2026-11-30x).
#include <cuda_bf16.h>
#include <cooperative_groups.h>
#include <stdint.h>

#include "skinny.h"

namespace cg = cooperative_groups;

namespace tprun {

// All global accesses are volatile asm so that the compiler keeps them in
// program order around griddepcontrol.wait: weights before, the rest after.
// TPRUN_WEIGHT_LD: the weight load instruction (experiment builds may
// define another one). No L2::256B prefetch hint: with it, shard 3584 ran
// 0.23-0.3 us slower on the same H200 (bench/NOTES-kernel.md, v8).
#ifndef TPRUN_WEIGHT_LD
#define TPRUN_WEIGHT_LD "ld.global.nc.L1::no_allocate.v4.u32"
#endif
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
__device__ __forceinline__ uint4 ld_weight(const uint16_t* p, bool pred) {
  uint4 v;
  TPRUN_LD_V4_PRED(TPRUN_WEIGHT_LD, v, p, pred);
  return v;
}

// Latent and shared: ordinary (coherent) loads, issued after
// griddepcontrol.wait, cached in L1 so CTAs on one SM share the latent.
// L2ONLY: `.cg`, cached in L2 only (still coherent: the latent may be
// written by the previous grid, so `.nc` is not allowed). Only the step's
// family "_t32pn" uses it: in the fused step it is 0.04-0.07 us faster at
// M 5-7, but made global it cost other shapes up to 0.41 us
// (bench/NOTES-kernel.md, 2026-12-01al).
template <bool L2ONLY = false>
__device__ __forceinline__ uint4 ld_act(const uint16_t* p, bool pred) {
  uint4 v;
  if constexpr (L2ONLY)
    TPRUN_LD_V4_PRED("ld.global.cg.v4.u32", v, p, pred);
  else
    TPRUN_LD_V4_PRED("ld.global.v4.u32", v, p, pred);
  return v;
}

// 16 bytes global -> shared without registers; zero-filled when !pred.
__device__ __forceinline__ void cp_async16(uint16_t* dst, const uint16_t* src, bool pred) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src), "r"(pred ? 16 : 0)
               : "memory");
}

// The same for streamed weights, with a 256-byte L2 prefetch.
__device__ __forceinline__ void cp_async16_w(uint16_t* dst, const uint16_t* src, bool pred) {
  const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
  asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
               "r"(pred ? 16 : 0)
               : "memory");
}

// Ask for bytes at p to be brought into L2 (a hint: no landing space, no
// completion to wait for).
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// What both forms of the plan need: the helper count, the tile limit, and
// where tile t starts and how many bytes it has. The tiles are counted from
// the shard, not the grid, which may carry receive CTAs after them. In the
// packed layout a tile is the same contiguous block with rows padded to 16
// and k to 32.
template <int ROWS, bool PACKED>
struct PfPlan {
  int helpers;        // TPRUN_PF_HELPERS
  int lim;            // tiles t < lim are prefetched by the helpers
  size_t row_bytes;   // bytes of one weight row (all of K), padded in the packed layout
  int shard_rows;     // rows the weight buffer holds
  const char* w;

  __device__ __forceinline__ explicit PfPlan(const tprun_skinny_params& p) {
    const int s16 = TPRUN_PF_SIXTEENTHS(p.l2_prefetch);
    const int ntiles = (p.shard + ROWS - 1) / ROWS;
    helpers = TPRUN_PF_HELPERS(p.l2_prefetch);
    lim = s16 == 0 ? ntiles : min(ntiles, (ntiles * s16 + 15) / 16);
    row_bytes = PACKED ? (size_t)((p.latent_dim + 31) / 32) * 64 : (size_t)p.latent_dim * 2;
    shard_rows = PACKED ? (p.shard + 15) / 16 * 16 : p.shard;
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
template <int ROWS, bool PACKED>
__device__ __forceinline__ void l2_prefetch_tiles(const tprun_skinny_params& p, int tile, int lane) {
  const PfPlan<ROWS, PACKED> pl(p);
  auto one = [&](int t) { prefetch_l2(pl.tile_base(t), (uint32_t)pl.tile_bytes(t)); };
  if (tile < pl.helpers) {
    for (int t = tile + lane * pl.helpers; t < pl.lim; t += 32 * pl.helpers) one(t);
    if (lane == 0 && tile >= pl.lim) one(tile);
  } else if (TPRUN_PF_OWN(p.l2_prefetch) && lane == 0) {
    one(tile);
  }
}

__device__ __forceinline__ void prefetch_line_l2(const void* p) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(p) : "memory");
}

// The LSU form of the plan (TPRUN_PF_LSU): every thread of the leader CTA
// prefetches a share of whole tiles' 128-byte lines; nothing is held in
// registers or shared memory, so a CTA can have its whole tile (and, for a
// helper, other CTAs' tiles) in flight however small its ring.
template <int ROWS, bool PACKED>
__device__ __forceinline__ void l2_prefetch_lsu(const tprun_skinny_params& p, int tile) {
  const PfPlan<ROWS, PACKED> pl(p);
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

// Experiment builds only (-DTPRUN_TRACE, scripts/kernel-harness): thread 0
// of every CTA records %globaltimer and clock64 at its start, after
// griddepcontrol.wait, after its MMAs and after its epilogue, for the
// harness's "trace" mode. The shipped fatbin has none of it.
#ifdef TPRUN_TRACE
struct tprun_trace_rec {
  unsigned long long g[7];
  unsigned c[7];
  unsigned smid, blk, wlo, nctas;
};
extern "C" {
__device__ unsigned tprun_trace_n;
__device__ tprun_trace_rec tprun_trace_buf[1 << 16];
}
struct Trace {
  unsigned long long g[7] = {};
  long long c[7] = {};
  __device__ __forceinline__ void mark(int i) {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g[i])::"memory");
    c[i] = clock64();
  }
  __device__ __forceinline__ void flush(const tprun_skinny_params& p) {
    if (threadIdx.x != 0) return;
    const unsigned i = atomicAdd(&tprun_trace_n, 1u);
    if (i >= (1u << 16)) return;
    tprun_trace_rec r;
    for (int q = 0; q < 7; ++q) r.g[q] = g[q], r.c[q] = (unsigned)(c[q] - c[0]);
    asm volatile("mov.u32 %0, %%smid;" : "=r"(r.smid));
    r.blk = blockIdx.x;
    r.wlo = (unsigned)(p.weight >> 8);
    r.nctas = gridDim.x;
    tprun_trace_buf[i] = r;
  }
};
// Marks i once register x has landed: the timer read is predicated on a
// comparison of x (a value no load returns here), so it cannot issue before
// the load that writes x completes. A plain read of x into a dead register
// does not do it: ptxas deletes the move.
__device__ __forceinline__ void trace_landed(Trace& t, int i, uint32_t x) {
  unsigned long long g;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "setp.ne.u32 p, %1, 0x7fc17fc1;\n\t"
      "mov.u64 %0, 0;\n\t"
      "@p mov.u64 %0, %%globaltimer;\n\t}"
      : "=l"(g)
      : "r"(x)
      : "memory");
  t.g[i] = g;
  t.c[i] = clock64();
}
// For several registers: fold them into one value first (each fold waits).
__device__ __forceinline__ uint32_t trace_fold(uint32_t a, uint32_t x) { return a ^ x; }
#else
struct Trace {
  __device__ __forceinline__ void mark(int) {}
  __device__ __forceinline__ void flush(const tprun_skinny_params&) {}
};
__device__ __forceinline__ void trace_landed(Trace&, int, uint32_t) {}
__device__ __forceinline__ uint32_t trace_fold(uint32_t a, uint32_t) { return a; }
#endif

// The cluster sum (clusters of 2..8 CTAs that split K): each non-leader
// CTA sends its partial sums into its slot of the LEADER's shared memory
// with st.async, which counts the bytes on an mbarrier of the leader; only
// the leader's epilogue threads wait, on that barrier. One-way: no cluster
// barrier round trip at the end, and the senders leave as soon as their
// stores are issued. Against the cluster barrier it replaced, same GPU,
// interleaved: shard 896 at 32/4/g/8/4/p 0.06-0.20 µs faster, shard 3584 at
// 32/4/g/4/4/p 0.41-0.52 µs (bench/NOTES-kernel.md, 2026-11-30i).
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
// ROWS..ROWS+3 of warp 0's latent row 0, which nothing else reads or
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

// Which launches an instance of the tile code serves, and so what it knows
// of the cluster shape at compile time (template parameter CL):
// - kNoCluster: launches without a cluster (one CTA per cluster); no
//   cluster instruction is compiled into it;
// - kCluster: clusters of 2..8;
// - kAny: both, the cluster size read at run time (the "_d8p1" entry
//   points, and every entry point up to 2026-11-30i).
// The entry points with two instances pick by %cluster_nctarank
// (in_cluster). Against kAny, same GPU, interleaved: shard 3584 0.05-0.15
// µs faster, shard 896 with 16 warps and no cluster 0.19 µs faster at M 1,
// but 0.12-0.43 µs slower at M 3-8 (2026-11-30m; 0.18-0.41 at M 3-6 in
// three calls of 2026-11-30p on three H200s). Not explained: the
// no-cluster instance issues its first weight load about 100 instructions
// sooner, and elsewhere the two differ in the order of a few instructions
// (SASS of nvcc 12.4). Hence "_d8p1".
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

__device__ __forceinline__ uint4 lds_v4(const uint16_t* p) {
  return *reinterpret_cast<const uint4*>(p);
}

__device__ __forceinline__ void st_v4(uint16_t* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

// griddepcontrol.wait behind a branch that ptxas cannot resolve (the SM
// count is never 0): without it, ptxas hoists the wait (SASS ACQBULK) above
// the weight loads of the prologue and PDL overlaps nothing.
__device__ __forceinline__ void griddep_wait() {
  uint32_t nsm;
  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsm));
  if (nsm != 0) asm volatile("griddepcontrol.wait;" ::: "memory");
}

// The tile code an entry point of M runs: the code of CODE >= M rows, with
// rows M..CODE-1 never loaded, summed as zeros and never stored. M = 1 runs
// the M = 2 code: the M = 1 instance of the register ring spilled and ran
// 0.3-0.4 µs slower than M = 2 at shard 3584 (bench/NOTES-kernel.md,
// 2026-11-30b). The "_t32pw" entry points run the M = 8 code at every M:
// at shard 896 with an 80 % carveout, M 2-6 time 0.185-0.244 µs faster in it
// than in their own (2026-11-30ak; why is not known). The MMA is m16n8k16
// with the latent as the 8-wide operand, so the extra rows cost no MMA;
// the epilogue still handles CODE rows (the sums over the warps and the
// cluster sum's stores), and decides its form from CODE: the M = 8 code
// never takes the warp-per-vector epilogue (warp_epilogue), so at 16 warps
// without a cluster and M <= 2 it adds the warps' partials in another
// order than the M = 2 code (an element may round one bit apart).
// latent_rows: the row count, M; when CODE > M, through a move ptxas cannot
// fold, so that the M rows are a run-time bound of the CODE-row code.
template <int M, int CODE>
__device__ __forceinline__ int latent_rows() {
  static_assert(M >= 1 && M <= CODE && CODE <= 8, "an entry point runs the code of at least its rows");
  if constexpr (M == CODE) {
    return M;
  } else {
    int r;
    asm volatile("mov.b32 %0, %1;" : "=r"(r) : "n"(M));
    return r;
  }
}

__device__ __forceinline__ void griddep_launch_dependents() {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
}

// D += A·B for one m16n8k16 tile; see the PTX ISA for the fragment layouts.
__device__ __forceinline__ void mma16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
      "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

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
// destination: whole words, as the receiver checks words.
__device__ __forceinline__ void store_vector(const tprun_skinny_params& p, const float (&s)[8], const uint4& shv,
                                             int n0, int em, int ec) {
  uint4 o;
  o.x = finish2(s[0], s[1], shv.x);
  o.y = finish2(s[2], s[3], shv.y);
  o.z = finish2(s[4], s[5], shv.z);
  o.w = finish2(s[6], s[7], shv.w);
  const size_t off = (size_t)em * (size_t)p.hidden + (size_t)p.rank * (size_t)p.shard + n0 + ec;
  for (int d = 0; d < p.ndst; ++d) st_v4(reinterpret_cast<uint16_t*>(p.dst[d]) + off, o);
}

// Whether a CTA takes the warp-per-vector epilogue of reduce_store: no
// cluster, never more than one output vector per warp, and at most
// max(4, warps/2) vectors.
// Measured (bench/NOTES-kernel.md, 2026-11-30b and 30e): with 16 warps,
// where the other epilogue sums 16 partials per output, it gains 0.17 µs
// with 6 vectors and 0.41 µs with 8 (shard 896, M 3 and 4); with 10 and 12
// it lost in the sweeps. With 8 warps it gains up to 0.1 µs with 2 or 4
// vectors (M <= 2 at 16 rows); with 6 or 8 the A/B could not tell (0.05-0.1
// µs slower, as much as two builds differed where the rule changes
// nothing), so 8 warps keep the limit 4.
// TPRUN_WEPI_MAX, if defined, replaces the limit (experiment builds).
__device__ __forceinline__ bool warp_epilogue(int nv, int csize) {
  const int nwarps = (int)(blockDim.x >> 5);
#ifdef TPRUN_WEPI_MAX
  const int lim = TPRUN_WEPI_MAX;
#else
  const int lim = max(4, nwarps / 2);
#endif
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
// Both orders are fixed: bit-identical reruns.
template <int M, int TR, int CL>
__device__ __forceinline__ void reduce_store(const tprun_skinny_params& p, float* red, float* parts,
                                             const float (&acc)[TR][2][4], int n0, const uint4& shv,
                                             bool eok, int em, int ec) {
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
    if (eok) store_vector(p, s, shv, n0, em, ec);  // lane 0 only (see the callers)
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
  store_vector(p, s, shv, n0, em, ec);
}

// What every tile entry (skinny, skinny_lines, skinny_slab) sets up first:
// the thread's place in its warp and CTA, the cluster shape, the CTA's first
// output column, the cluster sum's barrier (cluster_sum_init), and the K
// split: CTA crank of the cluster takes chunks [cs, ce), each warp a
// contiguous part [wc0, wc1) of that, so every load address is a base plus
// an immediate offset (few registers, more CTAs per SM).
template <int M, int ROWS, int CL>
struct TileSetup {
  int lane, warp, nwarps;
  int g;    // MMA group: weight rows g and g+8, latent row g
  int tig;  // thread in group: k offset tig*8 within a chunk
  int csize, crank, n0;
  int K, nchunks, cs, ce, wc0, wc1;
  __device__ __forceinline__ TileSetup(const tprun_skinny_params& p, float* smem) {
    lane = threadIdx.x & 31;
    warp = threadIdx.x >> 5;
    nwarps = blockDim.x >> 5;
    g = lane >> 2;
    tig = lane & 3;
    const ClusterShape<CL> cl;
    csize = cl.csize;
    crank = cl.crank;
    n0 = (int)(blockIdx.x / csize) * ROWS;
    if (cluster_launch<CL>(csize)) cluster_sum_init(cluster_sum_bar<ROWS>(smem), crank, (uint32_t)((csize - 1) * M * ROWS * 4));
    K = p.latent_dim;
    nchunks = (K + 31) >> 5;
    cs = (int)(((long long)crank * nchunks) / csize);
    ce = (int)(((long long)(crank + 1) * nchunks) / csize);
    wc0 = cs + (int)(((long long)warp * (ce - cs)) / nwarps);
    wc1 = cs + (int)(((long long)(warp + 1) * (ce - cs)) / nwarps);
  }
};

// The output vector this thread finishes in reduce_store, if any (lane 0 of
// warp v for vector v with warp_epilogue, else the leader's thread v), and
// its `shared` vector, fetched where epilogue_slot is called: off the
// critical path, after the latent loads. A function returning the values,
// not a constructor filling the members: with the constructor ptxas
// scheduled the prologue differently and the kernel ran 0.01-0.04 us
// slower (bench/NOTES-kernel.md, 2026-11-30z); this form compiles to the
// same SASS as the code it replaced.
struct EpilogueSlot {
  int em, ec;  // latent row and first column of the vector
  bool eok;    // the thread has a vector to store
  uint4 shv;
};
template <int M, int ROWS, int CL, bool L2ONLY = false>
__device__ __forceinline__ EpilogueSlot epilogue_slot(const tprun_skinny_params& p, const TileSetup<M, ROWS, CL>& t, int mrows) {
  constexpr int NV = M * ROWS / 8;
  const bool wepi = CL != kCluster && warp_epilogue(NV, t.csize);
  const int ev = wepi ? (t.lane == 0 ? t.warp : NV) : (int)threadIdx.x;
  const bool epi = t.crank == 0 && ev < NV;
  const int em = ev / (ROWS / 8);
  const int ec = (ev % (ROWS / 8)) * 8;
  const bool eok = epi && t.n0 + ec < p.shard && em < mrows;
  const uint4 shv = ld_act<L2ONLY>(reinterpret_cast<const uint16_t*>(p.shared) + (eok ? (size_t)em * (size_t)p.shared_stride + t.n0 + ec : 0),
                           eok);
  return {em, ec, eok, shv};
}

// The prologue of skinny() and skinny_lines() around their weight ring:
// tile_prologue_start before the ring's loads (the bulk form of skinny.h's
// L2 prefetch plan), tile_prologue_end after them (its LSU form; then the
// next kernel may launch, and this one waits for the previous grid).
template <int ROWS, bool PACKED>
__device__ __forceinline__ void tile_prologue_start(const tprun_skinny_params& p, int csize, int crank, int warp,
                                                    int lane) {
  if (p.l2_prefetch != 0 && !TPRUN_PF_LSU(p.l2_prefetch) && crank == 0 && warp == 0)
    l2_prefetch_tiles<ROWS, PACKED>(p, (int)(blockIdx.x / csize), lane);
}
template <int ROWS, bool PACKED>
__device__ __forceinline__ void tile_prologue_end(const tprun_skinny_params& p, int csize, int crank) {
  if (p.l2_prefetch != 0 && TPRUN_PF_LSU(p.l2_prefetch) && crank == 0)
    l2_prefetch_lsu<ROWS, PACKED>(p, (int)(blockIdx.x / csize));
  // Let the next kernel start streaming its own weights as soon as every
  // CTA of this one is running; its griddepcontrol.wait still waits for
  // this whole grid to finish and flush.
  griddep_launch_dependents();
  griddep_wait();
}

// U: weight ring depth in 32-k chunks (U*TR*8 registers, U*TR KB per warp in
// flight). STAGE: the CTA copies its latent K slice into shared memory once,
// right after griddepcontrol.wait (one L2 round trip, all threads), and the
// MMAs read B from there; otherwise each warp streams its latent chunks from
// L2 through a ring of UB registers.
// PACKED: the weight is in skinny.h's packed layout. mrows (<= M): the
// latent rows that exist; the code computes M (latent_rows).
template <int M, int TR, int U, int UB, bool STAGE, bool PACKED, int CL, bool L2ONLY = false>
__device__ __forceinline__ void skinny(const tprun_skinny_params& p, float* smem, int mrows) {
  static_assert(U % UB == 0, "latent ring must divide the weight ring");
  Trace tr;
  tr.mark(0);
  constexpr int ROWS = 16 * TR;
  constexpr int SP = ROWS + 4;  // smem pitch (floats): conflict-free fragment stores
  // Elements between a thread's consecutive 32-k chunks of one weight row:
  // the next 32 k of the row, or the next 1 KB block of the packed layout.
  constexpr int WS = PACKED ? 512 : 32;

  if (p.tile_rows != ROWS) __trap();  // launched with another entry point's geometry
  if (((p.flags & TPRUN_SKINNY_PACKED) != 0) != PACKED) __trap();  // weight layout mismatch

  const TileSetup<M, ROWS, CL> t(p, smem);
  const int lane = t.lane, warp = t.warp, nwarps = t.nwarps, g = t.g, tig = t.tig;
  const int csize = t.csize, crank = t.crank, n0 = t.n0;
  const int K = t.K, nchunks = t.nchunks, cs = t.cs, ce = t.ce, wc0 = t.wc0, wc1 = t.wc1;
  const int nj = wc1 - wc0;  // this warp's chunks
  const int kb = wc0 * 32 + tig * 8;
  const int kleft = K - kb;  // step j is in range when 32*j < kleft (K % 8 == 0)

  const uint16_t* wp[TR][2];
  bool rowok[TR][2];
#pragma unroll
  for (int r = 0; r < TR; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if constexpr (PACKED) {
        // Block (group, chunk) of the packed layout (skinny.h): this lane's
        // 16 bytes of half h sit at (h*32 + lane)*8; padding rows and k are
        // zeros, so only whole missing groups need a guard.
        const int grp = n0 / 16 + r;
        rowok[r][h] = grp * 16 < p.shard;
        wp[r][h] = reinterpret_cast<const uint16_t*>(p.weight) +
                   ((size_t)(rowok[r][h] ? grp : 0) * (size_t)nchunks + wc0) * 512 + h * 256 + lane * 8;
      } else {
        const int row = n0 + 16 * r + 8 * h + g;
        rowok[r][h] = row < p.shard;
        wp[r][h] = reinterpret_cast<const uint16_t*>(p.weight) +
                   (size_t)(rowok[r][h] ? row : 0) * (size_t)K + kb;
      }
    }
  }
  const bool lrow = g < mrows;
  const uint16_t* lp = reinterpret_cast<const uint16_t*>(p.latent) + (size_t)(lrow ? g : 0) * K + kb;

  tile_prologue_start<ROWS, PACKED>(p, csize, crank, warp, lane);

  uint4 wa[U][TR][2];
  // Weight prologue: independent of the previous kernel's results.
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const bool ok = u < nj && (PACKED || 32 * u < kleft);
#pragma unroll
    for (int r = 0; r < TR; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) wa[u][r][h] = ld_weight(wp[r][h] + WS * u, ok && rowok[r][h]);
  }
  tile_prologue_end<ROWS, PACKED>(p, csize, crank);
  tr.mark(1);

  float* red = smem;
  float* parts = smem + nwarps * 8 * SP;  // [cluster rank][m][n], used in the leader
  // Staged latent: [M][lpitch] bf16 after the reduction buffers; the pitch
  // is an odd multiple of 64 bytes, so the 8 rows of a B fragment load fall
  // in different banks.
  const int nch = ce - cs;
  const int lpitch = (nch | 1) * 32;
  uint16_t* lat_s = reinterpret_cast<uint16_t*>(parts + csize * 8 * SP);
  uint4 lb[STAGE ? 1 : UB];
  if constexpr (STAGE) {
    const uint16_t* lat = reinterpret_cast<const uint16_t*>(p.latent);
    const int per_row = nch * 4;  // 16-byte vectors per latent row of the slice
    const int nvec = mrows * per_row;  // rows >= mrows are never read (lrow)
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
      const int m = i / per_row, q = i % per_row;
      const int k = cs * 32 + q * 8;
      const bool ok = k < K;  // the last chunk may run past K: zeros
      cp_async16(lat_s + m * lpitch + q * 8, lat + (ok ? (size_t)m * K + k : 0), ok);
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
  } else {
#pragma unroll
    for (int u = 0; u < UB; ++u) lb[u] = ld_act<L2ONLY>(lp + 32 * u, lrow && u < nj && 32 * u < kleft);
  }
  // This thread's B fragments in the staged slice: row g, chunk wc0 - cs.
  const uint16_t* bs = lat_s + (lrow ? g : 0) * lpitch + (wc0 - cs) * 32 + tig * 8;
  const EpilogueSlot es = epilogue_slot<M, ROWS, CL, L2ONLY>(p, t, mrows);

  // Two accumulator sets per tile (first and second k half of each chunk):
  // two independent MMA dependency chains.
  float acc[TR][2][4];
#pragma unroll
  for (int r = 0; r < TR; ++r)
#pragma unroll
    for (int q = 0; q < 2; ++q) acc[r][q][0] = acc[r][q][1] = acc[r][q][2] = acc[r][q][3] = 0.f;

  if constexpr (STAGE) __syncthreads();  // the staged latent is complete
  trace_landed(tr, 4, wa[0][0][0].x);
  if constexpr (!STAGE) trace_landed(tr, 5, lb[0].x);
#ifdef TPRUN_TRACE
  // Mark 6: every chunk of the prologue ring (this warp's first U) and
  // every latent chunk of the first UB landed.
  {
    uint32_t f = 0;
#pragma unroll
    for (int u = 0; u < U; ++u)
      if (u < nj) f = trace_fold(f, wa[u][TR - 1][1].w);
    if constexpr (!STAGE) {
#pragma unroll
      for (int u = 0; u < UB; ++u) f = trace_fold(f, lb[u].w);
    }
    trace_landed(tr, 6, f);
  }
#endif

  for (int j0 = 0; j0 < nj; j0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u;
      if (j < nj) {
        uint4 b;
        if constexpr (STAGE) {
          b = lrow ? lds_v4(bs + 32 * u) : make_uint4(0, 0, 0, 0);
        } else {
          b = lb[u % UB];
        }
#pragma unroll
        for (int r = 0; r < TR; ++r) {
          // Thread-local k 0..3 feed MMA 0, k 4..7 MMA 1; the B halves follow
          // the same split, so A and B agree on every k.
          if constexpr (PACKED) {  // each load is one MMA's A fragment (skinny.h)
            mma16816(acc[r][0], wa[u][r][0].x, wa[u][r][0].y, wa[u][r][0].z, wa[u][r][0].w, b.x, b.y);
            mma16816(acc[r][1], wa[u][r][1].x, wa[u][r][1].y, wa[u][r][1].z, wa[u][r][1].w, b.z, b.w);
          } else {  // loads of rows g and g + 8, interleaved into the fragments
            mma16816(acc[r][0], wa[u][r][0].x, wa[u][r][1].x, wa[u][r][0].y, wa[u][r][1].y, b.x, b.y);
            mma16816(acc[r][1], wa[u][r][0].z, wa[u][r][1].z, wa[u][r][0].w, wa[u][r][1].w, b.z, b.w);
          }
        }
      }
      if constexpr (!STAGE) {
        const int jb = j + UB;
        lb[u % UB] = ld_act<L2ONLY>(lp + 32 * (u + UB), lrow && jb < nj && 32 * jb < kleft);
      }
      const int jw = j + U;
      const bool ok = jw < nj && (PACKED || 32 * jw < kleft);
#pragma unroll
      for (int r = 0; r < TR; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) wa[u][r][h] = ld_weight(wp[r][h] + WS * (u + U), ok && rowok[r][h]);
    }
#pragma unroll
    for (int r = 0; r < TR; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) wp[r][h] += WS * U;
    lp += 32 * U;
    bs += 32 * U;
  }

  tr.mark(2);
  reduce_store<M, TR, CL>(p, red, parts, acc, n0, es.shv, es.eok, es.em, es.ec);
  tr.mark(3);
  tr.flush(p);
}

// "l" entry points: the latent read by whole 128-byte lines. In skinny()
// lane (g, tig) loads 16 bytes of latent row g, so one load instruction
// touches M half-lines; on the H200 that is most of the kernel's growth with
// M (bench/NOTES-kernel.md, 2026-11-30w: no latent loads at all made shard
// 896 flat in M, and the same bytes read contiguously recovered most of it).
// Here a warp walks its chunks in PAIRS (2c, 2c+1: one 128-byte line of a
// latent row when K is a multiple of 64), and lane (g, tig) loads 16 bytes
// of latent row 4b + (g & 3), chunk 2c + (g >> 2): one instruction reads 4
// rows x 128 bytes, whole lines. B column n then holds latent row n & 3 of
// the pair's chunk n >> 2; the MMAs of the even chunk's weights use the
// columns 0-3, those of the odd chunk's weights the columns 4-7, each into
// its own accumulator, and the others' products are thrown away. No
// shuffle in the loop; the cost is MMAs: as many as skinny() for M <= 4 (the
// columns it leaves empty are the ones used here), twice as many for M 5-8
// (b = 0, 1: rows 0-3 and 4-7). At the end one xor-2 shuffle per value puts
// every sum where reduce_store expects it.
// A warp whose chunk run starts or ends on an odd chunk has a half-empty
// pair there: that chunk's weight and latent loads are predicated off, so
// its MMAs add zeros. Packed weights only; U: weight chunks in flight (U/2
// pairs), LP: latent pairs in flight. A latent ring as long as the warp's
// run keeps every latent load before the first MMA: with a shorter one,
// ptxas issued the refills after it and a second L2 round trip showed in
// the kernel's time (0.3-0.6 us, 2026-11-30x).
template <int M, int TR, int U, int LP, int CL>
__device__ __forceinline__ void skinny_lines(const tprun_skinny_params& p, float* smem, int mrows) {
  constexpr int UP = U / 2;
  constexpr int ST = UP > LP ? UP : LP;  // pairs per pass of the main loop: slots u % UP, u % LP
  static_assert(U % 2 == 0 && ST % UP == 0 && ST % LP == 0, "rings must divide the loop's pass");
  constexpr int NB = M > 4 ? 2 : 1;  // latent loads per pair: rows 0-3, then 4-7
  constexpr int ROWS = 16 * TR;
  constexpr int SP = ROWS + 4;
  constexpr int WS = 512;  // elements between a lane's consecutive chunks (packed layout)
  Trace tr;
  tr.mark(0);

  if (p.tile_rows != ROWS) __trap();
  if ((p.flags & TPRUN_SKINNY_PACKED) == 0) __trap();  // reads the packed layout only

  // The K split of skinny(); the warp's pairs start on the even chunk at or
  // below its first chunk.
  const TileSetup<M, ROWS, CL> t(p, smem);
  const int lane = t.lane, warp = t.warp, nwarps = t.nwarps, g = t.g, tig = t.tig;
  const int csize = t.csize, crank = t.crank, n0 = t.n0;
  const int K = t.K, nchunks = t.nchunks, wc0 = t.wc0, wc1 = t.wc1;
  const int pc = wc0 & ~1;
  const int np = wc1 > wc0 ? (wc1 - pc + 1) >> 1 : 0;  // this warp's pairs
  // Whether chunk slot s of the warp's pair i is one of its chunks.
  auto chunk_ok = [&](int i, int s) {
    const int c = pc + 2 * i + s;
    return c >= wc0 && c < wc1;
  };

  const uint16_t* wp[TR][2];
  bool rowok[TR];
#pragma unroll
  for (int r = 0; r < TR; ++r) {
    const int grp = n0 / 16 + r;
    rowok[r] = grp * 16 < p.shard;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      wp[r][h] = reinterpret_cast<const uint16_t*>(p.weight) +
                 ((size_t)(rowok[r] ? grp : 0) * (size_t)nchunks + pc) * 512 + h * 256 + lane * 8;
  }
  // This lane's latent: half hl of each pair, rows lrow[b] = 4b + (g & 3).
  const int hl = g >> 2;
  const int kl = (pc + hl) * 32 + tig * 8;  // its k in pair 0
  const uint16_t* lp[NB];
  bool lok[NB];
#pragma unroll
  for (int b = 0; b < NB; ++b) {
    const int row = 4 * b + (g & 3);
    lok[b] = row < mrows;
    lp[b] = reinterpret_cast<const uint16_t*>(p.latent) + (size_t)(lok[b] ? row : 0) * K + kl;
  }
  // Whether this lane's 16 latent bytes of pair i exist (the last chunk of
  // K may be short: K % 8 == 0).
  auto lat_ok = [&](int i) { return chunk_ok(i, hl) && kl + 64 * i < K; };

  tile_prologue_start<ROWS, true>(p, csize, crank, warp, lane);

  uint4 wa[UP][2][TR][2];
#pragma unroll
  for (int u = 0; u < UP; ++u)
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      const bool ok = u < np && chunk_ok(u, s);
#pragma unroll
      for (int r = 0; r < TR; ++r)
#pragma unroll
        for (int h = 0; h < 2; ++h) wa[u][s][r][h] = ld_weight(wp[r][h] + WS * (2 * u + s), ok && rowok[r]);
    }
  tile_prologue_end<ROWS, true>(p, csize, crank);
  tr.mark(1);

  float* red = smem;
  float* parts = smem + nwarps * 8 * SP;
  uint4 lb[LP][NB];
#pragma unroll
  for (int u = 0; u < LP; ++u)
#pragma unroll
    for (int b = 0; b < NB; ++b) lb[u][b] = ld_act(lp[b] + 64 * u, lok[b] && u < np && lat_ok(u));
  const EpilogueSlot es = epilogue_slot<M, ROWS, CL>(p, t, mrows);

  // acc[r][b][s]: tile r, latent rows 4b.., the weights of chunk slot s.
  float acc[TR][NB][2][4];
#pragma unroll
  for (int r = 0; r < TR; ++r)
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int s = 0; s < 2; ++s) acc[r][b][s][0] = acc[r][b][s][1] = acc[r][b][s][2] = acc[r][b][s][3] = 0.f;
  trace_landed(tr, 4, wa[0][1][0][0].x);  // slot 1: slot 0 of a warp starting on an odd chunk is empty
  trace_landed(tr, 5, lb[0][0].x);

  for (int i0 = 0; i0 < np; i0 += ST) {
#pragma unroll
    for (int u = 0; u < ST; ++u) {
      const int i = i0 + u;
      if (i < np) {
#pragma unroll
        for (int b = 0; b < NB; ++b) {
          const uint4 bb = lb[u % LP][b];
#pragma unroll
          for (int r = 0; r < TR; ++r)
#pragma unroll
            for (int s = 0; s < 2; ++s) {
              const uint4& w0 = wa[u % UP][s][r][0];
              const uint4& w1 = wa[u % UP][s][r][1];
              mma16816(acc[r][b][s], w0.x, w0.y, w0.z, w0.w, bb.x, bb.y);  // the chunk's MMA 0 and 1 (skinny.h)
              mma16816(acc[r][b][s], w1.x, w1.y, w1.z, w1.w, bb.z, bb.w);
            }
        }
      }
      const int il = i + LP;
#pragma unroll
      for (int b = 0; b < NB; ++b) lb[u % LP][b] = ld_act(lp[b] + 64 * (u + LP), lok[b] && il < np && lat_ok(il));
      const int iw = i + UP;
#pragma unroll
      for (int s = 0; s < 2; ++s) {
        const bool ok = iw < np && chunk_ok(iw, s);
#pragma unroll
        for (int r = 0; r < TR; ++r)
#pragma unroll
          for (int h = 0; h < 2; ++h)
            wa[u % UP][s][r][h] = ld_weight(wp[r][h] + WS * (2 * (u + UP) + s), ok && rowok[r]);
      }
    }
#pragma unroll
    for (int r = 0; r < TR; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) wp[r][h] += WS * 2 * ST;
#pragma unroll
    for (int b = 0; b < NB; ++b) lp[b] += 64 * ST;
  }
  tr.mark(2);

  // Lane (g, tig) holds columns 2tig, 2tig+1 of each accumulator. The
  // useful ones: tig < 2 in the even chunk's (latent rows 4b + 2tig..),
  // tig >= 2 in the odd chunk's (rows 4b + 2tig - 4..). reduce_store wants
  // rows 2tig, 2tig+1 in lane tig: lanes tig < 2 add their b = 0 even sums
  // to the b = 0 odd sums of lane tig + 2; lanes tig >= 2 add their b = 1
  // odd sums to the b = 1 even sums of lane tig - 2.
  float out[TR][2][4];
  const bool lo = tig < 2;
#pragma unroll
  for (int r = 0; r < TR; ++r)
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const float e1 = NB > 1 ? acc[r][NB - 1][0][q] : 0.f;
      const float o1 = NB > 1 ? acc[r][NB - 1][1][q] : 0.f;
      const float recv = __shfl_xor_sync(0xffffffffu, lo ? e1 : acc[r][0][1][q], 2);
      out[r][0][q] = (lo ? acc[r][0][0][q] : o1) + recv;
      out[r][1][q] = 0.f;
    }
  reduce_store<M, TR, CL>(p, red, parts, out, n0, es.shv, es.eok, es.em, es.ec);
  tr.mark(3);
  tr.flush(p);
}

// "_c" entry points: the CTA's whole weight slab (16 rows x its K slice) is
// copied into shared memory with cp.async before griddepcontrol.wait, so
// the prefetch costs shared memory instead of registers and several
// kernels' CTAs fit on an SM at once; the latent slice follows after the
// wait. Rows of both slabs have an odd multiple of 64 bytes as pitch, so
// the 16-byte fragment loads of a quarter warp hit distinct banks.
template <int M, int CL>
__device__ __forceinline__ void skinny_slab(const tprun_skinny_params& p, float* smem) {
  constexpr int ROWS = 16;
  constexpr int SP = ROWS + 4;
  constexpr int NV = M * ROWS / 8;

  if (p.tile_rows != ROWS) __trap();
  if (p.flags & TPRUN_SKINNY_PACKED) __trap();  // the slab copy reads row-major weights

  const TileSetup<M, ROWS, CL> t(p, smem);
  const int warp = t.warp, nwarps = t.nwarps, g = t.g, tig = t.tig;
  const int csize = t.csize, n0 = t.n0, K = t.K, cs = t.cs, ce = t.ce;
  const int nch = ce - cs;
  const int pitch = (nch | 1) * 32;  // elements
  const int per_row = nch * 4;       // 16-byte vectors per slab row

  float* red = smem;
  float* parts = smem + nwarps * 8 * SP;
  uint16_t* wsl = reinterpret_cast<uint16_t*>(parts + csize * 8 * SP);  // [16][pitch]
  uint16_t* lsl = wsl + ROWS * pitch;                                     // [M][pitch]

  {
    const uint16_t* W = reinterpret_cast<const uint16_t*>(p.weight);
    const int nvec = ROWS * per_row;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
      const int r = i / per_row, q = i % per_row;
      const int row = n0 + r, k = cs * 32 + q * 8;
      const bool ok = row < p.shard && k < K;
      cp_async16_w(wsl + r * pitch + q * 8, W + (ok ? (size_t)row * K + k : 0), ok);
    }
  }
  griddep_launch_dependents();
  griddep_wait();
  {
    const uint16_t* L = reinterpret_cast<const uint16_t*>(p.latent);
    const int nvec = M * per_row;
    for (int i = threadIdx.x; i < nvec; i += blockDim.x) {
      const int m = i / per_row, q = i % per_row;
      const int k = cs * 32 + q * 8;
      const bool ok = k < K;
      cp_async16(lsl + m * pitch + q * 8, L + (ok ? (size_t)m * K + k : 0), ok);
    }
  }
  // As epilogue_slot, without the row check (M rows always).
  const int ev = CL != kCluster && warp_epilogue(NV, csize) ? (t.lane == 0 ? warp : NV) : (int)threadIdx.x;
  const int em = ev / (ROWS / 8);
  const int ec = (ev % (ROWS / 8)) * 8;
  const bool eok = t.crank == 0 && ev < NV && n0 + ec < p.shard;
  const uint4 shv = ld_act(reinterpret_cast<const uint16_t*>(p.shared) +
                               (eok ? (size_t)em * (size_t)p.shared_stride + n0 + ec : 0),
                           eok);
  asm volatile("cp.async.wait_all;" ::: "memory");
  __syncthreads();

  // Each warp: a contiguous run of the slab's chunks.
  const int c0 = (int)(((long long)warp * nch) / nwarps);
  const int c1 = (int)(((long long)(warp + 1) * nch) / nwarps);
  const bool lrow = g < M;
  const uint16_t* a0 = wsl + g * pitch + tig * 8;
  const uint16_t* a1 = a0 + 8 * pitch;
  const uint16_t* bp = lsl + (lrow ? g : 0) * pitch + tig * 8;
  float acc[1][2][4];
#pragma unroll
  for (int q = 0; q < 2; ++q) acc[0][q][0] = acc[0][q][1] = acc[0][q][2] = acc[0][q][3] = 0.f;
#pragma unroll 4
  for (int c = c0; c < c1; ++c) {
    const uint4 wa = lds_v4(a0 + c * 32);
    const uint4 wb = lds_v4(a1 + c * 32);
    const uint4 b = lrow ? lds_v4(bp + c * 32) : make_uint4(0, 0, 0, 0);
    mma16816(acc[0][0], wa.x, wb.x, wa.y, wb.y, b.x, b.y);
    mma16816(acc[0][1], wa.z, wb.z, wa.w, wb.w, b.z, b.w);
  }
  reduce_store<M, 1, CL>(p, red, parts, acc, n0, shv, eok, em, ec);
}

// The receive CTAs of a launch with a fused receive (skinny.h, recv_slot):
// the CTAs after the tiles' (blockIdx.x >= ceil(shard/tile_rows) * cluster)
// compute nothing. Like every CTA they let the next kernel launch and wait
// for the previous one; then they do this step's Lamport receive, the
// vectors spread over their threads. Being last in the grid they are placed
// after every tile CTA, so their polling never keeps a tile CTA off an SM.
// Returns whether this CTA was one of them.
template <int M>
__device__ __forceinline__ bool receive_cta(const tprun_skinny_params& p) {
  if (p.recv_slot == 0) return false;
  const unsigned csize = cg::this_cluster().num_blocks();
  const unsigned first = (unsigned)((p.shard + p.tile_rows - 1) / p.tile_rows) * csize;
  if (blockIdx.x < first) return false;
  griddep_launch_dependents();
  griddep_wait();
  const long long r = (long long)(blockIdx.x - first), nr = (long long)(gridDim.x - first);
  receive_block(p.recv_slot, p.recv_out, p.recv_status, p.recv_timeout_ns, p.recv_flags, M, p.hidden, p.shard,
                r * blockDim.x + threadIdx.x, nr * blockDim.x);
  return true;
}

// Whether this launch has clusters of more than one CTA: which instance of
// the tile code (ClusterShape) an entry point runs. Uniform over the grid.
__device__ __forceinline__ bool in_cluster() {
  uint32_t n;
  asm("mov.u32 %0, %%cluster_nctarank;" : "=r"(n));
  return n > 1;
}

}  // namespace tprun

// Entry points: tprun_skinny_m<M><variant>, one per M and geometry:
//   ""      16 output columns per CTA, 4 chunks of weights in flight per warp,
//           latent from L2; at most 256 threads and 80 registers
//   "_d8"   16 columns, 8 chunks in flight, latent from L2; up to 512 threads
//   "_t32"  32 columns, 4 chunks in flight, latent from L2; up to 512 threads
//   "_s8"   as "_d8" with the latent K slice staged in shared memory
//   "_s32"  as "_t32" with the latent K slice staged in shared memory
//   "_c"    16 columns; weight slab and latent slice both copied to shared
//           memory (cp.async), no register ring; up to 512 threads
//   "_d8p", "_t32p", "_s8p"  as "_d8", "_t32", "_s8" on a packed weight
//           (skinny.h: flags & TPRUN_SKINNY_PACKED)
//   "_d8p1" as "_d8p", its tile code compiled once for launches with and
//           without a cluster (ClusterShape, kAny)
//   "_d8pl" as "_d8p" with the latent read by whole lines (skinny_lines).
//           M 1-4: the latent ring holds 4 pairs (8 chunks, the weight
//           ring's depth); M 5-8: 1 pair, which keeps them within 128
//           registers at 512 threads (4 pairs spilled 228-260 bytes), and
//           which is slow: at M 5-8 no sweep picks it (2026-11-30x)
//   "_t32pw" as "_t32p" running the M = 8 tile code at every M ("wide":
//           latent_rows); "_t32pw" of M = 8 is "_t32p" of M = 8
//   "_t32pn" as "_t32p" with the latent and shared loads cached in L2
//           only (ld_act's L2ONLY): the fused step's family
// ONE: one instance of the tile code for every cluster size (kAny).
// CODE: the rows of the tile code it runs (latent_rows), at least MM;
// TPRUN_CODE_ROWS(MM) for the entries that run their own M's code (M = 1
// the M = 2 code). L2ONLY: ld_act's form for the latent and shared loads.
#define TPRUN_CODE_ROWS(MM) ((MM) == 1 ? 2 : (MM))
#define TPRUN_SKINNY_ENTRY(MM, SUFFIX, TR, U, UB, STAGE, PACKED, MAXT, MINB, ONE, CODE, L2ONLY)     \
  extern "C" __global__ void __launch_bounds__(MAXT, MINB)                                        \
      tprun_skinny_m##MM##SUFFIX(const __grid_constant__ tprun_skinny_params p) {                 \
    extern __shared__ float4 tprun_smem[];                                                        \
    if (tprun::receive_cta<MM>(p)) return;                                                        \
    float* smem = reinterpret_cast<float*>(tprun_smem);                                           \
    if constexpr (ONE)                                                                            \
      tprun::skinny<CODE, TR, U, UB, STAGE, PACKED, tprun::kAny, L2ONLY>(p, smem, tprun::latent_rows<MM, CODE>()); \
    else if (tprun::in_cluster())                                                                 \
      tprun::skinny<CODE, TR, U, UB, STAGE, PACKED, tprun::kCluster, L2ONLY>(p, smem, tprun::latent_rows<MM, CODE>()); \
    else                                                                                          \
      tprun::skinny<CODE, TR, U, UB, STAGE, PACKED, tprun::kNoCluster, L2ONLY>(p, smem, tprun::latent_rows<MM, CODE>()); \
  }
// The "l" entry points (skinny_lines): line-wise latent loads, packed
// weights, one instance per cluster shape as TPRUN_SKINNY_ENTRY.
#define TPRUN_SKINNY_LENTRY(MM, SUFFIX, TR, U, LP, MAXT, MINB)                                     \
  extern "C" __global__ void __launch_bounds__(MAXT, MINB)                                        \
      tprun_skinny_m##MM##SUFFIX(const __grid_constant__ tprun_skinny_params p) {                 \
    extern __shared__ float4 tprun_smem[];                                                        \
    if (tprun::receive_cta<MM>(p)) return;                                                        \
    float* smem = reinterpret_cast<float*>(tprun_smem);                                           \
    if (tprun::in_cluster())                                                                      \
      tprun::skinny_lines<TPRUN_CODE_ROWS(MM), TR, U, LP, tprun::kCluster>(p, smem, tprun::latent_rows<MM, TPRUN_CODE_ROWS(MM)>()); \
    else                                                                                          \
      tprun::skinny_lines<TPRUN_CODE_ROWS(MM), TR, U, LP, tprun::kNoCluster>(p, smem, tprun::latent_rows<MM, TPRUN_CODE_ROWS(MM)>()); \
  }
#define TPRUN_SKINNY_M(MM)                                    \
  TPRUN_SKINNY_ENTRY(MM, , 1, 4, 4, false, false, 256, 3, false, TPRUN_CODE_ROWS(MM), false)     \
  TPRUN_SKINNY_ENTRY(MM, _d8, 1, 8, 4, false, false, 512, 1, false, TPRUN_CODE_ROWS(MM), false)  \
  TPRUN_SKINNY_ENTRY(MM, _t32, 2, 4, 4, false, false, 512, 1, false, TPRUN_CODE_ROWS(MM), false) \
  TPRUN_SKINNY_ENTRY(MM, _s8, 1, 8, 1, true, false, 512, 1, false, TPRUN_CODE_ROWS(MM), false)   \
  TPRUN_SKINNY_ENTRY(MM, _s32, 2, 4, 1, true, false, 512, 1, false, TPRUN_CODE_ROWS(MM), false)  \
  TPRUN_SKINNY_ENTRY(MM, _d8p, 1, 8, 4, false, true, 512, 1, false, TPRUN_CODE_ROWS(MM), false)  \
  TPRUN_SKINNY_ENTRY(MM, _t32p, 2, 4, 4, false, true, 512, 1, false, TPRUN_CODE_ROWS(MM), false) \
  TPRUN_SKINNY_ENTRY(MM, _t32pw, 2, 4, 4, false, true, 512, 1, false, 8, false) \
  TPRUN_SKINNY_ENTRY(MM, _t32pn, 2, 4, 4, false, true, 512, 1, false, TPRUN_CODE_ROWS(MM), true) \
  TPRUN_SKINNY_ENTRY(MM, _s8p, 1, 8, 1, true, true, 512, 1, false, TPRUN_CODE_ROWS(MM), false)   \
  TPRUN_SKINNY_ENTRY(MM, _d8p1, 1, 8, 4, false, true, 512, 1, true, TPRUN_CODE_ROWS(MM), false)  \
  TPRUN_SKINNY_LENTRY(MM, _d8pl, 1, 8, (MM > 4 ? 1 : 4), 512, 1)     \
  extern "C" __global__ void __launch_bounds__(512, 2)        \
      tprun_skinny_m##MM##_c(const __grid_constant__ tprun_skinny_params p) { \
    extern __shared__ float4 tprun_smem[];                    \
    if (tprun::receive_cta<MM>(p)) return;                    \
    float* smem = reinterpret_cast<float*>(tprun_smem);       \
    if (tprun::in_cluster())                                  \
      tprun::skinny_slab<MM, tprun::kCluster>(p, smem);       \
    else                                                      \
      tprun::skinny_slab<MM, tprun::kNoCluster>(p, smem);     \
  }

TPRUN_SKINNY_M(1)
TPRUN_SKINNY_M(2)
TPRUN_SKINNY_M(3)
TPRUN_SKINNY_M(4)
TPRUN_SKINNY_M(5)
TPRUN_SKINNY_M(6)
TPRUN_SKINNY_M(7)
TPRUN_SKINNY_M(8)
