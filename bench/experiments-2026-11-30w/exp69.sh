#!/bin/bash
# Session 2026-11-30 (11th, "w") call 12, nvidia-h200: why is LSH slow on
# the no-cluster configs? WIDE (-DTPRUN_LSH_EXP -DTPRUN_LSH_WIDE: as many
# chunk pairs in flight as the weight ring, so a warp's whole latent part
# is asked for at once) and UNAL (-DTPRUN_LSH_EXP -DTPRUN_LSH_UNALIGNED:
# the warps' K parts as committed, pairs not line-aligned). base = the
# committed fatbin. 3 interleaved rounds, timing only.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/w
PIDS=""
for b in WIDE UNAL; do
  case $b in WIDE) D="-DTPRUN_LSH_EXP -DTPRUN_LSH_WIDE" ;; UNAL) D="-DTPRUN_LSH_EXP -DTPRUN_LSH_UNALIGNED" ;; esac
  ( mkdir -p build/$b && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/$b/ && cd build/$b && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 $D -Xptxas -v -I . -gencode arch=compute_90,code=sm_90 -o ../$b.fatbin k.cu > ../$b-b.txt 2>&1 ) & PIDS="$PIDS $!"
done
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
for p in $PIDS; do wait $p; done; ls -la build/*.fatbin
grep -A3 "m3_d8p' for\|m3_d8p1' for\|m3_t32p' for" build/WIDE-b.txt | grep -E "entry|Used|spill"
date -u
AB="896:1,2,3,4:16/8/g/16/1/p,16/8/g/16/1/p/one,32/4/g/8/4/p;3584:1,4:32/4/g/4/4/pf48.8l/p/lb"
for r in 1 2 3; do
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  for b in WIDE UNAL; do
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness build/$b.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$b r$r /" >> $O/kab.txt
  done
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base WIDE UNAL" | tee $O/kab-summary.txt
date -u
