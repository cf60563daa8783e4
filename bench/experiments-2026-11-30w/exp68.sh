#!/bin/bash
# Session 2026-11-30 (11th, "w") call 11, nvidia-h200: a correct form of
# LINE for M <= 4 (-DTPRUN_LSH_EXP): each latent load instruction reads two
# chunks (128 bytes, one line) of 4 rows, and shuffles hand every lane its
# B fragment; the warps' K parts start on even chunks. base = the committed
# fatbin. Harness check of LSH first, then 4 interleaved rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/w
( mkdir -p build/L && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/L/ && cd build/L && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_LSH_EXP -I . -gencode arch=compute_90,code=sm_90 -o ../L.fatbin k.cu > ../L-b.txt 2>&1 ) & P=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $P; ls -la build/L.fatbin; grep -v lshift build/L-b.txt | head -5
date -u
timeout 200 build/harness build/L.fatbin check > $O/lsh-check.txt 2>&1; echo "check rc $?"; tail -n 2 $O/lsh-check.txt; grep -m5 -i "fail" $O/lsh-check.txt
date -u
AB="896:1,2,3,4:16/8/g/16/1/p,16/8/g/16/1/p/one,32/4/g/8/4/p;3584:1,2,3,4:32/4/g/4/4/pf48.8l/p/lb,16/8/g/8/1/p"
for r in 1 2 3 4; do
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness build/L.fatbin ab 2>&1 | grep '^ab' | sed "s/^/lsh r$r /" >> $O/kab.txt
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base lsh" | tee $O/kab-summary.txt
date -u
