// The harness's link to the Go kernel package: the launch parameters of a
// skinny or receive launch and the packed weight layout come from
// scripts/kernel-harness/launchparams (its doc comment has the request
// lines), which runs beside the harness as a coprocess on two pipes. The
// harness computes none of them itself. Plain C++17 and POSIX, no CUDA:
// it compiles with any C++ compiler.
//
// A developer tool, not part of the product.
#ifndef TPRUN_HARNESS_GOSIDE_H
#define TPRUN_HARNESS_GOSIDE_H

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace goside {

// A skinny launch as kernel.Kernels.LaunchSkinny makes it: cuLaunchKernelEx
// of function (rot_function with slot rotation) with grid (grid_x,1,1),
// block (block_x,1,1), shared_bytes of dynamic shared memory, the cluster
// dimension (cluster,1,1), the cluster scheduling policy when not 0, the
// carveout when not 0, and params.tile_rows and l2_prefetch as given.
// grid_x includes recv_ctas receive CTAs when the launch has a fused receive.
struct Skinny {
  bool ok = false;
  std::string why;  // when !ok: why the kernel package refuses the config
  std::string function, rot_function;
  int grid_x = 0, block_x = 0, shared_bytes = 0, cluster = 0, policy = 0, carveout = 0, tile_rows = 0,
      l2_prefetch = 0, recv_ctas = 0;
};

// A receive launch as kernel.Kernels.LaunchReceive makes it (no cluster, no
// dynamic shared memory).
struct Receive {
  std::string function, rot_function;
  int grid_x = 0, block_x = 0;
};

[[noreturn]] inline void fail(const std::string& what) {
  fprintf(stderr, "launchparams: %s\n", what.c_str());
  exit(2);
}

class Link {
 public:
  // Starts the launchparams binary at path. Call it before cuInit: it forks.
  explicit Link(const char* path) : path_(path) {
    int to[2], from[2];
    if (pipe(to) != 0 || pipe(from) != 0) fail("pipe failed");
    const pid_t pid = fork();
    if (pid < 0) fail("fork failed");
    if (pid == 0) {
      dup2(to[0], 0);
      dup2(from[1], 1);
      close(to[0]), close(to[1]), close(from[0]), close(from[1]);
      execl(path, path, (char*)nullptr);
      fprintf(stderr, "launchparams: cannot run %s (build it: see scripts/kernel-harness/README.md)\n", path);
      _exit(127);
    }
    close(to[0]);
    close(from[1]);
    signal(SIGPIPE, SIG_IGN);  // a write to an ended coprocess fails, and says so
    to_ = fdopen(to[1], "w");
    from_ = fdopen(from[0], "r");
    if (!to_ || !from_) fail("fdopen failed");
  }

  // The launch of the config (a launch table's columns) for m rows of a
  // shard x latent weight; recv_cols: the columns a fused receive polls per
  // row, 0 without one. Each distinct request is asked once.
  Skinny skinny(int m, int shard, int latent, const std::string& family, int warps, int cluster, int l2_prefetch,
                int policy, int carveout, int recv_cols) {
    std::ostringstream q;
    q << "skinny\t" << m << '\t' << shard << '\t' << latent << '\t' << family << '\t' << warps << '\t' << cluster << '\t'
      << l2_prefetch << '\t' << policy << '\t' << carveout << '\t' << recv_cols;
    auto it = cache_.find(q.str());
    if (it != cache_.end()) return it->second;
    const std::vector<std::string> f = ask(q.str(), 12);
    Skinny r;
    if (f[0] == "ok") {
      r.ok = true;
      r.function = f[1];
      r.rot_function = f[2];
      int* n[] = {&r.grid_x,   &r.block_x,   &r.shared_bytes, &r.cluster,    &r.policy,
                  &r.carveout, &r.tile_rows, &r.l2_prefetch,  &r.recv_ctas};
      for (int i = 0; i < 9; ++i) *n[i] = num(f[3 + i]);
    } else {
      r.why = f[1];
    }
    cache_[q.str()] = r;
    return r;
  }

  // The receive launch for m rows of which it polls cols columns.
  Receive receive(int m, int cols) {
    std::ostringstream q;
    q << "receive\t" << m << '\t' << cols;
    const std::vector<std::string> f = ask(q.str(), 5);
    if (f[0] != "ok") fail(q.str() + ": " + f[1]);
    return Receive{f[1], f[2], num(f[3]), num(f[4])};
  }

  // kernel.PackedWeightLen: bf16 elements of a packed shard x latent weight.
  size_t packed_len(int shard, int latent) {
    std::ostringstream q;
    q << "packlen\t" << shard << '\t' << latent;
    const std::vector<std::string> f = ask(q.str(), 2);
    if (f[0] != "ok") fail(q.str() + ": " + f[1]);
    return (size_t)num(f[1]);
  }

  // kernel.PackWeight of w, a row-major [shard][latent] bf16 weight.
  std::vector<uint16_t> pack(const std::vector<uint16_t>& w, int shard, int latent) {
    if (w.size() != (size_t)shard * latent) fail("pack: the weight is not shard x latent");
    std::ostringstream q;
    q << "pack\t" << shard << '\t' << latent;
    // bf16 little-endian: the host's order (x86-64, aarch64).
    const std::vector<std::string> f = ask(q.str(), 2, w.data(), w.size() * 2);
    if (f[0] != "ok") fail(q.str() + ": " + f[1]);
    std::vector<uint16_t> p((size_t)num(f[1]));
    if (fread(p.data(), 2, p.size(), from_) != p.size()) fail(q.str() + ": the packed weight ended early");
    return p;
  }

 private:
  // Sends one request line (and data after it), reads the answer line:
  // "ok" and n-1 fields, or "err" and a message.
  std::vector<std::string> ask(const std::string& req, size_t n, const void* data = nullptr, size_t bytes = 0) {
    if (fprintf(to_, "%s\n", req.c_str()) < 0 || (bytes && fwrite(data, 1, bytes, to_) != bytes) || fflush(to_) != 0)
      fail(path_ + " ended (" + req + ")");
    std::string line;
    for (int c; (c = fgetc(from_)) != '\n';) {
      if (c == EOF) fail(path_ + " ended without an answer to " + req);
      line += (char)c;
    }
    std::vector<std::string> f;
    std::stringstream s(line);
    for (std::string t; std::getline(s, t, '\t');) f.push_back(t);
    if (f.size() == 2 && f[0] == "err") return f;
    if (f.size() != n || f[0] != "ok") fail("answer to " + req + ": " + line);
    return f;
  }

  static int num(const std::string& s) {
    char* end = nullptr;
    const long v = strtol(s.c_str(), &end, 10);
    if (s.empty() || *end) fail("not a number: " + s);
    return (int)v;
  }

  std::string path_;
  FILE* to_ = nullptr;
  FILE* from_ = nullptr;
  std::map<std::string, Skinny> cache_;
};

}  // namespace goside

#endif
