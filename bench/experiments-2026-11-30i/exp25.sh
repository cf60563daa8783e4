#!/bin/bash
# Call on nvidia-h200-x2 (2026-11-30i): the final tree. (1) scripts/step-sweep
# (does the provisional step table hold?); (2) GPU tests, tp1, tp2, kill,
# bench-step; (3) tp4 on GPU 0 and tp8 on GPU 1 side by side.
set -u
O=$OUT
R=/tmp/gc
mkdir -p $O $R build
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
export TPRUN_MULTICAST=0
nvidia-smi -L
sha256sum kernel/kernels.fatbin
BENCH_TAG=i OUT=$R/ss scripts/step-sweep > $R/ss.txt 2>&1; echo "step-sweep exit $?"
tail -22 $R/ss.txt
el sweep
BENCH_TAG=i RESULTS=$R/a OUT=$R/outa scripts/gpu-checks tests tp1 tp2 kill bench-step > $R/a.txt 2>&1
cat $R/a/summary.txt
tail -14 $R/a/step-h200x2-*.txt
el checks
SHARED_DEVICE=0 RESULTS=$R/b OUT=$R/outb scripts/gpu-checks tp4 > $R/b.txt 2>&1 & P1=$!
SHARED_DEVICE=1 RESULTS=$R/c OUT=$R/outc scripts/gpu-checks tp8 > $R/c.txt 2>&1 & P2=$!
wait $P1; el tp4; cat $R/b/summary.txt
wait $P2; el tp8; cat $R/c/summary.txt
cp $R/outa/gpu-checks.tgz $O/a.tgz; cp $R/outb/gpu-checks.tgz $O/b.tgz; cp $R/outc/gpu-checks.tgz $O/c.tgz
tar czf $O/ss.tgz -C $R ss ss.txt
el done
