#!/bin/bash
# Session 2026-11-30 (10th) call 5, nvidia-h200: the committed fatbin
# (unchanged since 2026-11-30p) with the harness of 9cf5a1d: check (random
# cluster scheduling policies on half the cluster launches), memcheck, the
# full sweep (load balancing tried on the four fastest cluster configs per
# layout), the bench with the picked table. Files back as one tarball.
set -u
B=/tmp/bk
mkdir -p $B
BENCH_TAG=s OUT=$B timeout 585 scripts/bench-kernel --sweep --no-build > $B/console.txt 2>&1; echo "bench-kernel rc $?"
tail -42 $B/console.txt
cp bench/kernel-h200-2026-11-30s.txt $B/ 2>/dev/null
cd $B && tar czf $OUT/bk.tgz . && ls -la $OUT
