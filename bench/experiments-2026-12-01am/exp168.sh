#!/bin/bash
# Session 2026-12-01 "am", call 6 (nvidia-h200; no pair lent). Call 5:
# without the latent loads that follow griddepcontrol.wait (the ring's
# first UB chunks) the kernel is 0.06-0.13 µs faster at M 2-8 and grows
# half as much with M; without the refills, about level. So the first
# latent chunks' round trip is exposed. upre-skinny.patch (in "_t32pn"
# only): only the first UPRE chunks of the weight ring before the wait,
# the latent's first chunks right after it, then the ring's other chunks,
# so the latent is asked for ahead of those weights. u3, u2, u0 against
# main (U = 4); the kernel alone, the step's config, 9 rounds.
source scripts/device-call-prologue
mkdir -p .dev/up && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu .dev/up/ &&
	patch -d .dev/up -p0 skinny.cu < bench/experiments-2026-12-01am/upre-skinny.patch || exit 1
P=()
for v in 3 2 0; do scripts/kernel-harness/build-exp u$v .dev/up -DTPRUN_EXP_UPRE=$v & P+=($!); done
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
wait "${P[@]}"
el builds
AB_UNTIL=$((T0 + 400)) scripts/kernel-harness/ab-rounds $O/kab 9 "3584:1,2,4,6,8:32/4/n/4/4/pf48.8l/p/lb/co65" base=kernel/kernels.fatbin u3=build/u3.fatbin u2=build/u2.fatbin u0=build/u0.fatbin
el done
