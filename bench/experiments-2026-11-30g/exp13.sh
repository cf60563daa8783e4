#!/bin/bash
# Call on nvidia-h200 (2026-11-30g): where the post-wait time of shard 896
# goes. Experiment builds of .dev/exp/skinny.cu (sm_90 only): base (no
# macro), ub8 (latent ring 8 deep in _d8/_d8p), nolat (no latent loads),
# noepi (no reduction), spread (each CTA reads one of 8 latent copies),
# nolat+noepi. Interleaved 1-rep ab rounds, then sweeps of 896/16 warps.
set -u
O=$OUT
mkdir -p $O build/exp
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
nvidia-smi -L
nvcc --version | tail -1
cd .dev/exp
printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu
pids=()
for v in "base:" "ub8:-DEXP_UB=8" "nolat:-DEXP_NO_LAT" "noepi:-DEXP_NO_EPI" "spread:-DEXP_LAT_SPREAD=8" "bare:-DEXP_NO_LAT -DEXP_NO_EPI"; do
  n=${v%%:*}; f=${v#*:}
  nvcc -fatbin -O3 -std=c++17 -Xptxas -v $f -I . -gencode arch=compute_90,code=sm_90 -o ../../build/exp/$n.fatbin k.cu 2> ../../build/exp/$n.ptxas & pids+=($!)
done
nvcc -O3 -std=c++17 -arch=sm_90 -I ../../kernel -o ../../build/exp/harness harness.cu -lcuda > ../../build/exp/harness.log 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait $p || echo "build pid $p failed"; done
cd ../..
cat build/exp/harness.log
for n in base ub8; do awk '/Compiling entry function/{name=$0} /spill/{sp=$0} /Used/{if (name ~ /m[58]_d8p'"'"'/) print FILENAME": "name" | "sp" | "$0}' build/exp/$n.ptxas | sed -E 's/Compiling entry function//'; done
el built
H=build/exp/harness
$H build/exp/ub8.fatbin small 2>&1 | tail -1
compute-sanitizer --tool memcheck --error-exitcode 3 $H build/exp/ub8.fatbin small 2>&1 | tail -n 2
el checked
AB="896:2,4,5,6,8:16/8/g/16/1/p,32/4/g/8/4/p;3584:2,8:16/8/g/8/1/p"
for r in 1 2 3; do
  for n in base ub8 nolat noepi spread bare; do
    HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 60 $H build/exp/$n.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/ab.txt
  done
  el round $r
done
# L2-resident weights (one buffer), base and bare
for n in base bare; do
  HARNESS_NBUF=1 HARNESS_AB="896:2,5,8:16/8/g/16/1/p,32/4/g/8/4/p" HARNESS_AB_REPS=2 timeout 60 $H build/exp/$n.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n-l2res r0 /" >> $O/ab.txt
done
el l2res
python3 - $O/ab.txt > $O/ab-summary.txt <<'PY'
import sys, collections, statistics
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    x = l.split()
    if len(x) < 10 or x[8] != "median": continue
    name = x[0]; shard = x[4]; m = x[6]; cfg = x[7]; us = float(x[9])
    d[(shard, cfg, int(m), name)].append(us)
keys = sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2]))
names = ["base", "ub8", "nolat", "noepi", "spread", "bare", "base-l2res", "bare-l2res"]
print("shard cfg M | " + " ".join(f"{n:>10}" for n in names))
for k in keys:
    row = []
    for n in names:
        v = d.get(k + (n,))
        row.append(f"{statistics.median(v):10.3f}" if v else f"{'-':>10}")
    print(f"{k[0]} {k[1]} {k[2]} | " + " ".join(row))
PY
cat $O/ab-summary.txt
for n in base ub8; do
  HARNESS_SHARDS=896 HARNESS_WARPS=16 HARNESS_CLUSTERS=1 timeout 120 $H build/exp/$n.fatbin sweep $O/sweep-$n.tsv 2>&1 | grep "^sweep" | sed "s/^/$n /"
done
el sweeps
tar czf $O/ptxas.tgz build/exp/*.ptxas
el done
