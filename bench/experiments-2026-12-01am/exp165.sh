#!/bin/bash
# Session 2026-12-01 "am", call 3 (nvidia-h200; no pair lent yet).
# (1) skinny.cu's two loads share one asm macro (TPRUN_LD_V4_PRED) and
# skinny.h's comment names "_t32pn": no code change (nvcc 12.4 here gives
# a byte-identical sm_90 cubin). scripts/build-kernels (nvcc 13), then the
# new fatbin compared byte for byte and by SASS with the committed one.
# (2) the kernel package's GPU tests from the binaries of 3265e7e + the
# stage-5 step table (.dev/bin-am.tgz; fatbin of 3265e7e embedded).
source scripts/device-call-prologue
tar xzf .dev/bin-am.tgz
cp kernel/kernels.fatbin build/old.fatbin
timeout 200 scripts/build-kernels > $O/build-kernels.txt 2>&1; echo "build-kernels rc $?"; tail -1 $O/build-kernels.txt
cmp build/old.fatbin kernel/kernels.fatbin && echo "fatbin byte-identical to the committed one"
for a in sm_90 sm_100; do python3 scripts/kernel-harness/sass_diff.py --arch $a build/old.fatbin kernel/kernels.fatbin 2>&1 | tail -1; done
cp kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/
cmp -s build/old.fatbin kernel/kernels.fatbin || cp kernel/kernels.fatbin $O/
el build
cd kernel && timeout 200 ../bin/kernel.test -test.count 1 -test.v -test.skip TestFatbinStampMatchesSources > $O/kernel-tests.txt 2>&1; echo "kernel.test rc $?"; tail -1 $O/kernel-tests.txt; grep -c -- '--- PASS' $O/kernel-tests.txt; grep -- '--- FAIL\|--- SKIP' $O/kernel-tests.txt | head; grep -i 'shapes in' $O/kernel-tests.txt | head -3
cd ..; el done
