#!/bin/bash
# Session 2026-12-01 "am", call 5 (nvidia-h200; no pair lent). Where the
# kernel's growth with M comes from, in the step's config (shard 3584,
# 32/4/n/4/4/pf48.8l/p/lb/co65). Timing-only builds of
# nolat-split-skinny.patch: nf = the first UB latent chunks of each warp
# (loaded right after griddepcontrol.wait) not loaded; nr = the later
# chunks' latent (the ring refills) not loaded; nb = neither (NOLAT).
# 2026-11-30w's NOLAT put the whole latent at 0.24-0.39 µs of the step at
# M 5-8. The kernel alone grows about 0.08 µs per doubling of the rows
# (call 1: 5.99, 6.08, 6.15, 6.24 µs at M 1, 2, 4, 8), as the maximum of R
# line latencies would (one line per row per load); this tells whether
# that cost sits in the loads after the wait or in the refills.
source scripts/device-call-prologue
mkdir -p .dev/nl && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu .dev/nl/ &&
	patch -d .dev/nl -p0 skinny.cu < bench/experiments-2026-12-01am/nolat-split-skinny.patch || exit 1
P=()
scripts/kernel-harness/build-exp nf .dev/nl -DTPRUN_EXP_NOLAT_FIRST & P+=($!)
scripts/kernel-harness/build-exp nr .dev/nl -DTPRUN_EXP_NOLAT_REFILL & P+=($!)
scripts/kernel-harness/build-exp nb .dev/nl -DTPRUN_EXP_NOLAT_FIRST -DTPRUN_EXP_NOLAT_REFILL & P+=($!)
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
wait "${P[@]}"
for b in nf nr nb; do grep -A2 "m8_t32pn' for 'sm_90'" build/$b-b.txt | grep -E 'registers|spill' | tr -s ' ' | tr '\n' ' '; echo " ($b)"; done
el builds
AB_UNTIL=$((T0 + 400)) scripts/kernel-harness/ab-rounds $O/kab 9 "3584:1,2,4,6,8:32/4/n/4/4/pf48.8l/p/lb/co65" base=kernel/kernels.fatbin nf=build/nf.fatbin nr=build/nr.fatbin nb=build/nb.fatbin
el done
