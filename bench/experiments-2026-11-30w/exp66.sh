#!/bin/bash
# Session 2026-11-30 (11th, "w") call 9, nvidia-h200-x2: the step with the
# latent loads gone (NOLAT, -DTPRUN_NOLAT_EXP; timing only, its blocks are
# wrong and counted so), against the committed fatbin: how much of the
# step's M growth is the latent's. The step table's config, 4 rounds.
set -u
O=$OUT
R=/tmp/w66
rm -rf $R; mkdir -p $O $R build
exec > >(tee -a $O/console.txt) 2>&1
export TPRUN_MULTICAST=0
date -u; nvidia-smi -L
mkdir -p bin && cp .dev/w/bin/tprun bin/tprun
S=.dev/w
( mkdir -p build/N && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/N/ && cd build/N && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_NOLAT_EXP -I . -gencode arch=compute_90,code=sm_90 -o ../N.fatbin k.cu > ../N-b.txt 2>&1 )
ls -la build/N.fatbin; head -3 build/N-b.txt
date -u
C=32/4/g/4/4/pf48.8l/p/lb
for r in 1 2 3 4; do
  BENCH_TAG=w66b$r OUT=$R/base$r timeout 100 scripts/step-sweep --rounds 1 --configs $C > $R/base$r.log 2>&1; echo "base r$r rc $?"
  TPRUN_KERNELS_FATBIN=$PWD/build/N.fatbin BENCH_TAG=w66n$r OUT=$R/nolat$r timeout 100 scripts/step-sweep --rounds 1 --configs $C > $R/nolat$r.log 2>&1; echo "nolat r$r rc $?"
  date -u
done
for r in 1 2 3 4; do
  for b in base nolat; do tail -n +2 $R/$b$r/step-sweep.tsv | sed "s/^/$b\t/"; done
done > $O/runs.tsv
python3 - $O/runs.tsv <<'PY' | tee $O/summary.txt
import collections, statistics, sys
d = collections.defaultdict(list); wrong = collections.Counter()
for line in open(sys.argv[1]):
    b, r, c, m, us, w, ident = line.rstrip("\n").split("\t")
    if w != "0" or ident != "true": wrong[b] += 1
    if float(us) > 0: d[(b, int(m))].append(float(us))
print("runs with wrong blocks (expected for nolat only):", dict(wrong))
print("M     base    nolat   delta")
for m in range(1, 9):
    v = [statistics.median(d[(n, m)]) if d.get((n, m)) else float("nan") for n in ("base", "nolat")]
    print(f"{m} {v[0]:8.3f} {v[1]:8.3f}  {v[1] - v[0]:+.3f}")
PY
date -u
