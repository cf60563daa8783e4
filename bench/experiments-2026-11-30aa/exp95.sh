#!/bin/bash
# Session 2026-11-30 (14th, "aa") call 5, nvidia-h200: the kernel table's
# latent-1024 and -2048 rows swept again (fragment-order layout; the tenth
# session's picks until now), over the committed table's sweeps (s, then z);
# a bench of every shape with the picked table (PyTorch in the same run);
# then main's kernel GPU tests with the picked table (TPRUN_KERNELS_CONFIG_TABLE).
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
B=/tmp/bk; mkdir -p $B
BENCH_TAG=aa SWEEP_BASE="bench/kernel-sweep-h200-2026-11-30s.tsv bench/kernel-sweep-h200-2026-11-30z.tsv" HARNESS_LATENTS=1024,2048 OUT=$B timeout 420 scripts/bench-kernel --sweep --no-build --no-check > $B/console.txt 2>&1; echo "bench-kernel rc $?"
el sweep+bench
grep -E "^sweep latent (1024|2048)" $B/console.txt
grep -E "^\| (1024|2048|3584) \|" bench/kernel-h200-2026-11-30aa.txt
cp bench/kernel-h200-2026-11-30aa.txt $B/config_table.tsv $O/ 2>/dev/null; cp $B/sweep.tsv $O/kernel-sweep-h200-2026-11-30aa.tsv
if [[ -s $B/config_table.tsv ]]; then
  ( cd kernel && for i in 1 2; do TPRUN_KERNELS_CONFIG_TABLE=$B/config_table.tsv timeout 100 ../bin/kernel.test -test.v -test.count=1 -test.timeout 95s > $B/ktest$i.log 2>&1; echo "kernel.test (picked table) run $i rc $? $(grep -c '^--- PASS' $B/ktest$i.log) passed $(grep -c '^--- FAIL' $B/ktest$i.log) failed"; grep -E "^--- FAIL" $B/ktest$i.log | head -5; done )
fi
el tests
(cd $B && tar czf $O/bk.tgz console.txt readbw.txt ktest*.log 2>/dev/null)
el done
