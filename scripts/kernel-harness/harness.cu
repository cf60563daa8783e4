// Test and benchmark harness for kernel/kernels.fatbin, through the CUDA
// driver API: it loads exactly the shipped fatbin with cuModuleLoadData.
//
//   harness FATBIN check               correctness of every M, shard, latent and
//                                      launch config; receive kernel; exit 1 on failure
//   harness FATBIN small               one small case of each kernel (for compute-sanitizer)
//   harness FATBIN sweep OUT.tsv       time every launch config at the benchmark shapes
//   harness FATBIN pfsweep OUT.tsv     time L2 prefetch plans (l2_prefetch) on a few geometries
//   harness FATBIN bench TABLE OUT.tsv time the configs of TABLE (kernel/config_table.tsv
//                                      format) at the benchmark shapes, plus copy bandwidth
//   harness FATBIN readbw              the read ceiling: chains of kernels that only stream
//                                      bytes (same PDL shape as the skinny kernel)
// HARNESS_NBUF=1 makes every timed launch read the same weight (L2-resident
// when it fits): the kernel's cost without HBM, for the notes.
//
// Built by scripts/bench-kernel with nvcc (-lcuda). Inputs are fresh random
// numbers each run (the seed is printed); outputs are poisoned before every
// launch.
#include <cuda.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "../../kernel/skinny.h"

namespace {

// ---------------------------------------------------------------- errors

void die(CUresult r, const char* what, int line) {
  const char* name = "?";
  const char* msg = "?";
  cuGetErrorName(r, &name);
  cuGetErrorString(r, &msg);
  fprintf(stderr, "harness.cu:%d: %s: %s (%s)\n", line, what, name, msg);
  exit(2);
}
#define CK(x)                                 \
  do {                                        \
    CUresult r_ = (x);                        \
    if (r_ != CUDA_SUCCESS) die(r_, #x, __LINE__); \
  } while (0)

const char* errname(CUresult r) {
  const char* n = "?";
  cuGetErrorName(r, &n);
  return n;
}

// ---------------------------------------------------------------- bf16, rng

uint16_t bf16_rne(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);  // NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
float bf16_f(uint16_t b) {
  uint32_t u = (uint32_t)b << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

struct Rng {
  uint64_t s;
  uint64_t next() {  // splitmix64
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uni(float lo, float hi) { return lo + (hi - lo) * (float)((next() >> 40) * (1.0 / 16777216.0)); }
  int below(int n) { return (int)(next() % (uint64_t)n); }
};

void fill_bf16(std::vector<uint16_t>& v, Rng& rng, float lo, float hi) {
  for (auto& x : v) x = bf16_rne(rng.uni(lo, hi));
}

// ---------------------------------------------------------------- module

constexpr int kNumVariants = 13;

struct Kernels {
  CUmodule mod{};
  CUfunction skinny[9][kNumVariants]{};  // [M][variant]
  CUfunction receive{};
};

const char* const kSuffix[kNumVariants] = {"", "_d8", "_t32", "_s8", "_s32", "_c", "_d8p", "_t32p", "_s8p", "_d8p1", "_d8pl", "_t32pw", "_t32pn"};

Kernels load(const char* path) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "cannot open %s\n", path);
    exit(2);
  }
  std::vector<char> bytes;
  char buf[1 << 16];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) bytes.insert(bytes.end(), buf, buf + n);
  fclose(f);
  Kernels k;
  CK(cuModuleLoadData(&k.mod, bytes.data()));
  for (int m = 1; m <= 8; ++m)
    for (int v = 0; v < kNumVariants; ++v) {
      char name[32];
      snprintf(name, sizeof name, "tprun_skinny_m%d%s", m, kSuffix[v]);
      // A fatbin built before an entry point family existed (or after one
      // was dropped) lacks it: time_skinny then reports its configs as
      // unable to launch, and the other configs of a run still time.
      const CUresult fr = cuModuleGetFunction(&k.skinny[m][v], k.mod, name);
      if (fr == CUDA_ERROR_NOT_FOUND) {
        if (m == 1) fprintf(stderr, "note: %s has no %s entry points\n", path, kSuffix[v]);
        k.skinny[m][v] = nullptr;
        continue;
      }
      CK(fr);
      // Staged variants need more than the default 48 KiB of shared memory.
      CK(cuFuncSetAttribute(k.skinny[m][v], CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 200 * 1024));
    }

  CK(cuModuleGetFunction(&k.receive, k.mod, "tprun_receive"));
  return k;
}

// ---------------------------------------------------------------- launch

// A launch config: the entry point (tile_rows, depth, stage), warps per CTA
// and CTAs per cluster (the K split).
struct Cfg {
  int tile_rows, depth, stage, warps, cluster;
  int pf = 0;      // tprun_skinny_params.l2_prefetch
  int packed = 0;  // packed weight layout (skinny.h, TPRUN_SKINNY_PACKED): the "p" entry points
  int one = 0;     // "_d8p1": the "_d8p" tile code compiled once for every cluster size (skinny.cu)
  int policy = 0;  // cluster scheduling policy preference (CUclusterSchedulingPolicy; 2: load balancing)
  int carveout = 0;  // kernel.LaunchConfig.Carveout: preferred shared memory carveout, percent (0: the driver's)
  int variant() const {
    if (one) return 9;  // valid only with 16 rows, depth 8, stage 0, packed (exists())
    if (stage == 3) return 10;  // "_d8pl": valid only with 16 rows, depth 8, packed
    if (stage == 4) return 11;  // "_t32pw": valid only with 32 rows, depth 4, packed
    if (stage == 5) return 12;  // "_t32pn": valid only with 32 rows, depth 4, packed
    if (packed) return stage ? 8 : tile_rows == 32 ? 7 : 6;
    if (stage == 2) return 5;
    if (stage) return tile_rows == 32 ? 4 : 3;
    return tile_rows == 32 ? 2 : depth == 8 ? 1 : 0;
  }
  CUfunction fn(const Kernels& k, int M) const { return k.skinny[M][variant()]; }
  std::string str() const {
    char b[96];
    int n = snprintf(b, sizeof b, "%d/%d/%s/%d/%d", tile_rows, depth, stage == 5 ? "n" : stage == 4 ? "w" : stage == 3 ? "l" : stage == 2 ? "c" : stage ? "s" : "g", warps, cluster);
    if (pf)
      n += snprintf(b + n, sizeof b - n, "/pf%d.%d%s%s", TPRUN_PF_HELPERS(pf), TPRUN_PF_SIXTEENTHS(pf),
                    TPRUN_PF_OWN(pf) ? "o" : "", TPRUN_PF_LSU(pf) ? "l" : "");
    if (packed) n += snprintf(b + n, sizeof b - n, "/p");
    if (one) n += snprintf(b + n, sizeof b - n, "/one");
    if (policy == 1) n += snprintf(b + n, sizeof b - n, "/sp");
    if (policy == 2) n += snprintf(b + n, sizeof b - n, "/lb");
    if (carveout) snprintf(b + n, sizeof b - n, "/co%d", carveout);
    return b;
  }
  // Whether an entry point has this geometry (variant() maps the others
  // onto one that traps or is not what was asked for).
  bool exists() const {
    if (policy < 0 || policy > 2 || (policy != 0 && cluster < 2)) return false;  // a policy needs clusters
    if (carveout < 0 || carveout > 100) return false;
    if (one) return packed == 1 && tile_rows == 16 && depth == 8 && stage == 0;
    if (stage == 3) return packed == 1 && tile_rows == 16 && depth == 8;  // "_d8pl"
    if (stage == 4) return packed == 1 && tile_rows == 32 && depth == 4;  // "_t32pw"
    if (stage == 5) return packed == 1 && tile_rows == 32 && depth == 4;  // "_t32pn"
    if (packed)  // "_d8p", "_s8p", "_t32p"
      return (tile_rows == 16 && depth == 8 && (stage == 0 || stage == 1)) ||
             (tile_rows == 32 && depth == 4 && stage == 0);
    if (stage == 2) return tile_rows == 16 && depth == 0;  // "_c"
    // "", "_d8", "_s8", "_t32", "_s32"
    return (stage == 0 || stage == 1) &&
           ((tile_rows == 32 && depth == 4) || (tile_rows == 16 && (depth == 8 || (depth == 4 && stage == 0))));
  }
};

// Reads a config as Cfg::str() writes it: rows/depth/{g,s,c,l,w,n}/warps/cluster,
// then optionally /pfH.S[o][l], /p, /one, /sp or /lb, and /coN (a carveout
// of N percent). False when it is not one.
bool parse_cfg(const std::string& str, Cfg* out) {
  std::vector<std::string> f;
  std::stringstream q(str);
  for (std::string t; std::getline(q, t, '/');) f.push_back(t);
  if (f.size() < 5 || f[2].size() != 1) return false;
  Cfg c{atoi(f[0].c_str()), atoi(f[1].c_str()), 0, atoi(f[3].c_str()), atoi(f[4].c_str())};
  const char st = f[2][0];
  if (st == 'g') c.stage = 0;
  else if (st == 's') c.stage = 1;
  else if (st == 'c') c.stage = 2;
  else if (st == 'l') c.stage = 3;
  else if (st == 'w') c.stage = 4;
  else if (st == 'n') c.stage = 5;
  else return false;
  for (size_t i = 5; i < f.size(); ++i) {
    if (f[i] == "p") {
      c.packed = 1;
    } else if (f[i] == "one") {
      c.one = 1;
    } else if (f[i] == "sp") {
      c.policy = 1;
    } else if (f[i] == "lb") {
      c.policy = 2;
    } else if (f[i].rfind("co", 0) == 0) {
      int n = 0;
      if (sscanf(f[i].c_str(), "co%d%n", &c.carveout, &n) != 1 || f[i][n] != 0) return false;
    } else if (f[i].rfind("pf", 0) == 0) {
      int h = 0, s16 = 0, n = 0;
      if (sscanf(f[i].c_str(), "pf%d.%d%n", &h, &s16, &n) != 2) return false;
      c.pf = h | (s16 << 16);
      for (const char* r = f[i].c_str() + n; *r; ++r) {
        if (*r == 'o') c.pf |= 1 << 24;
        else if (*r == 'l') c.pf |= 1 << 25;
        else return false;
      }
    } else {
      return false;
    }
  }
  if (c.str() != str || !c.exists()) return false;  // round trip: nothing was dropped
  *out = c;
  return true;
}

// A group of the `ab` and `trace` specs: "SHARD:M,M,...:CFG,CFG,..." (CFG as
// the sweep prints it, e.g. 16/8/g/8/1/p); groups are separated by ';'.
struct Group {
  int shard;
  std::vector<int> ms;
  std::vector<Cfg> cfgs;
};
bool parse_groups(const char* spec, std::vector<Group>* out) {
  std::stringstream groups(spec);
  std::string grp;
  while (std::getline(groups, grp, ';')) {
    std::stringstream parts(grp);
    std::string shard_s, ms_s, cfgs_s, tok;
    std::getline(parts, shard_s, ':');
    std::getline(parts, ms_s, ':');
    std::getline(parts, cfgs_s, ':');
    Group g{atoi(shard_s.c_str()), {}, {}};
    for (std::stringstream q(ms_s); std::getline(q, tok, ',');) g.ms.push_back(atoi(tok.c_str()));
    for (std::stringstream q(cfgs_s); std::getline(q, tok, ',');) {
      Cfg c{};
      if (!parse_cfg(tok, &c)) {
        fprintf(stderr, "cannot read config %s\n", tok.c_str());
        return false;
      }
      g.cfgs.push_back(c);
    }
    if (g.shard <= 0 || g.ms.empty() || g.cfgs.empty()) {
      fprintf(stderr, "cannot read group %s\n", grp.c_str());
      return false;
    }
    out->push_back(g);
  }
  return !out->empty();
}

// The packed weight layout of skinny.h: 16-row groups x 32-k chunks, 1 KB
// blocks in MMA fragment order, zero padding.
std::vector<uint16_t> pack_weight(const std::vector<uint16_t>& w, int shard, int K) {
  const int G = (shard + 15) / 16, C = (K + 31) / 32;
  std::vector<uint16_t> o((size_t)G * C * 512, 0);
  for (int g = 0; g < G; ++g)
    for (int c = 0; c < C; ++c)
      for (int q = 0; q < 2; ++q)  // lane l's 16 bytes q: the A fragment of the chunk's MMA q (skinny.h)
        for (int l = 0; l < 32; ++l)
          for (int e = 0; e < 8; ++e) {
            const int a = e / 2, row = 16 * g + l / 4 + 8 * (a % 2), k = 32 * c + 8 * (l % 4) + 4 * q + 2 * (a / 2) + e % 2;
            if (row < shard && k < K)
              o[((size_t)g * C + c) * 512 + (size_t)(q * 32 + l) * 8 + e] = w[(size_t)row * K + k];
          }
  return o;
}

// stage 0: latent from L2; 1: latent slice in shared memory; 2 ("_c"): the
// weight slab too, no register ring (depth 0).
const Cfg kVariants[6] = {{16, 4, 0, 0, 0}, {16, 8, 0, 0, 0}, {32, 4, 0, 0, 0},
                          {16, 8, 1, 0, 0}, {32, 4, 1, 0, 0}, {16, 0, 2, 0, 0}};

// Dynamic shared memory: reduction buffers, plus the staged latent slice
// ([M][pitch], pitch an odd multiple of 64 bytes) for the "_s" entry points.
size_t smem_bytes(const Cfg& c, int M, int K) {
  size_t b = (size_t)(c.warps + c.cluster) * 8 * (c.tile_rows + 4) * 4;
  if (c.stage == 1 || c.stage == 2) {
    int nchunks = (K + 31) / 32, per = (nchunks + c.cluster - 1) / c.cluster;
    b += (size_t)(M + (c.stage == 2 ? c.tile_rows : 0)) * (per | 1) * 64;
  }
  return b;
}
int grid_x(const Cfg& c, int shard) { return (shard + c.tile_rows - 1) / c.tile_rows * c.cluster; }

CUresult launch_skinny(const Kernels& k, int M, tprun_skinny_params p, const Cfg& c, CUstream s,
                       bool pdl) {
  p.tile_rows = c.tile_rows;
  p.l2_prefetch = c.pf;
  p.flags = c.packed ? TPRUN_SKINNY_PACKED : 0;
  CUlaunchAttribute at[4];
  memset(at, 0, sizeof at);
  int na = 0;
  at[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  at[na].value.clusterDim.x = (unsigned)c.cluster;
  at[na].value.clusterDim.y = 1;
  at[na].value.clusterDim.z = 1;
  ++na;
  if (c.policy != 0) {  // kernel.LaunchConfig.ClusterPolicy
    at[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    at[na].value.clusterSchedulingPolicyPreference = (CUclusterSchedulingPolicy)c.policy;
    ++na;
  }
  if (pdl) {
    at[na].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    at[na].value.programmaticStreamSerializationAllowed = 1;
    ++na;
  }
  if (c.carveout > 0) {  // kernel.LaunchConfig.Carveout
    // CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT (14), whose value
    // is CUlaunchAttributeValue.sharedMemCarveout at offset 0: spelled out so
    // that older cuda.h headers (12.4 here) compile it too;
    // internal/cuda's ABI test pins both against the real cuda.h.
    at[na].id = (CUlaunchAttributeID)14;
    const unsigned co = (unsigned)c.carveout;
    memcpy(&at[na].value, &co, sizeof co);
    ++na;
  }
  CUlaunchConfig lc;
  memset(&lc, 0, sizeof lc);
  lc.gridDimX = (unsigned)grid_x(c, p.shard);
  if (p.recv_slot != 0) {  // the receive CTAs (kernel.ReceiveCTAs)
    const int block = 32 * c.warps;
    int n = (M * p.hidden / 8 + block - 1) / block;
    n = std::min(std::max(n, 1), 132);
    lc.gridDimX += (unsigned)((n + c.cluster - 1) / c.cluster * c.cluster);
  }
  lc.gridDimY = lc.gridDimZ = 1;
  lc.blockDimX = (unsigned)(32 * c.warps);
  lc.blockDimY = lc.blockDimZ = 1;
  lc.sharedMemBytes = (unsigned)smem_bytes(c, M, p.latent_dim);
  lc.hStream = s;
  lc.attrs = at;
  lc.numAttrs = (unsigned)na;
  void* args[] = {&p};
  if (!c.fn(k, M)) return CUDA_ERROR_NOT_FOUND;
  return cuLaunchKernelEx(&lc, c.fn(k, M), args, nullptr);
}

CUresult launch_receive(const Kernels& k, const tprun_receive_params& p, CUstream s) {
  long long nvec = (long long)p.m * p.hidden / 8;
  int block = 256;
  int grid = (int)std::min<long long>((nvec + block - 1) / block, 132);
  if (grid < 1) grid = 1;
  CUlaunchAttribute at[1];
  memset(at, 0, sizeof at);
  at[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  at[0].value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig lc;
  memset(&lc, 0, sizeof lc);
  lc.gridDimX = (unsigned)grid;
  lc.gridDimY = lc.gridDimZ = 1;
  lc.blockDimX = (unsigned)block;
  lc.blockDimY = lc.blockDimZ = 1;
  lc.hStream = s;
  lc.attrs = at;
  lc.numAttrs = 1;
  tprun_receive_params q = p;
  void* args[] = {&q};
  return cuLaunchKernelEx(&lc, k.receive, args, nullptr);
}

// Every config the check covers; ConfigFor only returns configs from it.
std::vector<Cfg> all_configs() {
  std::vector<Cfg> v;
  for (const Cfg& base : kVariants)
    for (int w : {1, 2, 4, 8, 16}) {
      if (w == 16 && base.variant() == 0) continue;  // lean entry: at most 256 threads
      for (int c : {1, 2, 3, 4, 6, 8}) {
        v.push_back({base.tile_rows, base.depth, base.stage, w, c});
        if (base.stage < 2 && base.variant() != 0 && base.variant() != 4) {
          Cfg q{base.tile_rows, base.depth, base.stage, w, c};
          q.packed = 1;
          v.push_back(q);
          if (base.variant() == 1) {  // "_d8p1"
            q.one = 1;
            v.push_back(q);
          }
          if (base.variant() == 1) {  // "_d8pl"
            Cfg l{base.tile_rows, base.depth, 3, w, c};
            l.packed = 1;
            v.push_back(l);
          }
          if (base.variant() == 2) {  // "_t32pw", "_t32pn"
            Cfg x{base.tile_rows, base.depth, 4, w, c};
            x.packed = 1;
            v.push_back(x);
            x.stage = 5;
            v.push_back(x);
          }
        }
      }
    }
  return v;
}

// ---------------------------------------------------------------- reference

struct Ref {
  std::vector<double> s, a;  // [m][n]: sum and sum of |products|
};

Ref reference(int M, int shard, int K, const std::vector<uint16_t>& lat,
              const std::vector<uint16_t>& w) {
  Ref r;
  r.s.assign((size_t)M * shard, 0);
  r.a.assign((size_t)M * shard, 0);
  std::vector<float> lf(lat.size());
  for (size_t i = 0; i < lat.size(); ++i) lf[i] = bf16_f(lat[i]);
  unsigned nt = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<int> next{0};
  auto work = [&]() {
    std::vector<double> wr(K);
    for (int n; (n = next.fetch_add(1)) < shard;) {
      for (int k = 0; k < K; ++k) wr[k] = bf16_f(w[(size_t)n * K + k]);
      for (int m = 0; m < M; ++m) {
        double s = 0, a = 0;
        const float* l = &lf[(size_t)m * K];
        for (int k = 0; k < K; ++k) {
          double p = (double)l[k] * wr[k];
          s += p;
          a += fabs(p);
        }
        r.s[(size_t)m * shard + n] = s;
        r.a[(size_t)m * shard + n] = a;
      }
    }
  };
  std::vector<std::thread> th;
  for (unsigned i = 0; i < nt; ++i) th.emplace_back(work);
  for (auto& t : th) t.join();
  return r;
}

// ---------------------------------------------------------------- check

constexpr uint16_t kPoison = 0x7fc1;  // a NaN no finite computation produces here

struct Verdict {
  bool ok = true;
  long long exact = 0, total = 0;
  double maxerr_over_tol = 0, sq_err = 0, sq_ref = 0;
  std::string why;
};

// Checks one [M][hidden] output block: the rank's slice against the
// reference, everything else still poison.
Verdict verify(const std::vector<uint16_t>& out, int M, int shard, int hidden, int rank,
               const Ref& ref, const std::vector<uint16_t>& sh, int stride) {
  Verdict v;
  char buf[256];
  for (int m = 0; m < M && v.ok; ++m) {
    for (int col = 0; col < hidden; ++col) {
      uint16_t o = out[(size_t)m * hidden + col];
      int n = col - rank * shard;
      if (n < 0 || n >= shard) {
        if (o != kPoison) {
          snprintf(buf, sizeof buf, "wrote outside the slice: m=%d col=%d got %04x", m, col, o);
          v.ok = false;
          v.why = buf;
          break;
        }
        continue;
      }
      if (o == kPoison) {
        snprintf(buf, sizeof buf, "not written: m=%d n=%d", m, n);
        v.ok = false;
        v.why = buf;
        break;
      }
      if (o == 0x8000) {
        snprintf(buf, sizeof buf, "negative zero stored: m=%d n=%d", m, n);
        v.ok = false;
        v.why = buf;
        break;
      }
      double s = ref.s[(size_t)m * shard + n], a = ref.a[(size_t)m * shard + n];
      float shv = bf16_f(sh[(size_t)m * stride + n]);
      double want = s + shv;
      double got = bf16_f(o);
      // bf16 rounding of S and of the sum (2^-8 relative each), fp32
      // accumulation (tensor cores may truncate: 2^-18 of sum |products|).
      double gam = std::ldexp(a, -18);
      double tol = 1.01 * (std::ldexp(fabs(s) + gam, -8) + std::ldexp(fabs(want) + gam + std::ldexp(fabs(s), -8), -8)) + 1.1 * gam + 1e-30;
      double err = fabs(got - want);
      if (!(err <= tol)) {
        snprintf(buf, sizeof buf, "m=%d n=%d got %.6g want %.6g (S=%.6g shared=%.6g) err %.3g tol %.3g",
                 m, n, got, want, s, shv, err, tol);
        v.ok = false;
        v.why = buf;
        break;
      }
      v.maxerr_over_tol = std::max(v.maxerr_over_tol, err / tol);
      v.sq_err += err * err;
      v.sq_ref += want * want;
      // The exact double rounding applied to the float64 sum: equal unless S
      // sits within the accumulation error of a bf16 rounding boundary.
      uint16_t e = bf16_rne(bf16_f(bf16_rne((float)s)) + shv);
      if (e == 0x8000) e = 0;
      v.exact += (e == o);
      v.total++;
    }
  }
  if (v.ok && v.total >= 1000 && v.exact < 0.95 * v.total) {
    snprintf(buf, sizeof buf, "only %lld of %lld outputs equal the rounded float64 result", v.exact,
             v.total);
    v.ok = false;
    v.why = buf;
  }
  return v;
}

// Fills of device memory. cuMemsetD16/D32 run on the legacy default
// stream and may return before they finish; a CU_STREAM_NON_BLOCKING
// stream (every launch here) does not wait for that stream, so a kernel
// could start while the fill still runs and find its output poisoned
// afterwards (a check of 2026-11-30g failed once that way: "destination 3
// of 4 differs"). These wait for the fill.
void fill16(CUdeviceptr p, uint16_t v, size_t n) {
  CK(cuMemsetD16Async(p, v, n, nullptr));
  CK(cuStreamSynchronize(nullptr));
}
void fill32(CUdeviceptr p, uint32_t v, size_t n) {
  CK(cuMemsetD32Async(p, v, n, nullptr));
  CK(cuStreamSynchronize(nullptr));
}

struct DevBuf {
  CUdeviceptr p = 0;
  size_t bytes = 0;
  explicit DevBuf(size_t b) : bytes(b) { CK(cuMemAlloc(&p, b ? b : 16)); }
  ~DevBuf() {
    if (p) cuMemFree(p);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
};

int check_skinny(const Kernels& k, Rng& rng, CUstream s) {
  const int shards[] = {448, 896, 1024, 1792, 3584, 7168};
  const int latents[] = {512, 1024, 2048, 3584, 3600};
  int failures = 0, shapes = 0;
  long long runs = 0, exact = 0, total = 0;
  double worst = 0, worst_rel = 0;
  for (int M = 1; M <= 8; ++M) {
    const std::vector<Cfg> cfgs = all_configs();
    for (int shard : shards) {
      for (int K : latents) {
        const int tp = 3, rank = 1 + (shapes % 2), hidden = tp * shard;
        shapes++;
        std::vector<uint16_t> lat((size_t)M * K), w((size_t)shard * K), sh((size_t)M * hidden);
        fill_bf16(lat, rng, -1.f, 1.f);
        fill_bf16(w, rng, -1.f, 1.f);
        fill_bf16(sh, rng, -16.f, 16.f);
        Ref ref = reference(M, shard, K, lat, w);
        const std::vector<uint16_t> wpk = pack_weight(w, shard, K);
        DevBuf dl(lat.size() * 2), dw(w.size() * 2), dwp(wpk.size() * 2), dsh(sh.size() * 2);
        CK(cuMemcpyHtoD(dl.p, lat.data(), dl.bytes));
        CK(cuMemcpyHtoD(dw.p, w.data(), dw.bytes));
        CK(cuMemcpyHtoD(dwp.p, wpk.data(), dwp.bytes));
        CK(cuMemcpyHtoD(dsh.p, sh.data(), dsh.bytes));
        const size_t outn = (size_t)M * hidden;
        // One poisoned row past the block: a store of a row >= M (the M = 1
        // entry points run the M = 2 code) must not reach it.
        std::vector<DevBuf*> dout;
        for (int d = 0; d < 8; ++d) dout.push_back(new DevBuf((outn + hidden) * 2));
        tprun_skinny_params p;
        memset(&p, 0, sizeof p);
        p.latent = dl.p;
        p.weight = dw.p;
        p.shared = dsh.p + (size_t)rank * shard * 2;
        p.dst[0] = dout[0]->p;
        p.latent_dim = K;
        p.shard = shard;
        p.hidden = hidden;
        p.rank = rank;
        p.shared_stride = hidden;
        p.ndst = 1;
        std::vector<uint16_t> out(outn), out2(outn);
        const std::vector<uint16_t> shs(sh.begin() + (size_t)rank * shard, sh.end());
        std::string ran;  // the last run's config with its random plan and policy, for the failure lines
        auto run = [&](const Cfg& c, int ndst, std::vector<uint16_t>& o) -> bool {
          for (int d = 0; d < ndst; ++d) {
            fill16(dout[d]->p, kPoison, outn + hidden);
            p.dst[d] = dout[d]->p;
          }
          p.ndst = ndst;
          p.weight = c.packed ? dwp.p : dw.p;
          Cfg cc = c;
          // A third of the runs with a random L2 prefetch plan: a hint that
          // must never change the result.
          if (rng.below(3) == 0) cc.pf = (1 + rng.below(40)) | (rng.below(17) << 16) | (rng.below(4) << 24);
          // And half of the cluster launches with a cluster scheduling policy
          // (spread or load balancing): placement, which must not change it either.
          if (cc.cluster > 1 && rng.below(2) == 0) cc.policy = 1 + (int)rng.below(2);
          // And a third with a shared memory carveout: how the SM's memory is
          // split, which must not change it either.
          if (rng.below(3) == 0) cc.carveout = 1 + (int)rng.below(100);
          ran = cc.str();
          CUresult r = launch_skinny(k, M, p, cc, s, false);
          if (r == CUDA_SUCCESS) r = cuStreamSynchronize(s);
          if (r != CUDA_SUCCESS) {
            printf("FAIL M=%d shard=%d K=%d cfg=%s: launch %s\n", M, shard, K, ran.c_str(), errname(r));
            if (r != CUDA_ERROR_INVALID_VALUE && r != CUDA_ERROR_INVALID_CLUSTER_SIZE && r != CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES) exit(2);
            return false;
          }
          CK(cuMemcpyDtoH(o.data(), dout[0]->p, outn * 2));
          std::vector<uint16_t> past(hidden);
          CK(cuMemcpyDtoH(past.data(), dout[0]->p + outn * 2, hidden * 2));
          for (int i = 0; i < hidden; ++i)
            if (past[i] != kPoison) {
              printf("FAIL M=%d shard=%d K=%d cfg=%s: stored past the M rows (row %d, column %d)\n", M, shard, K,
                     ran.c_str(), M, i);
              return false;
            }
          return true;
        };
        for (size_t ci = 0; ci < cfgs.size(); ++ci) {
          const Cfg& c = cfgs[ci];
          runs++;
          if (!run(c, 1, out)) {
            failures++;
            continue;
          }
          Verdict v = verify(out, M, shard, hidden, rank, ref, shs, hidden);
          if (!v.ok) {
            printf("FAIL M=%d shard=%d K=%d cfg=%s: %s\n", M, shard, K, ran.c_str(), v.why.c_str());
            failures++;
            continue;
          }
          exact += v.exact;
          total += v.total;
          worst = std::max(worst, v.maxerr_over_tol);
          worst_rel = std::max(worst_rel, sqrt(v.sq_err / std::max(v.sq_ref, 1e-300)));
          // "_t32pn" differs from "_t32p" only in its latent and shared
          // loads' cache operator: the same result bit for bit.
          if (c.stage == 5) {
            const std::string first = ran;
            Cfg t = c;
            t.stage = 0;
            runs++;
            if (!run(t, 1, out2)) {
              failures++;
              continue;
            }
            if (out2 != out) {
              printf("FAIL M=%d shard=%d K=%d cfg=%s: not bit-identical to its \"_t32p\" twin %s\n", M, shard, K,
                     first.c_str(), ran.c_str());
              failures++;
            }
          }
          // Determinism and multi-destination, for a few configs per shape.
          if (ci % 13 == (size_t)(shapes % 13)) {
            const std::string first = ran;
            if (!run(c, 1, out2)) {
              failures++;
              continue;
            }
            if (out2 != out) {
              printf("FAIL M=%d shard=%d K=%d cfg=%s: rerun as %s not bit-identical\n", M, shard, K, first.c_str(),
                     ran.c_str());
              failures++;
            }
            int nd = 2 + rng.below(7);
            if (!run(c, nd, out2)) {
              failures++;
              continue;
            }
            for (int d = 0; d < nd; ++d) {
              CK(cuMemcpyDtoH(out2.data(), dout[d]->p, outn * 2));
              if (out2 != out) {
                printf("FAIL M=%d shard=%d K=%d cfg=%s: destination %d of %d differs\n", M, shard, K,
                       ran.c_str(), d, nd);
                failures++;
                break;
              }
            }
          }
        }
        for (auto* d : dout) delete d;
      }
    }
    printf("check: M=%d done, %d failures so far\n", M, failures);
    fflush(stdout);
  }
  printf("check skinny: %d shapes, %lld runs, %d failures; %.4f%% outputs equal to the rounded "
         "float64 result; worst err/tol %.3f; worst rel L2 error %.3g\n",
         shapes, runs, failures, 100.0 * exact / std::max(total, 1ll), worst, worst_rel);
  return failures;
}

// Latent zero except one tiny product per row: S underflows to a negative
// zero or a tiny negative; shared is -0: the stored result must be +0.
int check_negzero(const Kernels& k, CUstream s) {
  const int M = 8, shard = 64, K = 64, hidden = 64;
  std::vector<uint16_t> lat((size_t)M * K, 0), w((size_t)shard * K, 0xbf80), sh((size_t)M * hidden, 0x8000);
  for (int m = 0; m < M; ++m) lat[(size_t)m * K] = 0x0080 + m;  // tiny positive (subnormal range)
  DevBuf dl(lat.size() * 2), dw(w.size() * 2), dsh(sh.size() * 2), dout((size_t)M * hidden * 2);
  CK(cuMemcpyHtoD(dl.p, lat.data(), dl.bytes));
  CK(cuMemcpyHtoD(dw.p, w.data(), dw.bytes));
  CK(cuMemcpyHtoD(dsh.p, sh.data(), dsh.bytes));
  fill16(dout.p, kPoison, (size_t)M * hidden);
  tprun_skinny_params p;
  memset(&p, 0, sizeof p);
  p.latent = dl.p;
  p.weight = dw.p;
  p.shared = dsh.p;
  p.dst[0] = dout.p;
  p.latent_dim = K;
  p.shard = shard;
  p.hidden = hidden;
  p.shared_stride = hidden;
  p.ndst = 1;
  CK(launch_skinny(k, M, p, {16, 4, 0, 2, 1}, s, false));
  CK(cuStreamSynchronize(s));
  std::vector<uint16_t> out((size_t)M * hidden);
  CK(cuMemcpyDtoH(out.data(), dout.p, out.size() * 2));
  int bad = 0;
  for (uint16_t o : out) bad += (o == 0x8000 || o == kPoison);
  printf("check negzero: %d bad of %zu (tiny negative sums plus -0 must store +0; first %04x)\n", bad,
         out.size(), out[0]);
  return bad ? 1 : 0;
}

// flags: tprun_receive_params.flags. Status has room for the abort word in
// every mode.
int check_receive(const Kernels& k, Rng& rng, CUstream s, bool late = true, int flags = 0) {
  int failures = 0;
  printf("check receive, flags %#x:\n", flags);
  const int M = 5, tp = 4, shard = 896, hidden = tp * shard;
  const size_t n = (size_t)M * hidden;
  std::vector<uint16_t> data(n);
  fill_bf16(data, rng, -4.f, 4.f);
  for (auto& x : data)
    if (x == 0x8000) x = 0;  // writers sanitize: no sentinel word can appear
  DevBuf slot(n * 2), out(n * 2), status(64 * 4);
  fill32(status.p, 0, 64);
  std::vector<uint32_t> st(TPRUN_RECEIVE_STATUS_WORDS);
  std::vector<uint16_t> got(n);
  tprun_receive_params p;
  memset(&p, 0, sizeof p);
  p.slot = slot.p;
  p.out = out.p;
  p.status = status.p;
  p.m = M;
  p.hidden = hidden;
  p.shard = shard;
  p.flags = flags;
  auto rearmed = [&]() {
    std::vector<uint32_t> w(n / 2);
    CK(cuMemcpyDtoH(w.data(), slot.p, n * 2));
    for (uint32_t x : w)
      if (x != 0x80000000u) return false;
    return true;
  };

  // 1. Everything arrived before the receive starts.
  CK(cuMemcpyHtoD(slot.p, data.data(), n * 2));
  fill32(status.p, 0, TPRUN_RECEIVE_STATUS_WORDS);
  fill16(out.p, kPoison, n);
  p.timeout_ns = 1000000000ull;
  CK(launch_receive(k, p, s));
  CK(cuStreamSynchronize(s));
  CK(cuMemcpyDtoH(got.data(), out.p, n * 2));
  CK(cuMemcpyDtoH(st.data(), status.p, st.size() * 4));
  bool ok = got == data && rearmed() && std::all_of(st.begin(), st.end(), [](uint32_t x) { return x == 0; });
  printf("check receive complete: %s\n", ok ? "ok" : "FAIL");
  failures += !ok;

  // 2. Rank 2's slice has one word missing in row 3, rank 0's in row 0: the
  //    receive must time out, name ranks 0 and 2, and copy what arrived.
  std::vector<uint16_t> partial = data;
  // The sentinel word 0x80000000 is element 2i = 0x0000, element 2i+1 = 0x8000.
  partial[(size_t)3 * hidden + 2 * shard + 100] = 0x0000;
  partial[(size_t)3 * hidden + 2 * shard + 101] = 0x8000;
  partial[(size_t)0 * hidden + 0 * shard + 6] = 0x0000;
  partial[(size_t)0 * hidden + 0 * shard + 7] = 0x8000;
  CK(cuMemcpyHtoD(slot.p, partial.data(), n * 2));
  fill32(status.p, 0, TPRUN_RECEIVE_STATUS_WORDS);
  fill16(out.p, kPoison, n);
  p.timeout_ns = 2000000ull;  // 2 ms
  auto t0 = std::chrono::steady_clock::now();
  CK(launch_receive(k, p, s));
  CK(cuStreamSynchronize(s));
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  CK(cuMemcpyDtoH(got.data(), out.p, n * 2));
  CK(cuMemcpyDtoH(st.data(), status.p, st.size() * 4));
  ok = st[0] == 1 && st[1 + 0] == 1 && st[1 + 2] == 1;
  for (int r = 0; r < TPRUN_MAX_RANKS; ++r)
    if (r != 0 && r != 2 && st[1 + r] != 0) ok = false;
  size_t copied = 0;
  for (size_t i = 0; i < n; ++i) copied += got[i] == data[i];
  ok = ok && copied == n - 16;  // the two 8-element vectors holding a sentinel word stay
  printf("check receive timeout: %s (returned after %.1f ms, status %u ranks0=%u ranks2=%u, %zu of %zu copied)\n",
         ok ? "ok" : "FAIL", ms, st[0], st[1], st[3], copied, n);
  failures += !ok;

  // 3. The data arrives while the receive is polling (copy on another stream;
  //    skipped under compute-sanitizer, which serializes the two).
  if (!late) return failures;
  CUstream s2;
  CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  void* pinned;
  CK(cuMemAllocHost(&pinned, n * 2));
  memcpy(pinned, data.data(), n * 2);
  fill32(slot.p, 0x80000000u, n / 2);
  fill32(status.p, 0, TPRUN_RECEIVE_STATUS_WORDS);
  fill16(out.p, kPoison, n);
  CK(cuCtxSynchronize());
  p.timeout_ns = 2000000000ull;
  CK(launch_receive(k, p, s));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CK(cuMemcpyHtoDAsync(slot.p, pinned, n * 2, s2));
  CK(cuStreamSynchronize(s));
  CK(cuStreamSynchronize(s2));
  CK(cuMemcpyDtoH(got.data(), out.p, n * 2));
  CK(cuMemcpyDtoH(st.data(), status.p, st.size() * 4));
  ok = got == data && rearmed() && st[0] == 0;
  printf("check receive late arrival: %s\n", ok ? "ok" : "FAIL");
  failures += !ok;
  CK(cuMemFreeHost(pinned));
  CK(cuStreamDestroy(s2));
  if (!(flags & TPRUN_RECEIVE_ABORTABLE)) return failures;

  // 4. Two words never arrive, the deadline is 10 s, the status page is
  //    host-mapped, and the host sets the abort word after 20 ms: the
  //    receive ends soon after, reporting as on a timeout.
  void* hst;
  CK(cuMemHostAlloc(&hst, 4096, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE));
  memset(hst, 0, 4096);
  CUdeviceptr dev_status;
  CK(cuMemHostGetDevicePointer(&dev_status, hst, 0));
  CK(cuMemcpyHtoD(slot.p, partial.data(), n * 2));
  fill16(out.p, kPoison, n);
  CK(cuCtxSynchronize());
  tprun_receive_params q = p;
  q.status = dev_status;
  q.timeout_ns = 10000000000ull;
  auto a0 = std::chrono::steady_clock::now();
  CK(launch_receive(k, q, s));
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  reinterpret_cast<volatile uint32_t*>(hst)[TPRUN_RECEIVE_ABORT_WORD] = 1;
  CK(cuStreamSynchronize(s));
  double ams = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - a0).count();
  const volatile uint32_t* hs = reinterpret_cast<const volatile uint32_t*>(hst);
  ok = ams < 1000 && hs[0] == 1 && hs[1 + 0] == 1 && hs[1 + 2] == 1 && hs[1 + 1] == 0;
  printf("check receive abort word: %s (ended %.1f ms after the launch, abort set at 20 ms)\n", ok ? "ok" : "FAIL", ams);
  failures += !ok;
  CK(cuMemFreeHost(hst));
  return failures;
}

// The fused receive (recv_slot): rank 1 of 2 computes its slice into the
// local slot, where rank 0's slice is already waiting (or, in the second
// case, one word of it never arrives); the kernel must deliver the whole
// block to out, re-arm the slot, and report rank 0 on the timeout.
// The parameter block of the small cases: rank's columns of a [M][hidden]
// shared tensor, no destinations yet.
tprun_skinny_params small_params(const DevBuf& dl, const DevBuf& dw, const DevBuf& dsh, int K, int shard, int hidden,
                                 int rank) {
  tprun_skinny_params p;
  memset(&p, 0, sizeof p);
  p.latent = dl.p;
  p.weight = dw.p;
  p.shared = dsh.p + (size_t)rank * shard * 2;
  p.latent_dim = K;
  p.shard = shard;
  p.hidden = hidden;
  p.rank = rank;
  p.shared_stride = hidden;
  return p;
}

int check_fused(const Kernels& k, Rng& rng, CUstream s, int M, int shard, int K, const DevBuf& dl, const DevBuf& dw,
                const DevBuf& dsh, const std::vector<uint16_t>& sh, const Ref& ref) {
  const int tp = 2, rank = 1, hidden = tp * shard;
  const size_t n = (size_t)M * hidden;
  std::vector<uint16_t> peer(n);
  fill_bf16(peer, rng, -4.f, 4.f);
  for (auto& x : peer)
    if (x == 0x8000) x = 0;
  DevBuf slot(n * 2), out(n * 2), status(64 * 4);
  int fails = 0;
  for (const Cfg& cfg : {Cfg{16, 8, 0, 4, 1}, Cfg{32, 4, 0, 2, 3}})
  for (int missing : {0, 1}) {
    // Slot: rank 0's columns hold peer data, rank 1's the sentinel.
    std::vector<uint16_t> init(n);
    for (int m = 0; m < M; ++m)
      for (int c = 0; c < hidden; ++c) {
        const bool own = c >= rank * shard;
        init[(size_t)m * hidden + c] = own ? (c % 2 ? 0x8000 : 0x0000) : peer[(size_t)m * hidden + c];
      }
    if (missing) {  // one word of rank 0's slice in the last row never arrives
      init[(size_t)(M - 1) * hidden + 10] = 0x0000;
      init[(size_t)(M - 1) * hidden + 11] = 0x8000;
    }
    CK(cuMemcpyHtoD(slot.p, init.data(), n * 2));
    fill16(out.p, kPoison, n);
    fill32(status.p, 0, 64);
    tprun_skinny_params p = small_params(dl, dw, dsh, K, shard, hidden, rank);
    p.dst[0] = slot.p;
    p.ndst = 1;
    p.recv_slot = slot.p;
    p.recv_out = out.p;
    p.recv_status = status.p;
    p.recv_timeout_ns = missing ? 2000000ull : 2000000000ull;
    p.recv_flags = TPRUN_RECEIVE_ABORTABLE;
    CK(launch_skinny(k, M, p, cfg, s, true));
    CK(cuStreamSynchronize(s));
    std::vector<uint16_t> got(n);
    std::vector<uint32_t> st(64), left(n / 2);
    CK(cuMemcpyDtoH(got.data(), out.p, n * 2));
    CK(cuMemcpyDtoH(st.data(), status.p, 64 * 4));
    CK(cuMemcpyDtoH(left.data(), slot.p, n * 2));
    // Rank 1's columns: the computed slice; rank 0's: the peer data (minus
    // the missing vector, which stays poison and stays in the slot).
    std::vector<uint16_t> mine(n, kPoison);
    for (int m = 0; m < M; ++m)
      for (int c = rank * shard; c < hidden; ++c) mine[(size_t)m * hidden + c] = got[(size_t)m * hidden + c];
    const std::vector<uint16_t> shs(sh.begin() + (size_t)rank * shard, sh.end());
    Verdict v = verify(mine, M, shard, hidden, rank, ref, shs, hidden);
    bool ok = v.ok;
    size_t peer_ok = 0, peer_poison = 0, armed = 0;
    for (int m = 0; m < M; ++m)
      for (int c = 0; c < rank * shard; ++c) {
        const size_t i = (size_t)m * hidden + c;
        peer_ok += got[i] == peer[i];
        peer_poison += got[i] == kPoison;
      }
    for (uint32_t w : left) armed += w == 0x80000000u;
    const size_t peer_n = (size_t)M * rank * shard;
    if (missing) {
      ok = ok && st[0] == 1 && st[1] == 1 && st[2] == 0 && peer_ok == peer_n - 8 && peer_poison == 8 && armed == n / 2 - 3;
    } else {
      ok = ok && st[0] == 0 && st[1] == 0 && peer_ok == peer_n && armed == n / 2;
    }
    printf("check fused receive, cfg %s%s: %s (%s; peer copied %zu of %zu, slot words re-armed %zu of %zu, status %u/%u/%u)\n",
           cfg.str().c_str(), missing ? ", a peer word missing" : "", ok ? "ok" : "FAIL", v.ok ? "own slice ok" : v.why.c_str(), peer_ok,
           peer_n, armed, n / 2, st[0], st[1], st[2]);
    fails += !ok;
  }
  return fails;
}

// One small case of every config in cfgs for M rows: partial tiles, a K
// tail, buffers of exactly the sizes skinny.h names (so that compute-sanitizer
// sees any access past them, e.g. a row >= M of the entry points that run
// the code of more rows: M = 1 the M = 2 code, "_t32pw" the M = 8 code).
int small_m(const Kernels& k, Rng& rng, CUstream s, int M, std::initializer_list<Cfg> cfgs) {
  const int shard = 200, K = 3600, tp = 2, rank = 1, hidden = tp * shard;
  std::vector<uint16_t> lat((size_t)M * K), w((size_t)shard * K), sh((size_t)M * hidden);
  fill_bf16(lat, rng, -1, 1);
  fill_bf16(w, rng, -1, 1);
  fill_bf16(sh, rng, -16, 16);
  Ref ref = reference(M, shard, K, lat, w);
  const std::vector<uint16_t> wpk = pack_weight(w, shard, K);
  DevBuf dl(lat.size() * 2), dw(w.size() * 2), dwp(wpk.size() * 2), dsh(sh.size() * 2), o0((size_t)M * hidden * 2),
      o1((size_t)M * hidden * 2);
  CK(cuMemcpyHtoD(dl.p, lat.data(), dl.bytes));
  CK(cuMemcpyHtoD(dw.p, w.data(), dw.bytes));
  CK(cuMemcpyHtoD(dwp.p, wpk.data(), dwp.bytes));
  CK(cuMemcpyHtoD(dsh.p, sh.data(), dsh.bytes));
  int fails = 0;
  for (const Cfg& c : cfgs) {
    fill16(o0.p, kPoison, (size_t)M * hidden);
    fill16(o1.p, kPoison, (size_t)M * hidden);
    tprun_skinny_params p = small_params(dl, c.packed ? dwp : dw, dsh, K, shard, hidden, rank);
    p.dst[0] = o0.p;
    p.dst[1] = o1.p;
    p.ndst = 2;
    CK(launch_skinny(k, M, p, c, s, true));
    CK(cuStreamSynchronize(s));
    std::vector<uint16_t> out((size_t)M * hidden);
    CK(cuMemcpyDtoH(out.data(), o1.p, out.size() * 2));
    const std::vector<uint16_t> shs(sh.begin() + (size_t)rank * shard, sh.end());
    Verdict v = verify(out, M, shard, hidden, rank, ref, shs, hidden);
    printf("small skinny M=%d cfg %s: %s %s\n", M, c.str().c_str(), v.ok ? "ok" : "FAIL", v.why.c_str());
    fails += !v.ok;
  }
  if (M == 3) fails += check_fused(k, rng, s, M, shard, K, dl, dw, dsh, sh, ref);
  return fails;
}

// The small cases of every kernel, for compute-sanitizer: M = 3 over many
// geometries (a cluster, staging, the slab, prefetch plans, packed), M = 1
// and 2 over the warp-per-vector epilogue and the M = 1-as-M = 2 entries,
// M = 5 and 7 over the wide ("_t32pw") entries; the step's "_t32pn" in
// clusters of 4 at M 1-3, 5 and 7, and without a cluster at M 3.
int small(const Kernels& k, Rng& rng, CUstream s) {
  int fails = small_m(k, rng, s, 3,
                      {Cfg{32, 4, 0, 4, 3}, Cfg{16, 4, 0, 2, 1}, Cfg{16, 8, 0, 2, 2}, Cfg{16, 8, 1, 4, 3}, Cfg{32, 4, 1, 2, 1},
                       Cfg{16, 0, 2, 4, 3}, Cfg{16, 0, 2, 1, 1}, Cfg{16, 8, 0, 2, 1, 3 | (16 << 16) | (1 << 24)},
                       Cfg{32, 4, 0, 2, 2, 1 | (5 << 16)}, Cfg{16, 8, 0, 2, 2, 0, 1}, Cfg{32, 4, 0, 4, 3, 0, 1},
                       Cfg{16, 8, 1, 4, 1, 0, 1}, Cfg{16, 8, 0, 2, 1, 3 | (16 << 16) | (1 << 24), 1},
                       Cfg{16, 8, 0, 2, 1, 3 | (16 << 16) | (3 << 24), 1}, Cfg{32, 4, 0, 4, 1, 2 | (8 << 16) | (2 << 24)},
                       Cfg{16, 8, 3, 4, 3, 0, 1}, Cfg{16, 8, 3, 2, 1, 0, 1}, Cfg{32, 4, 4, 4, 3, 0, 1},
                       Cfg{32, 4, 4, 16, 2, 0, 1}, Cfg{32, 4, 5, 4, 4, 0, 1}, Cfg{32, 4, 5, 2, 1, 0, 1}});
  for (int M : {1, 2})
    fails += small_m(k, rng, s, M,
                     {Cfg{16, 8, 0, 4, 1}, Cfg{16, 8, 1, 4, 1, 0, 1}, Cfg{32, 4, 0, 4, 1, 0, 1}, Cfg{16, 8, 0, 16, 1, 0, 1},
                      Cfg{16, 4, 0, 2, 1}, Cfg{16, 0, 2, 4, 1}, Cfg{16, 8, 0, 2, 3, 0, 1}, Cfg{16, 8, 3, 16, 1, 0, 1},
                      Cfg{32, 4, 4, 16, 2, 0, 1}, Cfg{32, 4, 5, 4, 4, 0, 1}});
  // The wide entry points ("_t32pw": the M = 8 code) where rows M..7 exist
  // in the code but not in the buffers.
  for (int M : {5, 7})
    fails += small_m(k, rng, s, M, {Cfg{32, 4, 4, 16, 2, 0, 1}, Cfg{32, 4, 4, 4, 1, 0, 1}, Cfg{32, 4, 5, 4, 4, 0, 1}});
  fails += check_receive(k, rng, s, false);
  fails += check_receive(k, rng, s, false, TPRUN_RECEIVE_ABORTABLE);
  return fails;
}

// ---------------------------------------------------------------- timing

struct Timer {
  CUevent a, b;
  Timer() {
    CK(cuEventCreate(&a, CU_EVENT_DEFAULT));
    CK(cuEventCreate(&b, CU_EVENT_DEFAULT));
  }
  ~Timer() {
    cuEventDestroy(a);
    cuEventDestroy(b);
  }
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double copy_bandwidth(CUstream s) {
  const size_t bytes = 1ull << 30;
  DevBuf a(bytes), b(bytes);
  fill32(a.p, 0x3f803f80u, bytes / 4);
  Timer t;
  std::vector<double> v;
  for (int i = 0; i < 12; ++i) {
    CK(cuEventRecord(t.a, s));
    CK(cuMemcpyDtoDAsync(b.p, a.p, bytes, s));
    CK(cuEventRecord(t.b, s));
    CK(cuEventSynchronize(t.b));
    float ms;
    CK(cuEventElapsedTime(&ms, t.a, t.b));
    if (i >= 2) v.push_back(2.0 * bytes / (ms * 1e-3));
  }
  return median(v);  // bytes/s, read plus write
}

// Weights for one (shard, latent): at least 512 MiB of distinct buffers so
// that a replayed graph reads every weight from HBM, not from the 60 MiB L2.
struct Pool {
  int shard, K, nbuf;
  size_t stride;
  DevBuf* buf;
  Pool(int shard_, int K_, Rng& rng) : shard(shard_), K(K_) {
    // Room for either layout: the packed one pads rows to 16 and k to 32.
    const size_t packed = (size_t)((shard + 15) / 16) * ((K + 31) / 32) * 1024;
    size_t wb = std::max((size_t)shard * K * 2, packed);
    stride = (wb + 255) / 256 * 256;
    nbuf = (int)std::max<size_t>(2, ((512ull << 20) + wb - 1) / wb);
    if (const char* e = getenv("HARNESS_NBUF")) nbuf = std::max(1, atoi(e));  // experiment: 1 = L2-resident
    buf = new DevBuf(stride * nbuf);
    std::vector<uint16_t> chunk(32ull << 20);  // 64 MiB of random bf16, copied round
    fill_bf16(chunk, rng, -1, 1);
    for (size_t off = 0; off < buf->bytes; off += chunk.size() * 2)
      CK(cuMemcpyHtoD(buf->p + off, chunk.data(), std::min(chunk.size() * 2, buf->bytes - off)));
  }
  ~Pool() { delete buf; }
  size_t weight_bytes() const { return (size_t)shard * K * 2; }
};

struct Acts {
  DevBuf lat, sh, out;
  Acts(int K, int hidden, Rng& rng) : lat((size_t)8 * K * 2), sh((size_t)8 * hidden * 2), out((size_t)8 * hidden * 2) {
    std::vector<uint16_t> l((size_t)8 * K), h((size_t)8 * hidden);
    fill_bf16(l, rng, -1, 1);
    fill_bf16(h, rng, -16, 16);
    CK(cuMemcpyHtoD(lat.p, l.data(), lat.bytes));
    CK(cuMemcpyHtoD(sh.p, h.data(), sh.bytes));
  }
};

// Instantiates g (L launches), replays it reps + 2 times (the first two
// warm up), destroys it, and returns the median time per launch in µs.
double replay_median(CUgraph g, int L, int reps, CUstream s) {
  CUgraphExec ge;
  CK(cuGraphInstantiate(&ge, g, 0));
  Timer t;
  std::vector<double> v;
  for (int i = 0; i < reps + 2; ++i) {
    CK(cuEventRecord(t.a, s));
    CK(cuGraphLaunch(ge, s));
    CK(cuEventRecord(t.b, s));
    CK(cuEventSynchronize(t.b));
    float ms;
    CK(cuEventElapsedTime(&ms, t.a, t.b));
    if (i >= 2) v.push_back(ms * 1e3 / L);
  }
  CK(cuGraphExecDestroy(ge));
  CK(cuGraphDestroy(g));
  return median(v);
}

// Trace mode (a fatbin built with -DTPRUN_TRACE): when g_trace is set,
// time_skinny also replays its graph once with the kernel's trace buffer
// cleared and writes one line per CTA record (skinny.cu, Trace).
FILE* g_trace = nullptr;
struct TraceRec {
  unsigned long long g[7];
  unsigned c[7];
  unsigned smid, blk, wlo, nctas;
};
void trace_graph(const Kernels& k, CUgraph g, int M, int shard, const Cfg& c, CUstream s) {
  CUdeviceptr n_p, buf_p;
  size_t n_b, buf_b;
  if (cuModuleGetGlobal(&n_p, &n_b, k.mod, "tprun_trace_n") != CUDA_SUCCESS ||
      cuModuleGetGlobal(&buf_p, &buf_b, k.mod, "tprun_trace_buf") != CUDA_SUCCESS) {
    fprintf(stderr, "trace: this fatbin was not built with -DTPRUN_TRACE\n");
    exit(2);
  }
  CUgraphExec ge;
  CK(cuGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; ++i) CK(cuGraphLaunch(ge, s));
  CK(cuStreamSynchronize(s));
  CK(cuMemsetD32Async(n_p, 0, 1, s));  // on s: ordered before the traced replay
  CK(cuGraphLaunch(ge, s));
  CK(cuStreamSynchronize(s));
  unsigned n = 0;
  CK(cuMemcpyDtoH(&n, n_p, 4));
  n = std::min<unsigned>(n, (unsigned)(buf_b / sizeof(TraceRec)));
  std::vector<TraceRec> v(n);
  if (n) CK(cuMemcpyDtoH(v.data(), buf_p, n * sizeof(TraceRec)));
  CK(cuGraphExecDestroy(ge));
  for (const TraceRec& r : v)
    fprintf(g_trace, "%d\t%d\t%s\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%llu\t%u\t%u\t%u\t%u\t%u\t%u\t%u\t%u\t%u\t%u\n",
            shard, M, c.str().c_str(), r.g[0], r.g[1], r.g[2], r.g[3], r.g[4], r.g[5], r.g[6], r.c[1], r.c[2], r.c[3],
            r.c[4], r.c[5], r.c[6], r.smid, r.blk, r.wlo, r.nctas);
  fflush(g_trace);
}

// Median time per launch (µs) of a captured graph of L launches rotating
// through the pool, or a negative value when the config cannot launch.
double time_skinny(const Kernels& k, const Pool& pool, const Acts& acts, int M, int hidden, const Cfg& c,
                   CUstream s, int reps, bool pdl = true) {
  const int shard = pool.shard, rank = hidden / shard - 1;
  tprun_skinny_params p;
  memset(&p, 0, sizeof p);
  p.latent = acts.lat.p;
  p.shared = acts.sh.p + (size_t)rank * shard * 2;
  p.dst[0] = acts.out.p;
  p.ndst = 1;
  p.latent_dim = pool.K;
  p.shard = shard;
  p.hidden = hidden;
  p.rank = rank;
  p.shared_stride = hidden;
  const int L = pool.nbuf * std::max(1, (96 + pool.nbuf - 1) / pool.nbuf);
  // Probe once outside capture: a config the GPU cannot schedule fails here.
  p.weight = pool.buf->p;
  CUresult r = launch_skinny(k, M, p, c, s, pdl);
  if (r == CUDA_SUCCESS) r = cuStreamSynchronize(s);
  if (r != CUDA_SUCCESS) {
    // NOT_FOUND: the entry point is not in this fatbin (load, launch_skinny).
    if (r != CUDA_ERROR_INVALID_VALUE && r != CUDA_ERROR_INVALID_CLUSTER_SIZE && r != CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES &&
        r != CUDA_ERROR_NOT_FOUND)
      die(r, "probe launch", __LINE__);
    return -1;
  }
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  for (int i = 0; i < L; ++i) {
    p.weight = pool.buf->p + (size_t)(i % pool.nbuf) * pool.stride;
    r = launch_skinny(k, M, p, c, s, pdl);
    if (r != CUDA_SUCCESS) break;
  }
  CUgraph g = nullptr;
  CUresult re = cuStreamEndCapture(s, &g);
  if (r != CUDA_SUCCESS || re != CUDA_SUCCESS) {
    if (g) cuGraphDestroy(g);
    fprintf(stderr, "capture failed: %s %s\n", errname(r), errname(re));
    return -1;
  }
  if (g_trace) trace_graph(k, g, M, shard, c, s);
  return replay_median(g, L, reps, s);
}

struct Shape {
  int latent, hidden, shard;
};

std::vector<Shape> bench_shapes() {
  std::vector<Shape> v;
  for (int shard : {7168, 3584, 1792, 896, 448}) v.push_back({3584, 7168, shard});
  v.push_back({1024, 4096, 1024});  // 4096/1024 at TP 4
  v.push_back({2048, 8192, 1024});  // 8192/2048 at TP 8
  return v;
}

// A comma-separated list of ints from the environment, or def.
std::vector<int> env_ints(const char* name, std::vector<int> def) {
  const char* e = getenv(name);
  if (!e || !*e) return def;
  std::vector<int> v;
  for (const char* q = e; *q;) {
    v.push_back(atoi(q));
    while (*q && *q != ',') ++q;
    if (*q == ',') ++q;
  }
  return v;
}

// Every launch config at the benchmark shapes, row-major and packed
// entry points; then, for the best configs of each layout, a few L2
// prefetch plans in the LSU form (skinny.h, TPRUN_PF_LSU), the
// load-balancing cluster policy, and the shared memory carveouts of
// HARNESS_CARVEOUTS (percent, default 65,80) on the six fastest of all and
// on the fastest of each geometry within 10 % of the best.
// HARNESS_SHARDS (latent-3584 shards only), HARNESS_LATENTS (only the
// shapes of these latent sizes), HARNESS_WARPS and
// HARNESS_CLUSTERS narrow or widen it (defaults: every benchmark shape,
// warps 4,8,16, clusters 1,2,4 from shard 896 up and 1,2,3,4,6,8 below).
int sweep(const Kernels& k, Rng& rng, CUstream s, const char* outpath) {
  const std::vector<int> only = env_ints("HARNESS_SHARDS", {});
  const std::vector<int> latents = env_ints("HARNESS_LATENTS", {});
  const std::vector<int> warps = env_ints("HARNESS_WARPS", {4, 8, 16});
  const std::vector<int> clusters = env_ints("HARNESS_CLUSTERS", {});
  FILE* f = fopen(outpath, "w");
  if (!f) {
    fprintf(stderr, "cannot write %s\n", outpath);
    return 1;
  }
  fprintf(f, "latent\tshard\tm\ttile_rows\tdepth\tstage\twarps\tcluster\tl2_prefetch\tpacked\tone\tcluster_policy\tcarveout\tus\n");
  auto row = [&](const Shape& sh, int M, const Cfg& c, double us) {
    fprintf(f, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\n", sh.latent, sh.shard, M, c.tile_rows,
            c.depth, c.stage, c.warps, c.cluster, c.pf, c.packed, c.one, c.policy, c.carveout, us);
  };
  // Carveouts tried on the fastest configs of each layout (HARNESS_CARVEOUTS;
  // 2026-11-30aj: 65 and 80 % took 0.03-0.2 µs off shard 896).
  const std::vector<int> carveouts = env_ints("HARNESS_CARVEOUTS", {65, 80});
  const int L = 1 << 25, O = 1 << 24;
  // 48.8l: the step sweep's pick at shard 3584 (bench/NOTES-kernel.md, 2026-11-30m).
  const int lsu_plans[] = {L | O,      L | 20 | (8 << 16), L | 40 | (8 << 16), L | 48 | (8 << 16),
                           L | 64 | (16 << 16), L | O | 40 | (16 << 16)};
  for (const Shape& sh : bench_shapes()) {
    if (!only.empty() && (sh.latent != 3584 || std::find(only.begin(), only.end(), sh.shard) == only.end())) continue;
    if (!latents.empty() && std::find(latents.begin(), latents.end(), sh.latent) == latents.end()) continue;
    Pool pool(sh.shard, sh.latent, rng);
    Acts acts(sh.latent, sh.hidden, rng);
    for (int M = 1; M <= 8; ++M) {
      std::vector<std::pair<double, Cfg>> timed[2];  // per layout: every config that ran, then sorted
      for (int pk : {0, 1})
        for (const Cfg& base : kVariants) {
          if (pk && (base.stage == 2 || (base.tile_rows == 16 && base.depth == 4))) continue;  // no packed twin
          if (base.variant() == 4) continue;  // "_s32": never fastest in the 2026-11-29 sweeps
          for (int w : warps)
            for (int c : {1, 2, 3, 4, 6, 8}) {
              if (w == 16 && base.variant() == 0) continue;
              if (clusters.empty() ? sh.shard >= 896 && (c == 3 || c == 6 || c == 8)
                                   : std::find(clusters.begin(), clusters.end(), c) == clusters.end())
                continue;
              Cfg cfg{base.tile_rows, base.depth, base.stage, w, c};
              cfg.packed = pk;
              // Times cfg in another form (one instance, another stage).
              auto time_form = [&](int one, int stage) {
                Cfg f = cfg;
                f.one = one;
                f.stage = stage;
                const double us = time_skinny(k, pool, acts, M, sh.hidden, f, s, 7);
                row(sh, M, f, us);
                if (us > 0) timed[pk].push_back({us, f});
              };
              // "_d8p" in both forms: two instances, and one ("_d8p1").
              time_form(0, base.stage);
              if (pk && base.variant() == 1) time_form(1, base.stage);
              // And reading the latent by whole lines ("_d8pl"), at M <= 4
              // only: at M 5-8 it ran 0.9-1.4 us slower than the table's
              // configs (bench/NOTES-kernel.md, 2026-11-30x).
              if (pk && base.variant() == 1 && M <= 4) time_form(0, 3);
              // And running the M = 8 code ("_t32pw") below M 8, where it
              // is not "_t32p" itself (2026-11-30ak: with an 80 % carveout,
              // 0.185-0.244 us faster at shard 896, M 2-6, 16/2).
              if (pk && base.variant() == 2 && M < 8) time_form(0, 4);
            }
        }
      // The plans on the three fastest configs of each layout: a plan can
      // turn a close second into the best (2026-11-30p: at shard 3584 M 3
      // the best without a plan was 16/8/g/4/2/p, and 32/4/g/4/4/pf48.8l/p
      // was 0.26 µs faster in an A/B of the same session).
      for (int pk : {0, 1}) {
        auto by_time = [](const std::pair<double, Cfg>& a, const std::pair<double, Cfg>& b) { return a.first < b.first; };
        std::stable_sort(timed[pk].begin(), timed[pk].end(), by_time);
        std::vector<std::pair<double, Cfg>> planned;
        for (size_t i = 0; i < timed[pk].size() && i < 3; ++i)
          for (int plan : lsu_plans) {
            Cfg cfg = timed[pk][i].second;
            if (cfg.stage == 2) break;
            cfg.pf = plan;
            const double us = time_skinny(k, pool, acts, M, sh.hidden, cfg, s, 7);
            row(sh, M, cfg, us);
            if (us > 0) planned.push_back({us, cfg});
          }
        // The load-balancing cluster scheduling policy on the four fastest
        // cluster configs, plans included (2026-11-30s: 0.2-0.37 µs off
        // 32/4/g/4/4/pf48.8l/p at shard 3584, but up to 0.4 µs slower on
        // 32/4/g/8/4/p at shard 896, M 5-8).
        planned.insert(planned.end(), timed[pk].begin(), timed[pk].end());
        std::stable_sort(planned.begin(), planned.end(), by_time);
        int tried = 0;
        std::vector<std::pair<double, Cfg>> policied;
        for (size_t i = 0; i < planned.size() && tried < 4; ++i) {
          Cfg cfg = planned[i].second;
          if (cfg.cluster < 2) continue;
          cfg.policy = 2;
          const double us = time_skinny(k, pool, acts, M, sh.hidden, cfg, s, 7);
          row(sh, M, cfg, us);
          if (us > 0) policied.push_back({us, cfg});
          ++tried;
        }
        // The shared memory carveouts on the six fastest of all of them,
        // and on the fastest of each geometry (entry point, warps,
        // cluster) within 10 % of the best: a carveout reorders them
        // (2026-11-30ak, shard 896 M 5: 32/4/w/16/2/p was 16th without
        // one and 0.1 us faster than all at 80 %).
        planned.insert(planned.end(), policied.begin(), policied.end());
        std::stable_sort(planned.begin(), planned.end(), by_time);
        std::vector<std::tuple<int, int, int>> geometries;
        for (size_t i = 0; i < planned.size(); ++i) {
          const Cfg& g = planned[i].second;
          const std::tuple<int, int, int> geo{g.variant(), g.warps, g.cluster};
          const bool seen = std::find(geometries.begin(), geometries.end(), geo) != geometries.end();
          if (i >= 6 && (seen || planned[i].first > 1.1 * planned[0].first)) continue;
          if (!seen) geometries.push_back(geo);
          for (int co : carveouts) {
            if (co < 1 || co > 100) continue;  // 0 is the default, timed above
            Cfg cfg = planned[i].second;
            cfg.carveout = co;
            row(sh, M, cfg, time_skinny(k, pool, acts, M, sh.hidden, cfg, s, 7));
          }
        }
      }
      fflush(f);
      auto best = [&](int pk) { return timed[pk].empty() ? std::make_pair(1e30, Cfg{}) : timed[pk].front(); };
      printf("sweep latent %d shard %d M %d: best row-major %.2f us with %s, packed %.2f us with %s\n", sh.latent,
             sh.shard, M, best(0).first, best(0).second.str().c_str(), best(1).first, best(1).second.str().c_str());
      fflush(stdout);
    }
  }
  fclose(f);
  return 0;
}

// The L2 prefetch sweep: for the shapes HARNESS_SHARDS (default 3584,896,7168,1792;
// latent 3584, hidden 7168) and M in HARNESS_MS (default 1..8), a few
// launch geometries, each with no prefetch and with a set of plans
// (helpers x sixteenths, every tile its own slab or not). Same TSV as sweep.
int pfsweep(const Kernels& k, Rng& rng, CUstream s, const char* outpath) {
  const std::vector<int> shards = env_ints("HARNESS_SHARDS", {3584, 896, 7168, 1792});
  const std::vector<int> ms = env_ints("HARNESS_MS", {1, 2, 3, 4, 5, 6, 7, 8});
  FILE* f = fopen(outpath, "w");
  if (!f) return 1;
  fprintf(f, "latent\tshard\tm\ttile_rows\tdepth\tstage\twarps\tcluster\tl2_prefetch\tpacked\tus\n");
  std::vector<int> plans = {0, 1 << 24};
  for (int h : {8, 16, 32, 64, 128})
    for (int s16 : {8, 16}) plans.push_back(h | (s16 << 16) | (1 << 24));
  for (int h : {16, 32, 64}) plans.push_back(h | (16 << 16));
  // Geometries per shard: the 2026-11-29 table's winners plus leaner ones
  // (fewer registers: more CTAs of the next kernel resident early).
  auto geos_for = [](int shard) -> std::vector<Cfg> {
    if (shard >= 7168) return {{16, 8, 0, 4, 1}, {32, 4, 0, 8, 1}, {16, 4, 0, 8, 1}, {16, 8, 0, 8, 1}};
    if (shard >= 3584) return {{16, 8, 1, 8, 1}, {16, 8, 0, 8, 1}, {16, 4, 0, 8, 1}, {16, 8, 0, 4, 1}, {16, 4, 0, 4, 1}};
    if (shard >= 1792) return {{16, 8, 0, 8, 1}, {16, 8, 0, 16, 1}, {16, 8, 0, 8, 2}, {32, 4, 0, 16, 2}, {16, 4, 0, 8, 1}};
    return {{16, 8, 1, 16, 1}, {16, 8, 0, 16, 1}, {32, 4, 0, 16, 2}, {16, 4, 0, 8, 1}, {16, 4, 0, 4, 1},
            {16, 8, 0, 8, 1}, {16, 8, 0, 8, 2}};
  };
  for (int shard : shards) {
    // Each geometry in both weight layouts where it has a packed twin
    // (16 rows depth 8 unstaged or staged, 32 rows depth 4 unstaged).
    std::vector<Cfg> geos;
    for (Cfg g : geos_for(shard)) {
      geos.push_back(g);
      if ((g.tile_rows == 16 && g.depth == 8 && g.stage < 2) || (g.tile_rows == 32 && g.depth == 4 && g.stage == 0)) {
        g.packed = 1;
        geos.push_back(g);
      }
    }
    Pool pool(shard, 3584, rng);
    Acts acts(3584, 7168, rng);
    for (int M : ms) {
      double best0 = 1e30, best = 1e30;
      Cfg b0{}, b{};
      for (const Cfg& g : geos)
        for (int pf : plans) {
          Cfg c = g;
          c.pf = pf;
          double us = time_skinny(k, pool, acts, M, 7168, c, s, 7);
          fprintf(f, "3584\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\n", shard, M, c.tile_rows, c.depth, c.stage,
                  c.warps, c.cluster, pf, c.packed, us);
          if (us <= 0) continue;
          if (pf == 0 && us < best0) best0 = us, b0 = c;
          if (us < best) best = us, b = c;
        }
      fflush(f);
      printf("pfsweep shard %d M %d: no prefetch best %.2f us (%s); best %.2f us (%s)\n", shard, M, best0,
             b0.str().c_str(), best, b.str().c_str());
      fflush(stdout);
    }
  }
  fclose(f);
  return 0;
}

// ---------------------------------------------------------------- read ceiling

// A kernel that only streams bytes, with the skinny kernel's dependency
// shape: it lets the next kernel launch, issues its first D 16-byte loads
// per thread, waits for the previous kernel (griddepcontrol.wait), then
// streams the rest of its contiguous share. What a chain of these costs per
// launch is the floor for any one-kernel-per-step design at that size.
template <int D>
__global__ void read_only(const uint4* base, long long vec_per_cta, unsigned* sink) {
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  const uint4* p = base + (long long)blockIdx.x * vec_per_cta;
  const long long stride = blockDim.x;
  uint32_t acc = 0;
  uint4 v[D];
  long long i = threadIdx.x;
#pragma unroll
  for (int u = 0; u < D; ++u) {
    const long long j = i + u * stride;
    v[u] = j < vec_per_cta ? __ldcs(p + j) : make_uint4(0, 0, 0, 0);
  }
  uint32_t nsm;
  asm volatile("mov.u32 %0, %%nsmid;" : "=r"(nsm));
  if (nsm != 0) asm volatile("griddepcontrol.wait;" ::: "memory");
  for (;;) {
#pragma unroll
    for (int u = 0; u < D; ++u) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    i += D * stride;
    if (i >= vec_per_cta) break;
#pragma unroll
    for (int u = 0; u < D; ++u) {
      const long long j = i + u * stride;
      v[u] = j < vec_per_cta ? __ldcs(p + j) : make_uint4(0, 0, 0, 0);
    }
  }
  if (acc == 0x9e3779b9u) sink[0] = acc;  // keeps the loads; practically never true
}

// Per-launch time of a graph of L read_only launches (PDL) over `bytes`
// each, rotating through >= 512 MiB.
double time_read(size_t bytes, int ctas, int threads, int depth, CUstream s) {
  const long long vpc = (long long)((bytes / 16 + ctas - 1) / ctas);
  const size_t stride = ((size_t)vpc * ctas * 16 + 255) / 256 * 256;
  const int nbuf = (int)std::max<size_t>(2, ((512ull << 20) + stride - 1) / stride);
  DevBuf buf(stride * nbuf), sink(256);
  fill32(buf.p, 0x3f803f80u, buf.bytes / 4);
  const int L = nbuf * std::max(1, (96 + nbuf - 1) / nbuf);
  auto launch = [&](int i) -> cudaError_t {
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t lc = {};
    lc.gridDim = dim3(ctas);
    lc.blockDim = dim3(threads);
    lc.stream = (cudaStream_t)s;
    lc.attrs = at;
    lc.numAttrs = 1;
    const uint4* b = reinterpret_cast<const uint4*>(buf.p + (size_t)(i % nbuf) * stride);
    unsigned* sk = reinterpret_cast<unsigned*>(sink.p);
    cudaError_t e = depth == 4 ? cudaLaunchKernelEx(&lc, read_only<4>, b, vpc, sk)
                  : depth == 8 ? cudaLaunchKernelEx(&lc, read_only<8>, b, vpc, sk)
                               : cudaLaunchKernelEx(&lc, read_only<16>, b, vpc, sk);
    return e;
  };
  if (launch(0) != cudaSuccess) {
    cudaGetLastError();
    return -1;  // too many registers for this block size
  }
  CK(cuStreamSynchronize(s));
  CK(cuStreamBeginCapture(s, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  for (int i = 0; i < L; ++i)
    if (launch(i) != cudaSuccess) {
      fprintf(stderr, "read_only launch failed in capture\n");
      exit(2);
    }
  CUgraph g;
  CK(cuStreamEndCapture(s, &g));
  return replay_median(g, L, 15, s);
}

int readbw(CUstream s) {
  const double bw = copy_bandwidth(s);
  printf("readbw: copy bandwidth (read+write) %.1f GB/s\n", bw / 1e9);
  // HARNESS_READ_SHARDS (weight rows of latent 3584), _CTAS, _THREADS and
  // _DEPTHS narrow or change the grid of the measurement.
  std::vector<size_t> sizes = {(size_t)3584 * 3584 * 2, (size_t)7168 * 3584 * 2, (size_t)896 * 3584 * 2,
                               (size_t)448 * 3584 * 2, (size_t)256 << 20};
  if (const char* e = getenv("HARNESS_READ_SHARDS"); e && *e) {
    sizes.clear();
    for (int r : env_ints("HARNESS_READ_SHARDS", {})) sizes.push_back((size_t)r * 3584 * 2);
  }
  const std::vector<int> ctas_l = env_ints("HARNESS_READ_CTAS", {132, 264, 528, 1056});
  const std::vector<int> threads_l = env_ints("HARNESS_READ_THREADS", {256, 512, 1024});
  const std::vector<int> depths_l = env_ints("HARNESS_READ_DEPTHS", {4, 8, 16});
  for (size_t bytes : sizes) {
    double best = 1e30;
    char bc[64] = "";
    for (int ctas : ctas_l)
      for (int threads : threads_l)
        for (int depth : depths_l) {
          if (depth != 4 && depth != 8 && depth != 16) continue;
          if ((long long)ctas * threads > 132 * 2048 * 2) continue;
          const double us = time_read(bytes, ctas, threads, depth, s);
          if (us < 0) continue;
          printf("readbw bytes %zu ctas %d threads %d depth %d: %.3f us, %.1f GB/s, %.3f x copy floor\n", bytes, ctas,
                 threads, depth, us, bytes / (us * 1e-6) / 1e9, us / (bytes / bw * 1e6));
          if (us < best) best = us, snprintf(bc, sizeof bc, "%d x %d, depth %d", ctas, threads, depth);
        }
    printf("readbw BEST bytes %zu (%.2f MB): %.3f us (%s), %.1f GB/s read, floor %.3f us, ratio %.3f\n", bytes,
           bytes / 1e6, best, bc, bytes / (best * 1e-6) / 1e9, bytes / bw * 1e6, best / (bytes / bw * 1e6));
    fflush(stdout);
  }
  return 0;
}

int bench(const Kernels& k, Rng& rng, CUstream s, const char* tablepath, const char* outpath) {
  std::map<std::tuple<int, int, int>, Cfg> table;
  FILE* tf = fopen(tablepath, "r");
  if (!tf) {
    fprintf(stderr, "cannot read %s\n", tablepath);
    return 1;
  }
  char line[256];
  while (fgets(line, sizeof line, tf)) {
    if (line[0] == '#') continue;
    // latent shard m tile_rows depth stage warps cluster [l2_prefetch [packed [one [cluster_policy [carveout]]]] median_us]:
    // 14 fields; 13 (no carveout column), 12 (no cluster_policy column), 11
    // (no one column), 10 (no packed column) or 8-9 (no l2_prefetch) in
    // older tables.
    std::vector<std::string> f;
    for (char* t = strtok(line, " \t\n"); t; t = strtok(nullptr, " \t\n")) f.push_back(t);
    if (f.empty()) continue;
    if (f.size() < 8 || f.size() > 14) {
      fprintf(stderr, "table %s: a line of %zu fields\n", tablepath, f.size());
      return 1;
    }
    int v[8];
    for (int i = 0; i < 8; ++i) v[i] = atoi(f[i].c_str());
    Cfg cfg{v[3], v[4], v[5], v[6], v[7], f.size() >= 10 ? atoi(f[8].c_str()) : 0};
    cfg.packed = f.size() >= 11 ? atoi(f[9].c_str()) : 0;
    cfg.one = f.size() >= 12 ? atoi(f[10].c_str()) : 0;
    cfg.policy = f.size() >= 13 ? atoi(f[11].c_str()) : 0;
    cfg.carveout = f.size() == 14 ? atoi(f[12].c_str()) : 0;
    if (!cfg.exists() || (cfg.packed != 0 && cfg.packed != 1) || (cfg.one != 0 && cfg.one != 1)) {
      fprintf(stderr, "table %s: no entry point for %s\n", tablepath, cfg.str().c_str());
      return 1;
    }
    table[{v[0], v[1], v[2]}] = cfg;
  }
  fclose(tf);
  double bw0 = copy_bandwidth(s);
  FILE* f = fopen(outpath, "w");
  if (!f) return 1;
  fprintf(f, "# copy bandwidth (read+write) %.1f GB/s\n", bw0 / 1e9);
  fprintf(f, "latent\thidden\tshard\tm\ttile_rows\tdepth\tstage\twarps\tcluster\tl2_prefetch\tpacked\tone\tcluster_policy\tcarveout\tours_us\tnopdl_us\tfloor_us\n");
  for (const Shape& sh : bench_shapes()) {
    Pool pool(sh.shard, sh.latent, rng);
    Acts acts(sh.latent, sh.hidden, rng);
    for (int M = 1; M <= 8; ++M) {
      auto it = table.find({sh.latent, sh.shard, M});
      if (it == table.end()) {
        printf("bench: no table entry for latent %d shard %d M %d\n", sh.latent, sh.shard, M);
        continue;
      }
      const Cfg c = it->second;
      double us = time_skinny(k, pool, acts, M, sh.hidden, c, s, 25);
      double us2 = time_skinny(k, pool, acts, M, sh.hidden, c, s, 25);
      double nopdl = time_skinny(k, pool, acts, M, sh.hidden, c, s, 15, false);
      double floor_us = pool.weight_bytes() / bw0 * 1e6;
      fprintf(f, "%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\n", sh.latent, sh.hidden,
              sh.shard, M, c.tile_rows, c.depth, c.stage, c.warps, c.cluster, c.pf, c.packed, c.one, c.policy,
              c.carveout, std::min(us, us2), nopdl, floor_us);
      printf("bench latent %d shard %d M %d cfg %s: %.2f us (repeat %.2f, no PDL %.2f), floor %.2f, ratio %.2f\n",
             sh.latent, sh.shard, M, c.str().c_str(), us, us2, nopdl, floor_us, us / floor_us);
      fflush(stdout);
    }
  }
  double bw1 = copy_bandwidth(s);
  fprintf(f, "# copy bandwidth after the runs %.1f GB/s\n", bw1 / 1e9);
  fclose(f);
  printf("copy bandwidth %.1f GB/s before, %.1f GB/s after\n", bw0 / 1e9, bw1 / 1e9);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: harness FATBIN check|small|sweep OUT|pfsweep OUT|bench TABLE OUT|readbw|trace OUT\n");
    return 2;
  }
  const std::string mode = argv[2];
  uint64_t seed = (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
  if (const char* e = getenv("HARNESS_SEED")) seed = strtoull(e, nullptr, 0);
  printf("seed %" PRIu64 "\n", seed);
  Rng rng{seed};
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  char name[256];
  CK(cuDeviceGetName(name, sizeof name, dev));
  int sms, major, minor;
  CK(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev));
  CK(cuDeviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
  CK(cuDeviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, dev));
  printf("device %s, cc %d.%d, %d SMs\n", name, major, minor, sms);
  Kernels k = load(argv[1]);
  {
    int regs = 0, lsize = 0;
    for (int v = 0; v < kNumVariants; ++v) {
      if (!k.skinny[8][v]) continue;  // not in this fatbin (load said so)
      CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, k.skinny[8][v]));
      CK(cuFuncGetAttribute(&lsize, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, k.skinny[8][v]));
      printf("tprun_skinny_m8%s: %d registers, %d bytes local\n", kSuffix[v], regs, lsize);
    }
  }
  CUstream s;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  int rc = 0;
  if (mode == "check") {
    int f = check_negzero(k, s);
    f += check_receive(k, rng, s);
    f += check_receive(k, rng, s, true, TPRUN_RECEIVE_ABORTABLE);
    f += check_skinny(k, rng, s);
    f += small(k, rng, s);  // includes the fused receive
    printf("CHECK %s: %d failures\n", f ? "FAILED" : "PASSED", f);
    rc = f ? 1 : 0;
  } else if (mode == "small") {
    int f = small(k, rng, s);
    printf("SMALL %s\n", f ? "FAILED" : "PASSED");
    rc = f ? 1 : 0;
  } else if (mode == "sweep" && argc >= 4) {
    rc = sweep(k, rng, s, argv[3]);
  } else if (mode == "pfsweep" && argc >= 4) {
    rc = pfsweep(k, rng, s, argv[3]);
  } else if (mode == "trace" && argc >= 4) {
    // Per-CTA timelines of a few configs (a -DTPRUN_TRACE fatbin), for
    // scripts/kernel-harness/trace_report.py.
    g_trace = fopen(argv[3], "w");
    if (!g_trace) return 1;
    fprintf(g_trace, "shard\tm\tcfg\tg0\tg1\tg2\tg3\tg4\tg5\tg6\tc1\tc2\tc3\tc4\tc5\tc6\tsmid\tblk\twlo\tnctas\n");
    // HARNESS_TRACE (the `ab` group format) picks the configs; without it, a
    // fixed set at shards 3584 and 896.
    std::vector<Group> gs;
    if (const char* spec = getenv("HARNESS_TRACE")) {
      if (!parse_groups(spec, &gs)) return 2;
    } else {
      const Cfg d8{16, 8, 0, 8, 1, 0, 1}, w16{16, 8, 0, 16, 1, 0, 1}, t32{32, 4, 0, 8, 4, 0, 1};
      gs = {{3584, {2, 8}, {d8}}, {896, {2, 3}, {w16}}, {896, {3, 8}, {t32}}, {896, {8}, {w16}}};
    }
    for (const Group& gr : gs) {
      Pool pool(gr.shard, 3584, rng);
      Acts acts(3584, 7168, rng);
      for (int M : gr.ms)
        for (const Cfg& c : gr.cfgs) {
          const double us = time_skinny(k, pool, acts, M, 7168, c, s, 7);
          printf("trace shard %d M %d %s: %.3f us per launch\n", gr.shard, M, c.str().c_str(), us);
          fflush(stdout);
        }
    }
    fclose(g_trace);
    g_trace = nullptr;
  } else if (mode == "ab") {
    // Interleaved A/B on one GPU: HARNESS_AB = "SHARD:M,M,...:CFG,CFG,...;..."
    // (CFG as the sweep prints it, e.g. 16/8/g/8/1/p); every config of a
    // group is timed in turn, HARNESS_AB_REPS rounds (default 5), so that
    // drift hits them alike.
    const char* spec = getenv("HARNESS_AB");
    if (!spec) {
      fprintf(stderr, "ab: set HARNESS_AB\n");
      return 2;
    }
    const int reps = std::max(1, env_ints("HARNESS_AB_REPS", {5})[0]);
    std::vector<Group> gs;
    if (!parse_groups(spec, &gs)) return 2;
    for (const Group& gr : gs) {
      const int shard = gr.shard;
      const std::vector<Cfg>& cs = gr.cfgs;
      Pool pool(shard, 3584, rng);
      Acts acts(3584, 7168, rng);
      for (int M : gr.ms) {
        std::vector<std::vector<double>> t(cs.size());
        for (int r = 0; r < reps; ++r)
          for (size_t i = 0; i < cs.size(); ++i) {
            const double us = time_skinny(k, pool, acts, M, 7168, cs[i], s, 7);
            if (us > 0) t[i].push_back(us);  // <= 0: the config cannot launch here
          }
        for (size_t i = 0; i < cs.size(); ++i) {
          if (t[i].empty()) {
            printf("ab shard %d M %d %-22s cannot launch\n", shard, M, cs[i].str().c_str());
            continue;
          }
          std::string all;
          char b[16];
          for (double x : t[i]) snprintf(b, sizeof b, " %.3f", x), all += b;
          printf("ab shard %d M %d %-22s median %.3f us (%s)\n", shard, M, cs[i].str().c_str(), median(t[i]),
                 all.c_str() + 1);
        }
        fflush(stdout);
      }
    }
  } else if (mode == "readbw") {
    rc = readbw(s);
  } else if (mode == "bench" && argc >= 5) {
    rc = bench(k, rng, s, argv[3], argv[4]);
  } else {
    fprintf(stderr, "unknown mode %s\n", mode.c_str());
    return 2;
  }
  CK(cuStreamDestroy(s));
  CK(cuModuleUnload(k.mod));
  CK(cuDevicePrimaryCtxRelease(dev));
  return rc;
}
