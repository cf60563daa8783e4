#!/bin/bash
# Session 2026-11-30 (19th, "ai") call 6, nvidia-h200-x2. Calls 3-5: the
# step's receive costs more the more vectors it takes, whichever they are;
# the reading is that each receive CTA holds a slot sized for a skinny CTA
# until the end of the step, slots the next step's early CTAs would use
# (28 receive CTAs at M 8, 4 at M 1). Fewer receive CTAs, each thread
# polling several vectors at once (ilp.patch, TPRUN_EXP_RECV_ILP=K; the
# host launches 1/K of the CTAs with TPRUN_EXP_RECEIVE_VECTORS=K, branch
# recv-ilp):
#   old: the committed sources (build-exp), 1 vector a thread;
#   s2:  the same kernel, half the CTAs (2 vectors a thread, one after the
#        other: the batched receive of 2026-11-30e, as a control);
#   k2:  ILP 2, half the CTAs;
#   k4:  ILP 4, a quarter of the CTAs.
# All must return right blocks. Step A/B, tp 2, 3 interleaved rounds,
# bin/tprun of the recv-ilp branch (recv-ilp-host.patch on 06ef227).
source scripts/device-call-prologue
tar xzf .dev/bin-ilp.tgz
R=$O/r; mkdir -p $R
mkdir -p build/src-row0 && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu build/src-row0/ &&
  (cd build/src-row0 && patch -p1 -s < ../../bench/experiments-2026-11-30ai/ilp.patch) || { echo "patch FAILED"; exit 1; }
el "builds"
pids=()
scripts/kernel-harness/build-exp old build/src-row0 > $R/build-old.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp k2 build/src-row0 -DTPRUN_EXP_RECV_ILP=2 > $R/build-k2.txt 2>&1 & pids+=($!)
scripts/kernel-harness/build-exp k4 build/src-row0 -DTPRUN_EXP_RECV_ILP=4 > $R/build-k4.txt 2>&1 & pids+=($!)
for p in "${pids[@]}"; do wait "$p"; done
cat $R/build-*.txt
cp build/old.fatbin build/s2.fatbin
for f in old k2 k4; do echo "$f: $(grep -A3 "entry function 'tprun_skinny_m8_t32p' for 'sm_90'" build/$f-b.txt | grep -o 'Used [0-9]* registers')"; done
el "step A/B"
for r in 1 2 3; do
  for f in old s2 k2 k4; do
    case $f in s2|k2) V=2 ;; k4) V=4 ;; *) V=1 ;; esac
    TPRUN_EXP_RECEIVE_VECTORS=$V TPRUN_KERNELS_FATBIN=$PWD/build/$f.fatbin timeout 60 bin/tprun --tp 2 -- bin/tprun __bench --hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 \
      --replays 200 --warmup 20 --rotate-mb 512 --table $R/step-$f-$r.tsv > $R/step-$f-$r.txt 2>&1 || echo "step $f round $r exit $?"
  done
  el "round $r"
done
python3 - $R > $R/step-ab.txt <<'PY'
import sys, statistics as st
o = sys.argv[1]
res = {}
builds = ("old", "s2", "k2", "k4")
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
print("step µs, median of 3 rounds (diff to old) ratio to the floor; every build must be right")
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
grep -h 'FAILED\|every checked' $R/step-k*.txt | head -6
tar czf $O/all.tgz -C $R . && rm -rf $R
el done
