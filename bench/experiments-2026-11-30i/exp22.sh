#!/bin/bash
# Call on nvidia-h200-x2 (2026-11-30, session i): (1) the cluster sum by
# st.async into the leader's shared memory (.dev/exp2, "sta") against the
# shipped fatbin: harness check of sta on GPU 1 while the kernel A/B runs on
# GPU 0; (2) the step (tp 2) with step-specific tables: every M of shard
# 3584 on one config, shipped and sta fatbins, interleaved rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
export TPRUN_MULTICAST=0
nvidia-smi -L
nvcc --version | tail -1
( cd .dev/exp2 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -Xptxas -v -I . -gencode arch=compute_90,code=sm_90 -o ../../build/sta.fatbin k.cu 2> ../../build/sta.ptxas ) & p1=$!
nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $p1 || { echo "sta build failed"; tail -20 build/sta.ptxas; exit 1; }
el built
H=build/harness
CUDA_VISIBLE_DEVICES=1 $H build/sta.fatbin check > $O/sta-check.txt 2>&1 &
pc=$!
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,32/4/g/8/4/p,16/8/g/8/2/p,32/4/g/8/2/p,32/4/g/16/2/p;3584:3,4,6,8:32/4/g/16/1/p,16/8/g/8/1/p,16/8/g/4/2/p,32/4/g/4/4/p"
for r in 1 2 3; do
  for n in base sta; do
    f=kernel/kernels.fatbin; [[ $n == sta ]] && f=build/sta.fatbin
    CUDA_VISIBLE_DEVICES=0 HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 $H $f ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
  el kernel round $r
done
wait $pc; echo "sta check exit $?"; grep -E "^check skinny|FAIL|fused receive|negzero" $O/sta-check.txt | head -20
CUDA_VISIBLE_DEVICES=0 compute-sanitizer --tool memcheck --error-exitcode 3 $H build/sta.fatbin small 2>&1 | tail -n 2
el checked
python3 - $O/kab.txt > $O/kab-summary.txt <<'PY'
import sys, collections, statistics
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    x = l.split()
    if len(x) < 10 or x[8] != "median": continue
    d[(x[4], x[7], int(x[6]), x[0])].append(float(x[9]))
keys = sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2]))
print("shard cfg M |       base        sta      delta")
for k in keys:
    b = d.get(k + ("base",)); s = d.get(k + ("sta",))
    if b and s:
        mb, ms = statistics.median(b), statistics.median(s)
        print(f"{k[0]} {k[1]} {k[2]} | {mb:10.3f} {ms:10.3f} {ms-mb:+10.3f}")
PY
cat $O/kab-summary.txt
B="--hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 --replays 200 --warmup 20 --rotate-mb 512"
F=$PWD/build/sta.fatbin
T=$PWD/.dev/steptables
run() { # name env...
  local n=$1; shift
  rm -f /tmp/s.tsv
  env "$@" timeout 90 bin/tprun --tp 2 -- bin/tprun __bench $B --table /tmp/s.tsv > /tmp/$n-$r.log 2>&1
  echo "round $r $n exit $?" >> $O/step-ab.txt; cat /tmp/s.tsv >> $O/step-ab.txt
}
S0=$(date +%s)
for r in 1 2 3; do
  run base X=1
  run sta TPRUN_KERNELS_FATBIN=$F
  for v in A16s8 A32g16 A32g16pf A16g8pf A16g4c2 A32g8c2 A32g4c4; do
    run $v TPRUN_KERNELS_CONFIG_TABLE=$T/$v.tsv
  done
  for v in A16g4c2 A32g8c2 A32g4c4; do
    run sta-$v TPRUN_KERNELS_FATBIN=$F TPRUN_KERNELS_CONFIG_TABLE=$T/$v.tsv
  done
  el step round $r
  (( $(date +%s) - S0 > 300 )) && break
done
grep -h "FAILED\|every checked\|wrong" /tmp/*-1.log | sort | uniq -c | head
python3 - $O/step-ab.txt > $O/step-ab-summary.txt <<'PY'
import sys, collections, statistics
d = collections.defaultdict(list); cur = None; names = []
for l in open(sys.argv[1]):
    x = l.split()
    if l.startswith('round'):
        cur = x[2]
        if cur not in names: names.append(cur)
        continue
    if not x or x[0] == 'm': continue
    d[(cur, int(x[0]))].append(float(x[1]))
print("M | " + " ".join(f"{n[:10]:>10}" for n in names))
for m in range(1, 9):
    print(f"{m} | " + " ".join(f"{statistics.median(d[(n, m)]):10.3f}" if d.get((n, m)) else f"{'-':>10}" for n in names))
PY
cat $O/step-ab-summary.txt
el done
