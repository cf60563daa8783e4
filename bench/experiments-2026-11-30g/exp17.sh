#!/bin/bash
# Call on nvidia-h200-x2 (2026-11-30g): the shipped candidate (cluster
# epilogue: non-leaders only arrive; receive skips the own slice, which the
# tiles store straight into the output). On GPU 0 alone: bench-kernel
# --sweep (build, check, memcheck, sweep, table, read ceiling, bench vs
# PyTorch). Then on both GPUs: the step A/B, old binary (HEAD 70909ac, its
# embedded fatbin and table) against the new binary with the new fatbin and
# the old table, three interleaved rounds.
set -u
O=$OUT
KB=/tmp/kb
mkdir -p $O $KB
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
export TPRUN_MULTICAST=0
nvidia-smi -L
cp kernel/config_table.tsv /tmp/old_table.tsv
CUDA_VISIBLE_DEVICES=0 OUT=$KB BENCH_TAG=g HARNESS_READ_SHARDS=3584,896 HARNESS_READ_CTAS=132,264 scripts/bench-kernel --sweep > $KB/bench-kernel-console.txt 2>&1
echo "bench-kernel exit $?"
grep -E "CHECK|ERROR SUMMARY|SMALL" $KB/log.txt | head -5
cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/
cp $KB/config_table.tsv $KB/sweep.tsv $O/
cp bench/kernel-h200-*g.txt $O/ 2>/dev/null
grep -E "^\| 3584 \| (3584|896) " bench/kernel-h200-*g.txt
el bench-kernel
NEWF=$PWD/kernel/kernels.fatbin
B="--hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 --replays 200 --warmup 20 --rotate-mb 512"
for r in 1 2 3; do
  rm -f /tmp/s.tsv; timeout 90 bin/tprun-old --tp 2 -- bin/tprun-old __bench $B --table /tmp/s.tsv > /tmp/old-$r.log 2>&1
  echo "round $r old exit $?" >> $KB/step-ab.txt; cat /tmp/s.tsv >> $KB/step-ab.txt
  rm -f /tmp/s.tsv; TPRUN_KERNELS_FATBIN=$NEWF TPRUN_KERNELS_CONFIG_TABLE=/tmp/old_table.tsv timeout 90 bin/tprun --tp 2 -- bin/tprun __bench $B --table /tmp/s.tsv > /tmp/new-$r.log 2>&1
  echo "round $r new exit $?" >> $KB/step-ab.txt; cat /tmp/s.tsv >> $KB/step-ab.txt
  el round $r
done
grep -h "FAILED\|every checked" /tmp/old-1.log /tmp/new-1.log
python3 - $KB/step-ab.txt > $KB/step-ab-summary.txt <<'PY'
import sys, collections, statistics
d = collections.defaultdict(list); cur = None
for l in open(sys.argv[1]):
    x = l.split()
    if l.startswith('round'): cur = x[2]; continue
    if not x or x[0] == 'm': continue
    d[(cur, int(x[0]))].append(float(x[1]))
print("M | old (rounds) | new (rounds) | median old new diff")
for m in range(1, 9):
    o, n = d[('old', m)], d[('new', m)]
    if o and n:
        print(f"{m} | {' '.join(map(str, o))} | {' '.join(map(str, n))} | {statistics.median(o):.3f} {statistics.median(n):.3f} {statistics.median(n) - statistics.median(o):+.3f}")
PY
cat $KB/step-ab-summary.txt
cp /tmp/old-1.log /tmp/new-1.log $KB/
tar czf $O/rest.tgz -C $KB .
el done
