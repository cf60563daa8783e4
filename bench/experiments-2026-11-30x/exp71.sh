#!/bin/bash
# Session 2026-11-30 (12th, "x") call 1, nvidia-h200: the "l" entry points
# (skinny_lines: latent pairs of chunks = whole 128-byte lines, B columns
# 0-3 / 4-7 for the pair's even / odd chunk, no shuffles), from the working
# tree's kernel/. E1: as written; E2: "_d8pl" at M 5-8 with a latent ring
# of 2 pairs and at most 256 threads. Check E1, then 3 interleaved rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
B() { # name, extra flags
  ( mkdir -p build/$1 && cp kernel/skinny.cu kernel/skinny.h kernel/receive.cu build/$1/ && cd build/$1 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 $2 -I . -gencode arch=compute_90,code=sm_90 -o ../$1.fatbin k.cu > ../$1-b.txt 2>&1; echo "build $1 rc $?" )
}
B E1 "" & P1=$!
B E2 "-DTPRUN_D8PL_LP5=2 -DTPRUN_D8PL_MAXT5=256" & P2=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"; cat build/h.txt
wait $P1; wait $P2; ls -la build/*.fatbin
date -u
timeout 240 build/harness build/E1.fatbin check > $O/e1-check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK" $O/e1-check.txt; grep -m8 -i "fail\|mismatch\|wrong" $O/e1-check.txt
date -u
AB1="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,16/8/g/16/1/p/one,32/4/g/8/4/p,16/8/l/16/1/p,32/4/l/8/4/p,16/8/l/8/2/p,32/4/l/8/2/p,16/8/l/8/1/p;3584:1,2,3,4,5,6,7,8:32/4/g/4/4/pf48.8l/p/lb,32/4/l/4/4/pf48.8l/p/lb,32/4/l/4/4/p/lb,16/8/l/8/1/p,16/8/l/4/2/p"
AB2="896:5,6,7,8:16/8/l/8/1/p,16/8/l/8/2/p,16/8/l/4/4/p;3584:5,6,7,8:16/8/l/8/1/p,16/8/l/4/2/p"
for r in 1 2 3; do
  HARNESS_AB="$AB1" HARNESS_AB_REPS=1 timeout 90 build/harness build/E1.fatbin ab 2>&1 | grep '^ab' | sed "s/^/e1 r$r /" >> $O/kab.txt
  HARNESS_AB="$AB2" HARNESS_AB_REPS=1 timeout 60 build/harness build/E2.fatbin ab 2>&1 | grep '^ab' | sed "s/^/e2 r$r /" >> $O/kab.txt
  HARNESS_AB="$AB2" HARNESS_AB_REPS=1 timeout 60 build/harness build/E1.fatbin ab 2>&1 | grep '^ab' | sed "s/^/e1 r$r /" >> $O/kab.txt
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "e1 e2" | tee $O/kab-summary.txt
date -u
