#!/bin/bash
# Session 2026-11-30 (18th, "ah") call 1, nvidia-h200-x2: the halt word
# (kernel/skinny.h, "Halt"): a receive that gives up sets a device word;
# skinny tiles that find it set store nothing, receives that find it set
# give up at once. Binaries of the working tree (stamp = new sources hash,
# embedded fatbin still the old one: every run below names the fatbin
# through TPRUN_KERNELS_FATBIN).
# 1. scripts/build-kernels (nvcc 13): the new fatbin, brought back in $O/fatbin.
# 2. sass_diff against the committed fatbin (informational).
# 3. GPU tests of kernel, tp, internal/cuda with the new fatbin (memcheck too).
# 4. Step A/B, tp 2: old fatbin vs new, 3 interleaved rounds, same bin/tprun.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
cp kernel/kernels.fatbin build/old.fatbin
git show HEAD:kernel/kernels.fatbin.stamp > build/old.stamp 2>/dev/null || true
el "build-kernels"
stamp_before=$(cat kernel/kernels.fatbin.stamp)
timeout 300 scripts/build-kernels > $O/build-kernels.log 2>&1; echo "build-kernels rc $?"
tail -3 $O/build-kernels.log
mkdir -p $O/fatbin
cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/fatbin/
cp kernel/kernels.fatbin build/new.fatbin
echo "stamp before $stamp_before after $(cat kernel/kernels.fatbin.stamp)"
sha256sum build/old.fatbin build/new.fatbin
grep -B1 -A2 'tprun_skinny_m[0-9]_t32p\b' kernel/kernels.fatbin.ptxas.txt | grep -E 'Compiling|Used|spill' | head -40 > $O/ptxas-t32p.txt
el "sass_diff"
for a in 90 100; do
  timeout 120 python3 scripts/kernel-harness/sass_diff.py --arch sm_$a build/old.fatbin build/new.fatbin > $O/sass-diff-sm$a.txt 2>&1; echo "sass_diff sm_$a rc $?"; tail -3 $O/sass-diff-sm$a.txt
done
export TPRUN_KERNELS_FATBIN=$PWD/build/new.fatbin
el "GPU tests"
OUT=$O/gt GPU_TEST_TIMEOUT=6m timeout 560 scripts/gpu-test kernel tp internal/cuda > $O/gpu-test.log 2>&1; echo "gpu-test rc $?"
tail -8 $O/gpu-test.log
grep -h -E 'StalledPeer|TestGPUHalt|halt' $O/gt/*.log | grep -E '^(=== RUN|--- |    )' | head -30
el "step A/B"
for r in 1 2 3; do
  for f in old new; do
    TPRUN_KERNELS_FATBIN=$PWD/build/$f.fatbin timeout 120 bin/tprun --tp 2 -- bin/tprun __bench --hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 \
      --replays 200 --warmup 20 --rotate-mb 512 --table $O/step-$f-$r.tsv > $O/step-$f-$r.txt 2>&1; echo "step $f round $r rc $?"
  done
done
python3 - $O <<'PY'
import sys, glob, statistics as st
o = sys.argv[1]
res = {}
for f in ("old", "new"):
    for r in (1, 2, 3):
        try:
            lines = open(f"{o}/step-{f}-{r}.tsv").read().split("\n")[1:]
        except OSError:
            continue
        for l in lines:
            if not l.strip(): continue
            x = l.split("\t")
            res.setdefault((f, int(x[0])), []).append((float(x[1]), float(x[3]), x[5], x[6]))
print("M  old_us(med of rounds)  new_us  diff   floor  new_ratio  wrong/ident(new)")
for m in range(1, 9):
    a = [v[0] for v in res.get(("old", m), [])]; b = [v[0] for v in res.get(("new", m), [])]
    if not a or not b: continue
    fl = st.median([v[1] for v in res[("new", m)]])
    print(f"{m}  {st.median(a):.3f} {st.median(b):.3f} {st.median(b)-st.median(a):+.3f}  {fl:.3f}  {st.median(b)/fl:.3f}  {[(v[2], v[3]) for v in res[('new', m)]]}")
PY
el done
