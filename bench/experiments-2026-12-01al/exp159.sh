#!/bin/bash
# Session 2026-12-01 "al", call 5 (nvidia-h200: no pair was lent when
# exp158.sh was due). The kernel alone with the load forms of
# act-weight-load-skinny.patch, interleaved A/B rounds against the
# committed fatbin: act = the latent/residual load as .cg; w1 = the weight
# load as .cg; actw1 both; actw3 = act with the weight load as .cs.
# Shapes: shard 3584 with the step's config (65 %) and the kernel table's
# (no carveout); shard 896 with its table's configs.
source scripts/device-call-prologue
mkdir -p .dev/aw && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu .dev/aw/ &&
	patch -d .dev/aw -p0 skinny.cu < bench/experiments-2026-12-01al/act-weight-load-skinny.patch || exit 1
P=()
scripts/kernel-harness/build-exp act .dev/aw -DTPRUN_ACT_LD_FORM=1 & P+=($!)
scripts/kernel-harness/build-exp w1 .dev/aw -DTPRUN_WEIGHT_LD_FORM=1 & P+=($!)
scripts/kernel-harness/build-exp actw1 .dev/aw -DTPRUN_ACT_LD_FORM=1 -DTPRUN_WEIGHT_LD_FORM=1 & P+=($!)
scripts/kernel-harness/build-exp actw3 .dev/aw -DTPRUN_ACT_LD_FORM=1 -DTPRUN_WEIGHT_LD_FORM=3 & P+=($!)
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
wait "${P[@]}"
el builds
SPEC="3584:1,4,7,8:32/4/g/4/4/pf48.8l/p/lb/co65,32/4/g/4/4/pf48.8l/p/lb;896:1,4:16/8/l/16/1/p/co65;896:5,6:32/4/w/16/2/p/co80;896:7,8:32/4/g/16/2/p/co80"
AB_UNTIL=$((T0 + 330)) scripts/kernel-harness/ab-rounds $O/kab 7 "$SPEC" base=kernel/kernels.fatbin act=build/act.fatbin w1=build/w1.fatbin actw1=build/actw1.fatbin actw3=build/actw3.fatbin
el done
