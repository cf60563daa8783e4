#!/bin/bash
# Session 2026-11-30 (10th) call 4, nvidia-h200: launch attributes, on the
# committed fatbin. The harness (.dev/csum/harness-attr.cu) as committed
# plus: HARNESS_NOATTR1=1 leaves the cluster-dimension attribute out when
# the cluster is 1 (the harness and kernel.LaunchSkinny always set it);
# HARNESS_CPOLICY=1|2: cluster scheduling policy spread | load balancing.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness .dev/csum/harness-attr.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
date -u
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,16/8/g/16/1/p/one,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,4,8:32/4/g/4/4/pf48.8l/p,16/8/g/8/1/p;7168:1,8:16/8/g/4/1/p"
N="dflt noattr1 spread lbal"
for r in 1 2 3 4; do
  for n in $N; do
    case $n in dflt) e="";; noattr1) e="HARNESS_NOATTR1=1";; spread) e="HARNESS_CPOLICY=1";; lbal) e="HARNESS_CPOLICY=2";; esac
    env $e HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "$N" | tee $O/kab-summary.txt
date -u
