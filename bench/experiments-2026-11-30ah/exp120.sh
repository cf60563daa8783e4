#!/bin/bash
# Session 2026-11-30 (18th, "ah") call 3, nvidia-h200-x2. Call 2 (exp119)
# built every variant and then hung in a bare `wait`, which also waits for
# the prologue's tee (600 s lost); this call waits on PIDs only.
# 1. build-exp a, b, c (sm_90) and scripts/build-kernels for a and b.
# 2. Step A/B, tp 2: committed fatbin vs a, b, c; 3 interleaved rounds.
# 3. The faster of a and b (mean step time over M; a unless b is faster
#    by more than 0.01 µs) is the candidate: its full fatbin comes back,
#    and gpu-final-checks runs with it (TPRUN_KERNELS_FATBIN).
# Everything comes back in all.tgz.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
V=bench/experiments-2026-11-30ah/variants
R=$O/r; mkdir -p $R
cp kernel/kernels.fatbin build/old.fatbin
el "builds"
pids=()
for v in a b c; do scripts/kernel-harness/build-exp $v $V/$v > $R/build-exp-$v.txt 2>&1 & pids+=($!); done
for v in a b; do
  (rm -rf /tmp/full-$v && mkdir -p /tmp/full-$v && cp -r scripts kernel /tmp/full-$v/ && cp $V/$v/* /tmp/full-$v/kernel/ &&
   cd /tmp/full-$v && timeout 300 scripts/build-kernels > $R/build-kernels-$v.log 2>&1; echo "build-kernels $v rc $?" >> $R/build-kernels-$v.log) &
  pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
grep -h 'nvcc exit' $R/build-exp-*.txt; tail -qn1 $R/build-kernels-a.log $R/build-kernels-b.log
for v in a b; do mkdir -p $R/fatbin-$v; cp /tmp/full-$v/kernel/kernels.fatbin* $R/fatbin-$v/; done
sha256sum build/*.fatbin $R/fatbin-*/kernels.fatbin
el "step A/B"
for r in 1 2 3; do
  for f in old a b c; do
    TPRUN_KERNELS_FATBIN=$PWD/build/$f.fatbin timeout 60 bin/tprun --tp 2 -- bin/tprun __bench --hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 \
      --replays 200 --warmup 20 --rotate-mb 512 --table $R/step-$f-$r.tsv > $R/step-$f-$r.txt 2>&1 || echo "step $f round $r FAILED"
  done
done
python3 - $R > $R/step-ab.txt <<'PY'
import sys, statistics as st
o = sys.argv[1]
res = {}
builds = ("old", "a", "b", "c")
for f in builds:
    for r in range(1, 4):
        try:
            lines = open(f"{o}/step-{f}-{r}.tsv").read().split("\n")[1:]
        except OSError:
            continue
        for l in lines:
            if not l.strip(): continue
            x = l.split("\t")
            res.setdefault((f, int(x[0])), []).append((float(x[1]), float(x[3]), x[5] == "0" and x[6] == "true"))
print("step µs, median of 3 rounds (diff to old) ratio to the floor; ! = a round not right")
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
a, b = st.mean(mean.get("a", [99])), st.mean(mean.get("b", [99]))
print(f"mean over M: " + " ".join(f"{k} {st.mean(v):.4f}" for k, v in mean.items()))
print("pick", "b" if b < a - 0.01 else "a")
PY
cat $R/step-ab.txt
PICK=$(awk '/^pick/{print $2}' $R/step-ab.txt); PICK=${PICK:-a}
echo "candidate: $PICK"
export TPRUN_KERNELS_FATBIN=$R/fatbin-$PICK/kernels.fatbin
el "final checks with $PICK"
BENCH_TAG=ah OUT=$R/fc timeout 420 scripts/gpu-final-checks --note "binaries of the halt-word branch (s18); fatbin variant $PICK through TPRUN_KERNELS_FATBIN, sha256 $(sha256sum $TPRUN_KERNELS_FATBIN | cut -c1-16), stamp $(cat $R/fatbin-$PICK/kernels.fatbin.stamp | cut -c1-8); committed tables" > $R/final-checks.log 2>&1; echo "gpu-final-checks rc $?"
tail -40 $R/final-checks.log
cp bench/*2026-11-30ah* $R/ 2>/dev/null
el "pack"
tar czf $O/all.tgz -C $R . && rm -rf $R
el done
