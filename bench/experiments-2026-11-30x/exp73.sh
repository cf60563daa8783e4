#!/bin/bash
# Session 2026-11-30 (12th, "x") call 3, nvidia-h200: the "l" entry points
# with latent rings as long as the warp's run (call 2's SASS: with a ring
# of 2 pairs ptxas put the refill after the first MMAs, one more L2 round
# trip). "_d8pl": 4 pairs (M 5-8: at most 256 threads); "_t32pl": E1 4
# pairs (spills 8-36 B at M 1-4), E2 2 pairs, E3 4 pairs without the
# 128-register cap at M 1-4. Check E1, then 3 interleaved rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
B() { # name, extra flags
  ( mkdir -p build/$1 && cp kernel/skinny.cu kernel/skinny.h kernel/receive.cu build/$1/ && cd build/$1 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 $2 -I . -gencode arch=compute_90,code=sm_90 -o ../$1.fatbin k.cu > ../$1-b.txt 2>&1; echo "build $1 rc $?" )
}
B E1 "" & P1=$!
B E2 "-DTPRUN_T32PL_LP=2" & P2=$!
B E3 "-DTPRUN_T32PL_MINB4=1" & P3=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"; cat build/h.txt
wait $P1; wait $P2; wait $P3; ls -la build/*.fatbin
date -u
timeout 240 build/harness build/E1.fatbin check > $O/e1-check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK" $O/e1-check.txt; grep -m8 -i "fail\|mismatch\|wrong" $O/e1-check.txt
date -u
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,16/8/g/16/1/p/one,32/4/g/8/4/p,16/8/l/16/1/p,16/8/l/8/2/p,32/4/l/8/4/p,32/4/l/8/2/p,16/8/l/8/1/p,16/8/l/4/4/p;3584:1,2,3,4,5,6,7,8:32/4/g/4/4/pf48.8l/p/lb,32/4/l/4/4/pf48.8l/p/lb,32/4/l/4/4/p/lb,16/8/l/8/1/p,16/8/l/4/2/p,16/8/g/8/1/p"
for r in 1 2 3; do
  for e in E1 E2 E3; do
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 90 build/harness build/$e.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$e r$r /" >> $O/kab.txt
  done
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "E1 E2 E3" | tee $O/kab-summary.txt
date -u
