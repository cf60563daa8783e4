#!/bin/bash
# Session 2026-11-30 (12th, "x") call 8, nvidia-h200: SEL, "_d8pl" at M 5-8
# without extra MMAs (sel-skinny.patch on the committed sources, .dev/x2):
# the second latent load of a pair takes rows 4-7 with the halves swapped,
# and a per-lane select gives each chunk's MMA 8 useful B columns. S2: ring
# of 2 pairs at M 5-8 (no spill); S4: 4 pairs (spills 52-96 B). Check S2,
# then 3 interleaved rounds against the committed fatbin (base).
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/x2
B() { # name, extra flags
  ( mkdir -p build/$1 && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/$1/ && cd build/$1 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 $2 -I . -gencode arch=compute_90,code=sm_90 -o ../$1.fatbin k.cu > ../$1-b.txt 2>&1; echo "build $1 rc $?" )
}
B S2 "-DTPRUN_LP5=2" & P1=$!
B S4 "-DTPRUN_LP5=4" & P2=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"
wait $P1; wait $P2; ls -la build/*.fatbin
timeout 150 build/harness build/S2.fatbin check > $O/s2-check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK" $O/s2-check.txt; grep -m5 FAIL $O/s2-check.txt
date -u
AB="896:5,6,7,8:16/8/g/16/1/p/one,32/4/g/8/4/p,32/4/g/16/2/p,16/8/l/16/1/p,16/8/l/8/2/p,16/8/l/16/2/p,16/8/l/4/4/p;3584:5,8:32/4/g/4/4/pf48.8l/p/lb,16/8/g/8/1/p,16/8/l/8/1/p,16/8/l/4/2/p"
for r in 1 2 3; do
  for e in base S2 S4; do
    F=build/$e.fatbin; [[ $e == base ]] && F=kernel/kernels.fatbin
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 60 build/harness $F ab 2>&1 | grep '^ab' | sed "s/^/$e r$r /" >> $O/kab.txt
  done
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base S2 S4" | tee $O/kab-summary.txt
date -u
