#!/bin/bash
# Session 2026-11-30 (13th, "z") call 4, nvidia-h200: the shared-setup
# refactor of kernel/skinny.cu (TileSetup, EpilogueSlot:
# bench/experiments-2026-11-30x/setup-refactor-on-frag-layout.patch, now in
# the working tree). scripts/build-kernels (sm_90 + sm_100 + PTX), check,
# memcheck; an interleaved A/B (4 rounds) against the committed fatbin
# (e303a877, fragment order, the same sources before the refactor) at the
# table's configs of shards 896, 3584 and 7168; then the bench with the
# committed table (BENCH_TAG=z3).
set -u
# Logs go to /tmp/o, packed into $OUT/all.tgz (a call returns at most 8 files).
O=/tmp/o
mkdir -p $O $OUT build
exec > >(tee -a $OUT/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
date -u; nvidia-smi -L
cp kernel/kernels.fatbin build/frag.fatbin; sha256sum build/frag.fatbin
( nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?" ) & PH=$!
scripts/build-kernels > $O/build.txt 2>&1; echo "build-kernels rc $?"; tail -2 $O/build.txt
cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/
sha256sum kernel/kernels.fatbin; cat kernel/kernels.fatbin.stamp
wait $PH
el build
timeout 200 build/harness kernel/kernels.fatbin check > $O/check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK|check receive" $O/check.txt | tail -6; grep -m5 FAIL $O/check.txt
el check
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 build/harness kernel/kernels.fatbin small > $O/memcheck.txt 2>&1; echo "memcheck rc $?"; tail -3 $O/memcheck.txt
el memcheck
AB="896:1,2,3,4,5,6,7,8:16/8/l/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,2,3,4,5,6,7,8:32/4/g/4/4/pf48.8l/p/lb;7168:1,4,8:32/4/g/4/4/p/lb,32/4/g/8/1/p"
for r in 1 2 3 4; do
  (( $(date +%s) - T0 > 420 )) && break
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 40 build/harness build/frag.fatbin ab 2>&1 | grep '^ab' | sed "s/^/frag r$r /" >> $O/kab.txt
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 40 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/refac r$r /" >> $O/kab.txt
  el "round $r"
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "frag refac" | tee $O/kab-summary.txt
mkdir -p /tmp/b3
BENCH_TAG=z3 OUT=/tmp/b3 timeout 120 scripts/bench-kernel --no-build --no-check > /tmp/b3/console.txt 2>&1; echo "bench rc $?"
cp bench/kernel-h200-2026-11-30z3.txt /tmp/b3/log.txt /tmp/b3/readbw.txt $O/ 2>/dev/null
grep -E "^\| 3584 \| (896|3584|7168)|Targets|^- " $O/kernel-h200-2026-11-30z3.txt
el done
cp $O/kernels.fatbin $O/kab-summary.txt $O/kernel-h200-2026-11-30z3.txt $OUT/ 2>/dev/null
tar czf $OUT/all.tgz -C $O .
