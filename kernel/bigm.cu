// The fused up-projection for M 9..128 latent rows on tensor cores:
// out = bf16(bf16(latent · weightᵀ) + shared), the op of skinny.h, stored
// straight into 1..16 mailbox slots. The skinny kernel (skinny.cu) keeps
// M = 1..8; this one takes the same parameter block, the same packed
// weight and the same slot rotation, with the row count M in the flags
// (skinny.h, TPRUN_SKINNY_ROWS) and a code size MT >= M per entry point.
//
// Design (docs/kernel-notes.md, "Larger M"; none of it measured yet):
// - mma.sync m16n8k16 bf16 -> f32 with the WEIGHT as A straight from the
//   packed layout, as in skinny.cu: a lane's 16-byte load is one MMA's A
//   fragment. The latent is B: 8 of its rows per MMA, so MT/8 MMAs per
//   16 weight rows and 16 k.
// - The latent is read from shared memory, not from L2 per warp. The warps
//   of a CTA are WR row warps (each its own TileRows weight rows) times WK
//   K warps (each a stride of the CTA's chunks: chunk wk, wk+WK, ...), so
//   each latent byte staged once serves WR*TileRows/16 row groups, and WK
//   lets a small shard keep all four tensor cores of an SM busy with
//   enough CTAs (p.tile_rows = WR*TileRows gives WR; WK = warps/WR). A lane's
//   B fragment for one 32-k chunk and latent rows 8j..8j+7 is 16 bytes of
//   row 8j+g at k offset 8*tig (the packed layout's k permutation, skinny.h),
//   so with the [chunk][row][32 k] layout one ld.shared.v4 of a warp reads
//   512 contiguous bytes: no bank conflict. Per 1 KB weight block a warp
//   reads MT*64 bytes of latent from shared memory; with two row groups
//   per warp (TileRows 32) that is MT*32 per KB, 4 KB at MT 128, about
//   60 % of an SM's shared memory bandwidth when HBM streams at full rate
//   (reasoned, not measured).
// - The latent comes in windows of KW 32-k chunks (64 KB per window),
//   double-buffered with cp.async (16 bytes each, zero-filled past M and
//   past K, so that every MMA operand is finite), issued after
//   griddepcontrol.wait. The weight is streamed into a register ring of
//   Depth chunks per warp, the first Depth issued before the wait (PDL),
//   and with l2_prefetch set each CTA first asks for its whole weight range
//   to be brought into L2 (cp.async.bulk.prefetch.L2, a hint), so the HBM
//   stream does not depend on the ring's depth.
// - The CTAs of a cluster (1..8) split K too. Each K warp group writes its
//   partial sums (fp32) into its own slab of its CTA's shared memory (over
//   the latent buffers, which are free then), the cluster synchronizes,
//   and every CTA of the cluster finishes a share of the output vectors,
//   adding the partials in (cluster rank, K warp group) order through
//   distributed shared memory, then `shared`, rounding and storing; a
//   second cluster barrier keeps every CTA resident until its partials are
//   read. Fixed order everywhere: bit-identical reruns.
// - Registers: the accumulators are TR*(MT/8)*4 floats per lane (128 at
//   MT 128, TileRows 32), the weight ring Depth*TR*8: hence Depth 2 and at
//   most 8 warps (launch bound 256 threads, 255 registers a thread).
// - No fused receive: a launch with recv_slot traps. The tprun_receive that
//   follows advances the slot rotation; this kernel only reads word 0.
#include "skinny_prims.cuh"

namespace tprun {

// 16 bytes from global to shared memory through L2 only; src_bytes 0
// writes 16 zero bytes and reads nothing.
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most N of this thread's committed groups are pending.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint4 lds128(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}
__device__ __forceinline__ float4 ld_cluster_f4(uint32_t a) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(a)
               : "memory");
  return v;
}
// Every thread of every CTA of the cluster: release this CTA's shared
// memory writes, acquire the others'.
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}

// Compile-time sizes of the entry point of code size MT.
template <int MT>
struct BigmSizes {
  static_assert(MT == 16 || MT == 32 || MT == 64 || MT == 128, "code sizes 16, 32, 64, 128");
  static constexpr int kNJ = MT / 8;          // B operands (8 latent rows each) per chunk
  static constexpr int kKW = 1024 / MT;       // chunks per latent window: MT*KW*64 = 64 KB
  static constexpr int kWinBytes = kKW * MT * 64;
};

// The dynamic shared memory of a launch with rows output columns per CTA
// and WK K warp groups (kernel/config.go, BigmSharedBytes, computes the
// same): two latent windows, or the partial sums [WK][MT][rows + 4] fp32
// over them, and 16 bytes for the slot word after that.
template <int MT>
__device__ __forceinline__ uint32_t bigm_parts_offset(int rows, int wk) {
  const uint32_t lat = 2u * BigmSizes<MT>::kWinBytes;
  const uint32_t parts = (uint32_t)wk * (uint32_t)MT * (uint32_t)(rows + 4) * 4u;
  return lat > parts ? lat : parts;
}

// Issues the cp.async of latent window w (chunks cs + w*KW .. of the CTA's
// range [cs, cs + nj)) into buffer dst: rows 0..mpad-1 (mpad: M rounded up
// to 8, rows >= M zero-filled), 16 bytes per thread and turn, consecutive
// threads along a latent row (coalesced).
template <int MT>
__device__ __forceinline__ void bigm_stage(const tprun_skinny_params& p, uint32_t dst, int w, int cs, int nj, int M) {
  constexpr int KW = BigmSizes<MT>::kKW;
  const int c0 = w * KW;
  const int nch = min(KW, nj - c0);
  if (nch <= 0) return;
  const int mpad = (M + 7) & ~7;
  const int K = p.latent_dim;
  const uint16_t* lat = reinterpret_cast<const uint16_t*>(p.latent);
  const int per_row = nch * 4;
  const int pieces = mpad * per_row;
  for (int e = (int)threadIdx.x; e < pieces; e += (int)blockDim.x) {
    const int row = e / per_row;
    const int rest = e - row * per_row;
    const int c = rest >> 2, q = rest & 3;
    const int k = (cs + c0 + c) * 32 + 8 * q;
    const bool ok = row < M && k < K;
    const uint16_t* src = lat + (ok ? (size_t)row * (size_t)K + (size_t)k : 0);
    cp_async16(dst + (uint32_t)(((c * MT + row) * 32 + 8 * q) * 2), src, ok ? 16u : 0u);
  }
}

// The tile code of entry point tprun_bigm_mt<MT>_<family>: TR row groups
// (TileRows/16) per warp, Depth chunks of weight loads in flight per warp.
template <int MT, int TR, int DEPTH, bool ROT>
__device__ __forceinline__ void bigm(const tprun_skinny_params& p, unsigned char* smem) {
  constexpr int NJ = BigmSizes<MT>::kNJ;
  constexpr int KW = BigmSizes<MT>::kKW;
  constexpr int WB = BigmSizes<MT>::kWinBytes;
  static_assert(KW % DEPTH == 0, "a window holds whole turns of the weight ring");
  constexpr int WS = 512;  // elements between a lane's consecutive chunks of one row group (packed layout)

  const int lane = (int)(threadIdx.x & 31), warp = (int)(threadIdx.x >> 5);
  const int nwarps = (int)(blockDim.x >> 5);
  const int g = lane >> 2, tig = lane & 3;
  const int rows = p.tile_rows;  // output columns of the CTA: WR row warps of 16*TR
  const int WR = rows / (16 * TR);
  const int M = TPRUN_SKINNY_ROWS(p.flags);
  // The geometry: whole row warps, every warp in one K group, and the K
  // groups' steps a whole number of weight ring turns per latent window.
  if (rows < 16 * TR || rows % (16 * TR) != 0 || nwarps % WR != 0) __trap();
  const int WK = nwarps / WR;
  if (KW % (WK * DEPTH) != 0) __trap();
  const int wr = warp % WR, wk = warp / WR;
  if ((p.flags & TPRUN_SKINNY_PACKED) == 0) __trap();    // reads the packed layout only
  if (M < 1 || M > MT) __trap();                         // the row count is this code's
  if (p.recv_slot != 0) __trap();                        // no fused receive here

  const ClusterShape<kAny> cl;
  const int csize = cl.csize, crank = cl.crank;
  const int n0 = (int)(blockIdx.x / (unsigned)csize) * rows;
  const int K = p.latent_dim;
  const int nchunks = (K + 31) >> 5;
  const int cs = (int)(((long long)crank * nchunks) / csize);
  const int ce = (int)(((long long)(crank + 1) * nchunks) / csize);
  const int nj = ce - cs;  // this CTA's chunks
  // This warp's chunks: cs + wk + WK*s for s < ns.
  const int ns = nj > wk ? (nj - wk + WK - 1) / WK : 0;
  const int SPW = KW / WK;  // this warp's steps per latent window

  // This warp's row groups and its lane's A fragments (packed layout,
  // skinny.h): block (group, chunk) at (group*nchunks + chunk)*512, half h
  // of lane l at (h*32 + l)*8. Padding rows and k are zeros; only whole
  // missing groups need a guard.
  const int grp0 = n0 / 16 + TR * wr;
  const uint16_t* wp[TR][2];
  bool rowok[TR];
#pragma unroll
  for (int r = 0; r < TR; ++r) {
    rowok[r] = (grp0 + r) * 16 < p.shard;
#pragma unroll
    for (int h = 0; h < 2; ++h)
      wp[r][h] = reinterpret_cast<const uint16_t*>(p.weight) +
                 ((size_t)(rowok[r] ? grp0 + r : 0) * (size_t)nchunks + cs + wk) * WS + h * 256 + lane * 8;
  }

  // L2 prefetch (l2_prefetch != 0): thread t < the CTA's row groups asks
  // for group t's chunks [cs, ce), one contiguous run of the packed layout.
  if (p.l2_prefetch != 0 && nj > 0 && (int)threadIdx.x < rows / 16) {
    const int grp = n0 / 16 + (int)threadIdx.x;
    if (grp * 16 < p.shard)
      prefetch_l2(reinterpret_cast<const uint16_t*>(p.weight) + ((size_t)grp * (size_t)nchunks + cs) * WS,
                  (uint32_t)nj * 1024u);
  }

  // Weight prologue: independent of the previous kernel's results.
  uint4 wa[DEPTH][TR][2];
#pragma unroll
  for (int u = 0; u < DEPTH; ++u)
#pragma unroll
    for (int r = 0; r < TR; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) wa[u][r][h] = ld_weight(wp[r][h] + (size_t)WS * WK * u, u < ns && rowok[r]);

  // The next kernel may launch; this one waits for the previous grid
  // before it reads the latent, `shared` or the slot counter.
  griddep_launch_dependents();
  griddep_wait();

  const uint32_t sbase = smem_u32(smem);
  const int nwin = (nj + KW - 1) / KW;
  bigm_stage<MT>(p, sbase, 0, cs, nj, M);
  cp_async_commit();
  bigm_stage<MT>(p, sbase + WB, 1, cs, nj, M);
  cp_async_commit();
  // Slot rotation: word 0 only (tprun_receive, which follows, advances
  // it); needed only by the stores, so its round trip overlaps the MMAs.
  uint32_t slot = 0;
  if (ROT && threadIdx.x == 0) slot = rotation_read(p.rot_counter);

  float acc[TR][NJ][4];
#pragma unroll
  for (int r = 0; r < TR; ++r)
#pragma unroll
    for (int j = 0; j < NJ; ++j) acc[r][j][0] = acc[r][j][1] = acc[r][j][2] = acc[r][j][3] = 0.f;
  const int jn = (M + 7) >> 3;  // B operands that hold rows < M
  // This lane's B fragment of window chunk c, operand j, in a window at
  // wb: wb + ((c*MT + 8j + g)*32 + 8*tig)*2 bytes; the warp's step t of a
  // window is its chunk wk + WK*t.
  const uint32_t lane_off = (uint32_t)(((wk * MT + g) * 32 + 8 * tig) * 2);

  for (int w = 0; w < nwin; ++w) {
    cp_async_wait<1>();  // window w has landed (the newest group is w + 1's)
    __syncthreads();     // ... for every thread's copies
    const uint32_t wb = sbase + (uint32_t)((w & 1) * WB) + lane_off;
    for (int t0 = 0; t0 < SPW && w * SPW + t0 < ns; t0 += DEPTH) {
#pragma unroll
      for (int u = 0; u < DEPTH; ++u) {
        const int t = t0 + u;
        const int i = w * SPW + t;  // the warp's step: ring slot i % DEPTH == u (SPW % DEPTH == 0)
        if (i < ns) {
#pragma unroll
          for (int j = 0; j < NJ; ++j) {
            if (j < jn) {
              const uint4 b = lds128(wb + (uint32_t)((t * WK * MT + 8 * j) * 64));
#pragma unroll
              for (int r = 0; r < TR; ++r) {
                // k 0..3 of the lane's 8 feed MMA 0 (A half 0), k 4..7 MMA 1.
                mma16816(acc[r][j], wa[u][r][0].x, wa[u][r][0].y, wa[u][r][0].z, wa[u][r][0].w, b.x, b.y);
                mma16816(acc[r][j], wa[u][r][1].x, wa[u][r][1].y, wa[u][r][1].z, wa[u][r][1].w, b.z, b.w);
              }
            }
          }
          const bool ok = i + DEPTH < ns;
#pragma unroll
          for (int r = 0; r < TR; ++r)
#pragma unroll
            for (int h = 0; h < 2; ++h)
              wa[u][r][h] = ld_weight(wp[r][h] + (size_t)WS * WK * (i + DEPTH), ok && rowok[r]);
        }
      }
    }
    __syncthreads();  // every warp is done with buffer w & 1
    bigm_stage<MT>(p, sbase + (uint32_t)((w & 1) * WB), w + 2, cs, nj, M);
    cp_async_commit();  // possibly empty: keeps wait_group<1> counting windows
  }
  cp_async_wait<0>();
  __syncthreads();  // no copy or read of a latent window is left: the partials may overwrite them

  // The partial sums [wk][m][n] (pitch rows + 4 floats: the fragment
  // stores below hit 32 distinct banks) over the latent buffers.
  // acc[r][j]: c0, c1 at weight row 16r + g, latent rows 8j + 2tig,
  // 8j + 2tig + 1; c2, c3 at weight row 16r + g + 8.
  const int P = rows + 4;
  const int SLAB = MT * P;  // floats per K group
  float* parts = reinterpret_cast<float*>(smem);
  {
    float* mine = parts + wk * SLAB;
    const int nb = 16 * TR * wr + g;
#pragma unroll
    for (int r = 0; r < TR; ++r)
#pragma unroll
      for (int j = 0; j < NJ; ++j) {
        if (j < jn) {
          const int m0 = 8 * j + 2 * tig;
          const int n = nb + 16 * r;
          mine[m0 * P + n] = acc[r][j][0];
          mine[(m0 + 1) * P + n] = acc[r][j][1];
          mine[m0 * P + n + 8] = acc[r][j][2];
          mine[(m0 + 1) * P + n + 8] = acc[r][j][3];
        }
      }
  }
  uint32_t* slot_word = reinterpret_cast<uint32_t*>(smem + bigm_parts_offset<MT>(rows, WK));
  if (ROT && threadIdx.x == 0) *slot_word = slot;
  if (csize > 1)
    cluster_sync_all();
  else
    __syncthreads();

  // The epilogue: vector v (latent row v / (rows/8), columns 8*(v % (rows/8))
  // of the tile) is finished by CTA v % csize of the cluster, which adds the
  // partials in order: cluster rank, then K group.
  const unsigned long long rot = ROT ? (unsigned long long)*slot_word * p.rot_stride : 0ull;
  const int vpr = rows / 8;
  const int nvec = M * vpr;
  for (int v = crank + csize * (int)threadIdx.x; v < nvec; v += csize * (int)blockDim.x) {
    const int em = v / vpr;
    const int ec = (v - em * vpr) * 8;
    if (n0 + ec >= p.shard) continue;
    const uint4 shv = ld_act(reinterpret_cast<const uint16_t*>(p.shared) + (size_t)em * (size_t)p.shared_stride + n0 + ec, true);
    const int off = em * P + ec;
    float s[8];
    const uint32_t a = smem_u32(parts + off);
    for (int q = 0; q < csize; ++q) {
      const uint32_t aq = csize > 1 ? mapa_u32(a, (uint32_t)q) : a;
      for (int k = 0; k < WK; ++k) {
        const uint32_t ak = aq + (uint32_t)(k * SLAB * 4);
        float4 x, y;
        if (csize > 1) {
          x = ld_cluster_f4(ak);
          y = ld_cluster_f4(ak + 16);
        } else {
          x = *reinterpret_cast<const float4*>(parts + off + k * SLAB);
          y = *reinterpret_cast<const float4*>(parts + off + k * SLAB + 4);
        }
        if (q == 0 && k == 0) {
          s[0] = x.x; s[1] = x.y; s[2] = x.z; s[3] = x.w;
          s[4] = y.x; s[5] = y.y; s[6] = y.z; s[7] = y.w;
        } else {
          s[0] += x.x; s[1] += x.y; s[2] += x.z; s[3] += x.w;
          s[4] += y.x; s[5] += y.y; s[6] += y.z; s[7] += y.w;
        }
      }
    }
    store_vector<ROT>(p, s, shv, n0, em, ec, rot);
  }
  // No CTA leaves while another may still read its partials.
  if (csize > 1) cluster_sync_all();
}

// A family of the larger-M entry points (families.tsv rows with latent
// "smem"): output columns per warp and weight chunks in flight per warp.
template <int TileRows, int Depth>
struct BigmFamily {
  static_assert(TileRows == 16 || TileRows == 32, "a warp owns one or two MMA row groups");
  static constexpr int kTR = TileRows / 16;
  static constexpr int kDepth = Depth;
};

template <int MT, class F, bool ROT>
__device__ __forceinline__ void bigm_entry(const tprun_skinny_params& p) {
  extern __shared__ float4 tprun_smem[];
  if (ROT && p.rot_counter == 0) __trap();  // the rotation's entry point without a counter
  bigm<MT, F::kTR, F::kDepth, ROT>(p, reinterpret_cast<unsigned char*>(tprun_smem));
}

}  // namespace tprun

// The entry points of code size MT (M up to MT rows) and family NAME, at
// most MAXT threads per CTA: without slot rotation, and with it ("_rot").
#define TPRUN_BIGM_ENTRY(MT, NAME, MAXT)                                                  \
  extern "C" __global__ void __launch_bounds__(MAXT, 1)                                   \
      tprun_bigm_mt##MT##_##NAME(const __grid_constant__ tprun_skinny_params p) {         \
    tprun::bigm_entry<MT, tprun_bigm_family_##NAME, false>(p);                            \
  }                                                                                       \
  extern "C" __global__ void __launch_bounds__(MAXT, 1)                                   \
      tprun_bigm_mt##MT##_##NAME##_rot(const __grid_constant__ tprun_skinny_params p) {   \
    tprun::bigm_entry<MT, tprun_bigm_family_##NAME, true>(p);                             \
  }
// A larger-M family's options and its entry points for MT = 16, 32, 64,
// 128 (families.tsv: tile_rows per warp, depth, max warps).
#define TPRUN_BIGM_FAMILY(NAME, ROWS, DEPTH, WARPS)                    \
  using tprun_bigm_family_##NAME = tprun::BigmFamily<ROWS, DEPTH>;     \
  TPRUN_BIGM_ENTRY(16, NAME, 32 * (WARPS))                             \
  TPRUN_BIGM_ENTRY(32, NAME, 32 * (WARPS))                             \
  TPRUN_BIGM_ENTRY(64, NAME, 32 * (WARPS))                             \
  TPRUN_BIGM_ENTRY(128, NAME, 32 * (WARPS))
