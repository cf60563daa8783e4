#!/bin/bash
# Session 2026-12-01 "al", call 4. The receive is at a local optimum
# (calls 1-3: more polls in flight, fewer polls, more receive CTAs: none
# faster). 2026-11-30w: without latent loads the step was 0.24-0.39 µs
# faster at M 5-8, and what costs is the lines each load touches. The
# latent (and residual) load, ld_act, is a plain ld.global (L1-cached); its
# cache operator was never varied. act-load-skinny.patch makes it a macro
# (TPRUN_ACT_LD_FORM): 1 .cg (L2 only; SASS LDG.E.128.STRONG.GPU),
# 2 .L1::no_allocate, 3 .L1::evict_last, 4 .nc (diagnostic only: the
# latent is written by the previous grid, which may still run when this one
# starts, so .nc's read-only-for-the-kernel's-lifetime rule is not met).
# scripts/step-ab, 5 interleaved rounds, against the embedded fatbin, with
# main's bin/tprun (.dev/bin-tprun.tgz).
source scripts/device-call-prologue
tar xzf .dev/bin-tprun.tgz
mkdir -p .dev/act && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu .dev/act/ &&
	patch -d .dev/act -p0 skinny.cu < bench/experiments-2026-12-01al/act-load-skinny.patch || exit 1
P=()
for f in 1 2 3 4; do
	scripts/kernel-harness/build-exp act$f .dev/act -DTPRUN_ACT_LD_FORM=$f & P+=($!)
done
wait "${P[@]}"
el builds
OUT=$O timeout 330 scripts/step-ab --rounds 5 base=embedded cg=build/act1.fatbin na=build/act2.fatbin el=build/act3.fatbin nc=build/act4.fatbin
el done
rm -rf $O/step-ab
