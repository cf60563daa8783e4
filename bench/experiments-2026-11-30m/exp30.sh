#!/bin/bash
# Session 2026-11-30 (8th) call 3, nvidia-h200-x2.
# cur (committed fatbin) vs A (dual instance, call 2's full build = the
# working tree) vs B (.dev/exp5: dual, but the no-cluster instance reads
# the cluster shape at run time), interleaved on GPU 0; then step-sweep
# with A on both GPUs, and pf48.8l with cur.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
( cd .dev/exp5 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -I . -gencode arch=compute_90,code=sm_90 -o ../../build/B.fatbin k.cu ) & p1=$!
nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $p1 || exit 1
cp kernel/kernels.fatbin build/cur.fatbin; cp .dev/A.fatbin build/A.fatbin
date -u
H=build/harness
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,4,8:16/8/g/8/1/p,32/4/g/4/4/pf40.8l/p"
for r in 1 2 3; do
  for n in cur A B; do
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
print("shard config M  cur  A  B  A-cur  B-cur")
for k in sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2])):
    v = [d.get(k + (n,)) for n in ("cur", "A", "B")]
    if all(v):
        a, b, c = (statistics.median(x) for x in v)
        print(k[0], k[1], k[2], f"{a:.3f} {b:.3f} {c:.3f} {b-a:+.3f} {c-a:+.3f}")
PY
date -u
TPRUN_KERNELS_FATBIN=$PWD/build/A.fatbin BENCH_TAG=c timeout 200 scripts/step-sweep --configs 32/4/g/4/4/pf48.8l/p,32/4/g/4/4/pf40.8l/p,32/4/g/4/4/pf44.8l/p,32/4/g/4/4/p,16/8/g/8/1/p,16/8/g/4/2/p > $O/ssA.txt 2>&1
tail -22 $O/ssA.txt; mkdir -p $O/ssA; mv $O/step-sweep.tsv $O/step_table.tsv $O/step-sweep.log $O/ssA/ 2>/dev/null; mv bench/step-sweep-h200x2-*c.txt $O/ssA/ 2>/dev/null
date -u
BENCH_TAG=d timeout 100 scripts/step-sweep --configs 32/4/g/4/4/pf48.8l/p > $O/ssCur.txt 2>&1
tail -14 $O/ssCur.txt; mkdir -p $O/ssCur; mv $O/step-sweep.tsv $O/step_table.tsv $O/step-sweep.log $O/ssCur/ 2>/dev/null; mv bench/step-sweep-h200x2-*d.txt $O/ssCur/ 2>/dev/null
date -u
cd $O && tar czf all.tgz --exclude=all.tgz * && ls
