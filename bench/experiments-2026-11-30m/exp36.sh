#!/bin/bash
# Session 2026-11-30 (8th) call 9, nvidia-h200: v12 (committed) vs E (v12
# with launch_dependents right after griddepcontrol.wait: at most two grids
# in flight), interleaved, 3 rounds. Tests the call 7 trace reading.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
( cd .dev/exp8 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -I . -gencode arch=compute_90,code=sm_90 -o ../../build/E.fatbin k.cu ) & p1=$!
nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $p1 || exit 1
cp kernel/kernels.fatbin build/v12.fatbin
H=build/harness
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,4,8:16/8/g/4/2/p,32/4/g/4/4/pf48.8l/p"
for r in 1 2 3; do
  for n in v12 E; do
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 60 $H build/$n.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
done
python3 - $O/kab.txt <<'PY' | tee $O/kab-summary.txt
import sys, collections, statistics
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    x = l.split()
    if len(x) < 10 or x[8] != "median": continue
    d[(x[4], x[7], int(x[6]), x[0])].append(float(x[9]))
print("shard config M  v12  E  E-v12")
for k in sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2])):
    a, b = d.get(k + ("v12",)), d.get(k + ("E",))
    if a and b:
        a, b = statistics.median(a), statistics.median(b)
        print(k[0], k[1], k[2], f"{a:.3f} {b:.3f} {b-a:+.3f}")
PY
date -u
