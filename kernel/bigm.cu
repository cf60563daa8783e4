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

// ------------------------------------------------------------------ bigw
//
// The warp-specialized form ("wgmma" families, families.tsv): the same op,
// parameter block, packed weight and slot rotation as bigm above, for M
// 9..128 (docs/kernel-notes.md, "A warp-specialized form").
// - A CTA owns NWG*64 weight rows (NWG consumer warpgroups of 64) and a
//   range of K (the CTAs of a cluster split K). The weight streams through
//   ST shared-memory stages of KC 32-k chunks: one weight warp brings each
//   of the CTA's row groups' KC blocks (contiguous in the packed layout)
//   by one bulk copy counted on the stage's full mbarrier, as soon as the
//   consumers have released the stage (its empty mbarrier). Weights are
//   never written by the previous kernel, so under PDL the first ST stages
//   are in flight before it ends.
// - A latent warpgroup stages the latent of each stage after
//   griddepcontrol.wait: in shared memory a 32-k chunk is [j 0..3][row
//   0..MT-1][16 B], K-major no-swizzle core matrices, word P of a row (k
//   2P, 2P+1) at column P % 4, word P / 4: the k order of the packed
//   weight's A fragments. Up to MT 32 by 4-byte cp.async (counted on the
//   full mbarrier by cp.async.mbarrier.arrive.noinc); above, through
//   registers (ld.global, the 4x4 word transpose, st.shared), the next
//   stage's loads in flight while one is stored.
// - Consumers: per k16 step a warp loads its row group's A fragment from
//   the stage (one ld.shared.v4 a lane, 512 contiguous bytes a warp) and
//   the warpgroup issues wgmma.mma_async m64nMTk16 (A from registers, B
//   the staged latent) on sm_90a; elsewhere (sm_100) mma.sync m16n8k16
//   with B fragments read from the same layout, whose D fragment is the
//   same, so the epilogue is one. Steps past the CTA's range multiply zero
//   A with zero latent: every accumulator sees only MMAs.
// - Epilogue as bigm's: fp32 partials [m][rows+4] in shared memory, the
//   cluster synchronizes, every CTA finishes a share of the vectors adding
//   partials in cluster-rank order, `shared`, the two roundings, -0 as +0,
//   stores to every destination. Fixed order: bit-identical reruns.

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define TPRUN_BIGW_WGMMA 1
#endif

__device__ __forceinline__ void bw_mbar_init(uint32_t a, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void bw_mbar_arrive(uint32_t a) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(a) : "memory");
}
__device__ __forceinline__ void bw_mbar_arrive_tx(uint32_t a, uint32_t tx) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(tx) : "memory");
}
__device__ __forceinline__ void bw_mbar_wait(uint32_t a, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "W_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra W_%=;\n\t}" ::"r"(a),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void bw_bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t mbar) {
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
               "l"(src), "r"(bytes), "r"(mbar)
               : "memory");
}
__device__ __forceinline__ void bw_cp_async_arrive_noinc(uint32_t mbar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(mbar) : "memory");
}
__device__ __forceinline__ void bw_cp_async4(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ void bw_st_shared_v4(uint32_t a, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ uint32_t bw_lds32(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}
// Generic-proxy shared memory writes become visible to the async proxy
// (wgmma's operand reads) after this fence and a barrier.
__device__ __forceinline__ void bw_fence_proxy_async() {
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

#ifdef TPRUN_BIGW_WGMMA
__device__ __forceinline__ void bw_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void bw_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void bw_wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// The shared-memory descriptor of a K-major, no-swizzle operand: start
// address, leading byte offset (the stride between core matrices along K)
// and stride byte offset (along N), each >> 4.
__device__ __forceinline__ uint64_t bw_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32);
}
#define TPRUN_WGMMA_D8(i) "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
// D[64][N] += A[64][16] (registers: per warp the m16n8k16 A fragment) *
// B[16][N] (shared memory, described by desc).
template <int N>
__device__ __forceinline__ void bw_wgmma(float (&d)[N / 2], const uint4& a, uint64_t desc);
template <>
__device__ __forceinline__ void bw_wgmma<16>(float (&d)[8], const uint4& a, uint64_t desc) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %13, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, {%8, %9, %10, %11}, %12, p, 1, 1, 0;\n\t}"
      : TPRUN_WGMMA_D8(0)
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}
template <>
__device__ __forceinline__ void bw_wgmma<32>(float (&d)[16], const uint4& a, uint64_t desc) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %21, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n\t}"
      : TPRUN_WGMMA_D8(0), TPRUN_WGMMA_D8(8)
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}
template <>
__device__ __forceinline__ void bw_wgmma<64>(float (&d)[32], const uint4& a, uint64_t desc) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %37, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n\t}"
      : TPRUN_WGMMA_D8(0), TPRUN_WGMMA_D8(8), TPRUN_WGMMA_D8(16), TPRUN_WGMMA_D8(24)
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}
template <>
__device__ __forceinline__ void bw_wgmma<128>(float (&d)[64], const uint4& a, uint64_t desc) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %69, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n\t}"
      : TPRUN_WGMMA_D8(0), TPRUN_WGMMA_D8(8), TPRUN_WGMMA_D8(16), TPRUN_WGMMA_D8(24), TPRUN_WGMMA_D8(32),
        TPRUN_WGMMA_D8(40), TPRUN_WGMMA_D8(48), TPRUN_WGMMA_D8(56)
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}
#undef TPRUN_WGMMA_D8
#endif

// Compile-time geometry of entry point tprun_bigw_mt<MT>_<family>: NWG
// consumer warpgroups, KC chunks a stage, as many stages (2..12) as fit in
// 200 KiB; then the latent warpgroup and the weight warp. kernel/config.go
// (BigwSharedBytes) computes the same shared memory size.
template <int MT, int NWG, int KC>
struct BigwGeo {
  static_assert(MT == 16 || MT == 32 || MT == 64 || MT == 128, "code sizes 16, 32, 64, 128");
  static_assert(NWG == 1 || NWG == 2, "one or two consumer warpgroups");
  static_assert(KC == 1 || KC == 2 || KC == 4, "1, 2 or 4 chunks a stage");
  static constexpr int kThreads = 128 * (NWG + 1) + 32;
  static constexpr int kRows = 64 * NWG;
  static constexpr int kWSB = kRows * KC * 64;  // weight bytes of a stage
  static constexpr int kLCB = MT * 64;          // latent bytes of a staged chunk
  static constexpr int kSB = kWSB + KC * kLCB;  // stage bytes
  static constexpr int kST = (200 * 1024) / kSB > 12 ? 12 : ((200 * 1024) / kSB < 2 ? 2 : (200 * 1024) / kSB);
  static constexpr int kWords = KC * MT * 16;   // 4-byte latent words of a stage
  static constexpr int kP = kRows + 4;          // partials pitch (floats)
  static constexpr int kBody = kST * kSB > MT * kP * 4 ? kST * kSB : MT * kP * 4;
  static constexpr int kShared = kBody + 16 * kST + 16;  // + full/empty mbarriers + the slot word
  static constexpr bool kLatRegs = MT >= 64;             // the latent through registers
};

// The latent of one stage by 4-byte cp.async: flat word f = ((c*4 + j)*
// (MT/8) + rg)*32 + 4*rr + t is word t of column j of row 8*rg + rr of
// stage chunk c (a warp writes 128 contiguous bytes). Rows >= M, chunks
// past the CTA's range and k >= K are zero-filled.
template <class G, int MT>
__device__ __forceinline__ void bw_stage_latent4(const tprun_skinny_params& p, uint32_t buf, int ltid, int chunk0,
                                                 int cend, int M) {
  const uint16_t* lat = reinterpret_cast<const uint16_t*>(p.latent);
  const int K = p.latent_dim;
#pragma unroll
  for (int it = 0; it < G::kWords / 128; ++it) {
    const int f = ltid + 128 * it;
    const int t = f & 3, rr = (f >> 2) & 7;
    const int q = f >> 5;
    const int rg = q % (MT / 8);
    const int j = (q / (MT / 8)) & 3;
    const int c = q / (MT / 8) / 4;
    const int r = 8 * rg + rr;
    const int k = (chunk0 + c) * 32 + 2 * (4 * t + j);
    const bool ok = r < M && chunk0 + c < cend && k < K;
    const uint16_t* src = ok ? lat + (size_t)r * (size_t)K + (size_t)k : lat;
    bw_cp_async4(buf + (uint32_t)(c * G::kLCB + j * MT * 16 + r * 16 + t * 4), src, ok);
  }
}

// The latent of one stage through registers: piece e = ltid + 128*it is
// row e % MT of stage chunk e / MT, 64 bytes as 4 uint4, stored as the 4x4
// word transpose of the layout above.
template <class G, int MT>
struct BwLatRegs {
  static constexpr int kPieces = G::kWords / 16;
  static constexpr int kIt = (kPieces + 127) / 128;
  uint4 v[kIt][4];
  __device__ __forceinline__ void load(const tprun_skinny_params& p, int ltid, int chunk0, int cend, int M) {
    const uint16_t* lat = reinterpret_cast<const uint16_t*>(p.latent);
    const int K = p.latent_dim;
#pragma unroll
    for (int it = 0; it < kIt; ++it) {
      const int e = ltid + 128 * it;
      const int r = e % MT;
      const int ch = chunk0 + e / MT;
      const bool ok = e < kPieces && r < M && ch < cend;
      const int k0 = ch * 32;
      const uint16_t* src = lat + (ok ? (size_t)r * (size_t)K + (size_t)k0 : 0);
#pragma unroll
      for (int a = 0; a < 4; ++a) v[it][a] = ld_act(src + 8 * a, ok && k0 + 8 * a < K);
    }
  }
  __device__ __forceinline__ void store(uint32_t buf, int ltid) const {
#pragma unroll
    for (int it = 0; it < kIt; ++it) {
      const int e = ltid + 128 * it;
      if (e < kPieces) {
        const uint32_t base = buf + (uint32_t)((e / MT) * G::kLCB + (e % MT) * 16);
        bw_st_shared_v4(base + 0 * MT * 16, make_uint4(v[it][0].x, v[it][1].x, v[it][2].x, v[it][3].x));
        bw_st_shared_v4(base + 1 * MT * 16, make_uint4(v[it][0].y, v[it][1].y, v[it][2].y, v[it][3].y));
        bw_st_shared_v4(base + 2 * MT * 16, make_uint4(v[it][0].z, v[it][1].z, v[it][2].z, v[it][3].z));
        bw_st_shared_v4(base + 3 * MT * 16, make_uint4(v[it][0].w, v[it][1].w, v[it][2].w, v[it][3].w));
      }
    }
  }
};

// One consumer stage: the warp's A fragments of the stage (steps past
// nsteps zero), then 2*KC k16 steps against the stage's latent.
template <class G, int MT, int KC>
__device__ __forceinline__ void bw_consume(float (&acc)[MT / 2], uint4 (&a)[2 * KC], uint32_t wsm, uint32_t lsm,
                                           int nsteps) {
#pragma unroll
  for (int j = 0; j < 2 * KC; ++j)
    a[j] = j < nsteps ? lds128(wsm + (uint32_t)((j >> 1) * 1024 + (j & 1) * 512)) : make_uint4(0, 0, 0, 0);
#ifdef TPRUN_BIGW_WGMMA
  bw_wgmma_fence();
#pragma unroll
  for (int j = 0; j < 2 * KC; ++j)
    bw_wgmma<MT>(acc, a[j], bw_desc(lsm + (uint32_t)((j >> 1) * G::kLCB + (j & 1) * 2 * MT * 16), MT * 16, 128));
  bw_wgmma_commit();
#else
  // Lane (g, t), latent rows 8n + g: b0 = virtual k 2t, 2t+1 (core column
  // 2h, word t), b1 = virtual k 2t+8, 2t+9 (column 2h+1).
  const int lane = (int)(threadIdx.x & 31);
  const uint32_t loff = (uint32_t)((lane >> 2) * 16 + (lane & 3) * 4);
#pragma unroll
  for (int j = 0; j < 2 * KC; ++j) {
    const uint32_t col = lsm + (uint32_t)((j >> 1) * G::kLCB + (j & 1) * 2 * MT * 16) + loff;
#pragma unroll
    for (int n = 0; n < MT / 8; ++n) {
      float(&d)[4] = *reinterpret_cast<float(*)[4]>(&acc[4 * n]);
      mma16816(d, a[j].x, a[j].y, a[j].z, a[j].w, bw_lds32(col + (uint32_t)(n * 128)),
               bw_lds32(col + (uint32_t)(MT * 16 + n * 128)));
    }
  }
#endif
}

template <int MT, int NWG, int KC, bool ROT>
__device__ __forceinline__ void bigw(const tprun_skinny_params& p, unsigned char* smem) {
  using G = BigwGeo<MT, NWG, KC>;
  constexpr int ST = G::kST;
  const int tid = (int)threadIdx.x;
  const int wg = tid >> 7;
  const int M = TPRUN_SKINNY_ROWS(p.flags);
  if ((int)blockDim.x != G::kThreads || p.tile_rows != G::kRows) __trap();  // the family's geometry
  if ((p.flags & TPRUN_SKINNY_PACKED) == 0) __trap();                         // reads the packed layout only
  if (M < 1 || M > MT) __trap();                                             // the row count is this code's
  if (p.recv_slot != 0) __trap();                                            // no fused receive here

  const ClusterShape<kAny> cl;
  const int csize = cl.csize, crank = cl.crank;
  const int n0 = (int)(blockIdx.x / (unsigned)csize) * G::kRows;
  const int C = (p.latent_dim + 31) >> 5;
  const int cs = (int)(((long long)crank * C) / csize);
  const int ce = (int)(((long long)(crank + 1) * C) / csize);
  const int nj = ce - cs;
  const int nst = (nj + KC - 1) / KC;
  const uint16_t* weight = reinterpret_cast<const uint16_t*>(p.weight);

  const uint32_t sbase = smem_u32(smem);
  const uint32_t full0 = sbase + (uint32_t)G::kBody, empty0 = full0 + (uint32_t)(8 * ST);
  uint32_t* slot_word = reinterpret_cast<uint32_t*>(smem + G::kBody + 16 * ST);
  if (tid == 0) {
    for (int s = 0; s < ST; ++s) {
      bw_mbar_init(full0 + 8 * s, 1 + 128);  // the weight lane's expect_tx + every latent thread
      bw_mbar_init(empty0 + 8 * s, 4 * NWG);  // one lane of every consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  griddep_launch_dependents();
  __syncthreads();

  float acc[MT / 2];
#pragma unroll
  for (int i = 0; i < MT / 2; ++i) acc[i] = 0.f;

  if (wg == NWG) {
    // The latent warpgroup, after the previous kernel (its output is the latent).
    const int ltid = tid - 128 * NWG;
    griddep_wait();
    if (ROT && ltid == 0) *slot_word = rotation_read(p.rot_counter);
    if constexpr (!G::kLatRegs) {
      for (int i = 0; i < nst; ++i) {
        const int s = i % ST;
        if (i >= ST) bw_mbar_wait(empty0 + 8 * s, (uint32_t)(((i / ST) - 1) & 1));
        bw_stage_latent4<G, MT>(p, sbase + (uint32_t)(s * G::kSB + G::kWSB), ltid, cs + KC * i, ce, M);
        bw_cp_async_arrive_noinc(full0 + 8 * s);
      }
    } else {
      BwLatRegs<G, MT> lr[2];
      if (nst > 0) lr[0].load(p, ltid, cs, ce, M);
      for (int i0 = 0; i0 < nst; i0 += 2) {
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int i = i0 + u;
          if (i < nst) {
            if (i + 1 < nst) lr[u ^ 1].load(p, ltid, cs + KC * (i + 1), ce, M);
            const int s = i % ST;
            if (i >= ST) bw_mbar_wait(empty0 + 8 * s, (uint32_t)(((i / ST) - 1) & 1));
            lr[u].store(sbase + (uint32_t)(s * G::kSB + G::kWSB), ltid);
            bw_fence_proxy_async();
            bw_mbar_arrive(full0 + 8 * s);
          }
        }
      }
    }
  } else if (wg == NWG + 1) {
    // The weight warp: lane 0 brings each row group's KC blocks of stage i
    // by one bulk copy as soon as the stage is free; the first ST before
    // the previous kernel has ended (weights are inputs of no kernel).
    const int lane = tid & 31;
    if (p.l2_prefetch != 0 && nj > 0 && lane < 4 * NWG) {
      const int g = n0 / 16 + lane;
      if (g * 16 < p.shard) prefetch_l2(weight + ((size_t)g * (size_t)C + (size_t)cs) * 512, (uint32_t)nj * 1024u);
    }
    if (lane == 0) {
      int ngrp = 0;
      for (int g = 0; g < 4 * NWG; ++g)
        if ((n0 / 16 + g) * 16 < p.shard) ++ngrp;
      for (int i = 0; i < nst; ++i) {
        const int s = i % ST;
        if (i >= ST) bw_mbar_wait(empty0 + 8 * s, (uint32_t)(((i / ST) - 1) & 1));
        const uint32_t stage = sbase + (uint32_t)(s * G::kSB);
        const int c0 = cs + KC * i;
        const int nch = min(KC, ce - c0);
        bw_mbar_arrive_tx(full0 + 8 * s, (uint32_t)(ngrp * nch * 1024));
        for (int g = 0; g < 4 * NWG; ++g) {
          const int grp = n0 / 16 + g;
          if (grp * 16 < p.shard)
            bw_bulk_g2s(stage + (uint32_t)(g * KC * 1024), weight + ((size_t)grp * (size_t)C + (size_t)c0) * 512,
                        (uint32_t)(nch * 1024), full0 + 8 * s);
        }
      }
    }
  } else {
    // Consumers: warpgroup wg, warp wq of it: row group 4*wg + wq of the tile.
    const int lane = tid & 31;
    const int wq = (tid >> 5) & 3;
    const uint32_t wrow = (uint32_t)((wg * 4 + wq) * KC * 1024 + lane * 16);
    uint4 a0[2 * KC], a1[2 * KC];  // A of alternate stages: a stage's wgmmas read theirs until they end
    for (int i0 = 0; i0 < nst; i0 += 2) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int i = i0 + u;
        if (i < nst) {
          const int s = i % ST;
          bw_mbar_wait(full0 + 8 * s, (uint32_t)((i / ST) & 1));
          bw_fence_proxy_async();  // the latent may have come by cp.async (generic proxy)
          const uint32_t stage = sbase + (uint32_t)(s * G::kSB);
          const int nsteps = 2 * min(KC, nj - KC * i);
          if (u == 0)
            bw_consume<G, MT, KC>(acc, a0, stage + wrow, stage + (uint32_t)G::kWSB, nsteps);
          else
            bw_consume<G, MT, KC>(acc, a1, stage + wrow, stage + (uint32_t)G::kWSB, nsteps);
#ifdef TPRUN_BIGW_WGMMA
          bw_wgmma_wait<1>();  // stage i-1's wgmmas are done: release it
#endif
          if (i > 0 && lane == 0) bw_mbar_arrive(empty0 + 8 * ((i - 1) % ST));
        }
      }
    }
#ifdef TPRUN_BIGW_WGMMA
    bw_wgmma_wait<0>();
#endif
  }
  griddep_wait();   // `shared` and the destinations: after the previous kernel
  __syncthreads();  // every stage consumed: the stage memory holds the partials now

  // Partials [m][n] (pitch kP floats). acc of warp wq, lane (g, t):
  // acc[4j+0..1] at weight row 16wq+g, latent rows 8j+2t, +1; acc[4j+2..3]
  // at weight row 16wq+g+8.
  float* parts = reinterpret_cast<float*>(smem);
  constexpr int P = G::kP;
  if (wg < NWG) {
    const int lane = tid & 31;
    const int wq = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const int nl = 64 * wg + 16 * wq + g;
#pragma unroll
    for (int j = 0; j < MT / 8; ++j) {
      if (8 * j < M) {
        const int m = 8 * j + 2 * t;
        parts[m * P + nl] = acc[4 * j + 0];
        parts[(m + 1) * P + nl] = acc[4 * j + 1];
        parts[m * P + nl + 8] = acc[4 * j + 2];
        parts[(m + 1) * P + nl + 8] = acc[4 * j + 3];
      }
    }
  }
  if (csize > 1)
    cluster_sync_all();
  else
    __syncthreads();

  // Vector v (latent row v / VPR, columns 8*(v % VPR) of the tile) is
  // finished by CTA v % csize, adding partials in cluster-rank order.
  const unsigned long long rot = ROT ? (unsigned long long)*slot_word * p.rot_stride : 0ull;
  constexpr int VPR = G::kRows / 8;
  const int nvec = M * VPR;
  for (int v = crank + csize * tid; v < nvec; v += csize * G::kThreads) {
    const int em = v / VPR;
    const int ec = (v - em * VPR) * 8;
    if (n0 + ec >= p.shard) continue;
    const uint4 shv = ld_act(reinterpret_cast<const uint16_t*>(p.shared) + (size_t)em * (size_t)p.shared_stride + n0 + ec, true);
    const int off = em * P + ec;
    float s[8];
    const uint32_t a = smem_u32(parts + off);
    for (int q = 0; q < csize; ++q) {
      float4 x, y;
      if (csize > 1) {
        const uint32_t aq = mapa_u32(a, (uint32_t)q);
        x = ld_cluster_f4(aq);
        y = ld_cluster_f4(aq + 16);
      } else {
        x = *reinterpret_cast<const float4*>(parts + off);
        y = *reinterpret_cast<const float4*>(parts + off + 4);
      }
      if (q == 0) {
        s[0] = x.x; s[1] = x.y; s[2] = x.z; s[3] = x.w;
        s[4] = y.x; s[5] = y.y; s[6] = y.z; s[7] = y.w;
      } else {
        s[0] += x.x; s[1] += x.y; s[2] += x.z; s[3] += x.w;
        s[4] += y.x; s[5] += y.y; s[6] += y.z; s[7] += y.w;
      }
    }
    store_vector<ROT>(p, s, shv, n0, em, ec, rot);
  }
  // No CTA leaves while another may still read its partials.
  if (csize > 1) cluster_sync_all();
}

template <int MT, int NWG, int KC, bool ROT>
__device__ __forceinline__ void bigw_entry(const tprun_skinny_params& p) {
  extern __shared__ float4 tprun_smem[];
  if (ROT && p.rot_counter == 0) __trap();  // the rotation's entry point without a counter
  bigw<MT, NWG, KC, ROT>(p, reinterpret_cast<unsigned char*>(tprun_smem));
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

// The entry points of a warp-specialized family (families.tsv rows with
// latent "wgmma": tile_rows = 64*NWG, depth = KC) for code size MT.
#define TPRUN_BIGW_ENTRY(MT, NAME, NWG, KC)                                                          \
  extern "C" __global__ void __launch_bounds__(tprun::BigwGeo<MT, NWG, KC>::kThreads, 1)             \
      tprun_bigw_mt##MT##_##NAME(const __grid_constant__ tprun_skinny_params p) {                    \
    tprun::bigw_entry<MT, NWG, KC, false>(p);                                                        \
  }                                                                                                  \
  extern "C" __global__ void __launch_bounds__(tprun::BigwGeo<MT, NWG, KC>::kThreads, 1)             \
      tprun_bigw_mt##MT##_##NAME##_rot(const __grid_constant__ tprun_skinny_params p) {              \
    tprun::bigw_entry<MT, NWG, KC, true>(p);                                                         \
  }
#define TPRUN_BIGW_FAMILY(NAME, ROWS, KC) \
  TPRUN_BIGW_ENTRY(16, NAME, (ROWS) / 64, KC) \
  TPRUN_BIGW_ENTRY(32, NAME, (ROWS) / 64, KC) \
  TPRUN_BIGW_ENTRY(64, NAME, (ROWS) / 64, KC) \
  TPRUN_BIGW_ENTRY(128, NAME, (ROWS) / 64, KC)
