#!/bin/bash
# Session 2026-11-30 (8th) call 2, nvidia-h200-x2.
# The tile code compiled twice per entry point (ClusterShape<CL>): an
# instance without any cluster instruction for launches without a cluster.
# 1. full build (scripts/build-kernels) in the background; a quick sm_90
#    build + harness; interleaved A/B cur (committed fatbin) vs new on GPU 0.
# 2. if new is not slower on the whole: bench-kernel --sweep --no-build (GPU 0),
#    then step-sweep with the new fatbin (both GPUs).
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
cp kernel/kernels.fatbin build/cur.fatbin
( scripts/build-kernels > build/full-build.txt 2>&1; echo "full build rc $?" >> build/full-build.txt ) & pb=$!
( mkdir -p build/q && cp kernel/skinny.cu kernel/skinny.h kernel/receive.cu build/q/ && cd build/q && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -I . -gencode arch=compute_90,code=sm_90 -o ../new.fatbin k.cu ) & p1=$!
nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $p1 || exit 1
date -u
H=build/harness
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,4,8:16/8/g/8/1/p,32/4/g/4/4/pf40.8l/p,32/4/g/4/2/p"
for r in 1 2 3; do
  for n in cur new; do
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
print("shard config M  cur  new  new-cur")
tot = []
for k in sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2])):
    a, b = (d.get(k + (n,)) for n in ("cur", "new"))
    if a and b:
        a, b = statistics.median(a), statistics.median(b)
        tot.append(b - a)
        print(k[0], k[1], k[2], f"{a:.3f} {b:.3f} {b-a:+.3f}")
print(f"mean delta {statistics.mean(tot):+.4f}")
open("build/gate", "w").write("go" if statistics.mean(tot) < 0.005 else "stop")
PY
date -u
wait $pb; cat build/full-build.txt | tail -3
cmp -s kernel/kernels.fatbin build/cur.fatbin && { echo "full build did not replace the fatbin"; exit 1; }
cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/
if [[ $(cat build/gate) != go ]]; then echo "gate: stop"; cd $O && tar czf all.tgz --exclude=all.tgz *; exit 0; fi
BENCH_TAG=a timeout 330 scripts/bench-kernel --sweep --no-build > build/bk.txt 2>&1; echo "bench-kernel rc $?"
grep -E "^check skinny|ERROR SUMMARY|^== done" build/bk.txt
mkdir -p $O/bk && cp bench/kernel-h200-*a.txt $O/bk/ 2>/dev/null; mv $O/sweep.tsv $O/config_table.tsv $O/readbw.txt $O/log.txt $O/bk/ 2>/dev/null
cp bench/kernel-h200-*a.txt $O/ 2>/dev/null
date -u
TPRUN_KERNELS_FATBIN=$PWD/kernel/kernels.fatbin BENCH_TAG=b timeout 200 scripts/step-sweep --configs 32/4/g/4/4/pf48.8l/p,32/4/g/4/4/pf40.8l/p,32/4/g/4/4/pf44.8l/p,32/4/g/4/4/pf52.8l/p,32/4/g/4/4/pf48.9l/p,32/4/g/4/4/p > $O/ss.txt 2>&1
tail -22 $O/ss.txt; mkdir -p $O/ss; mv $O/step-sweep.tsv $O/step_table.tsv $O/step-sweep.log $O/ss/ 2>/dev/null; cp bench/step-sweep-h200x2-*b.txt $O/ss/ 2>/dev/null
date -u
cd $O && tar czf all.tgz --exclude=all.tgz * && ls
