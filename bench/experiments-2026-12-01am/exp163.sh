#!/bin/bash
# Session 2026-12-01 "am", call 1 (nvidia-h200: no pair was lent). The
# step's own entry point family "_t32pn" ("_t32p" with the latent and
# shared loads as .cg, stage 5, harness letter n; 2026-12-01al calls 4 and
# 7: -0.04 to -0.07 µs at M 5-7 in the step, as an experiment build).
# scripts/build-kernels (nvcc 13: sm_90, sm_100, PTX); sass_diff.py against
# the committed fatbin (every old function must be unchanged on both
# architectures); the harness check and memcheck; then the kernel alone,
# 7 interleaved rounds of the step's config at shard 3584 on "_t32p"
# (65 %) and on "_t32pn" at 65, 50 and 80 % (one fatbin, configs side by
# side). The step itself needs a pair (exp164.sh).
source scripts/device-call-prologue
E=bench/experiments-2026-12-01am
cp kernel/kernels.fatbin build/old.fatbin
timeout 300 scripts/build-kernels > $O/build-kernels.txt 2>&1; echo "build-kernels rc $?"; tail -1 $O/build-kernels.txt
cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/
grep -A3 "m[1-8]_t32pn'" kernel/kernels.fatbin.ptxas.txt | grep -E "registers|spill" | sort | uniq -c
el build-kernels
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1 & P1=$!
for a in sm_90 sm_100; do python3 scripts/kernel-harness/sass_diff.py --arch $a build/old.fatbin kernel/kernels.fatbin > $O/sass-diff-$a.txt 2>&1; echo "sass_diff $a rc $?"; tail -1 $O/sass-diff-$a.txt; done
wait $P1; tail -3 build/h.txt
el "sass diff, harness"
timeout 240 build/harness kernel/kernels.fatbin check > $O/check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK|check receive" $O/check.txt | tail -4; grep -m5 FAIL $O/check.txt; echo "n/ lines: $(grep -c '/n/' $O/check.txt)"
el check
timeout 150 compute-sanitizer --tool memcheck build/harness kernel/kernels.fatbin small > $O/memcheck.txt 2>&1; echo "memcheck rc $?"; grep "ERROR SUMMARY" $O/memcheck.txt
el memcheck
C=32/4/g/4/4/pf48.8l/p/lb/co65,32/4/n/4/4/pf48.8l/p/lb/co65,32/4/n/4/4/pf48.8l/p/lb/co50,32/4/n/4/4/pf48.8l/p/lb/co80
AB_UNTIL=$((T0 + 500)) scripts/kernel-harness/ab-rounds $O/kab 7 "3584:1,2,4,5,6,7,8:$C" new=kernel/kernels.fatbin
el done
cd $O && tar czf logs.tgz build-kernels.txt sass-diff-sm_90.txt sass-diff-sm_100.txt check.txt memcheck.txt kab.txt kab-summary.txt && rm -f build-kernels.txt sass-diff-sm_90.txt sass-diff-sm_100.txt check.txt memcheck.txt kab.txt kab-summary.txt
