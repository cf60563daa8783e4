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
//   harness FATBIN ab                  interleaved A/B of configs (HARNESS_AB)
// The entry point families are read from kernel/families.tsv (the spec the
// Go package and scripts/build-kernels read; HARNESS_FAMILIES names another
// file); a config is written family/warps/cluster[/pfH.S[o][l]][/sp|/lb][/coN]
// (scripts/kernel-harness/cfgname.py). HARNESS_NBUF=1 makes every timed
// launch read the same weight (L2-resident when it fits): the kernel's cost
// without HBM.
//
// The launch parameters (entry point, grid, block, dynamic shared memory,
// cluster, receive CTAs) and the packed weight layout are the Go kernel
// package's: scripts/kernel-harness/launchparams answers them (goside.h;
// HARNESS_LAUNCHPARAMS names the binary, default build/launchparams), so
// the harness launches exactly what kernel.Kernels would for a config.
//
// A developer tool, not part of the product (scripts/kernel-harness/README.md).
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
#include "goside.h"

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

// The Go side (main starts it before cuInit).
goside::Link* g_go = nullptr;

// ---------------------------------------------------------------- families

// One row of kernel/families.tsv: the compile-time options of an entry
// point family (skinny.cu, Family) that the harness's choice of configs
// needs (the launch geometry is the Go side's).
struct Family {
  std::string name;
  int tile_rows = 0, depth = 0;
  bool lines = false, wide = false, one = false, l2only = false;
  int max_warps = 0;
};
std::vector<Family> g_fam;

// Reads the family spec: comment lines (#), the header row, then one
// tab-separated row per family. Exits on anything else.
void load_families(const char* path) {
  FILE* f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "cannot read the family spec %s\n", path);
    exit(2);
  }
  char line[512];
  bool header = false;
  while (fgets(line, sizeof line, f)) {
    std::string l(line);
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
    if (l.empty() || l[0] == '#') continue;
    if (!header) {
      if (l != "family\ttile_rows\tdepth\tlatent\twide\tone\tl2only\twarps") {
        fprintf(stderr, "%s: unexpected header %s\n", path, l.c_str());
        exit(2);
      }
      header = true;
      continue;
    }
    std::vector<std::string> c;
    std::stringstream q(l);
    for (std::string t; std::getline(q, t, '\t');) c.push_back(t);
    if (c.size() != 8 || (c[3] != "ring" && c[3] != "lines")) {
      fprintf(stderr, "%s: cannot read row %s\n", path, l.c_str());
      exit(2);
    }
    Family fam;
    fam.name = c[0];
    fam.tile_rows = atoi(c[1].c_str());
    fam.depth = atoi(c[2].c_str());
    fam.lines = c[3] == "lines";
    fam.wide = c[4] == "1";
    fam.one = c[5] == "1";
    fam.l2only = c[6] == "1";
    fam.max_warps = atoi(c[7].c_str());
    g_fam.push_back(fam);
  }
  fclose(f);
  if (g_fam.empty()) {
    fprintf(stderr, "%s: no families\n", path);
    exit(2);
  }
}

// The index of the family of that name, or -1.
int family_index(const std::string& name) {
  for (size_t i = 0; i < g_fam.size(); ++i)
    if (g_fam[i].name == name) return (int)i;
  return -1;
}

// ---------------------------------------------------------------- module

struct Kernels {
  CUmodule mod{};
  std::string path;
  // Entry points by name (the Go side's), looked up on first use; nullptr:
  // not in this fatbin.
  mutable std::map<std::string, CUfunction> fns;
  CUfunction fn(const std::string& name) const {
    auto it = fns.find(name);
    if (it != fns.end()) return it->second;
    // A fatbin built before a family (or the rotation) existed lacks it:
    // time_skinny then reports its configs as unable to launch, and the
    // other configs of a run still time.
    CUfunction f = nullptr;
    const CUresult r = cuModuleGetFunction(&f, mod, name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) {
      fprintf(stderr, "note: %s has no %s\n", path.c_str(), name.c_str());
      f = nullptr;
    } else {
      CK(r);
    }
    return fns[name] = f;
  }
};

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
  k.path = path;
  CK(cuModuleLoadData(&k.mod, bytes.data()));
  return k;
}

// ---------------------------------------------------------------- launch

// A launch config: the family, warps per CTA, CTAs per cluster (the K
// split) and the three hints of kernel.LaunchConfig.
struct Cfg {
  Cfg() {}  // not an aggregate: a config is made by make_cfg or field by field
  int fam = 0, warps = 0, cluster = 0;
  int pf = 0;        // tprun_skinny_params.l2_prefetch
  int policy = 0;    // cluster scheduling policy preference (CUclusterSchedulingPolicy; 2: load balancing)
  int carveout = 0;  // preferred shared memory carveout, percent (0: the driver's)
  const Family& f() const { return g_fam[fam]; }
  // The launch of this config for M rows of a shard x latent weight, with
  // a fused receive polling recv_cols columns a row (0: none): the Go
  // side's, which says why when the kernel package refuses the config.
  goside::Skinny launch(int M, int shard, int latent, int recv_cols = 0) const {
    return g_go->skinny(M, shard, latent, f().name, warps, cluster, pf, policy, carveout, recv_cols);
  }
  std::string str() const {
    char b[128];
    int n = snprintf(b, sizeof b, "%s/%d/%d", f().name.c_str(), warps, cluster);
    if (pf)
      n += snprintf(b + n, sizeof b - n, "/pf%d.%d%s%s", TPRUN_PF_HELPERS(pf), TPRUN_PF_SIXTEENTHS(pf),
                    TPRUN_PF_OWN(pf) ? "o" : "", TPRUN_PF_LSU(pf) ? "l" : "");
    if (policy == 1) n += snprintf(b + n, sizeof b - n, "/sp");
    if (policy == 2) n += snprintf(b + n, sizeof b - n, "/lb");
    if (carveout) snprintf(b + n, sizeof b - n, "/co%d", carveout);
    return b;
  }
};

// The config of family name (which must exist).
Cfg make_cfg(const char* name, int warps, int cluster, int pf = 0) {
  Cfg c;
  c.fam = family_index(name);
  if (c.fam < 0) {
    fprintf(stderr, "no family %s in the family spec\n", name);
    exit(2);
  }
  c.warps = warps;
  c.cluster = cluster;
  c.pf = pf;
  return c;
}

// Reads a config as Cfg::str() writes it. False when it is not one.
bool parse_cfg(const std::string& str, Cfg* out) {
  std::vector<std::string> f;
  std::stringstream q(str);
  for (std::string t; std::getline(q, t, '/');) f.push_back(t);
  if (f.size() < 3) return false;
  Cfg c;
  c.fam = family_index(f[0]);
  if (c.fam < 0) return false;
  c.warps = atoi(f[1].c_str());
  c.cluster = atoi(f[2].c_str());
  for (size_t i = 3; i < f.size(); ++i) {
    if (f[i] == "sp") {
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
  if (c.str() != str) return false;  // round trip: nothing was dropped (the Go side validates at launch)
  *out = c;
  return true;
}

// A group of the `ab` spec: "SHARD:M,M,...:CFG,CFG,..." (CFG as the sweep
// prints it, e.g. d8p/8/1); groups are separated by ';'.
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
      Cfg c;
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

CUresult launch_skinny(const Kernels& k, int M, tprun_skinny_params p, const Cfg& c, CUstream s,
                       bool pdl) {
  // A fused receive polls every column, or all but this rank's
  // (TPRUN_RECEIVE_SKIP; kernel.ReceiveArgs.SkipSlice).
  const int recv_cols = p.recv_slot == 0 ? 0 : (p.recv_flags & TPRUN_RECEIVE_SKIP) ? p.hidden - p.shard : p.hidden;
  const goside::Skinny g = c.launch(M, p.shard, p.latent_dim, recv_cols);
  if (!g.ok) {
    fprintf(stderr, "config %s, M %d shard %d latent %d: %s\n", c.str().c_str(), M, p.shard, p.latent_dim, g.why.c_str());
    return CUDA_ERROR_INVALID_VALUE;
  }
  p.tile_rows = g.tile_rows;
  p.l2_prefetch = g.l2_prefetch;
  p.flags = TPRUN_SKINNY_PACKED;
  CUlaunchAttribute at[4];
  memset(at, 0, sizeof at);
  int na = 0;
  at[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  at[na].value.clusterDim.x = (unsigned)g.cluster;
  at[na].value.clusterDim.y = 1;
  at[na].value.clusterDim.z = 1;
  ++na;
  if (g.policy != 0) {  // kernel.LaunchConfig.ClusterPolicy
    at[na].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    at[na].value.clusterSchedulingPolicyPreference = (CUclusterSchedulingPolicy)g.policy;
    ++na;
  }
  if (pdl) {
    at[na].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    at[na].value.programmaticStreamSerializationAllowed = 1;
    ++na;
  }
  if (g.carveout > 0) {  // kernel.LaunchConfig.Carveout
    // CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT (14), whose value
    // is CUlaunchAttributeValue.sharedMemCarveout at offset 0: spelled out so
    // that older cuda.h headers (12.4 here) compile it too;
    // internal/cuda's ABI test pins both against the real cuda.h.
    at[na].id = (CUlaunchAttributeID)14;
    const unsigned co = (unsigned)g.carveout;
    memcpy(&at[na].value, &co, sizeof co);
    ++na;
  }
  CUlaunchConfig lc;
  memset(&lc, 0, sizeof lc);
  lc.gridDimX = (unsigned)g.grid_x;  // with the receive CTAs of a fused receive
  lc.gridDimY = lc.gridDimZ = 1;
  lc.blockDimX = (unsigned)g.block_x;
  lc.blockDimY = lc.blockDimZ = 1;
  lc.sharedMemBytes = (unsigned)g.shared_bytes;
  lc.hStream = s;
  lc.attrs = at;
  lc.numAttrs = (unsigned)na;
  void* args[] = {&p};
  const CUfunction fn = k.fn(p.rot_counter != 0 ? g.rot_function : g.function);
  if (!fn) return CUDA_ERROR_NOT_FOUND;
  return cuLaunchKernelEx(&lc, fn, args, nullptr);
}

CUresult launch_receive(const Kernels& k, const tprun_receive_params& p, CUstream s) {
  const goside::Receive g = g_go->receive(p.m, (p.flags & TPRUN_RECEIVE_SKIP) ? p.hidden - p.shard : p.hidden);
  CUlaunchAttribute at[1];
  memset(at, 0, sizeof at);
  at[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  at[0].value.programmaticStreamSerializationAllowed = 1;
  CUlaunchConfig lc;
  memset(&lc, 0, sizeof lc);
  lc.gridDimX = (unsigned)g.grid_x;
  lc.gridDimY = lc.gridDimZ = 1;
  lc.blockDimX = (unsigned)g.block_x;
  lc.blockDimY = lc.blockDimZ = 1;
  lc.hStream = s;
  lc.attrs = at;
  lc.numAttrs = 1;
  tprun_receive_params q = p;
  void* args[] = {&q};
  const CUfunction fn = k.fn(p.rot_counter != 0 ? g.rot_function : g.function);
  if (!fn) return CUDA_ERROR_NOT_FOUND;
  return cuLaunchKernelEx(&lc, fn, args, nullptr);
}

// Every config the check covers; ConfigFor only returns configs from it
// (kernel/config_test.go, checkedWarps and checkedClusters).
std::vector<Cfg> all_configs() {
  std::vector<Cfg> v;
  for (size_t fi = 0; fi < g_fam.size(); ++fi)
    for (int w : {1, 2, 4, 8, 16}) {
      if (w > g_fam[fi].max_warps) continue;
      for (int c : {1, 2, 3, 4, 6, 8}) {
        Cfg q;
        q.fam = (int)fi;
        q.warps = w;
        q.cluster = c;
        v.push_back(q);
      }
    }
  return v;
}

// The family that differs from fam only in not taking L2-only loads, or -1:
// the two must give the same results bit for bit.
int plain_twin(int fam) {
  const Family& a = g_fam[fam];
  if (!a.l2only) return -1;
  for (size_t i = 0; i < g_fam.size(); ++i) {
    const Family& b = g_fam[i];
    if (!b.l2only && b.tile_rows == a.tile_rows && b.depth == a.depth && b.lines == a.lines && b.wide == a.wide &&
        b.one == a.one)
      return (int)i;
  }
  return -1;
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
// afterwards (a check failed once that way: "destination 3 of 4
// differs"). These wait for the fill.
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

std::vector<int> env_ints(const char* name, std::vector<int> def);

// HARNESS_MS (default 1..8) narrows the Ms, e.g. to a short check.
int check_skinny(const Kernels& k, Rng& rng, CUstream s) {
  const int shards[] = {448, 896, 1024, 1792, 3584, 7168};
  const int latents[] = {512, 1024, 2048, 3584, 3600};
  int failures = 0, shapes = 0;
  long long runs = 0, exact = 0, total = 0;
  double worst = 0, worst_rel = 0;
  for (int M : env_ints("HARNESS_MS", {1, 2, 3, 4, 5, 6, 7, 8})) {
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
        const std::vector<uint16_t> wpk = g_go->pack(w, shard, K);
        DevBuf dl(lat.size() * 2), dwp(wpk.size() * 2), dsh(sh.size() * 2);
        CK(cuMemcpyHtoD(dl.p, lat.data(), dl.bytes));
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
        p.weight = dwp.p;
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
          p.weight = dwp.p;
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
          // A family with L2-only loads differs from its plain twin only in
          // the latent and shared loads' cache operator: the same result
          // bit for bit.
          if (plain_twin(c.fam) >= 0) {
            const std::string first = ran;
            Cfg t = c;
            t.fam = plain_twin(c.fam);
            runs++;
            if (!run(t, 1, out2)) {
              failures++;
              continue;
            }
            if (out2 != out) {
              printf("FAIL M=%d shard=%d K=%d cfg=%s: not bit-identical to its plain twin %s\n", M, shard, K,
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
  const std::vector<uint16_t> wpk = g_go->pack(w, shard, K);
  DevBuf dl(lat.size() * 2), dw(wpk.size() * 2), dsh(sh.size() * 2), dout((size_t)M * hidden * 2);
  CK(cuMemcpyHtoD(dl.p, lat.data(), dl.bytes));
  CK(cuMemcpyHtoD(dw.p, wpk.data(), dw.bytes));
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
  CK(launch_skinny(k, M, p, make_cfg("d8p", 2, 1), s, false));
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
                                 int rank) {  // dw: the packed weight
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
  for (const Cfg& cfg : {make_cfg("d8p", 4, 1), make_cfg("t32p", 2, 3)})
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
  const std::vector<uint16_t> wpk = g_go->pack(w, shard, K);
  DevBuf dl(lat.size() * 2), dwp(wpk.size() * 2), dsh(sh.size() * 2), o0((size_t)M * hidden * 2),
      o1((size_t)M * hidden * 2);
  CK(cuMemcpyHtoD(dl.p, lat.data(), dl.bytes));
  CK(cuMemcpyHtoD(dwp.p, wpk.data(), dwp.bytes));
  CK(cuMemcpyHtoD(dsh.p, sh.data(), dsh.bytes));
  int fails = 0;
  for (const Cfg& c : cfgs) {
    fill16(o0.p, kPoison, (size_t)M * hidden);
    fill16(o1.p, kPoison, (size_t)M * hidden);
    tprun_skinny_params p = small_params(dl, dwp, dsh, K, shard, hidden, rank);
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
  if (M == 3) fails += check_fused(k, rng, s, M, shard, K, dl, dwp, dsh, sh, ref);
  return fails;
}

// The small cases of every kernel, for compute-sanitizer: M = 3 over every
// family with and without a cluster and prefetch plans in both forms, M = 1
// and 2 over the warp-per-vector epilogue and the M = 1-as-M = 2 code,
// M = 5 and 7 over the wide family (the M = 8 code) and the step's.
int small(const Kernels& k, Rng& rng, CUstream s) {
  const int own = 1 << 24, lsu = 1 << 25;
  int fails = small_m(k, rng, s, 3,
                      {make_cfg("d8p", 2, 1, 3 | (16 << 16) | own), make_cfg("d8p", 2, 2), make_cfg("d8p", 16, 1),
                       make_cfg("d8p1", 2, 1, 3 | (16 << 16) | own | lsu), make_cfg("d8p1", 4, 3), make_cfg("d8pl", 4, 3),
                       make_cfg("d8pl", 2, 1), make_cfg("t32p", 4, 3), make_cfg("t32p", 2, 2, 1 | (5 << 16)),
                       make_cfg("t32p", 4, 1, 2 | (8 << 16) | lsu), make_cfg("t32pw", 4, 3), make_cfg("t32pw", 16, 2),
                       make_cfg("t32pn", 4, 4), make_cfg("t32pn", 2, 1)});
  for (int M : {1, 2})
    fails += small_m(k, rng, s, M,
                     {make_cfg("d8p", 4, 1), make_cfg("d8p", 16, 1), make_cfg("t32p", 4, 1), make_cfg("d8p1", 2, 3),
                      make_cfg("d8pl", 16, 1), make_cfg("t32pw", 16, 2), make_cfg("t32pn", 4, 4)});
  // The wide family (the M = 8 code) where rows M..7 exist in the code but
  // not in the buffers.
  for (int M : {5, 7})
    fails += small_m(k, rng, s, M, {make_cfg("t32pw", 16, 2), make_cfg("t32pw", 4, 1), make_cfg("t32pn", 4, 4)});
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
    // Room for either layout: the packed one pads (kernel.PackedWeightLen).
    const size_t packed = g_go->packed_len(shard, K) * 2;
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
  // HARNESS_ROTATION=1: the entry points with slot rotation, reading a
  // counter that stays at slot 0 (a launch without the fused receive never
  // advances it): what reading the slot on the device costs.
  static DevBuf* counter = nullptr;
  if (const char* e = getenv("HARNESS_ROTATION"); e && atoi(e) == 1) {
    if (!counter) {
      counter = new DevBuf(16);
      fill32(counter->p, 0, 4);
    }
    p.rot_counter = counter->p;
    p.rot_slots = 2;
    p.rot_stride = 16;
    p.rot_dst_mask = 1;
  }
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

// The columns of a sweep's TSV (and of kernel/config_table.tsv, which
// scripts/kernel-harness/pick_table.py picks from them), last the time.
const char* const kSweepHeader = "latent\tshard\tm\tfamily\twarps\tcluster\tl2_prefetch\tcluster_policy\tcarveout\tus\n";
void sweep_row(FILE* f, int latent, int shard, int M, const Cfg& c, double us) {
  fprintf(f, "%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%.3f\n", latent, shard, M, c.f().name.c_str(), c.warps, c.cluster,
          c.pf, c.policy, c.carveout, us);
}

// Every launch config at the benchmark shapes: every family but the step's
// (L2-only loads: scripts/step-sweep measures it in the step), the
// line-wise ones at M <= 4 only (at M 5-8 they are far slower) and the
// wide ones below M 8 (at M 8 they are the plain family); then a few L2
// prefetch plans in the LSU form (skinny.h, TPRUN_PF_LSU) on the three
// fastest, the load-balancing cluster policy on the four fastest cluster
// configs, and the shared memory carveouts of HARNESS_CARVEOUTS (percent,
// default 65,80) on the six fastest of all and on the fastest of each
// geometry within 10 % of the best (a carveout reorders them).
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
  fputs(kSweepHeader, f);
  const std::vector<int> carveouts = env_ints("HARNESS_CARVEOUTS", {65, 80});
  const int L = 1 << 25, O = 1 << 24;
  const int lsu_plans[] = {L | O,      L | 20 | (8 << 16), L | 40 | (8 << 16), L | 48 | (8 << 16),
                           L | 64 | (16 << 16), L | O | 40 | (16 << 16)};
  for (const Shape& sh : bench_shapes()) {
    if (!only.empty() && (sh.latent != 3584 || std::find(only.begin(), only.end(), sh.shard) == only.end())) continue;
    if (!latents.empty() && std::find(latents.begin(), latents.end(), sh.latent) == latents.end()) continue;
    Pool pool(sh.shard, sh.latent, rng);
    Acts acts(sh.latent, sh.hidden, rng);
    auto row = [&](int M, const Cfg& c, double us) { sweep_row(f, sh.latent, sh.shard, M, c, us); };
    for (int M = 1; M <= 8; ++M) {
      std::vector<std::pair<double, Cfg>> timed;  // every config that ran, then sorted
      for (size_t fi = 0; fi < g_fam.size(); ++fi) {
        const Family& fam = g_fam[fi];
        if (fam.l2only || (fam.lines && M > 4) || (fam.wide && M == 8)) continue;
        for (int w : warps)
          for (int c : {1, 2, 3, 4, 6, 8}) {
            if (w > fam.max_warps) continue;
            if (clusters.empty() ? sh.shard >= 896 && (c == 3 || c == 6 || c == 8)
                                 : std::find(clusters.begin(), clusters.end(), c) == clusters.end())
              continue;
            Cfg cfg;
            cfg.fam = (int)fi;
            cfg.warps = w;
            cfg.cluster = c;
            const double us = time_skinny(k, pool, acts, M, sh.hidden, cfg, s, 7);
            row(M, cfg, us);
            if (us > 0) timed.push_back({us, cfg});
          }
      }
      // The plans on the three fastest configs: a plan can turn a close
      // second into the best.
      auto by_time = [](const std::pair<double, Cfg>& a, const std::pair<double, Cfg>& b) { return a.first < b.first; };
      std::stable_sort(timed.begin(), timed.end(), by_time);
      std::vector<std::pair<double, Cfg>> planned;
      for (size_t i = 0; i < timed.size() && i < 3; ++i)
        for (int plan : lsu_plans) {
          Cfg cfg = timed[i].second;
          cfg.pf = plan;
          const double us = time_skinny(k, pool, acts, M, sh.hidden, cfg, s, 7);
          row(M, cfg, us);
          if (us > 0) planned.push_back({us, cfg});
        }
      // The load-balancing cluster scheduling policy on the four fastest
      // cluster configs, plans included (it helps some shards and costs
      // others).
      planned.insert(planned.end(), timed.begin(), timed.end());
      std::stable_sort(planned.begin(), planned.end(), by_time);
      int tried = 0;
      std::vector<std::pair<double, Cfg>> policied;
      for (size_t i = 0; i < planned.size() && tried < 4; ++i) {
        Cfg cfg = planned[i].second;
        if (cfg.cluster < 2) continue;
        cfg.policy = 2;
        const double us = time_skinny(k, pool, acts, M, sh.hidden, cfg, s, 7);
        row(M, cfg, us);
        if (us > 0) policied.push_back({us, cfg});
        ++tried;
      }
      // The shared memory carveouts on the six fastest of all of them, and
      // on the fastest of each geometry (family, warps, cluster) within
      // 10 % of the best.
      planned.insert(planned.end(), policied.begin(), policied.end());
      std::stable_sort(planned.begin(), planned.end(), by_time);
      std::vector<std::tuple<int, int, int>> geometries;
      for (size_t i = 0; i < planned.size(); ++i) {
        const Cfg& g = planned[i].second;
        const std::tuple<int, int, int> geo{g.fam, g.warps, g.cluster};
        const bool seen = std::find(geometries.begin(), geometries.end(), geo) != geometries.end();
        if (i >= 6 && (seen || planned[i].first > 1.1 * planned[0].first)) continue;
        if (!seen) geometries.push_back(geo);
        for (int co : carveouts) {
          if (co < 1 || co > 100) continue;  // 0 is the default, timed above
          Cfg cfg = planned[i].second;
          cfg.carveout = co;
          row(M, cfg, time_skinny(k, pool, acts, M, sh.hidden, cfg, s, 7));
        }
      }
      fflush(f);
      if (!planned.empty())
        printf("sweep latent %d shard %d M %d: best %.2f us with %s\n", sh.latent, sh.shard, M, planned[0].first,
               planned[0].second.str().c_str());
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
  fputs(kSweepHeader, f);
  std::vector<int> plans = {0, 1 << 24};
  for (int h : {8, 16, 32, 64, 128})
    for (int s16 : {8, 16}) plans.push_back(h | (s16 << 16) | (1 << 24));
  for (int h : {16, 32, 64}) plans.push_back(h | (16 << 16));
  // Geometries per shard: the tables' winners plus leaner ones (fewer
  // registers: more CTAs of the next kernel resident early).
  auto geos_for = [](int shard) -> std::vector<Cfg> {
    if (shard >= 7168) return {make_cfg("d8p", 4, 1), make_cfg("t32p", 8, 1), make_cfg("d8p", 8, 1), make_cfg("t32p", 4, 4)};
    if (shard >= 3584) return {make_cfg("d8p", 8, 1), make_cfg("d8p", 4, 1), make_cfg("t32p", 4, 4)};
    if (shard >= 1792) return {make_cfg("d8p", 8, 1), make_cfg("d8p", 16, 1), make_cfg("d8p", 8, 2), make_cfg("t32p", 16, 2)};
    return {make_cfg("d8p", 16, 1), make_cfg("t32p", 16, 2), make_cfg("d8p", 8, 1), make_cfg("d8p", 8, 2)};
  };
  for (int shard : shards) {
    const std::vector<Cfg> geos = geos_for(shard);
    Pool pool(shard, 3584, rng);
    Acts acts(3584, 7168, rng);
    for (int M : ms) {
      double best0 = 1e30, best = 1e30;
      Cfg b0, b;
      for (const Cfg& g : geos)
        for (int pf : plans) {
          Cfg c = g;
          c.pf = pf;
          double us = time_skinny(k, pool, acts, M, 7168, c, s, 7);
          sweep_row(f, 3584, shard, M, c, us);
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
  // kernel/config_table.tsv's format: comments (#), the header row, then
  // latent shard m family warps cluster l2_prefetch cluster_policy
  // carveout median_us, tab-separated.
  std::map<std::tuple<int, int, int>, Cfg> table;
  FILE* tf = fopen(tablepath, "r");
  if (!tf) {
    fprintf(stderr, "cannot read %s\n", tablepath);
    return 1;
  }
  char line[256];
  bool header = false;
  while (fgets(line, sizeof line, tf)) {
    if (line[0] == '#') continue;
    std::vector<std::string> f;
    for (char* t = strtok(line, "\t\n\r"); t; t = strtok(nullptr, "\t\n\r")) f.push_back(t);
    if (f.empty()) continue;
    if (!header) {
      if (f.size() != 10 || f[0] != "latent" || f[3] != "family") {
        fprintf(stderr, "table %s: no header row (latent shard m family ...)\n", tablepath);
        return 1;
      }
      header = true;
      continue;
    }
    Cfg cfg;
    cfg.fam = f.size() == 10 ? family_index(f[3]) : -1;
    if (cfg.fam >= 0) {
      cfg.warps = atoi(f[4].c_str());
      cfg.cluster = atoi(f[5].c_str());
      cfg.pf = atoi(f[6].c_str());
      cfg.policy = atoi(f[7].c_str());
      cfg.carveout = atoi(f[8].c_str());
    }
    const goside::Skinny g = cfg.fam >= 0 ? cfg.launch(atoi(f[2].c_str()), atoi(f[1].c_str()), atoi(f[0].c_str())) : goside::Skinny{};
    if (!g.ok) {
      fprintf(stderr, "table %s: no entry point for the row of %s M %s: %s\n", tablepath, f[0].c_str(),
              f.size() > 2 ? f[2].c_str() : "?", cfg.fam >= 0 ? g.why.c_str() : "no such family");
      return 1;
    }
    table[{atoi(f[0].c_str()), atoi(f[1].c_str()), atoi(f[2].c_str())}] = cfg;
  }
  fclose(tf);
  double bw0 = copy_bandwidth(s);
  FILE* f = fopen(outpath, "w");
  if (!f) return 1;
  fprintf(f, "# copy bandwidth (read+write) %.1f GB/s\n", bw0 / 1e9);
  fprintf(f, "latent\thidden\tshard\tm\tfamily\twarps\tcluster\tl2_prefetch\tcluster_policy\tcarveout\tours_us\tnopdl_us\tfloor_us\n");
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
      fprintf(f, "%d\t%d\t%d\t%d\t%s\t%d\t%d\t%d\t%d\t%d\t%.3f\t%.3f\t%.3f\n", sh.latent, sh.hidden, sh.shard, M,
              c.f().name.c_str(), c.warps, c.cluster, c.pf, c.policy, c.carveout, std::min(us, us2), nopdl, floor_us);
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
    fprintf(stderr, "usage: harness FATBIN check|small|sweep OUT|pfsweep OUT|bench TABLE OUT|readbw|ab\n");
    return 2;
  }
  const std::string mode = argv[2];
  uint64_t seed = (uint64_t)std::chrono::high_resolution_clock::now().time_since_epoch().count();
  if (const char* e = getenv("HARNESS_SEED")) seed = strtoull(e, nullptr, 0);
  printf("seed %" PRIu64 "\n", seed);
  Rng rng{seed};
  // Before cuInit: it forks.
  const char* lp = getenv("HARNESS_LAUNCHPARAMS");
  g_go = new goside::Link(lp && *lp ? lp : "build/launchparams");
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
  const char* fams = getenv("HARNESS_FAMILIES");
  load_families(fams && *fams ? fams : "kernel/families.tsv");
  Kernels k = load(argv[1]);
  {
    int regs = 0, lsize = 0;
    for (const Family& fam : g_fam) {
      const goside::Skinny g = make_cfg(fam.name.c_str(), 1, 1).launch(8, 64, 64);
      if (!g.ok) {
        fprintf(stderr, "family %s: %s\n", fam.name.c_str(), g.why.c_str());
        return 2;
      }
      const CUfunction fn = k.fn(g.function);
      if (!fn) continue;  // not in this fatbin (Kernels::fn said so)
      CK(cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, fn));
      CK(cuFuncGetAttribute(&lsize, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, fn));
      printf("%s: %d registers, %d bytes local\n", g.function.c_str(), regs, lsize);
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
  } else if (mode == "ab") {
    // Interleaved A/B on one GPU: HARNESS_AB = "SHARD:M,M,...:CFG,CFG,...;..."
    // (CFG as the sweep prints it, e.g. d8p/8/1); every config of a
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
