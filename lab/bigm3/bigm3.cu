// bigm3: a standalone harness for a warp-specialized wgmma (sm_90a) form of the larger-M
// up-projection of kernel/bigm.cu:
//   out[m][n] = bf16(f32(bf16(sum_k latent[m][k] * W[n][k])) + f32(shared[m][n])),
// -0 stored as +0, fp32 accumulation, W in the packed layout of kernel/pack.go.
// Host and device in one file; README.md in this folder says how to run it.
//
// Build: nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v -o bigm3 bigm3.cu
// Host-only check without wgmma support: -DBIGM3_NO_WGMMA (the kernel then
// computes nothing useful; only C++, templates and host code are checked).
#include <cuda_runtime.h>
#include <stdint.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#define CK(call)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "CUDA error %s (%s) at %s:%d in %s\n", cudaGetErrorName(e_),                 \
              cudaGetErrorString(e_), __FILE__, __LINE__, #call);                                  \
      exit(2);                                                                                     \
    }                                                                                              \
  } while (0)

// ---------------------------------------------------------------- device

struct Params {
  const uint16_t* latent;  // [M][K] bf16
  const uint16_t* weight;  // packed, ceil(shard/16) * C * 512 elements
  const uint16_t* shared;  // [M][shard] bf16
  uint16_t* out;           // [M][shard] bf16
  int M, K, shard, C;      // C = ceil(K/32)
  int desc_mode;           // 0: LBO = K-direction core stride, SBO = N-direction; 1: swapped
  int l2pf;                // 1: each row group's weight range is prefetched into L2 first
  int latmode;             // 0: latent by 4-byte cp.async; 1: through registers (ld.global, transpose, st.shared)
};

__device__ __forceinline__ uint32_t smem_u32(const void* p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ uint4 ld_weight(const uint16_t* p, bool pred) {
  uint4 v;
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\t"
      "mov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t"
      "@p ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"((int)pred));
  return v;
}
__device__ __forceinline__ uint4 ld_act(const uint16_t* p, bool pred) {
  uint4 v;
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\t"
      "mov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\tmov.b32 %3, 0;\n\t"
      "@p ld.global.v4.u32 {%0, %1, %2, %3}, [%4];\n\t}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"((int)pred));
  return v;
}
__device__ __forceinline__ void st_shared_v4(uint32_t a, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(a), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void st_global_v4(uint16_t* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#ifndef BIGM3_NO_WGMMA  // PTX 8.0, as wgmma
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
#endif
}
__device__ __forceinline__ uint32_t mapa_u32(uint32_t a, uint32_t r) {
  uint32_t d;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(r));
  return d;
}
__device__ __forceinline__ float4 ld_cluster_f4(uint32_t a) {
  float4 v;
  asm volatile("ld.shared::cluster.v4.f32 {%0, %1, %2, %3}, [%4];"
               : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w)
               : "r"(a)
               : "memory");
  return v;
}
__device__ __forceinline__ void cluster_sync_all() {
  asm volatile("barrier.cluster.arrive.aligned;\n\tbarrier.cluster.wait.aligned;" ::: "memory");
}
__device__ __forceinline__ uint32_t cluster_rank() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_size() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
  return r;
}
__device__ __forceinline__ uint32_t cluster_id_x() {
  uint32_t r;
  asm volatile("mov.u32 %0, %%clusterid.x;" : "=r"(r));
  return r;
}

// Keeps a value in its register at this point (the compiler must assume
// the empty asm reads and rewrites it): registers an in-flight wgmma reads
// stay live until the wait that ends it, and the accumulators are not
// touched between wgmmas.
__device__ __forceinline__ void keep(uint4& v) {
  asm volatile("" : "+r"(v.x), "+r"(v.y), "+r"(v.z), "+r"(v.w)::"memory");
}
template <int N>
__device__ __forceinline__ void keep(float (&d)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

#ifndef BIGM3_NO_WGMMA
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}
// Generic-proxy shared memory writes (st.shared) become visible to the
// async proxy (wgmma's operand reads) after this fence and a barrier.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

// D[64][N] += A[64][16] (registers, per warp the mma.m16n8k16 A fragment)
// * B[16][N] (shared memory, K-major, described by desc).
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint4& a, uint64_t desc);
template <>
__device__ __forceinline__ void wgmma_rs<16>(float (&d)[8], const uint4& a, uint64_t desc) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %13, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7}, "
      "{%8, %9, %10, %11}, %12, p, 1, 1, 0;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_rs<32>(float (&d)[16], const uint4& a, uint64_t desc) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %21, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, "
      "{%16, %17, %18, %19}, %20, p, 1, 1, 0;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_rs<64>(float (&d)[32], const uint4& a, uint64_t desc) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %37, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
      "{%32, %33, %34, %35}, %36, p, 1, 1, 0;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}
template <>
__device__ __forceinline__ void wgmma_rs<128>(float (&d)[64], const uint4& a, uint64_t desc) {
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %69, 0;\n\t"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
      "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
      "{%64, %65, %66, %67}, %68, p, 1, 1, 0;\n\t}"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "l"(desc), "r"(1));
}
#else
// Stand-ins for a toolkit that cannot assemble wgmma: compile checks only.
__device__ __forceinline__ void wgmma_fence() {}
__device__ __forceinline__ void wgmma_commit() {}
template <int N>
__device__ __forceinline__ void wgmma_wait() {}
__device__ __forceinline__ void fence_proxy_async() {}
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], const uint4& a, uint64_t desc) {
  d[0] += __uint_as_float(a.x) * (float)(desc & 1);
}
#endif

// The shared-memory descriptor of a K-major, no-swizzle operand at byte
// address addr: start address bits 0-13, leading byte offset 16-29, stride
// byte offset 32-45 (all >> 4), base offset 0, layout type 0 (bits 62-63).
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  return (uint64_t)((addr & 0x3FFFFu) >> 4) | ((uint64_t)((lbo >> 4) & 0x3FFFu) << 16) |
         ((uint64_t)((sbo >> 4) & 0x3FFFu) << 32);
}

__device__ __forceinline__ uint32_t bf16_bits(float x) {
  const uint32_t u = __float_as_uint(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0u;  // NaN
  return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;           // round to nearest even
}
// One output element: bf16(f32(bf16(s)) + f32(sh)), -0 as +0 (finish1 of skinny_prims.cuh).
__device__ __forceinline__ uint32_t finish1(float s, uint32_t sh_bits) {
  const float r = __uint_as_float(bf16_bits(s) << 16) + __uint_as_float(sh_bits << 16);
  const uint32_t b = bf16_bits(r);
  return b == 0x8000u ? 0u : b;
}
__device__ __forceinline__ uint32_t finish2(float lo, float hi, uint32_t sh) {
  return finish1(lo, sh & 0xffffu) | (finish1(hi, sh >> 16) << 16);
}

// ------------------------------------------------------- mbarrier, bulk copy

__device__ __forceinline__ void mbar_init(uint32_t a, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t a) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(a) : "memory");
}
__device__ __forceinline__ void mbar_wait(uint32_t a, uint32_t parity) {
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "W_%=:\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n\t"
      "@!p bra W_%=;\n\t}" ::"r"(a),
      "r"(parity)
      : "memory");
}
#ifndef BIGM3_NO_WGMMA
__device__ __forceinline__ void mbar_arrive_tx(uint32_t a, uint32_t tx) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(tx) : "memory");
}
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void* src, uint32_t bytes, uint32_t mbar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
      "l"(src), "r"(bytes), "r"(mbar)
      : "memory");
}
__device__ __forceinline__ void fence_mbar_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// Arrives on the mbarrier once this thread's cp.async so far are complete
// (noinc: the arrival is one of the count the barrier was made with).
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t mbar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(mbar) : "memory");
}
#else
__device__ __forceinline__ void cp_async_arrive_noinc(uint32_t mbar) { mbar_arrive(mbar); }
__device__ __forceinline__ void mbar_arrive_tx(uint32_t a, uint32_t) { mbar_arrive(a); }
__device__ __forceinline__ void bulk_g2s(uint32_t, const void*, uint32_t, uint32_t) {}
__device__ __forceinline__ void fence_mbar_init() {}
#endif
// Programmatic dependent launch: no-ops unless the launch asked for it.
__device__ __forceinline__ void griddep_wait() { asm volatile("griddepcontrol.wait;" ::: "memory"); }
__device__ __forceinline__ void griddep_launch() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
// 4 bytes global -> shared, zero-filled (nothing read) unless ok.
__device__ __forceinline__ void cp_async4(uint32_t dst, const void* src, bool ok) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;" ::"r"(dst), "l"(src), "r"(ok ? 4 : 0) : "memory");
}
__device__ __forceinline__ uint4 ld_shared_v4(uint32_t a) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(a));
  return v;
}

// Compile-time geometry of one instantiation: MT latent rows (wgmma N),
// NWG consumer warpgroups of 64 weight rows each, KC 32-k chunks a stage,
// ST stages; after the consumers one latent warpgroup and one weight warp.
template <int MT, int NWG, int KC, int ST>
struct Geo {
  static_assert(MT == 16 || MT == 32 || MT == 64 || MT == 128, "MT 16, 32, 64, 128");
  static_assert(NWG >= 1 && NWG <= 4 && KC >= 1 && ST >= 2, "geometry");
  static constexpr int MT_ = MT;
  static constexpr int NT = 128 * (NWG + 1) + 32;
  static constexpr int ROWS = 64 * NWG;             // weight rows (output columns) per CTA
  static constexpr int WSB = ROWS * KC * 64;        // weight bytes of a stage: 4*NWG row groups x KC KB
  static constexpr int LCB = MT * 64;               // latent bytes of one staged chunk
  static constexpr int LSB = KC * LCB;              // latent bytes of a stage
  static constexpr int SB = WSB + LSB;              // stage bytes
  static constexpr int WORDS = KC * MT * 16;        // 4-byte latent words a stage
  static_assert(WORDS % 128 == 0, "whole turns of the latent warpgroup");
  static constexpr int IT = WORDS / 128;            // cp.async per latent thread a stage
  static constexpr int P = ROWS + 4;                // partials pitch (floats)
  static constexpr int PARTB = MT * P * 4;
  static constexpr int BODY = (ST * SB > PARTB ? ST * SB : PARTB);
  static constexpr int SMEM = BODY + 2 * ST * 8;    // + full[ST], empty[ST] mbarriers
};

// The latent of one stage by 4-byte cp.async, issued by the 128 threads of
// the latent warpgroup. In shared memory a chunk is [j 0..3][row 0..MT-1]
// [16 B]: K-major no-swizzle core matrices (8 rows x 16 B). Word P (k 2P,
// 2P+1 of the chunk) of a row goes to column j = P % 4, word t = P / 4 of
// its 16 bytes: the k order of the packed weight's A fragments (pack.go).
// Flat word f = ((c*4 + j)*(MT/8) + rg)*32 + 4*rr + t (row 8*rg + rr): the
// 32 lanes of a warp write 128 contiguous bytes. Rows >= M, chunks past the
// CTA's range and k >= K are zero-filled.
template <class G>
__device__ __forceinline__ void stage_latent(const Params& p, uint32_t buf, int ltid, int chunk0, int cend) {
  constexpr int MT = G::MT_;
#pragma unroll
  for (int it = 0; it < G::IT; ++it) {
    const int f = ltid + 128 * it;
    const int t = f & 3, rr = (f >> 2) & 7;
    const int q = f >> 5;
    const int rg = q % (MT / 8);
    const int j = (q / (MT / 8)) & 3;
    const int c = q / (MT / 8) / 4;
    const int r = 8 * rg + rr;
    const int k = (chunk0 + c) * 32 + 2 * (4 * t + j);
    const bool ok = r < p.M && chunk0 + c < cend && k < p.K;
    const uint16_t* src = ok ? p.latent + (size_t)r * (size_t)p.K + (size_t)k : p.latent;
    cp_async4(buf + (uint32_t)(c * G::LCB + j * MT * 16 + r * 16 + t * 4), src, ok);
  }
}

// The latent of one stage through registers: piece e = ltid + 128*it is
// latent row r = e % MT of stage chunk c = e / MT, 64 bytes (32 k) as 4
// uint4, stored as the 4x4 word transpose of the layout above.
template <class G>
struct LatRegs {
  static constexpr int PIECES = G::WORDS / 16;
  static constexpr int IT = (PIECES + 127) / 128;
  uint4 v[IT][4];
  __device__ __forceinline__ void load(const Params& p, int ltid, int chunk0, int cend) {
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int e = ltid + 128 * it;
      const int r = e % G::MT_;
      const int ch = chunk0 + e / G::MT_;
      const bool ok = e < PIECES && r < p.M && ch < cend;
      const int k0 = ch * 32;
      const uint16_t* src = p.latent + (ok ? (size_t)r * (size_t)p.K + (size_t)k0 : 0);
#pragma unroll
      for (int a = 0; a < 4; ++a) v[it][a] = ld_act(src + 8 * a, ok && k0 + 8 * a < p.K);
    }
  }
  __device__ __forceinline__ void store(uint32_t buf, int ltid) const {
#pragma unroll
    for (int it = 0; it < IT; ++it) {
      const int e = ltid + 128 * it;
      if (e < PIECES) {
        const int r = e % G::MT_;
        const int c = e / G::MT_;
        const uint32_t base = buf + (uint32_t)(c * G::LCB + r * 16);
        st_shared_v4(base + 0 * G::MT_ * 16, make_uint4(v[it][0].x, v[it][1].x, v[it][2].x, v[it][3].x));
        st_shared_v4(base + 1 * G::MT_ * 16, make_uint4(v[it][0].y, v[it][1].y, v[it][2].y, v[it][3].y));
        st_shared_v4(base + 2 * G::MT_ * 16, make_uint4(v[it][0].z, v[it][1].z, v[it][2].z, v[it][3].z));
        st_shared_v4(base + 3 * G::MT_ * 16, make_uint4(v[it][0].w, v[it][1].w, v[it][2].w, v[it][3].w));
      }
    }
  }
};

// One consumer stage: A (this warp's row group, KC chunks = 2*KC k16 steps)
// from the stage's weight into registers, then 2*KC wgmma against the
// stage's latent. Steps past the CTA's range get zero A (their latent is
// zero too): every wgmma runs, so the accumulators see only wgmma.
// The math of the wgmma form where wgmma is not available (sm_100, or
// BIGM3_FORCE_MMA to test it on sm_90): mma.sync m16n8k16 per 8 latent
// rows, B fragments read from the same shared-memory layout. Its D
// fragment is the wgmma D fragment of the warp's 16 rows, so the
// accumulators and the epilogue are the same.
#if defined(BIGM3_FORCE_MMA) || !defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define BIGM3_MMA_SYNC 1
#endif
__device__ __forceinline__ void mma16816(float (&d)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}
__device__ __forceinline__ uint32_t lds32(uint32_t a) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(a));
  return v;
}

template <class G, int KC>
__device__ __forceinline__ void consume(float (&acc)[G::MT_ / 2], uint4 (&a)[2 * KC], uint32_t wsm, uint32_t lsm,
                                        int nsteps) {
#pragma unroll
  for (int j = 0; j < 2 * KC; ++j)
    a[j] = j < nsteps ? ld_shared_v4(wsm + (uint32_t)((j >> 1) * 1024 + (j & 1) * 512)) : make_uint4(0, 0, 0, 0);
#ifdef BIGM3_MMA_SYNC
  // Lane (g, t), latent rows 8n + g: b0 = virtual k 2t, 2t+1 (core column
  // 2h, word t), b1 = virtual k 2t+8, 2t+9 (column 2h+1).
  const int lane = (int)(threadIdx.x & 31);
  const uint32_t loff = (uint32_t)((lane >> 2) * 16 + (lane & 3) * 4);
#pragma unroll
  for (int j = 0; j < 2 * KC; ++j) {
    const uint32_t col = lsm + (uint32_t)((j >> 1) * G::LCB + (j & 1) * 2 * G::MT_ * 16) + loff;
#pragma unroll
    for (int n = 0; n < G::MT_ / 8; ++n) {
      float(&d)[4] = *reinterpret_cast<float(*)[4]>(&acc[4 * n]);
      mma16816(d, a[j], lds32(col + (uint32_t)(n * 128)), lds32(col + (uint32_t)(G::MT_ * 16 + n * 128)));
    }
  }
#else
  wgmma_fence();
#pragma unroll
  for (int j = 0; j < 2 * KC; ++j)
    wgmma_rs<G::MT_>(acc, a[j], make_desc(lsm + (uint32_t)((j >> 1) * G::LCB + (j & 1) * 2 * G::MT_ * 16),
                                          G::MT_ * 16, 128));
  wgmma_commit();
#endif
}

// The kernel. CTA = NWG consumer warpgroups (warpgroup c: weight rows n0 +
// 64c .. +63, warp w of it row group n0/16 + 4c + w), a latent warpgroup
// and a weight warp; the CTAs of a cluster split the 32-k chunks of K.
// Stage i of a CTA holds chunks cs + KC*i .. : the weight warp brings each
// row group's KC blocks (contiguous in the packed layout) by one bulk copy,
// the latent warpgroup stages the latent by cp.async, each as soon as the
// stage is free; consumers wait on full[s], multiply, and release the
// stage on empty[s] once its wgmmas are done.
template <int MT, int NWG, int KC, int ST>
__global__ void __launch_bounds__(128 * (NWG + 1) + 32, 1) bigm3_kernel(const __grid_constant__ Params p) {
  using G = Geo<MT, NWG, KC, ST>;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = (int)threadIdx.x;
  const int wg = tid >> 7;
  const int csize = (int)cluster_size(), crank = (int)cluster_rank();
  const int tile = (int)cluster_id_x();
  const int n0 = tile * G::ROWS;
  const int C = p.C;
  const int cs = (int)(((long long)crank * C) / csize);
  const int ce = (int)(((long long)(crank + 1) * C) / csize);
  const int nj = ce - cs;
  const int nst = (nj + KC - 1) / KC;

  const uint32_t sbase = smem_u32(smem);
  const uint32_t full0 = sbase + (uint32_t)G::BODY, empty0 = full0 + (uint32_t)(8 * ST);
  if (tid == 0) {
    for (int s = 0; s < ST; ++s) {
      mbar_init(full0 + 8 * s, 1 + 128);  // the weight lane's expect_tx + every latent thread's cp.async
      mbar_init(empty0 + 8 * s, 4 * NWG);  // one lane of every consumer warp
    }
    fence_mbar_init();
  }
  griddep_launch();
  __syncthreads();

  float acc[MT / 2];
#pragma unroll
  for (int i = 0; i < MT / 2; ++i) acc[i] = 0.f;

  if (wg == NWG) {
    // Latent warpgroup: stage i's latent as soon as stage i's buffer is free.
    const int ltid = tid - 128 * NWG;
    griddep_wait();  // the latent is the previous kernel's output
    if (p.latmode == 0) {
      for (int i = 0; i < nst; ++i) {
        const int s = i % ST;
        if (i >= ST) mbar_wait(empty0 + 8 * s, (uint32_t)(((i / ST) - 1) & 1));
        stage_latent<G>(p, sbase + (uint32_t)(s * G::SB + G::WSB), ltid, cs + KC * i, ce);
        cp_async_arrive_noinc(full0 + 8 * s);
      }
    } else {
      // Through registers, the next stage's loads in flight while this
      // one's are stored.
      LatRegs<G> lr[2];
      if (nst > 0) lr[0].load(p, ltid, cs, ce);
      for (int i0 = 0; i0 < nst; i0 += 2) {
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int i = i0 + u;
          if (i < nst) {
            if (i + 1 < nst) lr[u ^ 1].load(p, ltid, cs + KC * (i + 1), ce);
            const int s = i % ST;
            if (i >= ST) mbar_wait(empty0 + 8 * s, (uint32_t)(((i / ST) - 1) & 1));
            lr[u].store(sbase + (uint32_t)(s * G::SB + G::WSB), ltid);
            fence_proxy_async();
            mbar_arrive(full0 + 8 * s);
          }
        }
      }
    }
  } else if (wg == NWG + 1) {
    // Weight warp: lane 0 brings each row group's KC blocks of stage i by
    // one bulk copy, as soon as the stage's buffer is free.
    const int lane = tid & 31;
    if (p.l2pf && nj > 0 && lane < 4 * NWG) {
      const int g = n0 / 16 + lane;
      if (g * 16 < p.shard) prefetch_l2(p.weight + ((size_t)g * (size_t)C + (size_t)cs) * 512, (uint32_t)nj * 1024u);
    }
    if (lane == 0) {
      int ngrp = 0;
      for (int g = 0; g < 4 * NWG; ++g)
        if ((n0 / 16 + g) * 16 < p.shard) ++ngrp;
      for (int i = 0; i < nst; ++i) {
        const int s = i % ST;
        if (i >= ST) mbar_wait(empty0 + 8 * s, (uint32_t)(((i / ST) - 1) & 1));
        const uint32_t stage = sbase + (uint32_t)(s * G::SB);
        const int c0 = cs + KC * i;
        const int nch = min(KC, ce - c0);
        mbar_arrive_tx(full0 + 8 * s, (uint32_t)(ngrp * nch * 1024));
        for (int g = 0; g < 4 * NWG; ++g) {
          const int grp = n0 / 16 + g;
          if (grp * 16 < p.shard)
            bulk_g2s(stage + (uint32_t)(g * KC * 1024), p.weight + ((size_t)grp * (size_t)C + (size_t)c0) * 512,
                     (uint32_t)(nch * 1024), full0 + 8 * s);
        }
      }
    }
  } else {
    // Consumers: warpgroup wg, warp wq of it, row group wg*4 + wq of the tile.
    const int lane = tid & 31;
    const int wq = (tid >> 5) & 3;
    const uint32_t wrow = (uint32_t)((wg * 4 + wq) * KC * 1024 + lane * 16);
    uint4 a0[2 * KC], a1[2 * KC];
    for (int i0 = 0; i0 < nst; i0 += 2) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        const int i = i0 + u;
        if (i < nst) {
          const int s = i % ST;
          mbar_wait(full0 + 8 * s, (uint32_t)((i / ST) & 1));
          fence_proxy_async();  // the latent came by cp.async (generic proxy); wgmma reads it (async proxy)
          const uint32_t stage = sbase + (uint32_t)(s * G::SB);
          const int nsteps = 2 * min(KC, nj - KC * i);
          if (u == 0)
            consume<G, KC>(acc, a0, stage + wrow, stage + (uint32_t)G::WSB, nsteps);
          else
            consume<G, KC>(acc, a1, stage + wrow, stage + (uint32_t)G::WSB, nsteps);
#ifndef BIGM3_MMA_SYNC
          wgmma_wait<1>();  // stage i-1 is done: release it
#endif
          if (i > 0 && lane == 0) mbar_arrive(empty0 + 8 * ((i - 1) % ST));
        }
      }
    }
#ifndef BIGM3_MMA_SYNC
    wgmma_wait<0>();
#endif
  }
  griddep_wait();   // `shared` and out belong to the previous kernel until it is done
  __syncthreads();  // every stage consumed: the stage memory holds the partials now

  // Partials [m][n] (pitch P floats). acc of warp wq, lane (g, t):
  // acc[4j+0..1] at weight row 16wq+g, latent rows 8j+2t, +1; acc[4j+2..3]
  // at weight row 16wq+g+8.
  float* parts = reinterpret_cast<float*>(smem);
  constexpr int P = G::P;
  if (wg < NWG) {
    const int lane = tid & 31;
    const int wq = (tid >> 5) & 3;
    const int g = lane >> 2, t = lane & 3;
    const int nl = 64 * wg + 16 * wq + g;
#pragma unroll
    for (int j = 0; j < MT / 8; ++j) {
      if (8 * j < p.M) {
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
  constexpr int VPR = G::ROWS / 8;
  const int nvec = p.M * VPR;
  for (int v = crank + csize * tid; v < nvec; v += csize * G::NT) {
    const int m = v / VPR;
    const int ec = (v - m * VPR) * 8;
    const int n = n0 + ec;
    if (n >= p.shard) continue;
    const uint4 shv = ld_act(p.shared + (size_t)m * (size_t)p.shard + n, true);
    const int off = m * P + ec;
    float s[8];
    const uint32_t a0 = smem_u32(parts + off);
    for (int q = 0; q < csize; ++q) {
      float4 x, y;
      if (csize > 1) {
        const uint32_t aq = mapa_u32(a0, (uint32_t)q);
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
    uint4 o;
    o.x = finish2(s[0], s[1], shv.x);
    o.y = finish2(s[2], s[3], shv.y);
    o.z = finish2(s[4], s[5], shv.z);
    o.w = finish2(s[6], s[7], shv.w);
    st_global_v4(p.out + (size_t)m * (size_t)p.shard + n, o);
  }
  if (csize > 1) cluster_sync_all();
}

// ---------------------------------------------------------------- host

// The instantiations: (MT, NWG, KC, ST). Cluster size is a runtime argument.
#define BIGM3_TABLE(X)                                                                             \
  X(16, 1, 4, 8) X(16, 1, 2, 12) X(16, 2, 2, 8) X(16, 2, 4, 5)                                     \
  X(32, 1, 4, 6) X(32, 1, 2, 10) X(32, 2, 2, 8) X(32, 2, 4, 4)                                     \
  X(64, 1, 4, 4) X(64, 1, 2, 8) X(64, 2, 2, 6) X(64, 2, 4, 4)                                      \
  X(128, 1, 2, 6) X(128, 1, 1, 10) X(128, 2, 2, 6) X(128, 2, 1, 10)

typedef void (*KernFn)(Params);
struct Inst {
  int mt, wgn, kc, st;
  KernFn fn;
  int smem, nt;
};
#define BIGM3_INST(MT, NWG, KC, ST) \
  {MT, NWG, KC, ST, bigm3_kernel<MT, NWG, KC, ST>, Geo<MT, NWG, KC, ST>::SMEM, Geo<MT, NWG, KC, ST>::NT},
static const Inst kInsts[] = {BIGM3_TABLE(BIGM3_INST)};

// kc or st 0: the first instantiation of the table that matches the rest.
static const Inst* find_inst(int mt, int wgn, int kc, int st) {
  for (const Inst& in : kInsts)
    if (in.mt == mt && in.wgn == wgn && (kc == 0 || in.kc == kc) && (st == 0 || in.st == st)) return &in;
  return nullptr;
}

// bf16 on the host: round to nearest even.
static uint16_t f2bf(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0;
  return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
static float bf2f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  double uni() { return ((next() >> 11) + 0.5) * (1.0 / 9007199254740992.0); }
  double normal() { return std::sqrt(-2.0 * std::log(uni())) * std::cos(6.283185307179586 * uni()); }
};

// pack.go's PackWeight: element (n, k) at (g*C + c)*512 + (q*32 + l)*8 + e.
static size_t packed_len(int shard, int K) { return (size_t)((shard + 15) / 16) * ((K + 31) / 32) * 512; }
static size_t packed_index(int n, int k, int C) {
  const int g = n / 16, c = k / 32, l = 4 * (n % 8) + (k % 32) / 8;
  const int q = (k % 8) / 4, e = 2 * (2 * ((k % 4) / 2) + (n % 16) / 8) + k % 2;
  return ((size_t)g * C + c) * 512 + (size_t)(q * 32 + l) * 8 + e;
}

static void parallel_for(int n, const std::function<void(int)>& f) {
  int nt = (int)std::thread::hardware_concurrency();
  if (nt < 1) nt = 1;
  if (nt > 32) nt = 32;
  std::atomic<int> next(0);
  std::vector<std::thread> th;
  for (int t = 0; t < nt; ++t)
    th.emplace_back([&] {
      for (int i; (i = next.fetch_add(1)) < n;) f(i);
    });
  for (auto& x : th) x.join();
}

// One shard's inputs and the float64 yardstick for its first maxM rows.
struct Problem {
  int shard, K, maxM;
  std::vector<uint16_t> lat, shr, w, wp;  // latent [maxM][K], shared [maxM][shard], W [shard][K], packed W
  std::vector<double> ideal, tol;         // [maxM][shard]
};

// The bound of kernel/reference.go (ToleranceFormula):
// |out - ref| <= (2^-8+2^-15)*(|S| + |S+shared|) + (1+2^-6)*(gamma_K*sum|l*w| + K*2^-149) + 2^-132.
static void make_problem(Problem& pr, int shard, int K, int maxM, uint64_t seed) {
  pr.shard = shard, pr.K = K, pr.maxM = maxM;
  Rng r(seed ^ ((uint64_t)shard << 32) ^ (uint64_t)K);
  pr.lat.resize((size_t)maxM * K);
  pr.shr.resize((size_t)maxM * shard);
  pr.w.resize((size_t)shard * K);
  for (auto& x : pr.lat) x = f2bf((float)r.normal());
  for (auto& x : pr.shr) x = f2bf((float)r.normal());
  const double ws = 1.0 / std::sqrt((double)K);
  for (auto& x : pr.w) x = f2bf((float)(r.normal() * ws));
  const int C = (K + 31) / 32;
  pr.wp.assign(packed_len(shard, K), 0);
  for (int n = 0; n < shard; ++n)
    for (int k = 0; k < K; ++k) pr.wp[packed_index(n, k, C)] = pr.w[(size_t)n * K + k];
  pr.ideal.resize((size_t)maxM * shard);
  pr.tol.resize((size_t)maxM * shard);
  std::vector<double> latd(pr.lat.size());
  for (size_t i = 0; i < latd.size(); ++i) latd[i] = bf2f(pr.lat[i]);
  const double ku = (double)K * std::ldexp(1.0, -24);
  const double gamma = ku / (1 - ku);
  const double tconst = (1 + std::ldexp(1.0, -6)) * (double)K * std::ldexp(1.0, -149) + std::ldexp(1.0, -132);
  parallel_for(shard, [&](int n) {
    std::vector<double> wd(K);
    for (int k = 0; k < K; ++k) wd[k] = bf2f(pr.w[(size_t)n * K + k]);
    for (int m = 0; m < maxM; ++m) {
      const double* l = &latd[(size_t)m * K];
      double s = 0, a = 0;
      for (int k = 0; k < K; ++k) {
        const double p = l[k] * wd[k];
        s += p;
        a += std::fabs(p);
      }
      const double id = s + bf2f(pr.shr[(size_t)m * shard + n]);
      pr.ideal[(size_t)m * shard + n] = id;
      pr.tol[(size_t)m * shard + n] =
          (std::ldexp(1.0, -8) + std::ldexp(1.0, -15)) * (std::fabs(s) + std::fabs(id)) +
          (1 + std::ldexp(1.0, -6)) * gamma * a + tconst;
    }
  });
}

struct Check {
  long wrong = 0, neg0 = 0;
  double worst = 0;  // largest |err| / tol
};
static Check check(const Problem& pr, int M, const std::vector<uint16_t>& out, bool verbose) {
  Check c;
  const int S = pr.shard;
  long by_n16[16] = {0}, by_m8[8] = {0};
  int shown = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < S; ++n) {
      const size_t i = (size_t)m * S + n;
      const uint16_t b = out[i];
      if (b == 0x8000) ++c.neg0;
      const double v = bf2f(b);
      const double err = std::fabs(v - pr.ideal[i]);
      const bool bad = !(err <= pr.tol[i]);  // NaN counts as wrong
      if (!std::isnan(err) && err / pr.tol[i] > c.worst) c.worst = err / pr.tol[i];
      if (bad) {
        ++c.wrong;
        ++by_n16[n % 16];
        ++by_m8[m % 8];
        if (verbose && shown < 6) {
          printf("    wrong m %d n %d: got %.6g (0x%04x) want %.6g tol %.3g\n", m, n, v, b, pr.ideal[i], pr.tol[i]);
          ++shown;
        }
      }
    }
  if (verbose && c.wrong > 0) {
    printf("    wrong by n%%16:");
    for (long x : by_n16) printf(" %ld", x);
    printf("\n    wrong by m%%8:");
    for (long x : by_m8) printf(" %ld", x);
    printf("\n");
  }
  return c;
}

struct Cfg {
  int mt = 0, wgn = 1, kc = 0, st = 0, cl = 1;
  std::string name() const {
    char b[96];
    snprintf(b, sizeof b, "mt%d.wgn%d.kc%d.st%d.cl%d", mt, wgn, kc, st, cl);
    return b;
  }
};
// "wgn2.kc2.st6.cl2", optionally "mt64." first (else the smallest MT >= M).
static bool parse_cfg(const std::string& s, Cfg& c) {
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find('.', i);
    if (j == std::string::npos) j = s.size();
    const std::string t = s.substr(i, j - i);
    int v = 0;
    if (sscanf(t.c_str(), "mt%d", &v) == 1) c.mt = v;
    else if (sscanf(t.c_str(), "wgn%d", &v) == 1) c.wgn = v;
    else if (sscanf(t.c_str(), "kc%d", &v) == 1) c.kc = v;
    else if (sscanf(t.c_str(), "st%d", &v) == 1) c.st = v;
    else if (sscanf(t.c_str(), "cl%d", &v) == 1) c.cl = v;
    else return false;
    i = j + 1;
  }
  return true;
}
static std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    v.push_back(atoi(s.substr(i, j - i).c_str()));
    i = j + 1;
  }
  return v;
}
static std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> v;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(sep, i);
    if (j == std::string::npos) j = s.size();
    if (j > i) v.push_back(s.substr(i, j - i));
    i = j + 1;
  }
  return v;
}

// A launch failed in a way that leaves the context unusable: report and stop
// this process (run.sh runs every config in its own process).
static void fatal_if(cudaError_t e, const char* what, const std::string& ctx) {
  if (e == cudaSuccess) return;
  printf("FATAL %s: %s (%s) during %s; the CUDA context is lost, stopping this process\n", ctx.c_str(),
         cudaGetErrorName(e), cudaGetErrorString(e), what);
  fflush(stdout);
  exit(3);
}

struct Device {
  uint16_t *lat = nullptr, *shr = nullptr, *out = nullptr, *w = nullptr;
  size_t wlen = 0;
  int ncopies = 0;
};

static int g_pdl = 1;
static cudaError_t launch(const Inst& in, const Cfg& c, const Params& p, cudaStream_t st) {
  const int ntiles = (p.shard + 64 * in.wgn - 1) / (64 * in.wgn);
  cudaLaunchConfig_t lc = {};
  lc.gridDim = dim3((unsigned)(ntiles * c.cl), 1, 1);
  lc.blockDim = dim3((unsigned)in.nt, 1, 1);
  lc.dynamicSmemBytes = (size_t)in.smem;
  lc.stream = st;
  cudaLaunchAttribute at[2];
  at[0].id = cudaLaunchAttributeClusterDimension;
  at[0].val.clusterDim.x = (unsigned)c.cl;
  at[0].val.clusterDim.y = 1;
  at[0].val.clusterDim.z = 1;
  at[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  at[1].val.programmaticStreamSerializationAllowed = 1;
  lc.attrs = at;
  lc.numAttrs = g_pdl ? 2 : 1;
  return cudaLaunchKernelEx(&lc, in.fn, p);
}

static bool prepare_fn(const Inst& in, const Cfg& c, bool print) {
  cudaError_t e = cudaFuncSetAttribute(in.fn, cudaFuncAttributeMaxDynamicSharedMemorySize, in.smem);
  if (e != cudaSuccess) {
    printf("config %s: cudaFuncSetAttribute(MaxDynamicSharedMemorySize, %d): %s\n", c.name().c_str(), in.smem,
           cudaGetErrorString(e));
    return false;
  }
  if (c.cl > 8) {
    e = cudaFuncSetAttribute(in.fn, cudaFuncAttributeNonPortableClusterSizeAllowed, 1);
    if (e != cudaSuccess) {
      printf("config %s: NonPortableClusterSizeAllowed: %s\n", c.name().c_str(), cudaGetErrorString(e));
      return false;
    }
  }
  if (print) {
    cudaFuncAttributes fa;
    CK(cudaFuncGetAttributes(&fa, in.fn));
    cudaLaunchConfig_t lc = {};
    lc.gridDim = dim3((unsigned)c.cl, 1, 1);
    lc.blockDim = dim3((unsigned)in.nt, 1, 1);
    lc.dynamicSmemBytes = (size_t)in.smem;
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeClusterDimension;
    at[0].val.clusterDim.x = (unsigned)c.cl;
    at[0].val.clusterDim.y = 1;
    at[0].val.clusterDim.z = 1;
    lc.attrs = at;
    lc.numAttrs = 1;
    int ncl = -1;
    cudaError_t oe = cudaOccupancyMaxActiveClusters(&ncl, in.fn, &lc);
    printf("config %s: %d threads, %d regs, %zu B local (spill if > 0), %d B dyn smem, "
           "max active clusters %d%s\n",
           c.name().c_str(), in.nt, fa.numRegs, (size_t)fa.localSizeBytes, in.smem, ncl,
           oe == cudaSuccess ? "" : " (query failed)");
    (void)cudaGetLastError();
  }
  return true;
}

struct Opts {
  int desc = -1;  // -1: probe
  int pf = 0;
  int lat = -1;  // -1: cp.async up to MT 32, registers above
  int pdl = 1;
  int time = 1;
  int reps = 60;
  double min_mib = 512;
  uint64_t seed = 12345;
};

// Runs one (shard, M, config) case: correctness, rerun identity, timing.
static void run_case(const Problem& pr, Device& dv, int M, const Cfg& c0, const Opts& o, int desc, bool verbose) {
  Cfg c = c0;
  if (c.mt == 0) c.mt = M <= 16 ? 16 : M <= 32 ? 32 : M <= 64 ? 64 : 128;
  const std::string ctx = "shard " + std::to_string(pr.shard) + " K " + std::to_string(pr.K) + " M " +
                          std::to_string(M) + " " + c.name();
  if (M > c.mt) {
    printf("%s: skipped, M > MT\n", ctx.c_str());
    return;
  }
  const Inst* in = find_inst(c.mt, c.wgn, c.kc, c.st);
  if (!in) {
    printf("%s: skipped, not instantiated (see BIGM3_TABLE)\n", ctx.c_str());
    return;
  }
  c.kc = in->kc;
  c.st = in->st;
  if (!prepare_fn(*in, c, false)) return;
  Params p;
  p.latent = dv.lat;
  p.weight = dv.w;
  p.shared = dv.shr;
  p.out = dv.out;
  p.M = M;
  p.K = pr.K;
  p.shard = pr.shard;
  p.C = (pr.K + 31) / 32;
  p.desc_mode = desc;
  p.l2pf = o.pf;
  p.latmode = o.lat >= 0 ? o.lat : (c.mt >= 64 ? 1 : 0);
  const size_t on = (size_t)M * pr.shard;
  std::vector<uint16_t> o1(on), o2(on);
  CK(cudaMemset(dv.out, 0xff, on * 2));  // NaN poison
  cudaError_t e = launch(*in, c, p, 0);
  if (e != cudaSuccess) {
    printf("%s: launch failed: %s (%s)\n", ctx.c_str(), cudaGetErrorName(e), cudaGetErrorString(e));
    (void)cudaGetLastError();
    return;
  }
  fatal_if(cudaDeviceSynchronize(), "first run", ctx);
  CK(cudaMemcpy(o1.data(), dv.out, on * 2, cudaMemcpyDeviceToHost));
  const Check ck = check(pr, M, o1, verbose);
  CK(cudaMemset(dv.out, 0xff, on * 2));
  fatal_if(launch(*in, c, p, 0), "rerun launch", ctx);
  fatal_if(cudaDeviceSynchronize(), "rerun", ctx);
  CK(cudaMemcpy(o2.data(), dv.out, on * 2, cudaMemcpyDeviceToHost));
  const bool ident = memcmp(o1.data(), o2.data(), on * 2) == 0;

  double med = -1, p90 = -1;
  const double wbytes = (double)dv.wlen * 2;
  if (o.time && dv.ncopies > 0) {
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    cudaGraph_t g;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < dv.ncopies; ++i) {
      Params q = p;
      q.weight = dv.w + (size_t)i * dv.wlen;
      cudaError_t le = launch(*in, c, q, st);
      if (le != cudaSuccess) {
        printf("%s: launch in capture failed: %s\n", ctx.c_str(), cudaGetErrorString(le));
        break;
      }
    }
    CK(cudaStreamEndCapture(st, &g));
    cudaGraphExec_t ge;
    CK(cudaGraphInstantiateWithFlags(&ge, g, 0));
    for (int i = 0; i < 3; ++i) fatal_if(cudaGraphLaunch(ge, st), "warm-up replay", ctx);
    fatal_if(cudaStreamSynchronize(st), "warm-up replays", ctx);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    std::vector<double> us;
    for (int r = 0; r < o.reps; ++r) {
      CK(cudaEventRecord(e0, st));
      CK(cudaGraphLaunch(ge, st));
      CK(cudaEventRecord(e1, st));
      fatal_if(cudaEventSynchronize(e1), "timed replay", ctx);
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      us.push_back(ms * 1000.0 / dv.ncopies);
    }
    std::sort(us.begin(), us.end());
    med = us[us.size() / 2];
    p90 = us[std::min(us.size() - 1, (size_t)(us.size() * 0.9))];
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaGraphExecDestroy(ge));
    CK(cudaGraphDestroy(g));
    CK(cudaStreamDestroy(st));
    // The timed launches wrote the same output: it must still be the first run's.
    CK(cudaMemcpy(o2.data(), dv.out, on * 2, cudaMemcpyDeviceToHost));
    if (memcmp(o1.data(), o2.data(), on * 2) != 0) printf("%s: output after the timed replays differs from the first run\n", ctx.c_str());
  }
  const int ntiles = (pr.shard + 64 * c.wgn - 1) / (64 * c.wgn);
  printf("RESULT shard %d K %d M %d cfg %s pf %d lat%d.pdl%d grid %d wrong %ld neg0 %ld identical %s worst %.3f "
         "median_us %.2f p90_us %.2f GB/s %.0f\n",
         pr.shard, pr.K, M, c.name().c_str(), o.pf, p.latmode, g_pdl, ntiles * c.cl, ck.wrong, ck.neg0, ident ? "yes" : "NO",
         ck.worst, med, p90, med > 0 ? wbytes / (med * 1e3) : 0.0);
  fflush(stdout);
}

static void alloc_device(Device& dv, const Problem& pr, int maxM, bool timing, double min_mib) {
  dv.wlen = pr.wp.size();
  const size_t wb = dv.wlen * 2;
  dv.ncopies = timing ? (int)std::max<size_t>(1, (size_t)std::ceil(min_mib * 1048576.0 / (double)wb)) : 1;
  CK(cudaMalloc(&dv.lat, pr.lat.size() * 2));
  CK(cudaMalloc(&dv.shr, pr.shr.size() * 2));
  CK(cudaMalloc(&dv.out, (size_t)maxM * pr.shard * 2));
  CK(cudaMalloc(&dv.w, wb * dv.ncopies));
  CK(cudaMemcpy(dv.lat, pr.lat.data(), pr.lat.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv.shr, pr.shr.data(), pr.shr.size() * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dv.w, pr.wp.data(), wb, cudaMemcpyHostToDevice));
  for (int i = 1; i < dv.ncopies; ++i) CK(cudaMemcpy(dv.w + (size_t)i * dv.wlen, dv.w, wb, cudaMemcpyDeviceToDevice));
}
static void free_device(Device& dv) {
  CK(cudaFree(dv.lat));
  CK(cudaFree(dv.shr));
  CK(cudaFree(dv.out));
  CK(cudaFree(dv.w));
  dv = Device();
}

static void usage() {
  printf(
      "usage: bigm3 [--shards 7168,3584] [--latent 3584] [--m 16,32,64,128]\n"
      "             [--cfg wgn2.kc2.st6.cl2,mt64.wgn1.kc4.st4.cl8,...] [--pf 0|1] [--lat -1|0|1] [--pdl 0|1]\n"
      "             [--time 0|1] [--reps 60] [--min-mib 512] [--seed N] [--verbose 0|1] [--list]\n"
      "  cfg: WGN consumer warpgroups (64 weight rows each) per CTA, KC 32-k chunks a stage, ST\n"
      "  stages, CL CTAs per cluster (split K); MT (code size) is the smallest of 16/32/64/128 >= M\n"
      "  unless mtNN is given.\n");
}

int main(int argc, char** argv) {
  std::vector<int> shards = {7168, 3584, 896, 448};
  int K = 3584;
  std::vector<int> ms = {16, 32, 64, 128};
  std::vector<std::string> cfgs = {"wgn2.cl2"};
  Opts o;
  int verbose = 1;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string v;
    const size_t eq = a.find('=');
    if (eq != std::string::npos) {
      v = a.substr(eq + 1);
      a = a.substr(0, eq);
    } else if (a != "--list" && a != "--help" && i + 1 < argc) {
      v = argv[++i];
    }
    if (a == "--shards") shards = parse_ints(v);
    else if (a == "--latent") K = atoi(v.c_str());
    else if (a == "--m") ms = parse_ints(v);
    else if (a == "--cfg") cfgs = split(v, ',');
    else if (a == "--pf") o.pf = atoi(v.c_str());
    else if (a == "--lat") o.lat = atoi(v.c_str());
    else if (a == "--pdl") o.pdl = atoi(v.c_str());
    else if (a == "--time") o.time = atoi(v.c_str());
    else if (a == "--reps") o.reps = std::max(1, atoi(v.c_str()));
    else if (a == "--min-mib") o.min_mib = atof(v.c_str());
    else if (a == "--seed") o.seed = strtoull(v.c_str(), nullptr, 10);
    else if (a == "--verbose") verbose = atoi(v.c_str());
    else if (a == "--list") {
      for (const Inst& in : kInsts)
        printf("mt%d.wgn%d.kc%d.st%d: %d threads, %d B smem\n", in.mt, in.wgn, in.kc, in.st, in.nt, in.smem);
      return 0;
    } else {
      usage();
      return a == "--help" ? 0 : 1;
    }
  }
  if (K <= 0 || K % 8 != 0) {
    printf("--latent %d: must be a positive multiple of 8 (16-byte latent rows)\n", K);
    return 1;
  }
  std::vector<Cfg> cs;
  for (const auto& s : cfgs) {
    Cfg c;
    if (!parse_cfg(s, c) || c.cl < 1 || c.cl > 16) {
      printf("--cfg %s: not of the form [mtNN.]wgnA.kcB.stC.clD (CL 1..16)\n", s.c_str());
      return 1;
    }
    cs.push_back(c);
  }
  g_pdl = o.pdl;
  int dev = 0;
  CK(cudaSetDevice(dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  printf("device %s, %d SMs, sm_%d%d, %zu B smem/block opt-in\n", prop.name, prop.multiProcessorCount, prop.major,
         prop.minor, (size_t)prop.sharedMemPerBlockOptin);
  const int desc = 0;  // LBO = K-direction core-matrix stride, SBO = N-direction
  for (const Cfg& c : cs) {
    for (int mt : {16, 32, 64, 128}) {
      Cfg ci = c;
      if (c.mt != 0 && c.mt != mt) continue;
      ci.mt = mt;
      if (const Inst* in = find_inst(mt, c.wgn, c.kc, c.st)) {
        ci.kc = in->kc;
        ci.st = in->st;
        prepare_fn(*in, ci, true);
      }
    }
  }
  int maxM = 0;
  for (int m : ms) {
    if (m < 1 || m > 128) {
      printf("--m %d: M is 1..128\n", m);
      return 1;
    }
    maxM = std::max(maxM, m);
  }
  for (int shard : shards) {
    if (shard <= 0 || shard % 8 != 0) {
      printf("shard %d: must be a positive multiple of 8 (16-byte output vectors)\n", shard);
      continue;
    }
    Problem pr;
    make_problem(pr, shard, K, maxM, o.seed);
    Device dv;
    alloc_device(dv, pr, maxM, o.time != 0, o.min_mib);
    printf("shard %d latent %d: weight %.1f MiB packed, %d copies for timing\n", shard, K,
           (double)dv.wlen * 2 / 1048576.0, dv.ncopies);
    for (int M : ms)
      for (const Cfg& c : cs) run_case(pr, dv, M, c, o, desc, verbose != 0);
    free_device(dv);
  }
  return 0;
}
