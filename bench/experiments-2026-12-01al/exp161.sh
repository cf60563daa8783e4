#!/bin/bash
# Session 2026-12-01 "al", call 6 (nvidia-h200). skinny.cu cleanups left
# for the next fatbin rebuild by 2026-11-30ak: the entry list's
# "(MM == 1 ? 2 : MM)" (13 times) is one macro, TPRUN_CODE_ROWS(MM), and
# the latent_rows comment's "0.18-0.24" reads 0.185-0.244. No code change:
# nvcc 12.4 here gives a byte-identical sm_90 cubin. scripts/build-kernels
# (nvcc 13, sm_90 + sm_100 + PTX), then the new fatbin compared byte for
# byte and by SASS with the committed one (carried as .dev/old3).
source scripts/device-call-prologue
timeout 200 scripts/build-kernels > $O/build-kernels.txt 2>&1; echo "build-kernels rc $?"; tail -1 $O/build-kernels.txt
cmp .dev/old3/kernels.fatbin kernel/kernels.fatbin && echo "fatbin byte-identical to the committed one"
for a in sm_90 sm_100; do python3 scripts/kernel-harness/sass_diff.py --arch $a .dev/old3/kernels.fatbin kernel/kernels.fatbin 2>&1 | tail -1; done
cp kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/
cmp -s .dev/old3/kernels.fatbin kernel/kernels.fatbin || cp kernel/kernels.fatbin $O/
el done
