#!/bin/bash
# Session 2026-11-30 (20th, "aj") call 11, nvidia-h200: after the carveout
# review's fixes (a carveout only for measured shapes; cuda.Carveout's
# range), the GPU tests of internal/cuda, kernel and tp; then the kernel
# bench on this (third) H200 for shard 896's M 5-6.
source scripts/device-call-prologue
tar xzf .dev/bin-aj6.tgz
OUT=$O/t GPU_TEST_TIMEOUT=100s timeout 200 scripts/gpu-test internal/cuda kernel tp > $O/gpu-test.txt 2>&1; echo "gpu-test rc $?"; grep -E '^(PASS|FAIL|MISSING)' $O/gpu-test.txt
el tests
BENCH_TAG=aj4 OUT=$O/bk4 timeout 150 scripts/bench-kernel --no-build --no-check > $O/bk4.console.txt 2>&1; echo "bench-kernel rc $?"
grep '| 3584 | 896 ' $O/bk4/kernel-h200-*.txt; grep -A4 'Targets\|targets met' $O/bk4/kernel-h200-*.txt | tail -5
cp $O/bk4/kernel-h200-*.txt $O/; rm -rf $O/bk4 $O/t
el done
