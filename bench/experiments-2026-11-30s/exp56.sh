#!/bin/bash
# Session 2026-11-30 (10th) call 9, nvidia-h200: is it the cluster launch
# itself that costs shard 896's cluster configs ~0.25 µs over the
# no-cluster M 1? A timing-only build (SKIP: no cluster sum) whose
# one-instance entry points, launched WITHOUT a cluster, split K as if in
# clusters of 4 (-DTPRUN_FAKE_CLUSTER=4; harness-fake.cu with
# HARNESS_FAKE_CLUSTER=1 launches the /one configs with a cluster of 1 and
# the same grid). real = the same build launched with clusters of 4;
# base = the committed fatbin (with its sum).
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/csum
( mkdir -p build/F && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/F/ && cd build/F && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_CSUM_SKIP -DTPRUN_FAKE_CLUSTER=4 -I . -gencode arch=compute_90,code=sm_90 -o ../F.fatbin k.cu > ../F-b.txt 2>&1 ) & P=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness-fake $S/harness-fake.cu -lcuda > build/h2.txt 2>&1; cat build/h2.txt
wait $P; ls -la build/F.fatbin; cat build/F-b.txt | head -5
date -u
AB="896:1,2,4,6,8:16/8/g/4/4/p/one,16/8/g/8/4/p/one,16/8/g/16/4/p/one,16/8/g/16/1/p/one;3584:1,8:16/8/g/4/4/p/one,16/8/g/8/4/p/one"
for r in 1 2 3 4; do
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 90 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 90 build/harness-fake build/F.fatbin ab 2>&1 | grep '^ab' | sed "s/^/real r$r /" >> $O/kab.txt
  HARNESS_FAKE_CLUSTER=1 HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 90 build/harness-fake build/F.fatbin ab 2>&1 | grep '^ab' | sed "s/^/fake r$r /" >> $O/kab.txt
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base real fake" | tee $O/kab-summary.txt
date -u
