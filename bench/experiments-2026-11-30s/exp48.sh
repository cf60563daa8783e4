#!/bin/bash
# Session 2026-11-30 (10th) call 2, nvidia-h200: where the cluster sum's
# 0.3 µs at shard 3584 goes (call 1: SKIP 0.27-0.31 faster at
# 32/4/g/4/4/pf48.8l/p). Builds from .dev/csum, timing only except base:
#   base, SKIP (no sum), NOSEND (senders sum but send nothing; the leader
#   waits for nothing), SENDRAW (senders send the same bytes without their
#   per-CTA sum; the leader as base)
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
for n in base SKIP NOSEND SENDRAW; do f=""; [ $n != base ] && f="-DTPRUN_CSUM_$n"; bld $n "$f" & pids="$pids $!"; done
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $pids; ls -la build/*.fatbin; cat build/*-b.txt | head
date -u
AB="3584:1,2,4,6,8:32/4/g/4/4/pf48.8l/p,32/4/g/4/4/p,32/4/g/4/2/p,16/8/g/4/2/p,16/8/g/8/1/p;896:5,8:32/4/g/8/4/p"
N="base SKIP NOSEND SENDRAW"
for r in 1 2 3 4; do
  for n in $N; do
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 90 build/harness build/$n.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "$N" | tee $O/kab-summary.txt
date -u
