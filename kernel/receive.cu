// The Lamport receive of one rank (docs/design.md, "The mailbox"): wait
// until every 32-bit word of the first m*hidden elements of the local slot
// (less a skipped rank's columns, TPRUN_RECEIVE_SKIP) differs from the
// sentinel, copy the block out, re-arm the slot with the sentinel. A
// deadline from %globaltimer makes a missing peer a reported failure
// instead of a hang. Parameters and status words: skinny.h.
//
// receive_block is also the tail of the skinny kernel's fused receive
// (skinny.h, recv_slot), so this file comes first in the translation unit
// (scripts/build-kernels). The slot rotation is in skinny_prims.cuh.
#include <stdint.h>

#include "skinny_prims.cuh"

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

// The host's abort word: system scope, since the host writes it while the
// kernel runs.
__device__ __forceinline__ uint32_t ld_sys_u32(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ unsigned long long globaltimer() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The Lamport receive of the 16-byte vectors first, first + stride, ...
// (< m*hidden/8) of slot: poll each until it holds no sentinel word, copy it
// to out, re-arm it. With TPRUN_RECEIVE_SKIP in flags the vectors are
// numbered over the other ranks' columns only (< m*(hidden-shard)/8), so
// the skipped rank's columns are never touched. A thread stops waiting at
// the deadline (timeout_ns after it got here) or, with TPRUN_RECEIVE_ABORTABLE in flags, when the
// host sets status[TPRUN_RECEIVE_ABORT_WORD] (looked at every 200 µs once
// it has waited that long); it then records in status which ranks'
// vectors never arrived (skinny.h, tprun_receive).
__device__ __forceinline__ void receive_block(unsigned long long slot_addr, unsigned long long out_addr,
                                              unsigned long long status_addr, unsigned long long timeout_ns,
                                              int flags, int m, int hidden, int shard, long long first,
                                              long long stride) {
  constexpr uint32_t kSentinel = 0x80000000u;
  constexpr unsigned long long kAbortEvery = 200000;  // ns between two looks at the abort word
  // Vector i is row i / per of slot, 16-byte column c = i % per, skipping
  // the skipped rank's sk8 columns at s0 (none without TPRUN_RECEIVE_SKIP).
  const bool skip = (flags & TPRUN_RECEIVE_SKIP) != 0;
  const long long row8 = hidden / 8;
  const long long sk8 = skip ? shard / 8 : 0;
  const long long s0 = skip ? (long long)TPRUN_RECEIVE_SKIP_RANK(flags) * sk8 : 0;
  const long long per = row8 - sk8;
  const long long nvec = (long long)m * per;
  if (first >= nvec) return;
  const unsigned long long start = globaltimer();
  const unsigned long long deadline = start + timeout_ns;
  const uint32_t* abort_word = (flags & TPRUN_RECEIVE_ABORTABLE)
                                   ? reinterpret_cast<const uint32_t*>(status_addr) + TPRUN_RECEIVE_ABORT_WORD
                                   : nullptr;
  unsigned long long next_abort_check = start + kAbortEvery;
  const uint4* slot = reinterpret_cast<const uint4*>(slot_addr);
  uint4* slot_w = reinterpret_cast<uint4*>(slot_addr);
  uint4* out = reinterpret_cast<uint4*>(out_addr);
  const uint4 rearm = make_uint4(kSentinel, kSentinel, kSentinel, kSentinel);

  bool expired = false;
  bool lost = false;     // some vector never arrived
  uint32_t missing = 0;  // bit r: some word of rank r's slice never arrived
  for (long long i = first; i < nvec; i += stride) {
    const long long c = i % per;
    const long long v = (i / per) * row8 + (c < s0 ? c : c + sk8);
    uint4 x;
    bool ok;
    for (;;) {
      x = ld_volatile_v4(slot + v);
      ok = x.x != kSentinel && x.y != kSentinel && x.z != kSentinel && x.w != kSentinel;
      // After the deadline every remaining vector is looked at once more,
      // so the report names every rank that is missing, not just the first.
      if (ok || expired) break;
      const unsigned long long now = globaltimer();
      if (now >= deadline) expired = true;
      if (abort_word != nullptr && now >= next_abort_check) {
        next_abort_check = now + kAbortEvery;
        if (ld_sys_u32(abort_word) != 0) expired = true;
      }
    }
    if (ok) {
      st_global_v4(out + v, x);
      st_global_v4(slot_w + v, rearm);
    } else {
      lost = true;
      const int col = (int)((v * 8) % hidden);
      const int r = col / shard;
      if (r < TPRUN_MAX_RANKS) missing |= 1u << r;
    }
  }
  if (lost) {
    volatile uint32_t* st = reinterpret_cast<volatile uint32_t*>(status_addr);
    st[0] = 1;
    for (int r = 0; r < TPRUN_MAX_RANKS; ++r)
      if (missing & (1u << r)) st[1 + r] = 1;
  }
}

// The receive kernel's body; ROT: with slot rotation (tprun_receive_rot).
template <bool ROT>
__device__ __forceinline__ void receive_kernel(const tprun_receive_params& p) {
  // The next step's kernel may launch now and start streaming its weights
  // (its blocks then wait for this grid at their own griddepcontrol.wait):
  // triggering first lets that prefetch overlap the skinny kernel of this
  // step too, not just the polling.
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  asm volatile("griddepcontrol.wait;" ::: "memory");
  unsigned long long slot = p.slot;
  if constexpr (ROT) {
    // Every CTA reads the slot and arrives: this kernel ends the step.
    __shared__ uint32_t rot_slot;
    if (p.rot_counter == 0) __trap();  // the rotation's entry point without a counter
    slot = rotated_receive_slot(slot, p.rot_counter, p.rot_stride, p.rot_slots, gridDim.x, &rot_slot);
  }
  receive_block(slot, p.out, p.status, p.timeout_ns, p.flags, p.m, p.hidden, p.shard,
                (long long)blockIdx.x * blockDim.x + threadIdx.x, (long long)gridDim.x * blockDim.x);
}

}  // namespace tprun

// The receive without slot rotation, and with it (a launch with rot_counter
// set takes tprun_receive_rot, and only such a launch).
extern "C" __global__ void __launch_bounds__(1024) tprun_receive(const __grid_constant__ tprun_receive_params p) {
  tprun::receive_kernel<false>(p);
}
extern "C" __global__ void __launch_bounds__(1024) tprun_receive_rot(const __grid_constant__ tprun_receive_params p) {
  tprun::receive_kernel<true>(p);
}
