// The fused skinny up-projection: out = bf16(bf16(latent · weightᵀ) + shared)
// for M = 1..8 latent rows, written straight into 1..16 mailbox slots.
//
// Design (docs/kernel-notes.md has the measurements behind each choice):
// - Tensor cores, mma.sync m16n8k16 bf16 -> f32, with the WEIGHT as the A
//   operand (16 weight rows = 16 output columns n) and the latent as B (its
//   8 columns are the M latent rows; rows >= M are zero). The weight is in
//   skinny.h's packed layout: every 16-byte load of a lane is one MMA's A
//   fragment as it lands (no register moves), and every 16-byte load of a
//   warp reads 512 contiguous bytes (fewer L2 requests per byte than 8 rows
//   x 64 bytes). The order of the k summation is free as long as A and B
//   use the same permutation; a lane's B fragment is 8 k of latent row g,
//   one 16-byte load.
// - One CTA owns TileRows (16 or 32) output columns and one K slice; each
//   warp takes a contiguous run of 32-k chunks of that slice; the CTAs of a
//   cluster split K, send their partial sums into the leader CTA's shared
//   memory (st.async, counted on an mbarrier there), and the leader adds
//   them in rank order, adds `shared`, rounds and stores 16-byte vectors.
//   Fixed order: bit-identical reruns.
// - Each warp keeps a ring of Depth chunks of weight loads in flight
//   (16-byte, L1::no_allocate, streamed), the first Depth issued before
//   griddepcontrol.wait so they overlap the previous kernel (PDL); the
//   latent comes through a small register ring from L2 (or by whole lines,
//   LineLoads).
// - An entry point holds the tile code twice (ClusterShape): once for
//   launches without a cluster, with no cluster instruction in it, once for
//   clusters; it picks by the launch's cluster size (OneInstance: once for
//   both).
//
// The primitives are in skinny_prims.cuh; the families (named sets of the
// compile-time options below) in families.tsv, from which
// scripts/build-kernels writes the instance list.
#include "skinny_prims.cuh"

namespace tprun {

// The tile code an entry point of M runs: the code of CODE >= M rows, with
// rows M..CODE-1 never loaded, summed as zeros and never stored. M = 1 runs
// the M = 2 code: the M = 1 instance of the register ring spilled and ran
// slower than M = 2. The WideCode families run the M = 8 code at every M:
// at shard 896 with an 80 % carveout, M 2-6 run faster in it than in their
// own (why is not known). The MMA is m16n8k16 with the latent as the
// 8-wide operand, so the extra rows cost no MMA; the epilogue still handles
// CODE rows (the sums over the warps and the cluster sum's stores), and
// decides its form from CODE: the M = 8 code never takes the
// warp-per-vector epilogue (warp_epilogue), so at 16 warps without a
// cluster and M <= 2 it adds the warps' partials in another order than the
// M = 2 code (an element may round one bit apart).
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

// What every tile entry (skinny, skinny_lines) sets up first: the thread's
// place in its warp and CTA, the cluster shape, the CTA's first output
// column, the cluster sum's barrier (cluster_sum_init), and the K split:
// CTA crank of the cluster takes chunks [cs, ce), each warp a contiguous
// part [wc0, wc1) of that, so every load address is a base plus an
// immediate offset (few registers, more CTAs per SM).
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
// scheduled the prologue differently and the kernel ran slower.
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
template <int ROWS>
__device__ __forceinline__ void tile_prologue_start(const tprun_skinny_params& p, int csize, int crank, int warp,
                                                    int lane) {
  if (p.l2_prefetch != 0 && !TPRUN_PF_LSU(p.l2_prefetch) && crank == 0 && warp == 0)
    l2_prefetch_tiles<ROWS>(p, (int)(blockIdx.x / csize), lane);
}
template <int ROWS>
__device__ __forceinline__ void tile_prologue_end(const tprun_skinny_params& p, int csize, int crank) {
  if (p.l2_prefetch != 0 && TPRUN_PF_LSU(p.l2_prefetch) && crank == 0)
    l2_prefetch_lsu<ROWS>(p, (int)(blockIdx.x / csize));
  // Let the next kernel start streaming its own weights as soon as every
  // CTA of this one is running; its griddepcontrol.wait still waits for
  // this whole grid to finish and flush.
  griddep_launch_dependents();
  griddep_wait();
}

// Slot rotation in the tile code (skinny.h, "Slot rotation"; the entry
// points with ROT): thread 0 of a cluster leader, the CTA that stores the
// tile, reads the counter right after griddepcontrol.wait, beside the
// latent loads: with the fused receive the launch ends the step, so it
// arrives (rotation_arrive), else it reads word 0. The value is needed only
// by the epilogue (reduce_store, tile_slot), so the round trip overlaps the
// MMAs. 0 without ROT and in every other thread.
template <bool ROT>
__device__ __forceinline__ unsigned long long tile_rotation(const tprun_skinny_params& p, int crank) {
  if (!ROT || crank != 0 || threadIdx.x != 0) return 0;
  return p.recv_slot != 0 ? rotation_arrive(p.rot_counter) : rotation_read(p.rot_counter);
}

// The register-ring tile: U (the family's Depth) chunks of 32 k of weight
// loads in flight per warp (U*TR*8 registers, U*TR KB per warp), the latent
// streamed from L2 through a ring of UB registers. mrows (<= M): the latent
// rows that exist; the code computes M (latent_rows). L2ONLY: ld_act's form
// for the latent and shared loads. ROT: slot rotation (tile_rotation).
template <int M, int TR, int U, int UB, int CL, bool L2ONLY, bool ROT>
__device__ __forceinline__ void skinny(const tprun_skinny_params& p, float* smem, int mrows) {
  static_assert(U % UB == 0, "latent ring must divide the weight ring");
  constexpr int ROWS = 16 * TR;
  constexpr int SP = ROWS + 4;  // smem pitch (floats): conflict-free fragment stores
  // Elements between a thread's consecutive 32-k chunks of one weight row:
  // the next 1 KB block of the packed layout.
  constexpr int WS = 512;

  if (p.tile_rows != ROWS) __trap();  // launched with another entry point's geometry
  if ((p.flags & TPRUN_SKINNY_PACKED) == 0) __trap();  // the weight must be in the packed layout

  const TileSetup<M, ROWS, CL> t(p, smem);
  const int lane = t.lane, warp = t.warp, nwarps = t.nwarps, g = t.g, tig = t.tig;
  const int csize = t.csize, crank = t.crank, n0 = t.n0;
  const int K = t.K, nchunks = t.nchunks, wc0 = t.wc0, wc1 = t.wc1;
  const int nj = wc1 - wc0;  // this warp's chunks
  const int kb = wc0 * 32 + tig * 8;
  const int kleft = K - kb;  // step j is in range when 32*j < kleft (K % 8 == 0)

  const uint16_t* wp[TR][2];
  bool rowok[TR][2];
#pragma unroll
  for (int r = 0; r < TR; ++r) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      // Block (group, chunk) of the packed layout (skinny.h): this lane's
      // 16 bytes of half h sit at (h*32 + lane)*8; padding rows and k are
      // zeros, so only whole missing groups need a guard.
      const int grp = n0 / 16 + r;
      rowok[r][h] = grp * 16 < p.shard;
      wp[r][h] = reinterpret_cast<const uint16_t*>(p.weight) +
                 ((size_t)(rowok[r][h] ? grp : 0) * (size_t)nchunks + wc0) * 512 + h * 256 + lane * 8;
    }
  }
  const bool lrow = g < mrows;
  const uint16_t* lp = reinterpret_cast<const uint16_t*>(p.latent) + (size_t)(lrow ? g : 0) * K + kb;

  tile_prologue_start<ROWS>(p, csize, crank, warp, lane);

  uint4 wa[U][TR][2];
  // Weight prologue: independent of the previous kernel's results.
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const bool ok = u < nj;
#pragma unroll
    for (int r = 0; r < TR; ++r)
#pragma unroll
      for (int h = 0; h < 2; ++h) wa[u][r][h] = ld_weight(wp[r][h] + WS * u, ok && rowok[r][h]);
  }
  tile_prologue_end<ROWS>(p, csize, crank);

  float* red = smem;
  float* parts = smem + nwarps * 8 * SP;  // [cluster rank][m][n], used in the leader
  uint4 lb[UB];
#pragma unroll
  for (int u = 0; u < UB; ++u) lb[u] = ld_act<L2ONLY>(lp + 32 * u, lrow && u < nj && 32 * u < kleft);
  const EpilogueSlot es = epilogue_slot<M, ROWS, CL, L2ONLY>(p, t, mrows);
  const unsigned long long rv = tile_rotation<ROT>(p, crank);

  // Two accumulator sets per tile (first and second k half of each chunk):
  // two independent MMA dependency chains.
  float acc[TR][2][4];
#pragma unroll
  for (int r = 0; r < TR; ++r)
#pragma unroll
    for (int q = 0; q < 2; ++q) acc[r][q][0] = acc[r][q][1] = acc[r][q][2] = acc[r][q][3] = 0.f;

  for (int j0 = 0; j0 < nj; j0 += U) {
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = j0 + u;
      if (j < nj) {
        const uint4 b = lb[u % UB];
#pragma unroll
        for (int r = 0; r < TR; ++r) {
          // Thread-local k 0..3 feed MMA 0, k 4..7 MMA 1; the B halves follow
          // the same split, so A and B agree on every k. Each weight load is
          // one MMA's A fragment (skinny.h).
          mma16816(acc[r][0], wa[u][r][0].x, wa[u][r][0].y, wa[u][r][0].z, wa[u][r][0].w, b.x, b.y);
          mma16816(acc[r][1], wa[u][r][1].x, wa[u][r][1].y, wa[u][r][1].z, wa[u][r][1].w, b.z, b.w);
        }
      }
      const int jb = j + UB;
      lb[u % UB] = ld_act<L2ONLY>(lp + 32 * (u + UB), lrow && jb < nj && 32 * jb < kleft);
      const int jw = j + U;
      const bool ok = jw < nj;
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
  }

  reduce_store<M, TR, CL, ROT>(p, red, parts, acc, n0, es.shv, es.eok, es.em, es.ec, rv);
}

// The line-wise tile (LineLoads): the latent read by whole 128-byte lines.
// In skinny() lane (g, tig) loads 16 bytes of latent row g, so one load
// instruction touches M half-lines; on the H200 that is most of the
// kernel's growth with M. Here a warp walks its chunks in PAIRS (2c, 2c+1:
// one 128-byte line of a latent row when K is a multiple of 64), and lane
// (g, tig) loads 16 bytes of latent row 4b + (g & 3), chunk 2c + (g >> 2):
// one instruction reads 4 rows x 128 bytes, whole lines. B column n then
// holds latent row n & 3 of the pair's chunk n >> 2; the MMAs of the even
// chunk's weights use the columns 0-3, those of the odd chunk's weights
// the columns 4-7, each into its own accumulator, and the others' products
// are thrown away. No shuffle in the loop; the cost is MMAs: as many as
// skinny() for M <= 4 (the columns it leaves empty are the ones used
// here), twice as many for M 5-8 (b = 0, 1: rows 0-3 and 4-7). At the end
// one xor-2 shuffle per value puts every sum where reduce_store expects it.
// A warp whose chunk run starts or ends on an odd chunk has a half-empty
// pair there: that chunk's weight and latent loads are predicated off, so
// its MMAs add zeros. U: weight chunks in flight (U/2 pairs), LP: latent
// pairs in flight. A latent ring as long as the warp's run keeps every
// latent load before the first MMA: with a shorter one, ptxas issued the
// refills after it and a second L2 round trip showed in the kernel's time.
template <int M, int TR, int U, int LP, int CL, bool ROT>
__device__ __forceinline__ void skinny_lines(const tprun_skinny_params& p, float* smem, int mrows) {
  constexpr int UP = U / 2;
  constexpr int ST = UP > LP ? UP : LP;  // pairs per pass of the main loop: slots u % UP, u % LP
  static_assert(U % 2 == 0 && ST % UP == 0 && ST % LP == 0, "rings must divide the loop's pass");
  constexpr int NB = M > 4 ? 2 : 1;  // latent loads per pair: rows 0-3, then 4-7
  constexpr int ROWS = 16 * TR;
  constexpr int SP = ROWS + 4;
  constexpr int WS = 512;  // elements between a lane's consecutive chunks (packed layout)

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

  tile_prologue_start<ROWS>(p, csize, crank, warp, lane);

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
  tile_prologue_end<ROWS>(p, csize, crank);

  float* red = smem;
  float* parts = smem + nwarps * 8 * SP;
  uint4 lb[LP][NB];
#pragma unroll
  for (int u = 0; u < LP; ++u)
#pragma unroll
    for (int b = 0; b < NB; ++b) lb[u][b] = ld_act(lp[b] + 64 * u, lok[b] && u < np && lat_ok(u));
  const EpilogueSlot es = epilogue_slot<M, ROWS, CL>(p, t, mrows);
  const unsigned long long rv = tile_rotation<ROT>(p, crank);

  // acc[r][b][s]: tile r, latent rows 4b.., the weights of chunk slot s.
  float acc[TR][NB][2][4];
#pragma unroll
  for (int r = 0; r < TR; ++r)
#pragma unroll
    for (int b = 0; b < NB; ++b)
#pragma unroll
      for (int s = 0; s < 2; ++s) acc[r][b][s][0] = acc[r][b][s][1] = acc[r][b][s][2] = acc[r][b][s][3] = 0.f;

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
  reduce_store<M, TR, CL, ROT>(p, red, parts, out, n0, es.shv, es.eok, es.em, es.ec, rv);
}

// The receive CTAs of a launch with a fused receive (skinny.h, recv_slot):
// the CTAs after the tiles' (blockIdx.x >= ceil(shard/tile_rows) * cluster)
// compute nothing. Like every CTA they let the next kernel launch and wait
// for the previous one; then they do this step's Lamport receive, the
// vectors spread over their threads. Being last in the grid they are placed
// after every tile CTA, so their polling never keeps a tile CTA off an SM.
// With slot rotation each of them is one arrival of the step (tile_slot
// counts them). smem: the launch's dynamic shared memory, which these CTAs
// use only to hand the slot around. Returns whether this CTA was one of
// them.
template <int M, bool ROT>
__device__ __forceinline__ bool receive_cta(const tprun_skinny_params& p, float* smem) {
  if (p.recv_slot == 0) return false;
  const unsigned csize = cg::this_cluster().num_blocks();
  const unsigned ntiles = (unsigned)((p.shard + p.tile_rows - 1) / p.tile_rows);
  const unsigned first = ntiles * csize;
  if (blockIdx.x < first) return false;
  griddep_launch_dependents();
  griddep_wait();
  unsigned long long slot = p.recv_slot;
  if constexpr (ROT)
    slot = rotated_receive_slot(slot, p.rot_counter, p.rot_stride, p.rot_slots, ntiles + (gridDim.x - first),
                                reinterpret_cast<uint32_t*>(smem));
  const long long r = (long long)(blockIdx.x - first), nr = (long long)(gridDim.x - first);
  receive_block(slot, p.recv_out, p.recv_status, p.recv_timeout_ns, p.recv_flags, M, p.hidden, p.shard,
                r * blockDim.x + threadIdx.x, nr * blockDim.x);
  return true;
}

// A family of entry points: the named compile-time options of the tile
// code (families.tsv defines the families; scripts/build-kernels turns each
// row into one TPRUN_SKINNY_FAMILY line).
template <int TileRows, int Depth, bool LineLoads, bool WideCode, bool OneInstance, bool L2OnlyLoads>
struct Family {
  static_assert(TileRows == 16 || TileRows == 32, "a tile is one or two MMA row groups");
  static constexpr int kTR = TileRows / 16;
  static constexpr int kDepth = Depth;            // 32-k weight chunks in flight per warp
  static constexpr bool kLineLoads = LineLoads;   // skinny_lines instead of skinny's latent ring
  static constexpr bool kWideCode = WideCode;     // the M = 8 tile code at every M
  static constexpr bool kOneInstance = OneInstance;  // one tile instance for every cluster size (kAny)
  static constexpr bool kL2OnlyLoads = L2OnlyLoads;  // latent and shared loads cached in L2 only
  static_assert(!(LineLoads && (WideCode || OneInstance || L2OnlyLoads)), "the line-wise tile has none of these options");
};

// The body of entry point tprun_skinny_m<M>_<family> (ROT: of
// tprun_skinny_m<M>_<family>_rot, the one with slot rotation: a launch
// with rot_counter set takes it, and only such a launch).
template <int M, class F, bool ROT>
__device__ __forceinline__ void skinny_entry(const tprun_skinny_params& p) {
  extern __shared__ float4 tprun_smem[];
  float* smem = reinterpret_cast<float*>(tprun_smem);
  if (ROT && p.rot_counter == 0) __trap();  // the rotation's entry point without a counter
  if (receive_cta<M, ROT>(p, smem)) return;
  // The rows of the tile code it runs (latent_rows).
  constexpr int CODE = F::kWideCode ? 8 : (M == 1 ? 2 : M);
  // The latent ring: 4 chunks of the register ring, or for the line-wise
  // tile 4 pairs (8 chunks, the weight ring's depth) at M 1-4 and 1 pair at
  // M 5-8, which keeps those within 128 registers at 512 threads.
  constexpr int UB = F::kLineLoads ? (M > 4 ? 1 : 4) : 4;
  if constexpr (F::kLineLoads) {
    if (in_cluster())
      skinny_lines<CODE, F::kTR, F::kDepth, UB, kCluster, ROT>(p, smem, latent_rows<M, CODE>());
    else
      skinny_lines<CODE, F::kTR, F::kDepth, UB, kNoCluster, ROT>(p, smem, latent_rows<M, CODE>());
  } else if constexpr (F::kOneInstance) {
    skinny<CODE, F::kTR, F::kDepth, UB, kAny, F::kL2OnlyLoads, ROT>(p, smem, latent_rows<M, CODE>());
  } else if (in_cluster()) {
    skinny<CODE, F::kTR, F::kDepth, UB, kCluster, F::kL2OnlyLoads, ROT>(p, smem, latent_rows<M, CODE>());
  } else {
    skinny<CODE, F::kTR, F::kDepth, UB, kNoCluster, F::kL2OnlyLoads, ROT>(p, smem, latent_rows<M, CODE>());
  }
}

}  // namespace tprun

// The entry points of M rows and family NAME (a tprun::Family), at most
// MAXT threads per CTA: without slot rotation, and with it ("_rot"). Two
// functions rather than a branch in one: a launch without rotation runs
// exactly the code it ran before rotation existed.
#define TPRUN_SKINNY_ENTRY(MM, NAME, MAXT)                                                    \
  extern "C" __global__ void __launch_bounds__(MAXT, 1)                                       \
      tprun_skinny_m##MM##_##NAME(const __grid_constant__ tprun_skinny_params p) {           \
    tprun::skinny_entry<MM, tprun_family_##NAME, false>(p);                                   \
  }                                                                                           \
  extern "C" __global__ void __launch_bounds__(MAXT, 1)                                       \
      tprun_skinny_m##MM##_##NAME##_rot(const __grid_constant__ tprun_skinny_params p) {     \
    tprun::skinny_entry<MM, tprun_family_##NAME, true>(p);                                    \
  }
// A family's options and its entry points for M = 1..8 (families.tsv:
// tile_rows, depth, latent loads by lines, wide code, one instance, L2-only
// loads, max warps).
#define TPRUN_SKINNY_FAMILY(NAME, ROWS, DEPTH, LINES, WIDE, ONE, L2ONLY, WARPS)   \
  using tprun_family_##NAME = tprun::Family<ROWS, DEPTH, LINES, WIDE, ONE, L2ONLY>; \
  TPRUN_SKINNY_ENTRY(1, NAME, 32 * (WARPS))                                         \
  TPRUN_SKINNY_ENTRY(2, NAME, 32 * (WARPS))                                         \
  TPRUN_SKINNY_ENTRY(3, NAME, 32 * (WARPS))                                         \
  TPRUN_SKINNY_ENTRY(4, NAME, 32 * (WARPS))                                         \
  TPRUN_SKINNY_ENTRY(5, NAME, 32 * (WARPS))                                         \
  TPRUN_SKINNY_ENTRY(6, NAME, 32 * (WARPS))                                         \
  TPRUN_SKINNY_ENTRY(7, NAME, 32 * (WARPS))                                         \
  TPRUN_SKINNY_ENTRY(8, NAME, 32 * (WARPS))
