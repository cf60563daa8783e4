#!/bin/bash
# Session 2026-11-30 (8th) call 7, nvidia-h200-x2: a repeat of bench-step
# on another pair (commit 3684de6's binaries), then per-CTA traces
# (-DTPRUN_TRACE builds, harness trace) of v11 (37c1af1) and v12 on GPU 0,
# for the 896 M 3 regression of v12's no-cluster instance.
set -u
O=$OUT
R=/tmp/gc
mkdir -p $O $R build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
export TPRUN_MULTICAST=0
for x in v11:.dev/tr11 v12:kernel; do n=${x%%:*}; d=${x##*:}
  ( mkdir -p build/$n && cp $d/skinny.cu $d/skinny.h $d/receive.cu build/$n/ && cd build/$n && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_TRACE -I . -gencode arch=compute_90,code=sm_90 -o ../$n-trace.fatbin k.cu > ../$n-b.txt 2>&1 ) & eval "p$n=\$!"
done
nvcc -O3 -std=c++17 -arch=sm_90 -I kernel -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1 & ph=$!
BENCH_TAG=n OUT=$R timeout 120 scripts/bench-step > $R/bs.txt 2>&1; echo "bench-step rc $?"
tail -11 bench/step-h200x2-2026-11-30n.txt; cp bench/step-h200x2-2026-11-30n.txt $O/
date -u
wait $ph $pv11 $pv12; cat build/h.txt build/v11-b.txt build/v12-b.txt | tail -5
for n in v11 v12; do
  CUDA_VISIBLE_DEVICES=0 timeout 120 build/harness build/$n-trace.fatbin trace $R/$n-trace.tsv > $R/$n-trace.txt 2>&1; echo "$n trace rc $?"
  cat $R/$n-trace.txt | grep "^trace"
  python3 scripts/kernel-harness/trace_report.py $R/$n-trace.tsv > $O/$n-trace-report.txt 2>&1
done
date -u
cd $O && tar czf all.tgz --exclude=all.tgz * && ls
