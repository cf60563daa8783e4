#!/bin/bash
# Call on nvidia-h200 (2026-11-30g, second): latent staged by TMA bulk copies
# (EXP_TMA_STAGE, the "s" configs) and a cluster epilogue where non-leaders
# only arrive (EXP_CL_ARRIVE). Experiment builds of .dev/exp/skinny.cu.
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
for v in "base:" "tma:-DEXP_TMA_STAGE" "cla:-DEXP_CL_ARRIVE" "tmacla:-DEXP_TMA_STAGE -DEXP_CL_ARRIVE"; do
  n=${v%%:*}; f=${v#*:}
  nvcc -fatbin -O3 -std=c++17 -Xptxas -v $f -I . -gencode arch=compute_90,code=sm_90 -o ../../build/exp/$n.fatbin k.cu 2> ../../build/exp/$n.ptxas & pids+=($!)
done
nvcc -O3 -std=c++17 -arch=sm_90 -I ../../kernel -o ../../build/exp/harness harness.cu -lcuda > ../../build/exp/harness.log 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait $p || echo "build pid $p failed"; done
cd ../..
el built
H=build/exp/harness
for n in tma cla tmacla; do
  echo "$n: $($H build/exp/$n.fatbin small 2>&1 | tail -1)"
  compute-sanitizer --tool memcheck --error-exitcode 3 $H build/exp/$n.fatbin small 2>&1 | tail -n 1
done
el checked
AB="896:2,4,5,6,7,8:16/8/g/16/1/p,16/8/s/16/1/p,32/4/g/8/4/p,16/8/s/8/2/p,16/8/s/4/4/p,16/8/s/8/4/p,16/8/g/8/2/p,32/4/s/8/4;3584:2,8:16/8/g/8/1/p,16/8/s/8/1/p"
for r in 1 2 3; do
  for n in base tma cla tmacla; do
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
names = ["base", "tma", "cla", "tmacla"]
print("shard cfg M | " + " ".join(f"{n:>8}" for n in names))
for k in keys:
    print(f"{k[0]} {k[1]:16} {k[2]} | " + " ".join(f"{statistics.median(d[k+(n,)]):8.3f}" if d.get(k+(n,)) else f"{'-':>8}" for n in names))
PY
cat $O/ab-summary.txt
el summary
for n in tma tmacla; do
  HARNESS_SHARDS=896 timeout 150 $H build/exp/$n.fatbin sweep $O/sweep-$n.tsv 2>&1 | grep "^sweep" | sed "s/^/$n /"
  el sweep $n
done
tar czf $O/ptxas.tgz build/exp/*.ptxas
el done
