#!/bin/bash
# Session 2026-11-30 (8th) call 4, nvidia-h200-x2 (GPU 0 only for the A/B).
# Late trigger: griddepcontrol.launch_dependents once a CTA's latent ring
# landed instead of right after the weight prologue. cur (committed), A
# (dual instance), C (A + late trigger, .dev/exp6), D (committed source +
# late trigger, .dev/exp7); interleaved, 3 rounds. C checked on GPU 1.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
for x in C:exp6 D:exp7; do n=${x%%:*}; d=${x##*:}
  ( cd .dev/$d && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -I . -gencode arch=compute_90,code=sm_90 -o ../../build/$n.fatbin k.cu ) &
done
nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait
ls -la build/*.fatbin
cp kernel/kernels.fatbin build/cur.fatbin; cp .dev/A.fatbin build/A.fatbin
date -u
H=build/harness
CUDA_VISIBLE_DEVICES=1 $H build/C.fatbin check > $O/C-check.txt 2>&1 &
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,4,8:16/8/g/8/1/p,32/4/g/4/4/pf40.8l/p,32/4/g/4/4/pf48.8l/p"
for r in 1 2 3; do
  for n in cur A C D; do
    CUDA_VISIBLE_DEVICES=0 HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 150 $H build/$n.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
done
python3 - $O/kab.txt <<'PY' | tee $O/kab-summary.txt
import sys, collections, statistics
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    x = l.split()
    if len(x) < 10 or x[8] != "median": continue
    d[(x[4], x[7], int(x[6]), x[0])].append(float(x[9]))
N = ("cur", "A", "C", "D")
print("shard config M  " + "  ".join(N) + "  A-cur C-cur D-cur")
for k in sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2])):
    v = [d.get(k + (n,)) for n in N]
    if all(v):
        m = [statistics.median(x) for x in v]
        print(k[0], k[1], k[2], " ".join(f"{x:.3f}" for x in m), " ".join(f"{x-m[0]:+.3f}" for x in m[1:]))
PY
wait; grep -E "^check skinny|FAIL" $O/C-check.txt | head -3
date -u
