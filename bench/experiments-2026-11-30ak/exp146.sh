#!/bin/bash
# Session 2026-11-30 (21st, "ak") call 1, nvidia-h200: the "wide" entry
# points (wide-skinny.patch): the _t32p entry of M runs the tile code of a
# larger M with a row count ptxas cannot fold, as M 1 already runs the M 2
# code. w8: M 2-7 run the M 8 code; w7: M 5-6 run the M 7 code. Harness
# check of w8 (and w7), then interleaved A/B rounds against the committed
# fatbin: shard 896 32/4/g/16/2/p at carveouts 65, 80, 100 and 32/4/g/8/4/p
# at 65; shard 3584 the step table's config, with and without 65.
source scripts/device-call-prologue
scripts/kernel-harness/build-exp w8 .dev/wide -DTPRUN_EXP_WIDE=8 -DTPRUN_EXP_WIDE_FROM=2 -DTPRUN_EXP_WIDE_TO=7 & P1=$!
scripts/kernel-harness/build-exp w7 .dev/wide -DTPRUN_EXP_WIDE=7 -DTPRUN_EXP_WIDE_FROM=5 -DTPRUN_EXP_WIDE_TO=6 & P2=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
wait $P1 $P2
for b in w8 w7; do tail -2 build/$b-b.txt; grep -A2 "m[5-8]_t32p'" build/$b-b.txt | grep -E "registers|spill" | head -8; done
cp build/w8-b.txt build/w7-b.txt $O/ 2>/dev/null
el builds
timeout 150 build/harness build/w8.fatbin check > $O/w8-check.txt 2>&1; echo "w8 check rc $?"; grep -E "check skinny:|CHECK|check receive" $O/w8-check.txt | tail -4; grep -m5 FAIL $O/w8-check.txt
el check
SPEC="896:2,3,4,5,6,7,8:32/4/g/16/2/p/co65,32/4/g/16/2/p/co80,32/4/g/16/2/p/co100,32/4/g/8/4/p/co65;3584:5,6,7,8:32/4/g/4/4/pf48.8l/p/lb/co65,32/4/g/4/4/pf48.8l/p/lb"
AB_UNTIL=$((T0 + 430)) scripts/kernel-harness/ab-rounds $O/kab 9 "$SPEC" base=kernel/kernels.fatbin w8=build/w8.fatbin w7=build/w7.fatbin
el done
