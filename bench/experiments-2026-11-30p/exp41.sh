#!/bin/bash
# Session 2026-11-30 (9th) call 5, nvidia-h200: rebuild after a comment fix
# in skinny.cu, then check, memcheck, the full sweep (LSU plans now on the
# three fastest configs of each layout) and the bench; the files go back
# as one tarball (the device tool returns at most 8 files).
set -u
B=/tmp/bk
mkdir -p $B
BENCH_TAG=q OUT=$B timeout 570 scripts/bench-kernel --sweep > $B/console.txt 2>&1; echo "bench-kernel rc $?"
tail -40 $B/console.txt
cp bench/kernel-h200-2026-11-30q.txt $B/ 2>/dev/null
cd $B && tar czf $OUT/bk.tgz . && ls -la $OUT
