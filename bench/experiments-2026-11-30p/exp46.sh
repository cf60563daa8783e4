#!/bin/bash
# Session 2026-11-30 (9th) call 10, nvidia-h200: the prologue delay of call
# 9 (.dev/delay) in every instance (-DTPRUN_PRO_DELAY=D -DTPRUN_PRO_DELAY_ALL),
# D = 0, 200, 400, 800, on the cluster configs of shard 896 (M 3-8), the
# one-instance form, and the step config of shard 3584; 3 rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
bld() { # name dir flags
  ( mkdir -p build/$1 && cp $2/skinny.cu $2/skinny.h $2/receive.cu build/$1/ && cd build/$1 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 $3 -I . -gencode arch=compute_90,code=sm_90 -o ../$1.fatbin k.cu > ../$1-b.txt 2>&1 )
}
pids=""
for d in 0 200 400 800; do bld D$d .dev/delay "-DTPRUN_PRO_DELAY=$d -DTPRUN_PRO_DELAY_ALL" & pids="$pids $!"; done
nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $pids; ls -la build/*.fatbin
date -u
AB="896:3,4,5,6,7,8:32/4/g/8/4/p,32/4/g/16/2/p,16/8/g/16/1/p/one;3584:2,8:32/4/g/4/4/pf48.8l/p"
N="D0 D200 D400 D800"
for r in 1 2 3; do
  for n in $N; do
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 60 build/harness build/$n.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
  date -u
done
python3 - $O/kab.txt "$N" <<'PY' | tee $O/kab-summary.txt
import sys, collections, statistics
names = sys.argv[2].split()
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    x = l.split()
    if len(x) < 10 or x[8] != "median": continue
    d[(x[4], x[7], int(x[6]), x[0])].append(float(x[9]))
print("shard config M " + " ".join(names) + "  (deltas against " + names[0] + ")")
for k in sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2])):
    v = [statistics.median(d[k + (n,)]) if d.get(k + (n,)) else float("nan") for n in names]
    print(k[0], k[1], k[2], " ".join(f"{x:.3f}" for x in v), " ".join(f"{x - v[0]:+.3f}" for x in v[1:]))
PY
date -u
