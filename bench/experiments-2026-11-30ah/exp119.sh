#!/bin/bash
# Session 2026-11-30 (18th, "ah") call 2, nvidia-h200-x2. Call 1 found the
# halt word in a register costing the fused step 0.05-0.06 µs at every M
# (ptxas issued its load ahead of the latent loads and tested it before the
# first MMA). Variants (bench/experiments-2026-11-30ah/variants/):
#   a: the tiles copy the halt word to shared memory with cp.async after
#      griddepcontrol.wait, read after reduce_store's first barrier; the
#      receive loads it before polling (the working tree's sources);
#   b: a, with the receive looking at it once, after its first failed poll;
#   c: a, with a receive that never reads it (timing only).
# 1. build-exp a, b, c (sm_90) and scripts/build-kernels for a and b (full
#    fatbins, brought back); the harness.
# 2. GPU tests of kernel, tp, internal/cuda with a's full fatbin.
# 3. Step A/B, tp 2: committed fatbin vs a, b, c; 5 interleaved rounds.
# 4. Kernel A/B (harness ab-rounds): committed vs a vs b at the table's
#    configs of shard 3584 and 896.
# Everything comes back in one archive, all.tgz.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
V=bench/experiments-2026-11-30ah/variants
R=$O/r; mkdir -p $R
cp kernel/kernels.fatbin build/old.fatbin
el "builds"
for v in a b c; do scripts/kernel-harness/build-exp $v $V/$v > $R/build-exp-$v.txt 2>&1 & done
for v in a b; do
  (rm -rf /tmp/full-$v && mkdir -p /tmp/full-$v && cp -r scripts kernel /tmp/full-$v/ && cp $V/$v/* /tmp/full-$v/kernel/ &&
   cd /tmp/full-$v && timeout 400 scripts/build-kernels > $R/build-kernels-$v.log 2>&1; echo "build-kernels $v rc $?" >> $R/build-kernels-$v.log) &
done
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > $R/harness-build.txt 2>&1; echo "harness rc $?"
wait
cat $R/build-exp-*.txt | grep -i 'nvcc exit'; tail -n1 $R/build-kernels-a.log $R/build-kernels-b.log
for v in a b; do mkdir -p $R/fatbin-$v; cp /tmp/full-$v/kernel/kernels.fatbin* $R/fatbin-$v/; done
sha256sum build/*.fatbin $R/fatbin-*/kernels.fatbin
echo "tree stamp $(cat kernel/kernels.fatbin.stamp); a $(cat $R/fatbin-a/kernels.fatbin.stamp); b $(cat $R/fatbin-b/kernels.fatbin.stamp)"
el "GPU tests (a)"
export TPRUN_KERNELS_FATBIN=$R/fatbin-a/kernels.fatbin
OUT=$R/gt GPU_TEST_TIMEOUT=5m SKIP_SANITIZER=1 timeout 400 scripts/gpu-test kernel tp internal/cuda > $R/gpu-test.log 2>&1; echo "gpu-test rc $?"
tail -5 $R/gpu-test.log
grep -h -B3 -A12 -E '^\s*--- FAIL' $R/gt/*.log | head -60
grep -h -E 'StalledPeer|halted step' $R/gt/*.log | head -12
unset TPRUN_KERNELS_FATBIN
el "check of b with the harness"
timeout 200 build/harness build/b.fatbin check > $R/check-b.txt 2>&1; echo "check b rc $?"; grep -E "check skinny:|CHECK|fused receive" $R/check-b.txt | tail -6
el "step A/B"
for r in 1 2 3 4 5; do
  for f in old a b c; do
    TPRUN_KERNELS_FATBIN=$PWD/build/$f.fatbin timeout 60 bin/tprun --tp 2 -- bin/tprun __bench --hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 \
      --replays 200 --warmup 20 --rotate-mb 512 --table $R/step-$f-$r.tsv > $R/step-$f-$r.txt 2>&1 || echo "step $f round $r FAILED"
  done
done
python3 - $R <<'PY'
import sys, statistics as st
o = sys.argv[1]
res = {}
builds = ("old", "a", "b", "c")
for f in builds:
    for r in range(1, 6):
        try:
            lines = open(f"{o}/step-{f}-{r}.tsv").read().split("\n")[1:]
        except OSError:
            continue
        for l in lines:
            if not l.strip(): continue
            x = l.split("\t")
            res.setdefault((f, int(x[0])), []).append((float(x[1]), float(x[3]), x[5] == "0" and x[6] == "true"))
print("step µs, median of rounds (diff to old); ratio to the floor; all rounds right")
print("M " + " ".join(f"{b:>16}" for b in builds) + "  floor")
for m in range(1, 9):
    base = st.median(v[0] for v in res.get(("old", m), [(0, 0, 0)]))
    cells = []
    for b in builds:
        v = res.get((b, m), [])
        if not v: cells.append(f"{'-':>16}"); continue
        med = st.median(x[0] for x in v); fl = st.median(x[1] for x in v)
        cells.append(f"{med:6.3f}({med-base:+.3f}){med/fl:5.3f}{'' if all(x[2] for x in v) else '!'}")
    print(f"{m} " + " ".join(cells) + f"  {st.median(x[1] for x in res[('old', m)]):.3f}")
PY
el "kernel A/B"
S="3584:1,2,3,4,5,6,7,8:32/4/g/4/4/pf48.8l/p/lb;896:1,2,3,4:16/8/l/16/1/p;896:5,6:32/4/g/8/4/p;896:7,8:32/4/g/16/2/p"
AB_UNTIL=$((T0 + 540)) scripts/kernel-harness/ab-rounds $R/kab 5 "$S" old=build/old.fatbin a=build/a.fatbin b=build/b.fatbin > $R/kab-console.txt 2>&1; echo "ab-rounds rc $?"
cat $R/kab-summary.txt 2>/dev/null | head -60
el "pack"
tar czf $O/all.tgz -C $R . && rm -rf $R
el done
