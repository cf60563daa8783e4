#!/bin/bash
# Session 2026-11-30 (19th, "ai") call 5, nvidia-h200-x2. Call 4 (exp126):
# polling by one lane per warp until its vector arrives (g) is 0.28-0.31
# µs slower at every M (one more L2 round trip at the end), and no copy to
# out (c) saves only 0.01-0.04; so r1's 0.13-0.32 µs is in waiting for the
# rows >= 1. Do later rows arrive later, or do the threads that handle
# them (the last receive CTAs) start late? Timing only, sources with
# row0.patch, gate.patch, rows.patch:
#   old: no macro;
#   r1:  row 0 alone (as in calls 3 and 4);
#   rl:  row M-1 alone, by the first receive threads (shifted);
#   rlt: row M-1 alone, by the threads that handle it in the committed code;
#   h:   rows 0 .. ceil(M/2)-1 (the first half), by their own threads.
# Step A/B, tp 2, 3 interleaved rounds, bin/tprun of 6703ff1.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
R=$O/r; mkdir -p $R
mkdir -p build/src-row0 && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu build/src-row0/ &&
  (cd build/src-row0 && patch -p1 -s < ../../bench/experiments-2026-11-30ai/row0.patch && patch -p1 -s < ../../bench/experiments-2026-11-30ai/gate.patch && patch -p1 -s < ../../bench/experiments-2026-11-30ai/rows.patch) || { echo "patch FAILED"; exit 1; }
el "builds"
pids=()
scripts/kernel-harness/build-exp old build/src-row0 > $R/build-old.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp r1 build/src-row0 -DTPRUN_EXP_RECV_ROW0 > $R/build-r1.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp rl build/src-row0 '-DTPRUN_EXP_RECV_LO=(m-1)' -DTPRUN_EXP_RECV_HI=m -DTPRUN_EXP_RECV_SHIFT > $R/build-rl.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp rlt build/src-row0 '-DTPRUN_EXP_RECV_LO=(m-1)' -DTPRUN_EXP_RECV_HI=m > $R/build-rlt.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp h build/src-row0 -DTPRUN_EXP_RECV_LO=0 '-DTPRUN_EXP_RECV_HI=((m+1)/2)' > $R/build-h.txt 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
cat $R/build-*.txt
el "step A/B"
for r in 1 2 3; do
  for f in old r1 rl rlt h; do
    TPRUN_KERNELS_FATBIN=$PWD/build/$f.fatbin timeout 60 bin/tprun --tp 2 -- bin/tprun __bench --hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 \
      --replays 200 --warmup 20 --rotate-mb 512 --table $R/step-$f-$r.tsv > $R/step-$f-$r.txt 2>&1 || echo "step $f round $r exit $?"
  done
  el "round $r"
done
python3 - $R > $R/step-ab.txt <<'PY'
import sys, statistics as st
o = sys.argv[1]
res = {}
builds = ("old", "r1", "rl", "rlt", "h")
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
print("step µs, median of 3 rounds (diff to old) ratio to the floor; all but old are timing only (wrong blocks)")
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
