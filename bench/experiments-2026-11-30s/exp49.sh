#!/bin/bash
# Session 2026-11-30 (10th) call 3, nvidia-h200: the cluster sum in
# fragment layout (FRAG, -DTPRUN_CSUM_FRAG): every warp sends its MMA
# fragments (one float4 per tile and lane) straight into the leader, which
# adds them in slot order. Against base and SKIP (no sum: the bound).
# Check of FRAG first.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/csum
bld() { # name flags
  ( mkdir -p build/$1 && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/$1/ && cd build/$1 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 $2 -I . -gencode arch=compute_90,code=sm_90 -o ../$1.fatbin k.cu > ../$1-b.txt 2>&1 )
}
pids=""
for n in base SKIP FRAG; do f=""; [ $n != base ] && f="-DTPRUN_CSUM_$n"; bld $n "$f" & pids="$pids $!"; done
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness-base scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
cp build/harness-base build/harness-SKIP
nvcc -O3 -std=c++17 -arch=sm_90 -DTPRUN_CSUM_FRAG -o build/harness-FRAG $S/harness.cu -lcuda > build/h2.txt 2>&1; cat build/h2.txt
wait $pids; ls -la build/*.fatbin; cat build/*-b.txt | head
date -u
echo "== FRAG check"
timeout 240 build/harness-FRAG build/FRAG.fatbin check > $O/frag-check.txt 2>&1; echo "rc $?"; grep -i "fail\|mismatch" $O/frag-check.txt | head -5; tail -2 $O/frag-check.txt
date -u
AB="3584:1,2,3,4,5,6,7,8:32/4/g/4/4/pf48.8l/p,32/4/g/4/4/p,16/8/g/4/2/p,16/8/g/8/1/p;896:1,3,5,6,7,8:32/4/g/8/4/p,32/4/g/16/2/p,16/8/g/16/1/p/one;7168:1,8:16/8/g/4/1/p"
N="base SKIP FRAG"
for r in 1 2 3 4; do
  for n in $N; do
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness-$n build/$n.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "$N" | tee $O/kab-summary.txt
date -u
