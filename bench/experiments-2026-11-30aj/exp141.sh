#!/bin/bash
# Session 2026-11-30 (20th, "aj") call 8, nvidia-h200: the carveout column
# shipped in Go and the harness (committed sources, committed fatbin):
#   1. scripts/bench-kernel --sweep --no-build: harness check (random
#      carveouts on a third of the launches) and memcheck; the sweep at
#      latent 3584 shard 896 only (every config; the sweep now also tries
#      65 and 80 % on the six fastest of each layout and M), the table
#      picked from the committed sweeps s, z and aa overridden by it; the
#      bench of every shape with that table, PyTorch in the same run;
#   2. the kernel package's GPU tests with that table (TPRUN_KERNELS_CONFIG_TABLE).
source scripts/device-call-prologue
tar xzf .dev/bin-aj3.tgz
B=$O/bk
BENCH_TAG=aj SWEEP_BASE="bench/kernel-sweep-h200-2026-11-30s.tsv bench/kernel-sweep-h200-2026-11-30z.tsv bench/kernel-sweep-h200-2026-11-30aa.tsv" HARNESS_SHARDS=896 OUT=$B timeout 420 scripts/bench-kernel --sweep --no-build > $B.console.txt 2>&1; echo "bench-kernel rc $?"
grep -E "CHECK|ERROR SUMMARY|status" $B.console.txt | tail -4
el "check, sweep, bench"
cp $B/sweep.tsv $O/kernel-sweep-896.tsv 2>/dev/null; cp $B/config_table.tsv $O/ 2>/dev/null
awk '$2==896' $B/config_table.tsv
grep -A12 '| 3584 | 896 | 1 ' $B/kernel-h200-*.txt | head -10; grep -A4 'Targets' $B/kernel-h200-*.txt
cd kernel && TPRUN_KERNELS_CONFIG_TABLE=$B/config_table.tsv timeout 150 ../bin/kernel.test -test.count 1 > $O/kernel-tests.txt 2>&1; echo "kernel.test rc $?"; tail -2 $O/kernel-tests.txt; grep -c -- '--- PASS' $O/kernel-tests.txt; grep -- '--- FAIL' $O/kernel-tests.txt | head
cd ..; tar czf $O/bk.tgz -C $O bk bk.console.txt; rm -rf $B
el done
