#!/bin/bash
# Call on nvidia-h200-x2 (2026-11-30g): the checks of commit 9f48670 (test
# binaries and tprun built here with the new fatbin and table embedded):
# GPU tests, tp1, tp2, kill, bench-step; then tp4 on GPU 0 and tp8 on GPU 1
# side by side; when tp4 is done, the harness check (fixed fills) on GPU 0.
set -u
O=$OUT
R=/tmp/gc
mkdir -p $O $R build
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
export TPRUN_MULTICAST=0
nvidia-smi -L
git log --oneline -1 2>/dev/null
sha256sum kernel/kernels.fatbin
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > $R/b-h.txt 2>&1 & PH=$!
BENCH_TAG=g RESULTS=$R/a OUT=$R/outa scripts/gpu-checks tests tp1 tp2 kill bench-step > $R/a.txt 2>&1
cat $R/a/summary.txt
cp $R/outa/gpu-checks.tgz $O/a.tgz
el checks
SHARED_DEVICE=0 RESULTS=$R/b OUT=$R/outb scripts/gpu-checks tp4 > $R/b.txt 2>&1 & P1=$!
SHARED_DEVICE=1 RESULTS=$R/c OUT=$R/outc scripts/gpu-checks tp8 > $R/c.txt 2>&1 & P2=$!
wait $PH; cat $R/b-h.txt
wait $P1
el tp4
cat $R/b/summary.txt; cp $R/outb/gpu-checks.tgz $O/b.tgz
CUDA_VISIBLE_DEVICES=0 timeout 200 build/harness kernel/kernels.fatbin check 2>&1 | grep -v "^check: M=" > $O/check.txt
grep -E "CHECK|FAIL" $O/check.txt | head
CUDA_VISIBLE_DEVICES=0 compute-sanitizer --tool memcheck --error-exitcode 3 build/harness kernel/kernels.fatbin small 2>&1 | tail -n 2
el check
wait $P2
el tp8
cat $R/c/summary.txt; cp $R/outc/gpu-checks.tgz $O/c.tgz
