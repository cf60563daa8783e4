#!/bin/bash
# Session 2026-12-01 "am", call 7 (nvidia-h200; no pair lent). The lead of
# calls 5-6: a resident CTA holds its 4 ring chunks when the wait returns,
# then needs the latent, then (after chunk 0's MMAs free registers) the
# HBM round trip of chunks 4-6. tail-skinny.patch ("_t32pn" only, at most
# 4 warps): chunks U..U+TT-1 of each warp copied into a static shared
# buffer by cp.async before the wait; the ring's refills of those chunks
# read shared memory. t3 (the step's 7 chunks a warp: all of the tail), t2.
# Harness check of t3 (every "_t32pn" config and its "_t32p" twin, bit for
# bit); the kernel alone, the step's config, 9 rounds.
source scripts/device-call-prologue
mkdir -p .dev/tl && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu .dev/tl/ &&
	patch -d .dev/tl -p0 skinny.cu < bench/experiments-2026-12-01am/tail-skinny.patch || exit 1
P=()
for v in 3 2; do scripts/kernel-harness/build-exp t$v .dev/tl -DTPRUN_EXP_TAIL=$v & P+=($!); done
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
wait "${P[@]}"
for b in t3 t2; do grep -A2 "m8_t32pn' for 'sm_90'" build/$b-b.txt | grep -E 'registers|spill' | tr -s ' ' | tr '\n' ' '; echo " ($b)"; done
el builds
AB_UNTIL=$((T0 + 300)) scripts/kernel-harness/ab-rounds $O/kab 9 "3584:1,2,4,6,8:32/4/n/4/4/pf48.8l/p/lb/co65" base=kernel/kernels.fatbin t3=build/t3.fatbin t2=build/t2.fatbin
el ab
timeout 150 build/harness build/t3.fatbin check > $O/check-t3.txt 2>&1; echo "check t3 rc $?"; grep -E "check skinny:|CHECK" $O/check-t3.txt | tail -2; grep -m5 FAIL $O/check-t3.txt
el done
