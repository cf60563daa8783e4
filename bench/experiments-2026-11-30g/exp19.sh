#!/bin/bash
# Call on nvidia-h200-x2 (2026-11-30g): the receive spread over more CTAs
# (chunked runs per receive CTA; TPRUN_DEV_RECEIVE_SPREAD=1,2,4) against the
# shipped step, and the shipped binary with the receive kernel
# (TPRUN_DEV_RECEIVE=kernel). Three interleaved rounds, tp 2.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
export TPRUN_MULTICAST=0
nvidia-smi -L
ARCHS=90 OUTFILE=build/spread.fatbin scripts/build-kernels > build/spread-build.txt 2>&1 || { tail -5 build/spread-build.txt; exit 1; }
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
el built
CUDA_VISIBLE_DEVICES=0 build/harness build/spread.fatbin small 2>&1 | grep -E "receive|SMALL" | head -8
CUDA_VISIBLE_DEVICES=0 compute-sanitizer --tool memcheck --error-exitcode 3 build/harness build/spread.fatbin small 2>&1 | tail -n 1
el checked
F=$PWD/build/spread.fatbin
B="--hidden 7168 --latent 3584 --m 1,2,3,4,5,6,7,8 --replays 200 --warmup 20 --rotate-mb 512"
run() { # name env...
  local n=$1; shift
  rm -f /tmp/s.tsv
  env "$@" timeout 90 ${BIN:-bin/tprun} --tp 2 -- ${BIN:-bin/tprun} __bench $B --table /tmp/s.tsv > /tmp/$n-$r.log 2>&1
  echo "round $r $n exit $?" >> $O/step-ab.txt; cat /tmp/s.tsv >> $O/step-ab.txt
}
for r in 1 2 3; do
  run base X=1
  run rkernel TPRUN_DEV_RECEIVE=kernel
  BIN=bin/tprun-exp run spread1 TPRUN_KERNELS_FATBIN=$F TPRUN_DEV_RECEIVE_SPREAD=1
  BIN=bin/tprun-exp run spread2 TPRUN_KERNELS_FATBIN=$F TPRUN_DEV_RECEIVE_SPREAD=2
  BIN=bin/tprun-exp run spread4 TPRUN_KERNELS_FATBIN=$F TPRUN_DEV_RECEIVE_SPREAD=4
  el round $r
done
grep -h "FAILED\|every checked" /tmp/*-1.log
python3 - $O/step-ab.txt > $O/step-ab-summary.txt <<'PY'
import sys, collections, statistics
d = collections.defaultdict(list); cur = None
for l in open(sys.argv[1]):
    x = l.split()
    if l.startswith('round'): cur = x[2]; continue
    if not x or x[0] == 'm': continue
    d[(cur, int(x[0]))].append(float(x[1]))
names = ["base", "rkernel", "spread1", "spread2", "spread4"]
print("M | " + " ".join(f"{n:>8}" for n in names))
for m in range(1, 9):
    print(f"{m} | " + " ".join(f"{statistics.median(d[(n, m)]):8.3f}" if d.get((n, m)) else f"{'-':>8}" for n in names))
PY
cat $O/step-ab-summary.txt
el done
