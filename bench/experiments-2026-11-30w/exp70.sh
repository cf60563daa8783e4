#!/bin/bash
# Session 2026-11-30 (11th, "w") call 13, nvidia-h200: LSH2, line-wise
# latent loads for every M (-DTPRUN_LSH2_EXP, .dev/w2): a pair of chunks
# that starts on an even chunk per instruction, 4 rows (two instructions
# for M > 4), shuffles to the B fragments; the committed warp split, a warp
# starting on an odd chunk runs a loop body that begins with a pair's
# second half. base = the committed fatbin. Check, then 3 rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/w2
( mkdir -p build/L2 && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/L2/ && cd build/L2 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_LSH2_EXP -I . -gencode arch=compute_90,code=sm_90 -o ../L2.fatbin k.cu > ../L2-b.txt 2>&1 ) & P=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $P; ls -la build/L2.fatbin
date -u
timeout 150 build/harness build/L2.fatbin check > $O/lsh2-check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK" $O/lsh2-check.txt; grep -m5 -i "fail" $O/lsh2-check.txt
date -u
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,16/8/g/16/1/p/one,32/4/g/8/4/p;3584:1,2,3,4,5,6,7,8:32/4/g/4/4/pf48.8l/p/lb"
for r in 1 2 3; do
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 60 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 60 build/harness build/L2.fatbin ab 2>&1 | grep '^ab' | sed "s/^/lsh2 r$r /" >> $O/kab.txt
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base lsh2" | tee $O/kab-summary.txt
date -u
