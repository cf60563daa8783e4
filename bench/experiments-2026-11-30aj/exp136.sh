#!/bin/bash
# Session 2026-11-30 (20th, "aj") call 3, nvidia-h200: LWS (-DTPRUN_LWS_EXP,
# lws-skinny.patch): in skinny(), a warp whose run is at most 7 chunks loads
# its latent line-wise right after the wait (lane L: row L/8 [+4], 16 bytes
# L%8 of a chunk pair = one 128-byte line), stores it to a per-warp shared
# buffer and reads its B fragments from there; the harness (lws-harness.patch)
# adds the buffers to the dynamic shared memory under HARNESS_LWS. Harness
# check of the LWS build, then interleaved A/B rounds against the committed
# fatbin at shard 896 (M 1-8) and 3584.
source scripts/device-call-prologue
cp .dev/lws/harness.cu scripts/kernel-harness/harness-lws.cu
scripts/kernel-harness/build-exp lws .dev/lws -DTPRUN_LWS_EXP & P1=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness-lws.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
wait $P1; grep -B1 -A2 'm8_t32p\b' build/lws-b.txt | grep -E 'registers|spill' | head -4
el builds
HARNESS_LWS=1 timeout 240 build/harness build/lws.fatbin check > $O/lws-check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK|check receive" $O/lws-check.txt | tail -4; grep -m5 FAIL $O/lws-check.txt
el check
SPEC="896:1,2,3,4,5,6,7,8:32/4/g/8/4/p,32/4/g/16/2/p,16/8/g/16/1/p;3584:1,2,4,6,7,8:32/4/g/4/4/pf48.8l/p/lb"
for r in 1 2 3 4 5; do
  (( $(date +%s) - T0 > 470 )) && { echo "time is up after $((r - 1)) rounds"; break; }
  HARNESS_AB="$SPEC" HARNESS_AB_REPS=1 timeout 100 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  HARNESS_LWS=1 HARNESS_AB="$SPEC" HARNESS_AB_REPS=1 timeout 100 build/harness build/lws.fatbin ab 2>&1 | grep '^ab' | sed "s/^/lws r$r /" >> $O/kab.txt
  el "round $r"
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base lws" | tee $O/kab-summary.txt
el done
