#!/bin/bash
# Session 2026-12-01 "am", call 4 (nvidia-h200; still no pair lent). The
# review fixes of this session on one H200: the harness check, which now
# compares every "_t32pn" run with its "_t32p" twin bit for bit; the kernel
# package's GPU tests from this tree's binaries (TestGPUStepInGraph now
# runs tp 2 at shard 3584 on packed weights, the fused rank on the step
# table's "_t32pn").
source scripts/device-call-prologue
tar xzf .dev/bin-am.tgz
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
timeout 150 build/harness kernel/kernels.fatbin check > $O/check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK" $O/check.txt | tail -2; grep -m5 FAIL $O/check.txt
el check
cd kernel && timeout 200 ../bin/kernel.test -test.count 1 -test.v > $O/kernel-tests.txt 2>&1; echo "kernel.test rc $?"; tail -1 $O/kernel-tests.txt; grep -c -- '--- PASS' $O/kernel-tests.txt; grep -- '--- FAIL\|--- SKIP' $O/kernel-tests.txt | head; grep -E "tp 2 M|fused rank's config" $O/kernel-tests.txt | head -20
cd ..; el done
