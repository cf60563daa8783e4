#!/bin/bash
# Session 2026-11-30 (10th) call 11, nvidia-h200-x2: the step with clusters
# of 8 two-warp CTAs under load balancing (second best in the kernel-alone
# A/B of call 7), against the step table's config; binaries of 40ff306.
set -u
O=$OUT
R=/tmp/gc58
rm -rf $R; mkdir -p $O $R
exec > >(tee -a $O/console.txt) 2>&1
export TPRUN_MULTICAST=0
tar xzf .dev/bin.tgz
nvidia-smi -L
C=32/4/g/4/4/pf48.8l/p/lb,32/4/g/2/8/p/lb,32/4/g/2/8/pf48.8l/p/lb,32/4/g/2/8/pf40.8l/p/lb
BENCH_TAG=v OUT=$R/ss timeout 150 scripts/step-sweep --configs $C > $R/ss.log 2>&1; echo "step-sweep rc $?"
tail -22 $R/ss.log
cp $R/ss/step-sweep-h200x2-*.txt $O/ 2>/dev/null
