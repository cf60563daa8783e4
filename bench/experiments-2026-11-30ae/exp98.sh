#!/bin/bash
# Session 2026-11-30 (15th, "ae") call 2, nvidia-h200.
# "_t32pl" with SEL: the latent read by whole lines for 32-row tiles, M 5-8
# without extra MMAs (load 1 of a pair takes rows 4-7 with the halves
# swapped; a per-lane select gives each chunk's MMAs 8 useful B columns; one
# xor-2 shuffle at the end). Weight ring 4 chunks, latent ring 2 pairs, 128
# registers, no spill (nvcc 12.4). Sources: .dev/sel (carried).
#  1. build-exp sel (sm_90); harness with the "_t32pl" variant;
#  2. sass_diff committed vs sel (only "_d8pl" M 5-8 should differ);
#  3. harness check of sel (the check covers the "_t32pl" configs);
#  4. ab-rounds committed vs sel, 5 rounds: shard 3584 (the step's shard)
#     and 896 at M 5-8, g against l.
source scripts/device-call-prologue
nvcc --version | tail -1
( scripts/kernel-harness/build-exp sel .dev/sel > $O/build-exp.txt 2>&1 ) & PE=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"
wait $PE; cat $O/build-exp.txt; grep -A3 "t32pl'" build/sel-b.txt | grep -E "Compiling|Used|spill" | paste - - - | sed -E 's/ptxas info *: //g' | cut -c1-150
el builds
python3 scripts/kernel-harness/sass_diff.py --arch sm_90 kernel/kernels.fatbin build/sel.fatbin | head -8
timeout 240 build/harness build/sel.fatbin check > $O/check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK|check receive" $O/check.txt | tail -4; grep -m5 FAIL $O/check.txt
el check
S="3584:2,4,5,6,7,8:32/4/g/4/4/pf48.8l/p/lb,32/4/l/4/4/pf48.8l/p/lb,32/4/l/4/4/p/lb,32/4/g/4/4/p/lb;896:5,6,7,8:32/4/g/8/4/p,32/4/l/8/4/p,32/4/g/16/2/p,32/4/l/16/2/p"
AB_UNTIL=$((T0 + 500)) scripts/kernel-harness/ab-rounds $O/kab 5 "$S" committed=kernel/kernels.fatbin sel=build/sel.fatbin
el ab
cp build/sel.fatbin $O/
cd $O && tar czf logs.tgz check.txt build-exp.txt kab.txt && rm -f check.txt kab.txt
el done
