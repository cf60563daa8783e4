#!/bin/bash
# Session 2026-11-30 (9th) call 8, nvidia-h200: does a grid that holds more
# SMs (HARNESS_EXTRA_CTAS: idle tiles past the shard) remove the late first
# CTAs at shard 896? Committed fatbin; extra 0 / 10 / 20, interleaved, 3 rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
AB="896:3,4,5,6,8:16/8/g/16/1/p/one,32/4/g/16/2/p,32/4/g/8/4/p;896:1,2:16/8/g/16/1/p"
N="x0 x10 x20"
for r in 1 2 3; do
  for n in $N; do
    HARNESS_EXTRA_CTAS=${n#x} HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 90 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
  date -u
done
python3 - $O/kab.txt "$N" <<'PY' | tee $O/kab-summary.txt
import sys, collections, statistics
names = sys.argv[2].split()
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    x = l.split()
    if len(x) < 10 or x[8] != "median": continue
    d[(x[4], x[7], int(x[6]), x[0])].append(float(x[9]))
print("shard config M " + " ".join(names) + "  (deltas against " + names[0] + ")")
for k in sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2])):
    v = [statistics.median(d[k + (n,)]) if d.get(k + (n,)) else float("nan") for n in names]
    print(k[0], k[1], k[2], " ".join(f"{x:.3f}" for x in v), " ".join(f"{x - v[0]:+.3f}" for x in v[1:]))
PY
date -u
