#!/bin/bash
# Session 2026-11-30 (10th) call 8, nvidia-h200-x2: step sweep of L2
# prefetch plans around 48.8l, all with the load-balancing policy (commit
# 87e3d55's binaries); then bench-step and tp2 with the picked table.
set -u
O=$OUT
R=/tmp/gc55
rm -rf $R; mkdir -p $O $R
exec > >(tee -a $O/console.txt) 2>&1
export TPRUN_MULTICAST=0
tar xzf .dev/bin.tgz
nvidia-smi -L
C=32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/pf56.8l/p/lb,32/4/g/4/4/pf64.8l/p/lb,32/4/g/4/4/pf48.10l/p/lb,32/4/g/4/4/pf48.12l/p/lb,32/4/g/4/4/pf40.10l/p/lb,32/4/g/4/4/pf48.6l/p/lb,32/4/g/4/4/pf32.8l/p/lb
BENCH_TAG=t OUT=$R/ss timeout 200 scripts/step-sweep --configs $C > $R/ss.log 2>&1; echo "step-sweep rc $?"
tail -24 $R/ss.log
cp $R/ss/step_table.tsv $O/ 2>/dev/null; cp $R/ss/step-sweep-h200x2-*.txt $O/ 2>/dev/null
export TPRUN_KERNELS_STEP_TABLE=$R/ss/step_table.tsv
BENCH_TAG=t RESULTS=$R/a OUT=$R/outa scripts/gpu-checks tp2 bench-step > $R/a.txt 2>&1
cat $R/a/summary.txt; tail -10 $R/a/step-h200x2-*.txt
cp $R/outa/gpu-checks.tgz $O/a.tgz
