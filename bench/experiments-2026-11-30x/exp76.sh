#!/bin/bash
# Session 2026-11-30 (12th, "x") call 6, nvidia-h200-x2: the binaries of
# commit "kernel table: sweep with _d8pl" (fatbin 1fa883ba, the new kernel
# table; step table unchanged). Every final check: GPU tests, tp1, tp2,
# kill, bench-step; then tp4 (GPU 0) and tp8 (GPU 1) side by side.
set -u
O=$OUT
R=/tmp/gc76
rm -rf $R; mkdir -p $O $R
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
export TPRUN_MULTICAST=0
tar xzf .dev/bin.tgz
nvidia-smi -L
sha256sum kernel/kernels.fatbin; cat kernel/kernels.fatbin.stamp
BENCH_TAG=x RESULTS=$R/a OUT=$R/outa scripts/gpu-checks tests tp1 tp2 kill bench-step > $R/a.txt 2>&1
cat $R/a/summary.txt; tail -14 $R/a/step-h200x2-*.txt
cp $R/outa/gpu-checks.tgz $O/a.tgz
el checks
SHARED_DEVICE=0 RESULTS=$R/b OUT=$R/outb scripts/gpu-checks tp4 > $R/b.txt 2>&1 & P1=$!
SHARED_DEVICE=1 RESULTS=$R/c OUT=$R/outc scripts/gpu-checks tp8 > $R/c.txt 2>&1 & P2=$!
wait $P1; el tp4; cat $R/b/summary.txt; tail -1 $R/b/tp4.log; cp $R/outb/gpu-checks.tgz $O/b.tgz
wait $P2; el tp8; cat $R/c/summary.txt; tail -1 $R/c/tp8.log; cp $R/outc/gpu-checks.tgz $O/c.tgz
