#!/bin/bash
# Call on nvidia-h200-x2 (2026-11-30i): the st.async cluster sum in
# kernel/skinny.cu. (1) scripts/bench-kernel --sweep on GPU 0 (build, check,
# memcheck, sweep, table, read ceiling, bench vs PyTorch); (2) the step
# (tp 2) with the new fatbin: the sweep's table, and every M of shard 3584
# on one config, interleaved rounds. Everything comes back in all.tgz.
set -u
O=$OUT
KB=$O/kb
mkdir -p $KB build
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
export TPRUN_MULTICAST=0
CUDA_VISIBLE_DEVICES=0 OUT=$KB BENCH_TAG=i HARNESS_READ_SHARDS=3584,896 HARNESS_READ_CTAS=132,264 scripts/bench-kernel --sweep > $KB/bench-kernel-console.txt 2>&1
echo "bench-kernel exit $?"
grep -E "^check skinny|FAIL|ERROR SUMMARY|SMALL" $KB/log.txt | head
ls $KB
el kernel
cp $KB/config_table.tsv build/newtable.tsv
python3 - build/newtable.tsv <<'PY'
import sys, os
base = open(sys.argv[1]).read().splitlines()
V = {
 'T16g8c1': (16,8,0,8,1), 'T16g4c2': (16,8,0,4,2), 'T16g8c2': (16,8,0,8,2), 'T16g4c4': (16,8,0,4,4),
 'T16g8c4': (16,8,0,8,4), 'T32g4c2': (32,4,0,4,2), 'T32g8c2': (32,4,0,8,2), 'T32g4c4': (32,4,0,4,4),
 'T32g8c4': (32,4,0,8,4), 'T16g2c4': (16,8,0,2,4), 'T32g16c1': (32,4,0,16,1),
}
os.makedirs('build/st', exist_ok=True)
for n, (t, d, s, w, c) in V.items():
    out = []
    for l in base:
        f = l.split('\t')
        if not l.startswith('#') and len(f) == 11 and f[0] == '3584' and f[1] == '3584':
            l = '\t'.join([f[0], f[1], f[2], str(t), str(d), str(s), str(w), str(c), '0', '1', '0'])
        out.append(l)
    open(f'build/st/{n}.tsv', 'w').write('\n'.join(out) + '\n')
PY
grep -P "^3584\t(3584|896)\t" build/newtable.tsv
B="--hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 --replays 200 --warmup 20 --rotate-mb 512"
F=$PWD/kernel/kernels.fatbin
run() { # name env...
  local n=$1; shift
  rm -f /tmp/s.tsv
  env "$@" timeout 90 bin/tprun --tp 2 -- bin/tprun __bench $B --table /tmp/s.tsv > /tmp/$n-$r.log 2>&1
  echo "round $r $n exit $?" >> $O/step-ab.txt; cat /tmp/s.tsv >> $O/step-ab.txt
}
S0=$(date +%s)
for r in 1 2 3 4; do
  run old X=1
  run newtable TPRUN_KERNELS_FATBIN=$F TPRUN_KERNELS_CONFIG_TABLE=$PWD/build/newtable.tsv
  for v in build/st/*.tsv; do
    n=$(basename $v .tsv)
    run $n TPRUN_KERNELS_FATBIN=$F TPRUN_KERNELS_CONFIG_TABLE=$PWD/$v
  done
  el step round $r
  (( $(date +%s) - S0 > 200 )) && break
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
cp bench/*-2026-11-30i* $KB/ 2>/dev/null
tar czf $O/all.tgz -C $O kb step-ab.txt
el done
