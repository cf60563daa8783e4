#!/bin/bash
# Session 2026-11-30 (21st, "ak") call 2, nvidia-h200: the "_t32pw" entry
# points in the committed sources: scripts/build-kernels (sm_90, sm_100,
# PTX); sass_diff.py of the new fatbin against the committed one (every
# function the old one has must be unchanged on both architectures); the
# harness check (every config, "_t32pw" included, random carveouts) and the
# small case under compute-sanitizer memcheck.
source scripts/device-call-prologue
timeout 400 scripts/build-kernels > $O/build-kernels.txt 2>&1; echo "build-kernels rc $?"; tail -3 $O/build-kernels.txt
cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/
grep -A3 "m[1-8]_t32pw'" kernel/kernels.fatbin.ptxas.txt | grep -E "registers|spill" | sort | uniq -c
el build-kernels
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1 & P1=$!
for a in sm_90 sm_100; do python3 scripts/kernel-harness/sass_diff.py --arch $a .dev/old/kernels.fatbin kernel/kernels.fatbin > $O/sass-diff-$a.txt 2>&1; echo "sass_diff $a rc $?"; tail -3 $O/sass-diff-$a.txt; done
wait $P1; tail -3 build/h.txt
el "sass diff, harness"
timeout 200 build/harness kernel/kernels.fatbin check > $O/check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK|check receive" $O/check.txt | tail -4; grep -m5 FAIL $O/check.txt; grep -c "w/" $O/check.txt
el check
timeout 120 compute-sanitizer --tool memcheck build/harness kernel/kernels.fatbin small > $O/memcheck.txt 2>&1; echo "memcheck rc $?"; grep "ERROR SUMMARY" $O/memcheck.txt
el done
