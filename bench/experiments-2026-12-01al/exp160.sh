#!/bin/bash
# Session 2026-12-01 "al", call 7 (nvidia-h200-x2, once a pair was lent again). Call 5 (one H200, the
# kernel alone, 7 rounds): the weight load as .cg is 0.14-0.31 µs slower
# everywhere, as .cs within ±0.06; the latent load as .cg within -0.044 to
# +0.045 of main (shard 3584, step config at 65 %: -0.004 to -0.021). So
# only the latent's .cg is left of call 4's gain (-0.01 to -0.07 µs in the
# step): is it real? 11 interleaved step rounds of base (embedded), cg (the
# latent as .cg) and cgcs (cg with the weights as .cs), main's bin/tprun.
source scripts/device-call-prologue
tar xzf .dev/bin-tprun.tgz
mkdir -p .dev/aw && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu .dev/aw/ &&
	patch -d .dev/aw -p0 skinny.cu < bench/experiments-2026-12-01al/act-weight-load-skinny.patch || exit 1
P=()
scripts/kernel-harness/build-exp cg .dev/aw -DTPRUN_ACT_LD_FORM=1 & P+=($!)
scripts/kernel-harness/build-exp cgcs .dev/aw -DTPRUN_ACT_LD_FORM=1 -DTPRUN_WEIGHT_LD_FORM=3 & P+=($!)
wait "${P[@]}"
el builds
OUT=$O timeout 420 scripts/step-ab --rounds 11 base=embedded cg=build/cg.fatbin cgcs=build/cgcs.fatbin
el done
rm -rf $O/step-ab
