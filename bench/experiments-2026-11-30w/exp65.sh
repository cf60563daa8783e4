#!/bin/bash
# Session 2026-11-30 (11th, "w") call 8 (call 7 moved the weights too: void), nvidia-h200: would the CTAs that
# share an SM save the latent's L2 reads if they read the same K part (L1)?
# Timing only, wrong sums: -DTPRUN_SMID_EXP takes the K part of a cluster CTA's LATENT loads (not its weights)
# from %smid % cluster instead of its cluster rank. base = the committed
# fatbin. Cluster configs of shards 3584, 7168 and 896; 4 rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/w
( mkdir -p build/Q && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/Q/ && cd build/Q && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_SMID_EXP -I . -gencode arch=compute_90,code=sm_90 -o ../Q.fatbin k.cu > ../Q-b.txt 2>&1 ) & P=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $P; ls -la build/Q.fatbin; head -5 build/Q-b.txt
date -u
AB="3584:1,2,4,6,8:32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/p/lb,32/4/g/4/4/pf48.8l/p;896:1,4,8:32/4/g/8/4/p,16/8/g/4/4/p/one;7168:1,4,8:32/4/g/4/4/pf48.8l/p/lb"
for r in 1 2 3 4; do
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness build/Q.fatbin ab 2>&1 | grep '^ab' | sed "s/^/smid r$r /" >> $O/kab.txt
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base smid" | tee $O/kab-summary.txt
date -u
