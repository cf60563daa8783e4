#!/bin/bash
# Session 2026-11-30 (11th, "w") call 1, nvidia-h200-x2: the step with the
# L2 prefetch helpers moved to the LAST tiles (-DTPRUN_PF_LATE_EXP: the CTAs
# placed last, as the previous kernel's tile CTAs leave, so their prefetch
# runs in the step's tail instead of competing with the previous kernel's
# stream). base = the committed fatbin. Builds interleaved per round.
set -u
O=$OUT
R=/tmp/w59
rm -rf $R; mkdir -p $O $R build
exec > >(tee -a $O/console.txt) 2>&1
export TPRUN_MULTICAST=0
date -u; nvidia-smi -L
mkdir -p bin && cp .dev/w/bin/tprun bin/tprun
S=.dev/w
( mkdir -p build/L && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/L/ && cd build/L && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_PF_LATE_EXP -I . -gencode arch=compute_90,code=sm_90 -o ../L.fatbin k.cu > ../L-b.txt 2>&1 ); cat build/L-b.txt | head
ls -la build/L.fatbin bin/tprun
date -u
CB=32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/p/lb
CL=32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/pf48.4l/p/lb,32/4/g/4/4/pf14.2l/p/lb,32/4/g/4/4/pf32.12l/p/lb,32/4/g/4/4/pf48.8l/p,32/4/g/4/4/p/lb
for r in 1 2 3; do
  BENCH_TAG=w59b$r OUT=$R/b$r timeout 150 scripts/step-sweep --rounds 1 --configs $CB > $R/b$r.log 2>&1; echo "base r$r rc $?"
  TPRUN_KERNELS_FATBIN=$PWD/build/L.fatbin BENCH_TAG=w59l$r OUT=$R/l$r timeout 250 scripts/step-sweep --rounds 1 --configs $CL > $R/l$r.log 2>&1; echo "late r$r rc $?"
  date -u
done
for r in 1 2 3; do
  tail -n +2 $R/b$r/step-sweep.tsv | sed "s/^/base\t/"
  tail -n +2 $R/l$r/step-sweep.tsv | sed "s/^/late\t/"
done > $O/runs.tsv
grep -h "exit [^0]" -A5 $R/*/step-sweep.log | head -20
python3 - $O/runs.tsv <<'PY' | tee $O/summary.txt
import collections, statistics, sys
d = collections.defaultdict(list); bad = set()
for line in open(sys.argv[1]):
    b, r, c, m, us, wrong, ident = line.rstrip("\n").split("\t")
    if wrong != "0" or ident != "true": bad.add((b, c)); continue
    d[(b + ":" + c, int(m))].append(float(us))
keys = sorted({k for k, _ in d}, key=lambda k: (k.split(":")[0], k))
print("bad:", bad)
print("M " + " ".join(f"{k[:4] + k.split(':')[1][9:]:>22}" for k in keys))
for m in range(1, 9):
    print(f"{m} " + " ".join(f"{statistics.median(d[(k, m)]):22.3f}" for k in keys))
PY
cp $R/l1/step-sweep-*.txt $O/ 2>/dev/null
tar czf $O/logs.tgz -C $R . 2>/dev/null
date -u
