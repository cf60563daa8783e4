#!/bin/bash
# Session 2026-11-30 (9th) call 7, nvidia-h200: a repeat bench of the
# committed fatbin and table on another H200 (no build, no check), and a
# narrow sweep (shard 896, 16 warps) as a check of the refactored sweep loop.
set -u
B=/tmp/bk
mkdir -p $B
BENCH_TAG=r OUT=$B timeout 300 scripts/bench-kernel --no-build --no-check > $B/console.txt 2>&1; echo "bench-kernel rc $?"
grep "^| 3584 | 896 \|^| 3584 | 3584 \|copy bandwidth\|machine" bench/kernel-h200-2026-11-30r.txt
cp bench/kernel-h200-2026-11-30r.txt $B/
HARNESS_SHARDS=896 HARNESS_WARPS=16 timeout 200 build/harness kernel/kernels.fatbin sweep $B/sweep896.tsv > $B/sweep896.txt 2>&1; echo "sweep rc $?"
grep "^sweep" $B/sweep896.txt
cd $B && tar czf $OUT/bk.tgz . && ls -la $OUT
