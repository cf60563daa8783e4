#!/bin/bash
# Session 2026-11-30 (13th, "z") call 1, nvidia-h200: ship the packed
# layout in MMA fragment order (branch frag-layout rebased on main).
# scripts/build-kernels (sm_90 + sm_100 + PTX), check, memcheck; the kernel
# sweep at latent 3584, every shard, over the tenth session's full sweep;
# the bench with the picked table, then a second bench with it. Last, if
# time is left: an A/B of the shared-setup refactor (.dev/r = these sources
# plus setup-refactor-on-frag-layout.patch, sm_90) against the new fatbin.
# NOTE, added after the run: .dev/r held the sources WITHOUT the patch (it
# was only dry-run there), so the last A/B ("refac") is an A/A test: the
# same sources built by a plain sm_90 nvcc call against build-kernels'
# fatbin. It measures run-to-run noise, not the refactor
# (call1-aa-kernel-ab-summary.txt).
set -u
O=$OUT
B=/tmp/bk
mkdir -p $O $B build
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
date -u; nvidia-smi -L
( mkdir -p build/R && cp .dev/r/skinny.cu .dev/r/skinny.h .dev/r/receive.cu build/R/ && cd build/R && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -I . -gencode arch=compute_90,code=sm_90 -o ../R.fatbin k.cu > ../R-b.txt 2>&1; echo "build R rc $?" ) & PR=$!
( nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?" ) & PH=$!
scripts/build-kernels > $O/build.txt 2>&1; echo "build-kernels rc $?"; tail -3 $O/build.txt
cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/
sha256sum kernel/kernels.fatbin; cat kernel/kernels.fatbin.stamp
wait $PH
el build
timeout 200 build/harness kernel/kernels.fatbin check > $O/check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK|check receive" $O/check.txt | tail -6; grep -m5 FAIL $O/check.txt
el check
timeout 120 compute-sanitizer --tool memcheck --error-exitcode 3 build/harness kernel/kernels.fatbin small > $O/memcheck.txt 2>&1; echo "memcheck rc $?"; tail -4 $O/memcheck.txt
el memcheck
BENCH_TAG=z SWEEP_BASE=bench/kernel-sweep-h200-2026-11-30s.tsv HARNESS_SHARDS=448,896,1024,1792,3584,7168 OUT=$B timeout 300 scripts/bench-kernel --sweep --no-build --no-check > $B/console.txt 2>&1; echo "bench-kernel rc $?"
el sweep+bench
tail -30 $B/console.txt
cp bench/kernel-h200-2026-11-30z.txt $B/ 2>/dev/null
if [[ -s $B/config_table.tsv ]]; then
  cp $B/config_table.tsv kernel/config_table.tsv
  mkdir -p $B/r2
  BENCH_TAG=z2 OUT=$B/r2 timeout 120 scripts/bench-kernel --no-build --no-check > $B/r2/console.txt 2>&1; echo "bench 2 rc $?"
  cp bench/kernel-h200-2026-11-30z2.txt $B/ 2>/dev/null
  grep -E "^\| 3584 \| (896|3584|7168)" $B/kernel-h200-2026-11-30z2.txt
fi
el bench2
(cd $B && tar czf $O/bk.tgz .)
wait $PR; ls -la build/R.fatbin
AB="896:1,2,4,5,6,7,8:16/8/l/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,2,4,6,8:32/4/g/4/4/pf48.8l/p/lb"
for r in 1 2 3; do
  (( $(date +%s) - T0 > 540 )) && break
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 30 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/frag r$r /" >> $O/kab.txt
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 30 build/harness build/R.fatbin ab 2>&1 | grep '^ab' | sed "s/^/refac r$r /" >> $O/kab.txt
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "frag refac" | tee $O/kab-summary.txt
el done
