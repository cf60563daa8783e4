#!/bin/bash
# Call on nvidia-h200 (2026-11-30g, third): the CTA's whole packed weight
# slice by one cp.async.bulk per 16-row group into shared memory before the
# wait (EXP_WTMA, in place of the "_s8p" entry, so "16/8/s/W/C/p" configs
# run it); with CL_ARRIVE; and with launch bounds (512, 2).
set -u
O=$OUT
mkdir -p $O build/exp
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
nvidia-smi -L
cd .dev/exp
printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu
pids=()
for v in "wtma:-DEXP_WTMA=1" "wtma2:-DEXP_WTMA=1 -DEXP_WTMA_MINB=2" "wtmacla:-DEXP_WTMA=1 -DEXP_CL_ARRIVE"; do
  n=${v%%:*}; f=${v#*:}
  nvcc -fatbin -O3 -std=c++17 -Xptxas -v $f -I . -gencode arch=compute_90,code=sm_90 -o ../../build/exp/$n.fatbin k.cu 2> ../../build/exp/$n.ptxas & pids+=($!)
done
nvcc -O3 -std=c++17 -arch=sm_90 -DEXP_WTMA=1 -I ../../kernel -o ../../build/exp/harness harness.cu -lcuda > ../../build/exp/harness.log 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait $p || echo "build pid $p failed"; done
cd ../..
cat build/exp/harness.log
el built
H=build/exp/harness
for n in wtma wtma2 wtmacla; do
  echo "$n: $($H build/exp/$n.fatbin small 2>&1 | tail -1)"
  compute-sanitizer --tool memcheck --error-exitcode 3 $H build/exp/$n.fatbin small 2>&1 | tail -n 1
done
el checked
AB="896:2,4,5,6,7,8:16/8/g/16/1/p,32/4/g/8/4/p,16/8/s/16/1/p,16/8/s/8/1/p,16/8/s/8/2/p,16/8/s/4/2/p,16/8/s/4/4/p,16/8/s/8/4/p,16/8/s/16/2/p;3584:2,8:16/8/g/8/1/p,16/8/s/8/1/p,16/8/s/8/2/p,16/8/s/4/2/p,16/8/s/4/4/p"
for r in 1 2 3; do
  for n in wtma wtma2 wtmacla; do
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 90 $H build/exp/$n.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/ab.txt
  done
  el round $r
done
python3 - $O/ab.txt > $O/ab-summary.txt <<'PY'
import sys, collections, statistics
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    x = l.split()
    if len(x) < 10 or x[8] != "median": continue
    d[(x[4], x[7], int(x[6]), x[0])].append(float(x[9]))
keys = sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2]))
names = ["wtma", "wtma2", "wtmacla"]
print("shard cfg M | " + " ".join(f"{n:>8}" for n in names))
for k in keys:
    print(f"{k[0]} {k[1]:16} {k[2]} | " + " ".join(f"{statistics.median(d[k+(n,)]):8.3f}" if d.get(k+(n,)) else f"{'-':>8}" for n in names))
PY
cat $O/ab-summary.txt
el summary
HARNESS_SHARDS=896 timeout 150 $H build/exp/wtmacla.fatbin sweep $O/sweep-wtmacla.tsv 2>&1 | grep "^sweep"
el sweep
tar czf $O/ptxas.tgz build/exp/*.ptxas
el done
