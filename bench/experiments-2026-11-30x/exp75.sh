#!/bin/bash
# Session 2026-11-30 (12th, "x") call 5, nvidia-h200: the committed fatbin
# of call 4 ("_d8pl"). The sweep at latent 3584, shards 448, 896 and 1792
# (where "_d8pl" can win, M <= 4), over the tenth session's full sweep;
# the bench with the picked table; then a second bench with the same table.
set -u
B=/tmp/bk
mkdir -p $B
T0=$(date +%s)
BENCH_TAG=x SWEEP_BASE=bench/kernel-sweep-h200-2026-11-30s.tsv HARNESS_SHARDS=448,896,1792 OUT=$B timeout 400 scripts/bench-kernel --sweep --no-build --no-check > $B/console.txt 2>&1; echo "bench-kernel rc $? at $(( $(date +%s) - T0 )) s"
tail -40 $B/console.txt
cp bench/kernel-h200-2026-11-30x.txt $B/ 2>/dev/null
if [[ -s $B/config_table.tsv ]]; then
  cp $B/config_table.tsv kernel/config_table.tsv
  mkdir -p $B/r2
  BENCH_TAG=y OUT=$B/r2 timeout 150 scripts/bench-kernel --no-build --no-check > $B/r2/console.txt 2>&1; echo "bench 2 rc $? at $(( $(date +%s) - T0 )) s"
  cp bench/kernel-h200-2026-11-30y.txt $B/ 2>/dev/null
  grep -E "^\| 3584 \| 896" $B/kernel-h200-2026-11-30y.txt
fi
cd $B && tar czf $OUT/bk.tgz . && ls -la $OUT
