// The Lamport receive of one rank (../shared/DESIGN.md, "The mailbox"):
// wait until every 32-bit word of the first m*hidden elements of the local
// slot differs from the sentinel, copy the block out, re-arm the slot with
// the sentinel. A deadline from %globaltimer makes a missing peer a reported
// failure instead of a hang. Parameters and status words: skinny.h.
#include <stdint.h>

#include "skinny.h"

namespace tprun {

__device__ __forceinline__ uint4 ld_volatile_v4(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ void st_global_v4(uint4* p, uint4 v) {
  asm volatile("st.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y),
               "r"(v.z), "r"(v.w)
               : "memory");
}

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

}  // namespace tprun

extern "C" __global__ void __launch_bounds__(1024)
    tprun_receive(const __grid_constant__ tprun_receive_params p) {
  constexpr uint32_t kSentinel = 0x80000000u;
  asm volatile("griddepcontrol.wait;" ::: "memory");
  // The next step's kernel may start streaming its weights while we poll.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");

  const long long nvec = (long long)p.m * p.hidden / 8;  // 16-byte vectors
  const unsigned long long deadline = tprun::globaltimer() + p.timeout_ns;
  const uint4* slot = reinterpret_cast<const uint4*>(p.slot);
  uint4* slot_w = reinterpret_cast<uint4*>(p.slot);
  uint4* out = reinterpret_cast<uint4*>(p.out);
  const uint4 rearm = make_uint4(kSentinel, kSentinel, kSentinel, kSentinel);

  bool expired = false;
  bool lost = false;     // some vector never arrived
  uint32_t missing = 0;  // bit r: some word of rank r's slice never arrived
  for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < nvec;
       v += (long long)gridDim.x * blockDim.x) {
    uint4 x;
    bool ok;
    for (;;) {
      x = tprun::ld_volatile_v4(slot + v);
      ok = x.x != kSentinel && x.y != kSentinel && x.z != kSentinel && x.w != kSentinel;
      // After the deadline every remaining vector is looked at once more,
      // so the report names every rank that is missing, not just the first.
      if (ok || expired) break;
      if (tprun::globaltimer() >= deadline) expired = true;
    }
    if (ok) {
      tprun::st_global_v4(out + v, x);
      tprun::st_global_v4(slot_w + v, rearm);
    } else {
      lost = true;
      const int col = (int)((v * 8) % p.hidden);
      const int r = col / p.shard;
      if (r < TPRUN_MAX_RANKS) missing |= 1u << r;
    }
  }
  if (lost) {
    volatile uint32_t* st = reinterpret_cast<volatile uint32_t*>(p.status);
    st[0] = 1;
    for (int r = 0; r < TPRUN_MAX_RANKS; ++r)
      if (missing & (1u << r)) st[1 + r] = 1;
  }
}
