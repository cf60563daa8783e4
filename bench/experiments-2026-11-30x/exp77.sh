#!/bin/bash
# Session 2026-11-30 (12th, "x") call 7, nvidia-h200: NOMOV, timing only
# (wrong values): every 16-byte weight load used as one MMA A fragment as
# it lands (what a packed layout stored in fragment order would give), so
# no register moves build the fragments; "_d8pl" at M 5-8 with a latent
# ring of 2 pairs (base: 1). .dev/x = the committed sources plus
# nomov-skinny.patch. base = the committed fatbin. 3 interleaved rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/x
( mkdir -p build/NM && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/NM/ && cd build/NM && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_NOMOV_EXP -DTPRUN_LP5=2 -I . -gencode arch=compute_90,code=sm_90 -o ../NM.fatbin k.cu > ../NM-b.txt 2>&1; echo "build NM rc $?" ) & P=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"
wait $P; ls -la build/NM.fatbin
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,16/8/g/16/1/p/one,32/4/g/8/4/p,32/4/g/16/2/p,16/8/l/16/1/p;3584:1,2,4,8:32/4/g/4/4/pf48.8l/p/lb,16/8/g/8/1/p"
for r in 1 2 3; do
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 60 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 60 build/harness build/NM.fatbin ab 2>&1 | grep '^ab' | sed "s/^/nomov r$r /" >> $O/kab.txt
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base nomov" | tee $O/kab-summary.txt
date -u
