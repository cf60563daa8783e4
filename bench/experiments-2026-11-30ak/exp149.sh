#!/bin/bash
# Session 2026-11-30 (21st, "ak") call 4, nvidia-h200: as call 3 (exp148), with the sweep's carveouts also on the fastest of each geometry within 10 % of the best; the fatbin of
# 2830eab ("_t32pw"): scripts/bench-kernel --sweep --no-build --no-check
# at latent 3584 shard 896 only (the check and memcheck ran in call 2), the
# table picked from the committed sweeps s, z and aa overridden by it, the
# bench of every shape with that table and PyTorch in the same run; then the
# kernel package's GPU tests with that table (TPRUN_KERNELS_CONFIG_TABLE);
# then a second bench with that table (a second sample on this GPU).
source scripts/device-call-prologue
tar xzf .dev/bin-k.tgz
B=$O/bk
BENCH_TAG=ak3 SWEEP_BASE="bench/kernel-sweep-h200-2026-11-30s.tsv bench/kernel-sweep-h200-2026-11-30z.tsv bench/kernel-sweep-h200-2026-11-30aa.tsv" HARNESS_SHARDS=896 OUT=$B timeout 300 scripts/bench-kernel --sweep --no-build --no-check > $B.console.txt 2>&1; echo "bench-kernel rc $?"
el "sweep, bench"
cp $B/sweep.tsv $O/kernel-sweep-896.tsv 2>/dev/null; cp $B/config_table.tsv $O/ 2>/dev/null
awk '$2==896' $B/config_table.tsv
grep -A12 '| 3584 | 896 | 1 ' $B/kernel-h200-*.txt | head -10; grep -A4 'Targets' $B/kernel-h200-*.txt
cd kernel && TPRUN_KERNELS_CONFIG_TABLE=$B/config_table.tsv timeout 150 ../bin/kernel.test -test.count 1 -test.v > $O/kernel-tests.txt 2>&1; echo "kernel.test rc $?"; tail -2 $O/kernel-tests.txt; grep -c -- '--- PASS' $O/kernel-tests.txt; grep -- '--- FAIL' $O/kernel-tests.txt | head; grep -m3 "t32pw" $O/kernel-tests.txt
cd ..; el "kernel tests"
if (( $(date +%s) - T0 < 330 )); then
  cp $B/config_table.tsv kernel/config_table.tsv
  BENCH_TAG=ak4 OUT=$O/bk2 timeout 200 scripts/bench-kernel --no-build --no-check > $O/bk2.console.txt 2>&1; echo "bench 2 rc $?"
  grep -A12 '| 3584 | 896 | 1 ' $O/bk2/kernel-h200-*.txt | head -10; grep -A4 'Targets' $O/bk2/kernel-h200-*.txt
  el "bench 2"
fi
tar czf $O/bk.tgz -C $O bk bk.console.txt $(ls -d $O/bk2 2>/dev/null | xargs -r -n1 basename) $(ls $O/bk2.console.txt 2>/dev/null | xargs -r -n1 basename); rm -rf $B $O/bk2 $O/bk.console.txt $O/bk2.console.txt
el done
