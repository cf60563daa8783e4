#!/bin/bash
# Call on nvidia-h200-x2 (2026-11-30g): receive experiments in the step
# (tp 2): base (shipped sources), sleep (100 ns between polls), skipown (the
# fused receive polls only the peer's slice; own slice left stale, so the
# check reports wrong values by design), tilerecv (no receive CTAs' work: the
# tile CTAs poll and copy after their epilogue). Interleaved rounds.
set -u
O=$OUT
mkdir -p $O build/exp
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
export TPRUN_MULTICAST=0
nvidia-smi -L
cd .dev/exp
printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu
pids=()
for v in "base:" "sleep:-DEXP_POLL_SLEEP=100" "skipown:-DEXP_SKIP_OWN" "tilerecv:-DEXP_TILE_RECV"; do
  n=${v%%:*}; f=${v#*:}
  nvcc -fatbin -O3 -std=c++17 $f -I . -gencode arch=compute_90,code=sm_90 -o ../../build/exp/$n.fatbin k.cu > ../../build/exp/$n.log 2>&1 & pids+=($!)
done
for p in "${pids[@]}"; do wait $p || echo "build pid $p failed"; done
cd ../..
el built
B="--hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 --replays 200 --warmup 20 --rotate-mb 512"
for r in 1 2 3 4; do
  for n in base sleep skipown tilerecv; do
    rm -f /tmp/s.tsv
    TPRUN_KERNELS_FATBIN=$PWD/build/exp/$n.fatbin timeout 90 bin/tprun --tp 2 -- bin/tprun __bench $B --table /tmp/s.tsv > /tmp/$n-$r.log 2>&1
    echo "round $r $n exit $?" >> $O/step-ab.txt; cat /tmp/s.tsv >> $O/step-ab.txt
  done
  el round $r
done
grep -h "FAILED\|error" /tmp/*-1.log | head -8
python3 - $O/step-ab.txt > $O/step-ab-summary.txt <<'PY'
import sys, collections, statistics
d = collections.defaultdict(list); cur = None
for l in open(sys.argv[1]):
    x = l.split()
    if l.startswith('round'): cur = x[2]; continue
    if not x or x[0] == 'm': continue
    d[(cur, int(x[0]))].append(float(x[1]))
names = ["base", "sleep", "skipown", "tilerecv"]
print("M | " + " ".join(f"{n:>9}" for n in names))
for m in range(1, 9):
    print(f"{m} | " + " ".join(f"{statistics.median(d[(n, m)]):9.3f}" if d.get((n, m)) else f"{'-':>9}" for n in names))
PY
cat $O/step-ab-summary.txt
tar czf $O/logs.tgz /tmp/*-1.log build/exp/*.log 2>/dev/null
el done
