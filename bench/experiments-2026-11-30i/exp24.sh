#!/bin/bash
# Call on nvidia-h200-x2 (2026-11-30i): (1) "moved": the cluster-sum setup
# after the weight prologue instead of before it (.dev/exp3/skinny.cu),
# built in full (sm_90, sm_100, PTX) so it can ship; harness check of it on
# GPU 1 while the kernel A/B (old 30g fatbin, cur = committed candidate,
# moved) runs on GPU 0, clusters of 8 at shard 896 included; (2) the step
# (tp 2): old fatbin+table, cur, moved, and every M of shard 3584 on
# 32/4/g/4/4 with three L2 prefetch plans. Interleaved rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
export TPRUN_MULTICAST=0
nvidia-smi -L
cp kernel/skinny.cu build/skinny.cu.cur && cp .dev/exp3/skinny.cu kernel/skinny.cu
OUTFILE=build/moved.fatbin scripts/build-kernels > build/moved-build.txt 2>&1 & p1=$!
nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $p1 || { echo "moved build failed"; tail -20 build/moved-build.txt; exit 1; }
cp build/skinny.cu.cur kernel/skinny.cu
tail -1 build/moved-build.txt; sha256sum kernel/kernels.fatbin build/moved.fatbin
el built
H=build/harness
CUDA_VISIBLE_DEVICES=1 $H build/moved.fatbin check > $O/moved-check.txt 2>&1 &
pc=$!
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;896:3,4,5,6,7,8:32/4/g/4/8/p,32/4/g/8/8/p,16/8/g/4/8/p,16/8/g/8/4/p;3584:1,2,4,8:16/8/g/8/1/p,32/4/g/4/4/p"
for r in 1 2 3; do
  for n in old cur moved; do
    f=kernel/kernels.fatbin; [[ $n == moved ]] && f=build/moved.fatbin; [[ $n == old ]] && f=.dev/old.fatbin
    CUDA_VISIBLE_DEVICES=0 HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 $H $f ab 2>&1 | grep '^ab' | sed "s/^/$n r$r /" >> $O/kab.txt
  done
  el kernel round $r
done
wait $pc; echo "moved check exit $?"; grep -E "^check skinny|FAIL|negzero" $O/moved-check.txt | head -8
CUDA_VISIBLE_DEVICES=0 compute-sanitizer --tool memcheck --error-exitcode 3 $H build/moved.fatbin small 2>&1 | tail -n 1
el checked
python3 - $O/kab.txt > $O/kab-summary.txt <<'PY'
import sys, collections, statistics
d = collections.defaultdict(list)
for l in open(sys.argv[1]):
    x = l.split()
    if len(x) < 10 or x[8] != "median": continue
    d[(x[4], x[7], int(x[6]), x[0])].append(float(x[9]))
keys = sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2]))
names = ["old", "cur", "moved"]
print("shard cfg M | " + " ".join(f"{n:>8}" for n in names))
for k in keys:
    print(f"{k[0]} {k[1]} {k[2]} | " + " ".join(f"{statistics.median(d[k + (n,)]):8.3f}" if d.get(k + (n,)) else f"{'-':>8}" for n in names))
PY
cat $O/kab-summary.txt
B="--hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 --replays 200 --warmup 20 --rotate-mb 512"
run() { # name env...
  local n=$1; shift
  rm -f /tmp/s.tsv
  env "$@" timeout 90 bin/tprun --tp 2 -- bin/tprun __bench $B --table /tmp/s.tsv > /tmp/$n-$r.log 2>&1
  echo "round $r $n exit $?" >> $O/step-ab.txt; cat /tmp/s.tsv >> $O/step-ab.txt
}
for r in 1 2 3 4; do
  run old TPRUN_KERNELS_FATBIN=$PWD/.dev/old.fatbin TPRUN_KERNELS_CONFIG_TABLE=$PWD/.dev/old-table.tsv
  run cur X=1
  run moved TPRUN_KERNELS_FATBIN=$PWD/build/moved.fatbin
  for v in P40 P20 PLO; do run $v TPRUN_KERNELS_CONFIG_TABLE=$PWD/.dev/st3/$v.tsv; done
  el step round $r
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
print("M | " + " ".join(f"{n[:9]:>9}" for n in names))
for m in range(1, 9):
    print(f"{m} | " + " ".join(f"{statistics.median(d[(n, m)]):9.3f}" if d.get((n, m)) else f"{'-':>9}" for n in names))
PY
cat $O/step-ab-summary.txt
cp build/moved.fatbin build/moved.fatbin.stamp build/moved.fatbin.ptxas.txt $O/
el done
