#!/bin/bash
# Session 2026-11-30 (11th, "w") call 4, nvidia-h200: how much of the
# latent's cost at shards 3584 and 7168 would halving its L2 reads per
# weight byte save (what 64-row tiles would do)? Timing-only builds:
# HALF (-DTPRUN_HALFLAT_EXP: every other latent chunk load predicated off)
# and NOLAT (no latent loads). base = the committed fatbin. 4 rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/w
PIDS=""
for b in HALF NOLAT; do
  case $b in HALF) D=TPRUN_HALFLAT_EXP ;; NOLAT) D=TPRUN_NOLAT_EXP ;; esac
  ( mkdir -p build/$b && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/$b/ && cd build/$b && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -D$D -I . -gencode arch=compute_90,code=sm_90 -o ../$b.fatbin k.cu > ../$b-b.txt 2>&1 ) & PIDS="$PIDS $!"
done
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
for p in $PIDS; do wait $p; done; ls -la build/*.fatbin; head -3 build/*-b.txt
date -u
AB="3584:1,2,4,6,8:32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/p/lb,16/8/g/8/1/p;7168:1,4,8:32/4/g/4/4/pf48.8l/p/lb,16/8/g/8/1/p"
for r in 1 2 3 4; do
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  for b in HALF NOLAT; do
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness build/$b.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$b r$r /" >> $O/kab.txt
  done
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base HALF NOLAT" | tee $O/kab-summary.txt
date -u
