#!/bin/bash
# Session 2026-11-30 (13th, "z") call 2, nvidia-h200-x2: the binaries of
# commit 953ac88 (packed weights in MMA fragment order, fatbin 96feaff8,
# new kernel table). The step sweep (four candidates: the table's config
# with three L2 prefetch plans, and the 8-warp cluster-1 config), then every
# final check with the step table it picked (TPRUN_KERNELS_STEP_TABLE, the
# table to commit): GPU tests, tp1, tp2, kill, bench-step; then tp4 (GPU 0)
# and tp8 (GPU 1) side by side.
set -u
O=$OUT
R=/tmp/gc82
rm -rf $R; mkdir -p $O $R
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
export TPRUN_MULTICAST=0
tar xzf .dev/bin.tgz
nvidia-smi -L
sha256sum kernel/kernels.fatbin; cat kernel/kernels.fatbin.stamp
BENCH_TAG=z OUT=$R/ss timeout 200 scripts/step-sweep --configs 32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/pf40.8l/p/lb,32/4/g/4/4/p/lb,16/8/g/8/1/p > $R/ss.log 2>&1; echo "step-sweep rc $?"
el step-sweep
tail -25 $R/ss.log
cp $R/ss/step_table.tsv $O/ 2>/dev/null; cp $R/ss/step-sweep-h200x2-*.txt $O/ 2>/dev/null; cp $R/ss/step-sweep.tsv $O/ 2>/dev/null
if [[ -s $R/ss/step_table.tsv ]]; then export TPRUN_KERNELS_STEP_TABLE=$R/ss/step_table.tsv; fi
echo "step table for the checks: ${TPRUN_KERNELS_STEP_TABLE:-embedded}"
BENCH_TAG=z RESULTS=$R/a OUT=$R/outa scripts/gpu-checks tests tp1 tp2 kill bench-step > $R/a.txt 2>&1
cat $R/a/summary.txt; tail -14 $R/a/step-h200x2-*.txt
cp $R/outa/gpu-checks.tgz $O/a.tgz
el checks
SHARED_DEVICE=0 RESULTS=$R/b OUT=$R/outb scripts/gpu-checks tp4 > $R/b.txt 2>&1 & P1=$!
SHARED_DEVICE=1 RESULTS=$R/c OUT=$R/outc scripts/gpu-checks tp8 > $R/c.txt 2>&1 & P2=$!
wait $P1; el tp4; cat $R/b/summary.txt; tail -1 $R/b/tp4.log; cp $R/outb/gpu-checks.tgz $O/b.tgz
wait $P2; el tp8; cat $R/c/summary.txt; tail -1 $R/c/tp8.log; cp $R/outc/gpu-checks.tgz $O/c.tgz
