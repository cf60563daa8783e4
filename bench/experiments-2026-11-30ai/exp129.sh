#!/bin/bash
# Session 2026-11-30 (19th, "ai") call 7, nvidia-h200-x2. Calls 3-6: the
# receive costs the step more the more vectors it takes (one row instead of
# M: -0.13 to -0.32 µs), whichever they are, however many CTAs take them;
# the best-fitting reading is the latest of N per-vector detections, each
# with a long tail (growing about with ln N). Two cheap probes of the tail:
#   gpu:  the polls as ld.relaxed.gpu (SASS LDG.E.128.STRONG.GPU) instead of
#         ld.volatile (STRONG.SYS); right blocks expected in practice, not
#         promised by the memory model for a peer GPU's stores;
#   t8:   the timer read every 8th failed poll instead of every one (a
#         shorter poll loop);
# and whether the tail needs the next step's L2 prefetch plan: old and r1
# (row 0 alone) with the step table's plan set to 0 (step_table_nopf.tsv).
# Sources with row0.patch and poll.patch. Step A/B, tp 2, 3 interleaved
# rounds, bin/tprun of 6703ff1.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
R=$O/r; mkdir -p $R
mkdir -p build/src-row0 && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu build/src-row0/ &&
  (cd build/src-row0 && patch -p1 -s < ../../bench/experiments-2026-11-30ai/row0.patch && patch -p1 -s < ../../bench/experiments-2026-11-30ai/poll.patch) || { echo "patch FAILED"; exit 1; }
el "builds"
pids=()
scripts/kernel-harness/build-exp old build/src-row0 > $R/build-old.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp r1 build/src-row0 -DTPRUN_EXP_RECV_ROW0 > $R/build-r1.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp gpu build/src-row0 -DTPRUN_EXP_POLL_LD=1 > $R/build-gpu.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp t8 build/src-row0 -DTPRUN_EXP_TIMER_EVERY=8 > $R/build-t8.txt 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
cat $R/build-*.txt
cp build/old.fatbin build/oldnopf.fatbin; cp build/r1.fatbin build/r1nopf.fatbin
el "step A/B"
for r in 1 2 3; do
  for f in old r1 gpu t8 oldnopf r1nopf; do
    case $f in *nopf) export TPRUN_KERNELS_STEP_TABLE=$PWD/bench/experiments-2026-11-30ai/step_table_nopf.tsv ;; *) unset TPRUN_KERNELS_STEP_TABLE ;; esac
    TPRUN_KERNELS_FATBIN=$PWD/build/$f.fatbin timeout 60 bin/tprun --tp 2 -- bin/tprun __bench --hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 \
      --replays 200 --warmup 20 --rotate-mb 512 --table $R/step-$f-$r.tsv > $R/step-$f-$r.txt 2>&1 || echo "step $f round $r exit $?"
  done
  el "round $r"
done
python3 - $R > $R/step-ab.txt <<'PY'
import sys, statistics as st
o = sys.argv[1]
res = {}
builds = ("old", "r1", "gpu", "t8", "oldnopf", "r1nopf")
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
print("step µs, median of 3 rounds (diff to old) ratio to the floor; r1, r1nopf timing only (wrong blocks); the rest must be right")
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
grep -h 'FAILED\|every checked' $R/step-gpu-*.txt $R/step-t8-*.txt $R/step-oldnopf-*.txt | head -9
tar czf $O/all.tgz -C $R . && rm -rf $R
el done
