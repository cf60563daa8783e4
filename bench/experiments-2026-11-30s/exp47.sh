#!/bin/bash
# Session 2026-11-30 (10th) call 1, nvidia-h200: the cluster sum at shard
# 896 (M 5-8 run on clusters, ~2.55 µs at every M, 0.25 over the no-cluster
# M 1). Builds from .dev/csum (the committed source plus macros):
#   base   : as committed
#   SKIP   : timing only, wrong sums: no cluster sum at all (senders leave
#            after their MMAs, the leader sums its own warps) -> how much of
#            the cluster configs' cost is the sum
#   DIRECT : every sender warp st.async's its own partials into the leader
#            (no per-CTA sum, no barrier in the senders); the leader adds
#            its warps, then the remote warps in (rank, warp) order
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/csum
bld() { # name flags
  ( mkdir -p build/$1 && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/$1/ && cd build/$1 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 $2 -I . -gencode arch=compute_90,code=sm_90 -o ../$1.fatbin k.cu > ../$1-b.txt 2>&1 )
}
bld base "" & p1=$!
bld SKIP "-DTPRUN_CSUM_SKIP" & p2=$!
bld DIRECT "-DTPRUN_CSUM_DIRECT" & p3=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
nvcc -O3 -std=c++17 -arch=sm_90 -DTPRUN_CSUM_DIRECT -o build/harness-DIRECT $S/harness.cu -lcuda > build/h2.txt 2>&1; cat build/h2.txt
cp build/harness build/harness-base; cp build/harness build/harness-SKIP
wait $p1 $p2 $p3; ls -la build/*.fatbin; cat build/*-b.txt | head
date -u
echo "== DIRECT check"
timeout 240 build/harness-DIRECT build/DIRECT.fatbin check > $O/direct-check.txt 2>&1; echo "rc $?"; tail -3 $O/direct-check.txt
date -u
AB="896:1,3,5,6,7,8:32/4/g/8/4/p,32/4/g/16/2/p,16/8/g/8/2/p/one,16/8/g/16/1/p/one;3584:1,4,8:32/4/g/4/4/pf48.8l/p"
N="base SKIP DIRECT"
for r in 1 2 3; do
  for n in $N; do
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 90 build/harness-$n build/$n.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "$N" | tee $O/kab-summary.txt
date -u
