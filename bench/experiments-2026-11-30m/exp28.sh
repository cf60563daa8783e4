#!/bin/bash
# Session 2026-11-30 (8th) call 1, nvidia-h200-x2.
# (a) kernel: does the unconditional cluster arrive (.dev/exp4 "ua") win back
#     the non-cluster slowdown of v11? 3-way interleaved A/B on GPU 0: the
#     committed fatbin (cur), ua, and the 30g fatbin (old); ua checked on GPU 1.
# (b) step: step-sweep with more L2 prefetch plans around pf40.8l.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
( cd .dev/exp4 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -Xptxas -v -I . -gencode arch=compute_90,code=sm_90 -o ../../build/ua.fatbin k.cu 2> ../../build/ua.ptxas ) & p1=$!
nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $p1 || { tail -20 build/ua.ptxas; exit 1; }
H=build/harness
CUDA_VISIBLE_DEVICES=1 $H build/ua.fatbin check > $O/ua-check.txt 2>&1 & pc=$!
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,4,8:16/8/g/8/1/p,32/4/g/4/4/pf40.8l/p"
for r in 1 2 3 4; do
  for n in cur ua old; do
    f=kernel/kernels.fatbin; [[ $n == ua ]] && f=build/ua.fatbin; [[ $n == old ]] && f=.dev/old.fatbin
    CUDA_VISIBLE_DEVICES=0 HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 150 $H $f ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
done
wait $pc; grep -E "^check skinny|FAIL" $O/ua-check.txt | head -5
CUDA_VISIBLE_DEVICES=0 compute-sanitizer --tool memcheck --error-exitcode 3 $H build/ua.fatbin small 2>&1 | tail -n 1
python3 - $O/kab.txt <<'PY' | tee $O/kab-summary.txt
import sys, collections, statistics
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    x = l.split()
    if len(x) < 10 or x[8] != "median": continue
    d[(x[4], x[7], int(x[6]), x[0])].append(float(x[9]))
print("shard config M  cur  ua  old  ua-cur  old-cur")
for k in sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2])):
    a, b, c = (d.get(k + (n,)) for n in ("cur", "ua", "old"))
    if a and b and c:
        a, b, c = (statistics.median(v) for v in (a, b, c))
        print(k[0], k[1], k[2], f"{a:.3f} {b:.3f} {c:.3f} {b-a:+.3f} {c-a:+.3f}")
PY
date -u
BENCH_TAG=a timeout 300 scripts/step-sweep --configs 32/4/g/4/4/pf40.8l/p,32/4/g/4/4/pf32.8l/p,32/4/g/4/4/pf48.8l/p,32/4/g/4/4/pf40.6l/p,32/4/g/4/4/pf40.10l/p,32/4/g/4/4/pf40.8/p,32/4/g/4/4/pf24.6l/p > $O/ss.txt 2>&1
tail -25 $O/ss.txt; cp bench/step-sweep-h200x2-*a.txt $O/ 2>/dev/null
date -u
cd $O && tar czf all.tgz --exclude=all.tgz * && ls
