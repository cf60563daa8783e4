#!/bin/bash
# Session 2026-11-30 (19th, "ai") call 8, nvidia-h200-x2. Call 7: the poll's
# load scope and a shorter poll loop change nothing, and the gap between
# the receive of one row (r1) and of M rows stays without the L2 prefetch
# plan. Is the gap the CTA slots the receive threads of rows >= 1 hold to
# the end of the step, or their memory work (polls, copy, re-arm)? r1 with
# those threads staying a fixed time, touching no memory, before they
# leave (late.patch, TPRUN_EXP_RECV_LATE_NS): 5 µs and 6.5 µs after their
# griddepcontrol.wait (a step is about 7.2-7.7 µs, the hand-off about 0.9).
# If r1late ~ old, the slots are the cost; if ~ r1, the memory work.
# Sources with row0.patch and late.patch; step A/B, tp 2, 3 interleaved
# rounds, bin/tprun of 6703ff1.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
R=$O/r; mkdir -p $R
mkdir -p build/src-row0 && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu build/src-row0/ &&
  (cd build/src-row0 && patch -p1 -s < ../../bench/experiments-2026-11-30ai/row0.patch && patch -p1 -s < ../../bench/experiments-2026-11-30ai/late.patch) || { echo "patch FAILED"; exit 1; }
el "builds"
pids=()
scripts/kernel-harness/build-exp old build/src-row0 > $R/build-old.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp r1 build/src-row0 -DTPRUN_EXP_RECV_ROW0 > $R/build-r1.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp l5 build/src-row0 -DTPRUN_EXP_RECV_ROW0 -DTPRUN_EXP_RECV_LATE_NS=5000 > $R/build-l5.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp l65 build/src-row0 -DTPRUN_EXP_RECV_ROW0 -DTPRUN_EXP_RECV_LATE_NS=6500 > $R/build-l65.txt 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
cat $R/build-*.txt
el "step A/B"
for r in 1 2 3; do
  for f in old r1 l5 l65; do
    TPRUN_KERNELS_FATBIN=$PWD/build/$f.fatbin timeout 60 bin/tprun --tp 2 -- bin/tprun __bench --hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 \
      --replays 200 --warmup 20 --rotate-mb 512 --table $R/step-$f-$r.tsv > $R/step-$f-$r.txt 2>&1 || echo "step $f round $r exit $?"
  done
  el "round $r"
done
python3 - $R > $R/step-ab.txt <<'PY'
import sys, statistics as st
o = sys.argv[1]
res = {}
builds = ("old", "r1", "l5", "l65")
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
print("step µs, median of 3 rounds (diff to old) ratio to the floor; all but old timing only (wrong blocks)")
print("M " + " ".join(f"{b:>21}" for b in builds) + "  floor")
for m in range(1, 9):
    base = st.median(v[0] for v in res.get(("old", m), [(0, 0, 0)]))
    cells = []
    for b in builds:
        v = res.get((b, m), [])
        if not v: cells.append(f"{'-':>21}"); continue
        med = st.median(x[0] for x in v); fl = st.median(x[1] for x in v)
        cells.append(f"{med:7.3f} ({med-base:+.3f}) {med/fl:5.3f}{'' if all(x[2] for x in v) else '!'}")
    print(f"{m} " + " ".join(cells) + f"  {st.median(x[1] for x in res[('old', m)]):.3f}")
PY
cat $R/step-ab.txt
grep -h 'every checked' $R/step-old-*.txt | head -3
tar czf $O/all.tgz -C $R . && rm -rf $R
el done
