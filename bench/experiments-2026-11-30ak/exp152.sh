#!/bin/bash
# Session 2026-11-30 (21st, "ak") call 7, nvidia-h200: after the review,
# skinny.cu's comment on latent_rows corrected (no code change):
# scripts/build-kernels; the new fatbin compared byte for byte and by SASS
# (sass_diff.py, sm_90 and sm_100) with the committed one; the kernel
# package's GPU tests (with the test's new sumsLikeTwin; the stamp test
# skipped: the binary embeds the old stamp); the kernel bench
# with the committed tables (another sample of issue 4's shard 896).
source scripts/device-call-prologue
tar xzf .dev/bin-k2.tgz
timeout 200 scripts/build-kernels > $O/build-kernels.txt 2>&1; echo "build-kernels rc $?"; tail -1 $O/build-kernels.txt
cmp .dev/old2/kernels.fatbin kernel/kernels.fatbin && echo "fatbin byte-identical to the committed one"
for a in sm_90 sm_100; do python3 scripts/kernel-harness/sass_diff.py --arch $a .dev/old2/kernels.fatbin kernel/kernels.fatbin 2>&1 | tail -1; done
cp kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/
cmp -s .dev/old2/kernels.fatbin kernel/kernels.fatbin || cp kernel/kernels.fatbin $O/
el build
cd kernel && timeout 120 ../bin/kernel.test -test.count 1 -test.skip TestFatbinStampMatchesSources > $O/kernel-tests.txt 2>&1; echo "kernel.test rc $?"; tail -1 $O/kernel-tests.txt; grep -c -- '--- PASS' $O/kernel-tests.txt; grep -- '--- FAIL' $O/kernel-tests.txt | head
cd ..; el "kernel tests"
BENCH_TAG=ak6 OUT=$O/bk timeout 100 scripts/bench-kernel --no-build --no-check > $O/bk.console.txt 2>&1; echo "bench-kernel rc $?"
grep -A12 '| 3584 | 896 | 1 ' $O/bk/kernel-h200-*.txt | head -8; grep -A4 'Targets' $O/bk/kernel-h200-*.txt
cp $O/bk/kernel-h200-*.txt $O/; rm -rf $O/bk
el done
