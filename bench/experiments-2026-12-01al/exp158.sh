#!/bin/bash
# Session 2026-12-01 "al": NOT RUN (no pair of H200s was lent when it was
# due; exp159.sh ran on one H200 instead, and exp160.sh was prepared in its
# place). Call 4: the latent load as .cg (L2 only)
# was 0.01-0.07 µs faster at M 3-8 (M 7 -0.07, M 8 -0.02; 5 rounds), the
# other operators no better (.L1::no_allocate +0.25). This call repeats cg
# with 7 rounds and adds the weight load's operator, which 2026-11-30d
# varied (.cs, .nc, .L1::no_allocate, .nc.L1::no_allocate) but never as
# .cg: act-weight-load-skinny.patch (act-load-skinny.patch plus
# TPRUN_WEIGHT_LD_FORM: 1 ld.global.cg, 2 ld.global.nc.L1::evict_first,
# 3 ld.global.cs; unset, main's ld.global.nc.L1::no_allocate). Every
# variant but base has the latent load as .cg. main's bin/tprun.
source scripts/device-call-prologue
tar xzf .dev/bin-tprun.tgz
mkdir -p .dev/aw && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu .dev/aw/ &&
	patch -d .dev/aw -p0 skinny.cu < bench/experiments-2026-12-01al/act-weight-load-skinny.patch || exit 1
P=()
scripts/kernel-harness/build-exp cg .dev/aw -DTPRUN_ACT_LD_FORM=1 & P+=($!)
for f in 1 2 3; do
	scripts/kernel-harness/build-exp cgw$f .dev/aw -DTPRUN_ACT_LD_FORM=1 -DTPRUN_WEIGHT_LD_FORM=$f & P+=($!)
done
wait "${P[@]}"
el builds
OUT=$O timeout 400 scripts/step-ab --rounds 7 base=embedded cg=build/cg.fatbin cgw1=build/cgw1.fatbin cgw2=build/cgw2.fatbin cgw3=build/cgw3.fatbin
el done
rm -rf $O/step-ab
