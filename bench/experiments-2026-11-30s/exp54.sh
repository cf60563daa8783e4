#!/bin/bash
# Session 2026-11-30 (10th) call 7, nvidia-h200: the load-balancing policy
# on cluster configs the sweep did not try it on (it tries the four fastest
# per layout and M, and no clusters of 3, 6, 8 at shard >= 896), with the
# committed fatbin and harness (87e3d55). 4 rounds, interleaved configs.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
A3="3584:1,4,8:32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/pf48.8l/p,32/4/g/2/4/p/lb,32/4/g/2/8/p/lb,32/4/g/4/8/p/lb,32/4/g/8/4/p/lb,32/4/g/8/2/p/lb,16/8/g/4/4/p/lb,16/8/g/8/4/p/lb,16/8/g/4/2/p/lb,16/8/g/2/8/p/lb,32/4/g/4/4/pf64.16l/p/lb,32/4/g/4/4/pf48.8l/p/sp"
A8="896:4,5,6,7,8:32/4/g/8/4/p,32/4/g/16/2/p,16/8/g/16/1/p/one,32/4/g/4/4/p/lb,32/4/g/4/8/p/lb,32/4/g/2/8/p/lb,16/8/g/8/2/p/lb,16/8/g/4/4/p/lb,16/8/g/4/8/p/lb,16/8/g/8/4/p/lb,32/4/g/16/2/p/lb,32/4/g/8/2/p/lb,16/8/g/8/2/p/one/lb,16/8/g/4/4/p/one/lb"
for r in 1 2 3 4; do
  HARNESS_AB="$A3;$A8" HARNESS_AB_REPS=1 timeout 150 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/c r$r /" >> $O/kab.txt
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "c" | sort -k1,1n -k3,3n -k4,4g | tee $O/kab-summary.txt
date -u
