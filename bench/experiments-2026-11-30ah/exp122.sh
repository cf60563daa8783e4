#!/bin/bash
# Session 2026-11-30 (18th, "ah") call 5, nvidia-h200-x2: variant f of the
# halt word, now the working tree's kernel sources. Call 4 (exp121) showed
# the cost of a in thread 0's cp.async.wait_all before reduce_store's
# barrier (0.035 µs) and the rest in the fetch and read (0.01-0.025); the
# tiles without the word cost nothing. f: thread 0 of the leader inits a
# barrier before its weight loads, has the TMA copy the word after its
# latent loads (complete_tx on that barrier), and only the threads that
# store wait on it, just before they read the word.
# 1. scripts/build-kernels (full fatbin, brought back).
# 2. Step A/B, tp 2: committed fatbin vs f; 3 interleaved rounds.
# 3. GPU tests of kernel, tp, internal/cuda (memcheck too) with f.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
R=$O/r; mkdir -p $R
cp kernel/kernels.fatbin build/old.fatbin
el "build-kernels"
timeout 200 scripts/build-kernels > $R/build-kernels.log 2>&1; echo "build-kernels rc $?"; tail -n1 $R/build-kernels.log
mkdir -p $R/fatbin; cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $R/fatbin/
cp kernel/kernels.fatbin build/f.fatbin
sha256sum build/old.fatbin build/f.fatbin
el "step A/B"
for r in 1 2 3; do
  for f in old f; do
    TPRUN_KERNELS_FATBIN=$PWD/build/$f.fatbin timeout 60 bin/tprun --tp 2 -- bin/tprun __bench --hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 \
      --replays 200 --warmup 20 --rotate-mb 512 --table $R/step-$f-$r.tsv > $R/step-$f-$r.txt 2>&1 || echo "step $f round $r FAILED"
  done
done
python3 - $R > $R/step-ab.txt <<'PY'
import sys, statistics as st
o = sys.argv[1]
res = {}
builds = ("old", "f")
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
print(f"mean over M: " + " ".join(f"{k} {st.mean(v):.4f}" for k, v in mean.items()))
PY
cat $R/step-ab.txt
el "GPU tests (f)"
export TPRUN_KERNELS_FATBIN=$PWD/build/f.fatbin
OUT=$R/gt GPU_TEST_TIMEOUT=3m timeout 200 scripts/gpu-test kernel tp internal/cuda > $R/gpu-test.log 2>&1; echo "gpu-test rc $?"
tail -6 $R/gpu-test.log
grep -h -A8 -E '^\s*--- FAIL' $R/gt/*.log | head -30
grep -h -E 'StalledPeer|halted step|fused receive, cfg' $R/gt/*.log | head -10
tar czf $O/all.tgz -C $R . && rm -rf $R
el done
