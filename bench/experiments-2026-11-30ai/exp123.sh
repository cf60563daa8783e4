#!/bin/bash
# Session 2026-11-30 (19th, "ai") call 1, nvidia-h200-x2. Question: how
# much of the step's per-step time is the CUDA graph boundary? The step
# bench captures K steps per graph, K = the number of weight copies (21 at
# --rotate-mb 512), and divides a replay by K. Replays cannot PDL-overlap
# each other, so each replay pays one un-overlapped boundary; spread over
# 21 steps it may be a few 0.01 µs per step. The kernel bench's graphs hold
# >= 96 launches. Same bin/tprun (head ffe97ad), interleaved rounds of
# rotate 512 / 1024 / 2048 MiB (K 21 / 42 / 84), then the PyTorch baseline
# at 512 and 2048.
source scripts/device-call-prologue
R=$O/r; mkdir -p $R
el "step rounds"
for r in 1 2 3; do
  for mb in 512 1024 2048; do
    timeout 90 bin/tprun --tp 2 -- bin/tprun __bench --hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 \
      --replays 200 --warmup 20 --rotate-mb $mb --table $R/step-$mb-$r.tsv > $R/step-$mb-$r.txt 2>&1 || echo "step $mb round $r FAILED"
  done
  el "round $r"
done
python3 - $R > $R/step-k.txt <<'PY'
import sys, statistics as st
o = sys.argv[1]
res = {}
builds = ("512", "1024", "2048")
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
print("step µs, median of 3 rounds (diff to 512) ratio to the floor; ! = a round not right")
print("M " + " ".join(f"{b:>21}" for b in builds) + "  floor")
for m in range(1, 9):
    base = st.median(v[0] for v in res.get(("512", m), [(0, 0, 0)]))
    cells = []
    for b in builds:
        v = res.get((b, m), [])
        if not v: cells.append(f"{'-':>21}"); continue
        med = st.median(x[0] for x in v); fl = st.median(x[1] for x in v)
        cells.append(f"{med:7.3f} ({med-base:+.3f}) {med/fl:5.3f}{'' if all(x[2] for x in v) else '!'}")
    print(f"{m} " + " ".join(cells) + f"  {st.median(x[1] for x in res[('512', m)]):.3f}")
PY
cat $R/step-k.txt
head -3 $R/step-2048-1.txt
el "torch"
for mb in 512 2048; do
  timeout 150 python3 scripts/bench-step-torch.py --tp 2 --hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 \
    --replays 200 --warmup 20 --rotate-mb $mb --out $R/torch-$mb.jsonl > $R/torch-$mb.txt 2>&1 || echo "torch $mb FAILED"
  grep -E 'M=' $R/torch-$mb.txt
  el "torch $mb"
done
tar czf $O/all.tgz -C $R . && rm -rf $R
el done
