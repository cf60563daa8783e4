#!/bin/bash
# Session 2026-11-30 (11th, "w") call 6, nvidia-h200: the warps' K parts
# rotated by the tile index (-DTPRUN_ROT_EXP; a correct kernel, another
# summation order over the warps), so that the tiles read different latent
# lines at any moment instead of all the same ones. base = the committed
# fatbin. 4 interleaved rounds; then the harness check of ROT.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/w
( mkdir -p build/R && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/R/ && cd build/R && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_ROT_EXP -I . -gencode arch=compute_90,code=sm_90 -o ../R.fatbin k.cu > ../R-b.txt 2>&1 ) & P=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $P; ls -la build/R.fatbin; head -5 build/R-b.txt
date -u
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,16/8/g/16/1/p/one,32/4/g/8/4/p;3584:1,2,4,6,8:32/4/g/4/4/pf48.8l/p/lb,16/8/g/8/1/p;7168:1,4,8:16/8/g/4/1/p"
for r in 1 2 3 4; do
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness build/R.fatbin ab 2>&1 | grep '^ab' | sed "s/^/rot r$r /" >> $O/kab.txt
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base rot" | tee $O/kab-summary.txt
date -u
timeout 240 build/harness build/R.fatbin check > $O/rot-check.txt 2>&1; echo "check rc $?"; tail -n 2 $O/rot-check.txt
date -u
