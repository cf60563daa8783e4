#!/bin/bash
# Session 2026-11-30 (12th, "x") call 9, nvidia-h200, branch frag-layout:
# the packed weight layout in MMA fragment order (each 16-byte load is one
# MMA's A operand; kernel.PackWeight, the harness's pack_weight, skinny.h,
# skinny.cu's packed MMA operands). F = that branch's sources, sm_90 only.
# Check F (the harness packs in the new order), then 3 interleaved rounds
# against the committed fatbin of main (timing only: the pool's weights
# are random, so the layout does not matter to the times).
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
( mkdir -p build/F && cp kernel/skinny.cu kernel/skinny.h kernel/receive.cu build/F/ && cd build/F && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -I . -gencode arch=compute_90,code=sm_90 -o ../F.fatbin k.cu > ../F-b.txt 2>&1; echo "build F rc $?" ) & P=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"
wait $P; ls -la build/F.fatbin
timeout 100 build/harness build/F.fatbin check > $O/f-check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK" $O/f-check.txt; grep -m5 FAIL $O/f-check.txt
date -u
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,16/8/l/16/1/p,16/8/g/16/1/p/one,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,2,3,4,5,6,7,8:32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/pf40.8l/p/lb"
for r in 1 2 3; do
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 40 build/harness .dev/main.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 40 build/harness build/F.fatbin ab 2>&1 | grep '^ab' | sed "s/^/frag r$r /" >> $O/kab.txt
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base frag" | tee $O/kab-summary.txt
date -u
