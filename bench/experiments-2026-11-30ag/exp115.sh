#!/bin/bash
# Session 2026-11-30 (17th, "ag") call 5, nvidia-h200: the kernel bench of
# issue 4 once more with the committed fatbin and table (unchanged since
# the thirteenth session, bench/kernel-h200-2026-11-30aa.txt), for a fresh
# figure on another H200. No build, no correctness matrix (the GPU tests
# ran in calls 1-4).
source scripts/device-call-prologue
BENCH_TAG=ag OUT=$O/bk timeout 480 scripts/bench-kernel --no-build --no-check > $O/bench-kernel.log 2>&1; echo "bench-kernel rc $?"
ls bench/kernel-h200-*ag*.txt && cp bench/kernel-h200-*ag*.txt $O/
grep -E '^\| 3584 \| (896|3584|7168) ' bench/kernel-h200-*ag.txt | head -30
el done
