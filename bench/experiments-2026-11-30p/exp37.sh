#!/bin/bash
# Session 2026-11-30 (9th) call 1, nvidia-h200: per-CTA traces (-DTPRUN_TRACE
# sm_90 builds) of v11 (37c1af1) and v12 (kernel/) at shard 896 with the raw
# TSVs kept, for trace_report's late-CTA analysis; then v11/v12 A/B, 3 rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
for x in v11:.dev/tr11 v12:kernel; do n=${x%%:*}; d=${x##*:}
  ( mkdir -p build/$n && cp $d/skinny.cu $d/skinny.h $d/receive.cu build/$n/ && cd build/$n && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_TRACE -I . -gencode arch=compute_90,code=sm_90 -o ../$n-trace.fatbin k.cu > ../$n-b.txt 2>&1 ) & eval "p$n=\$!"
done
( mkdir -p build/v11n && cp .dev/tr11/* build/v11n/ && cd build/v11n && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -I . -gencode arch=compute_90,code=sm_90 -o ../v11.fatbin k.cu > ../v11n-b.txt 2>&1 ) & pn=$!
nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $pv11 $pv12 $pn; cat build/v11-b.txt build/v12-b.txt build/v11n-b.txt | tail -5
date -u
export HARNESS_TRACE="896:2,3,4,6,8:16/8/g/16/1/p,32/4/g/16/2/p,32/4/g/8/4/p"
for n in v12 v11; do
  timeout 150 build/harness build/$n-trace.fatbin trace $O/$n-trace.tsv > $O/$n-trace.txt 2>&1; echo "$n trace rc $?"
  grep "^trace" $O/$n-trace.txt
  python3 scripts/kernel-harness/trace_report.py $O/$n-trace.tsv > $O/$n-trace-report.txt 2>&1; echo "report rc $?"
  gzip $O/$n-trace.tsv
done
date -u
cp kernel/kernels.fatbin build/v12.fatbin
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,32/4/g/16/2/p,32/4/g/8/4/p"
for r in 1 2 3; do
  for n in v12 v11; do
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 60 build/harness build/$n.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
done
python3 - $O/kab.txt <<'PY' | tee $O/kab-summary.txt
import sys, collections, statistics
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    x = l.split()
    if len(x) < 10 or x[8] != "median": continue
    d[(x[4], x[7], int(x[6]), x[0])].append(float(x[9]))
print("shard config M  v12  v11  v11-v12")
for k in sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2])):
    a, b = d.get(k + ("v12",)), d.get(k + ("v11",))
    if a and b:
        a, b = statistics.median(a), statistics.median(b)
        print(k[0], k[1], k[2], f"{a:.3f} {b:.3f} {b-a:+.3f}")
PY
date -u
