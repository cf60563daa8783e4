#!/bin/bash
# Session 2026-11-30 (8th) call 5, nvidia-h200-x2.
# GPU 0: bench-kernel --sweep --no-build with the working tree's fatbin
#   (the dual-instance build of call 2): check, memcheck, sweep, bench, torch.
# GPU 1 meanwhile: late-trigger experiment, cur / A / C (A + late trigger)
#   / D (committed source + late trigger), interleaved, 3 rounds.
# Then step-sweep (both GPUs) with the working tree's fatbin.
# (No bare `wait`: it would also wait for the tee below.)
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
( CUDA_VISIBLE_DEVICES=0 BENCH_TAG=m timeout 420 scripts/bench-kernel --sweep --no-build > build/bk.txt 2>&1; echo "bench-kernel rc $?" >> build/bk.txt ) & pk=$!
(
  set -u
  cp .dev/cur.fatbin build/cur.fatbin
  cp kernel/kernels.fatbin build/A.fatbin
  for x in C:exp6 D:exp7; do n=${x%%:*}; d=${x##*:}
    ( cd .dev/$d && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -I . -gencode arch=compute_90,code=sm_90 -o ../../build/$n.fatbin k.cu ) & eval "p$n=\$!"
  done
  nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness2 scripts/kernel-harness/harness.cu -lcuda
  wait $pC $pD || { echo "exp build failed"; exit 1; }
  H=build/harness2
  AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,4,8:16/8/g/8/1/p,32/4/g/4/4/pf48.8l/p"
  for r in 1 2 3; do
    for n in cur A C D; do
      CUDA_VISIBLE_DEVICES=1 HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 100 $H build/$n.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
    done
  done
  python3 - $O/kab.txt <<'PY' > $O/kab-summary.txt
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
) > build/exp.txt 2>&1 & pe=$!
wait $pe; echo "exp done $(date -u)"; tail -3 build/exp.txt; cat $O/kab-summary.txt
wait $pk; echo "bench-kernel done $(date -u)"; tail -1 build/bk.txt
grep -E "^check skinny|ERROR SUMMARY|^== done" build/bk.txt
cp build/bk.txt $O/bk-console.txt; cp bench/kernel-h200-2026-11-30m.txt $O/ 2>/dev/null
TPRUN_KERNELS_FATBIN=$PWD/kernel/kernels.fatbin BENCH_TAG=m timeout 150 scripts/step-sweep --configs 32/4/g/4/4/pf48.8l/p,32/4/g/4/4/pf44.8l/p,32/4/g/4/4/pf40.8l/p,32/4/g/4/4/p,16/8/g/8/1/p > $O/ss.txt 2>&1
tail -20 $O/ss.txt; mkdir -p $O/ss; mv $O/step-sweep.tsv $O/step_table.tsv $O/step-sweep.log $O/ss/ 2>/dev/null; cp bench/step-sweep-h200x2-2026-11-30m.txt $O/ss/ 2>/dev/null
date -u
rm -f $O/kernels.fatbin; cd $O && tar czf all.tgz --exclude=all.tgz * && ls
