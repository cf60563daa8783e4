#!/bin/bash
# Session 2026-11-30 (11th, "w") call 5, nvidia-h200-x2: the receive with
# several polls of a vector in flight at once (-DTPRUN_POLL_EXP=2 and 4),
# so that an arrival is seen sooner after it lands; base = the committed
# fatbin. The step table's config, 4 interleaved rounds of step-sweep; then
# the harness check of both builds (one per GPU).
set -u
O=$OUT
R=/tmp/w63
rm -rf $R; mkdir -p $O $R build
exec > >(tee -a $O/console.txt) 2>&1
export TPRUN_MULTICAST=0
date -u; nvidia-smi -L
mkdir -p bin && cp .dev/w/bin/tprun bin/tprun
S=.dev/w
PIDS=""
for n in 2 4; do
  ( mkdir -p build/P$n && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/P$n/ && cd build/P$n && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_POLL_EXP=$n -I . -gencode arch=compute_90,code=sm_90 -o ../P$n.fatbin k.cu > ../P$n-b.txt 2>&1 ) & PIDS="$PIDS $!"
done
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
for p in $PIDS; do wait $p; done; ls -la build/*.fatbin; head -3 build/P*-b.txt
date -u
C=32/4/g/4/4/pf48.8l/p/lb
for r in 1 2 3 4; do
  BENCH_TAG=w63b$r OUT=$R/base$r timeout 100 scripts/step-sweep --rounds 1 --configs $C > $R/base$r.log 2>&1; echo "base r$r rc $?"
  for n in 2 4; do
    TPRUN_KERNELS_FATBIN=$PWD/build/P$n.fatbin BENCH_TAG=w63p$n$r OUT=$R/poll$n$r timeout 100 scripts/step-sweep --rounds 1 --configs $C > $R/poll$n$r.log 2>&1; echo "poll$n r$r rc $?"
  done
  date -u
done
for r in 1 2 3 4; do
  for b in base poll2 poll4; do tail -n +2 $R/$b$r/step-sweep.tsv | sed "s/^/$b\t/"; done
done > $O/runs.tsv
python3 - $O/runs.tsv <<'PY' | tee $O/summary.txt
import collections, statistics, sys
d = collections.defaultdict(list); bad = set()
for line in open(sys.argv[1]):
    b, r, c, m, us, wrong, ident = line.rstrip("\n").split("\t")
    if wrong != "0" or ident != "true": bad.add(b); continue
    d[(b, int(m))].append(float(us))
names = ["base", "poll2", "poll4"]
print("bad:", bad)
print("M " + " ".join(f"{n:>8}" for n in names) + "   deltas")
for m in range(1, 9):
    v = [statistics.median(d[(n, m)]) if d.get((n, m)) else float("nan") for n in names]
    print(f"{m} " + " ".join(f"{x:8.3f}" for x in v) + "   " + " ".join(f"{x - v[0]:+.3f}" for x in v[1:]))
PY
date -u
CUDA_VISIBLE_DEVICES=0 timeout 200 build/harness build/P2.fatbin check > $O/p2-check.txt 2>&1 & C0=$!
CUDA_VISIBLE_DEVICES=1 timeout 200 build/harness build/P4.fatbin check > $O/p4-check.txt 2>&1 & C1=$!
wait $C0; echo "p2 check rc $?"; wait $C1; echo "p4 check rc $?"
tail -3 $O/p2-check.txt $O/p4-check.txt
tar czf $O/logs.tgz -C $R . 2>/dev/null
date -u
