#!/bin/bash
# Session 2026-11-30 (10th) call 10, nvidia-h200: a repeat bench of the
# committed fatbin and table (commit 50a8542) on another H200, no sweep,
# no check. Files back as one tarball.
set -u
B=/tmp/bk57
rm -rf $B; mkdir -p $B
BENCH_TAG=u OUT=$B timeout 280 scripts/bench-kernel --no-build --no-check > $B/console.txt 2>&1; echo "bench-kernel rc $?"
grep "| 3584 | 896\|| 3584 | 3584\|Targets\|MISS" $B/console.txt | tail -24
cp bench/kernel-h200-2026-11-30u.txt $B/ 2>/dev/null
cd $B && tar czf $OUT/bk.tgz kernel-h200-2026-11-30u.txt readbw.txt console.txt && ls -la $OUT
