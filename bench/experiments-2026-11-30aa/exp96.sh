#!/bin/bash
# Session 2026-11-30 (14th, "aa") call 6, nvidia-h200-x2: the delayed L2
# prefetch (TPRUN_PF_DELAY, branch pfdelay): the helpers' LSU prefetches
# issued D*256 ns after their prologue, after launch_dependents, to land in
# the previous step's tail. Build (scripts/build-kernels, sm_90 + sm_100 +
# PTX) of .dev/C = the branch's kernel sources; harness check (GPU 0) and
# memcheck (GPU 1); step sweep of delayed plans with that fatbin
# (TPRUN_KERNELS_FATBIN, binaries of the branch); kernel-alone A/B of the
# kernel table's configs, committed fatbin (v17) against the new one.
source scripts/device-call-prologue
tar xzf .dev/binC.tgz
.dev/C/scripts/build-kernels > $O/build-C.txt 2>&1 & PB=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"
wait $PB; echo "build rc $?"; tail -1 $O/build-C.txt
F=$PWD/.dev/C/kernel/kernels.fatbin
el build
CUDA_VISIBLE_DEVICES=0 timeout 200 build/harness $F check > $O/check-C.txt 2>&1 & PC=$!
CUDA_VISIBLE_DEVICES=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 3 build/harness $F small > $O/memcheck-C.txt 2>&1; echo "memcheck rc $?"; tail -2 $O/memcheck-C.txt
wait $PC; echo "check rc $?"; grep -E "check skinny:|CHECK|check receive" $O/check-C.txt | tail -4; grep -m5 FAIL $O/check-C.txt
el check
C=32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/pf48.8ld12/p/lb,32/4/g/4/4/pf48.8ld16/p/lb,32/4/g/4/4/pf48.8ld20/p/lb,32/4/g/4/4/pf12.4ld16/p/lb,32/4/g/4/4/pf12.4ld20/p/lb,32/4/g/4/4/pf8.4ld18/p/lb,32/4/g/4/4/pf48.9ld16/p/lb
TPRUN_KERNELS_FATBIN=$F BENCH_TAG=ac OUT=/tmp/ss timeout 300 scripts/step-sweep --configs $C > $O/ss.log 2>&1; echo "step-sweep rc $?"
sed -n '/^M  /,/^$/p' $O/ss.log
cp /tmp/ss/step-sweep.tsv $O/ 2>/dev/null; cp bench/step-sweep-h200x2-*ac*.txt $O/ 2>/dev/null
el sweep
AB="3584:1,2,4,6,8:32/4/g/4/4/pf48.8l/p/lb;896:1,4,5,8:16/8/l/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;7168:1,8:32/4/g/4/4/p/lb,32/4/g/8/1/p"
for r in 1 2 3; do
  (( $(date +%s) - T0 > 540 )) && break
  for e in base C; do
    FF=kernel/kernels.fatbin; [[ $e == C ]] && FF=$F
    CUDA_VISIBLE_DEVICES=0 HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 40 build/harness $FF ab 2>&1 | grep '^ab' | sed "s/^/$e r$r /" >> $O/kab.txt
  done
  el "ab round $r"
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base C" > $O/kab-summary.txt 2>&1; cat $O/kab-summary.txt
mkdir -p $O/fat && cp .dev/C/kernel/kernels.fatbin* $O/fat/
cd $O && tar czf logs.tgz check-C.txt memcheck-C.txt build-C.txt kab.txt ss.log && rm -f check-C.txt memcheck-C.txt build-C.txt kab.txt ss.log
el done
