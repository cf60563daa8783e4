// One-way GPU-to-GPU store latency over a peer mapping (NVLink), measured as
// half the round trip of a ping-pong: GPU 0 stores i into a word of GPU 1's
// memory and waits until GPU 1 has stored i back into a word of its own
// memory; GPU 1 waits for i and answers. One thread each, %globaltimer on
// GPU 0; twice: with system-scope release stores and acquire loads, and
// with the mailbox's plain stores and volatile loads.
//
//   nvcc -O3 -arch=sm_90 -o pingpong pingpong.cu && ./pingpong [rounds]
//
// Also times the same ping-pong with both words on one GPU (two blocks of
// one kernel), as the local baseline, and a PDL chain of kernels that store
// to GPU 0's memory against the same chain storing to GPU 1's.
#include <cstdio>
#include <cstdlib>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>

#define CK(x)                                                                         \
  do {                                                                                \
    cudaError_t e_ = (x);                                                             \
    if (e_ != cudaSuccess) {                                                          \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

// The flag's load and store. PLAIN: the mailbox's own primitives, a plain
// (weak) store by the writer and a volatile load by the poller
// (kernel/skinny.cu, kernel/receive.cu); else system-scope release and
// acquire.
template <bool PLAIN>
__device__ __forceinline__ unsigned ld_flag(const unsigned* p) {
  unsigned v;
  if (PLAIN)
    asm volatile("ld.volatile.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  else
    asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
template <bool PLAIN>
__device__ __forceinline__ void st_flag(unsigned* p, unsigned v) {
  if (PLAIN)
    asm volatile("st.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  else
    asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ unsigned long long gtimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// ping: for i in 1..n: store i to *out, wait until *in == i; times[i-1] =
// round trip. PLAIN: see ld_flag.
// Both sides give up a round after kGiveUpNs and report it (times[n] = 1
// on the ping side), so a missing partner ends the program instead of
// hanging it.
constexpr unsigned long long kGiveUpNs = 1000000000ull;
template <bool PLAIN>
__device__ void ping_body(unsigned* out, const unsigned* in, int n, unsigned long long* times) {
  for (int i = 1; i <= n; ++i) {
    const unsigned long long t0 = gtimer();
    st_flag<PLAIN>(out, (unsigned)i);
    while (ld_flag<PLAIN>(in) != (unsigned)i) {
      if (gtimer() - t0 > kGiveUpNs) {
        times[n] = 1;
        return;
      }
    }
    times[i - 1] = gtimer() - t0;
  }
}
// pong: for i in 1..n: wait until *in == i, store i to *out.
template <bool PLAIN>
__device__ void pong_body(unsigned* out, const unsigned* in, int n) {
  for (int i = 1; i <= n; ++i) {
    const unsigned long long t0 = gtimer();
    while (ld_flag<PLAIN>(in) != (unsigned)i) {
      if (gtimer() - t0 > kGiveUpNs) return;
    }
    st_flag<PLAIN>(out, (unsigned)i);
  }
}
template <bool PLAIN>
__global__ void ping(unsigned* out, const unsigned* in, int n, unsigned long long* times) {
  ping_body<PLAIN>(out, in, n, times);
}
template <bool PLAIN>
__global__ void pong(unsigned* out, const unsigned* in, int n) {
  pong_body<PLAIN>(out, in, n);
}
// Both in one kernel on one GPU: block 0 pings, block 1 pongs.
template <bool PLAIN>
__global__ void local_pingpong(unsigned* a, unsigned* b, int n, unsigned long long* times) {
  if (threadIdx.x != 0) return;
  if (blockIdx.x == 0) ping_body<PLAIN>(b, a, n, times);
  else pong_body<PLAIN>(a, b, n);
}

// A kernel that stores nvec 16-byte vectors to dst (one per thread), chained
// with programmatic dependent launch like the skinny kernel: it lets the
// next launch start, waits for the previous one, then stores.
__global__ void store_chain(uint4* dst, int nvec, unsigned salt) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < nvec) dst[i] = make_uint4(i, salt, i ^ salt, 1);
}

// Median time per launch (ns) of a graph of `len` PDL-chained store_chain
// launches on the current device, storing `bytes` to dst each.
static double chain_ns(uint4* dst, size_t bytes, int len, int reps) {
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int nvec = (int)(bytes / 16);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((nvec + 255) / 256);
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  cudaGraph_t g;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < len; ++i) CK(cudaLaunchKernelEx(&cfg, store_chain, dst, nvec, (unsigned)i));
  CK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  std::vector<double> t;
  for (int r = 0; r < reps + 3; ++r) {
    CK(cudaEventRecord(a, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 3) t.push_back(ms * 1e6 / len);
  }
  std::sort(t.begin(), t.end());
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaEventDestroy(a));
  CK(cudaEventDestroy(b));
  CK(cudaStreamDestroy(s));
  return t[t.size() / 2];
}

static void report(const char* what, std::vector<unsigned long long> t) {
  if (t.back() != 0) {
    printf("%-34s a round waited more than 1 s: no answer, no figure\n", what);
    return;
  }
  t.pop_back();
  // the first rounds warm up the mappings and TLBs
  t.erase(t.begin(), t.begin() + t.size() / 10);
  std::sort(t.begin(), t.end());
  auto q = [&](double f) { return t[(size_t)(f * (t.size() - 1))] / 2.0; };
  printf("%-34s one-way ns (half round trip): median %.0f  p10 %.0f  p90 %.0f  (%zu rounds)\n", what, q(0.5), q(0.1),
         q(0.9), t.size());
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 20000;
  if (n < 100 || n > 10000000) {
    fprintf(stderr, "usage: pingpong [rounds, 100..10000000]\n");
    return 2;
  }
  int ndev = 0;
  CK(cudaGetDeviceCount(&ndev));
  unsigned long long* times;
  std::vector<unsigned long long> h(n + 1);  // h[n]: 1 when the ping side gave up

  // Local baseline on GPU 0: both words in GPU 0 memory.
  CK(cudaSetDevice(0));
  unsigned* w0;
  CK(cudaMalloc(&w0, 2 * 128));
  CK(cudaMemset(w0, 0, 2 * 128));
  CK(cudaMalloc(&times, (n + 1) * sizeof(unsigned long long)));
  for (int plain = 0; plain < 2; ++plain) {
    CK(cudaMemset(w0, 0, 2 * 128));
    CK(cudaMemset(times, 0, (n + 1) * sizeof(unsigned long long)));
    if (plain) local_pingpong<true><<<2, 32>>>(w0, w0 + 32, n, times);
    else local_pingpong<false><<<2, 32>>>(w0, w0 + 32, n, times);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(h.data(), times, (n + 1) * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    report(plain ? "GPU 0 <-> GPU 0, plain/volatile" : "GPU 0 <-> GPU 0, release/acquire", h);
  }
  if (ndev < 2) {
    printf("one GPU only: no peer measurement\n");
    return 0;
  }
  int can01 = 0, can10 = 0;
  CK(cudaDeviceCanAccessPeer(&can01, 0, 1));
  CK(cudaDeviceCanAccessPeer(&can10, 1, 0));
  if (!can01 || !can10) {
    printf("GPUs 0 and 1 cannot access each other\n");
    return 1;
  }
  CK(cudaDeviceEnablePeerAccess(1, 0));
  CK(cudaSetDevice(1));
  CK(cudaDeviceEnablePeerAccess(0, 0));
  unsigned* w1;
  CK(cudaMalloc(&w1, 128));
  CK(cudaMemset(w1, 0, 128));
  CK(cudaDeviceSynchronize());
  // GPU 0 stores into w1 (remote) and polls w0 (local); GPU 1 polls w1 (local)
  // and stores into w0 (remote): every store crosses NVLink, every poll is local,
  // as in the mailbox.
  for (int plain = 0; plain < 2; ++plain) {
    CK(cudaSetDevice(1));
    CK(cudaMemset(w1, 0, 128));
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(0));
    CK(cudaMemset(w0, 0, 2 * 128));
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(1));
    if (plain) pong<true><<<1, 1>>>(w0, w1, n);
    else pong<false><<<1, 1>>>(w0, w1, n);
    CK(cudaGetLastError());
    CK(cudaSetDevice(0));
    CK(cudaMemset(times, 0, (n + 1) * sizeof(unsigned long long)));
    if (plain) ping<true><<<1, 1>>>(w1, w0, n, times);
    else ping<false><<<1, 1>>>(w1, w0, n, times);
    CK(cudaGetLastError());
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(1));
    CK(cudaDeviceSynchronize());
    CK(cudaSetDevice(0));
    CK(cudaMemcpy(h.data(), times, (n + 1) * sizeof(unsigned long long), cudaMemcpyDeviceToHost));
    report(plain ? "GPU 0 <-> GPU 1, plain/volatile" : "GPU 0 <-> GPU 1, release/acquire", h);
  }

  // What stores to the peer cost a chain of kernels: the same PDL chain on
  // GPU 0 storing into GPU 0's memory or into GPU 1's (a grid completes only
  // once its stores are performed, so remote stores can hold up the next
  // launch's griddepcontrol.wait).
  uint4 *loc, *rem;
  const size_t maxb = 1 << 20;
  CK(cudaMalloc(&loc, maxb));
  CK(cudaSetDevice(1));
  CK(cudaMalloc(&rem, maxb));
  CK(cudaSetDevice(0));
  printf("PDL chain of 200 store kernels on GPU 0, median of 20 graph replays, ns per launch:\n");
  printf("%10s %12s %12s %10s\n", "bytes", "to GPU 0", "to GPU 1", "difference");
  for (size_t bytes : {(size_t)16, (size_t)14336, (size_t)57344, (size_t)114688, (size_t)1 << 20}) {
    const double l = chain_ns(loc, bytes, 200, 20);
    const double r = chain_ns(rem, bytes, 200, 20);
    printf("%10zu %12.0f %12.0f %10.0f\n", bytes, l, r, r - l);
  }
  return 0;
}
