#!/bin/bash
# Session 2026-11-30 (18th, "ah") call 4, nvidia-h200-x2: where the step's
# +0.05 µs with the halt word comes from (call 3: variants a, b, c all
# +0.04-0.08 at every M, c with a receive that never reads the word).
#   d: a without thread 0's cp.async.wait_all before reduce_store's barrier
#      (timing only: the read then races the copy);
#   e: a whose tiles never look at the word (receive and parameter block
#      as a; timing only).
# Step A/B, tp 2: committed fatbin vs a, d, e; 4 interleaved rounds.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
V=bench/experiments-2026-11-30ah/variants
R=$O/r; mkdir -p $R
cp kernel/kernels.fatbin build/old.fatbin
el "builds"
pids=()
for v in a d e; do scripts/kernel-harness/build-exp $v $V/$v > $R/build-exp-$v.txt 2>&1 & pids+=($!); done
for p in "${pids[@]}"; do wait "$p"; done
grep -h 'nvcc exit' $R/build-exp-*.txt
el "step A/B"
for r in 1 2 3 4; do
  for f in old a d e; do
    TPRUN_KERNELS_FATBIN=$PWD/build/$f.fatbin timeout 60 bin/tprun --tp 2 -- bin/tprun __bench --hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 \
      --replays 200 --warmup 20 --rotate-mb 512 --table $R/step-$f-$r.tsv > $R/step-$f-$r.txt 2>&1 || echo "step $f round $r FAILED"
  done
done
python3 - $R > $R/step-ab.txt <<'PY'
import sys, statistics as st
o = sys.argv[1]
res = {}
builds = ("old", "a", "d", "e")
for f in builds:
    for r in range(1, 5):
        try:
            lines = open(f"{o}/step-{f}-{r}.tsv").read().split("\n")[1:]
        except OSError:
            continue
        for l in lines:
            if not l.strip(): continue
            x = l.split("\t")
            res.setdefault((f, int(x[0])), []).append((float(x[1]), float(x[3]), x[5] == "0" and x[6] == "true"))
print("step µs, median of 4 rounds (diff to old) ratio to the floor; ! = a round not right")
print("M " + " ".join(f"{b:>21}" for b in builds) + "  floor")
mean = {}
for m in range(1, 9):
    base = st.median(v[0] for v in res.get(("old", m), [(0, 0, 0)]))
    cells = []
    for b in builds:
        v = res.get((b, m), [])
        if not v: cells.append(f"{'-':>21}"); continue
        med = st.median(x[0] for x in v); fl = st.median(x[1] for x in v)
        mean.setdefault(b, []).append(med)
        cells.append(f"{med:7.3f} ({med-base:+.3f}) {med/fl:5.3f}{'' if all(x[2] for x in v) else '!'}")
    print(f"{m} " + " ".join(cells) + f"  {st.median(x[1] for x in res[('old', m)]):.3f}")
print(f"mean over M: " + " ".join(f"{k} {st.mean(v):.4f}" for k, v in mean.items()))
PY
cat $R/step-ab.txt
tar czf $O/all.tgz -C $R . && rm -rf $R
el done
