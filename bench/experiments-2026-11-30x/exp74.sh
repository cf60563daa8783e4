#!/bin/bash
# Session 2026-11-30 (12th, "x") call 4, nvidia-h200: build the fatbin to
# ship ("_d8pl" added; sm_90 + sm_100 + PTX, scripts/build-kernels), then
# the harness check and the compute-sanitizer memcheck with it.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
date -u; nvidia-smi -L
scripts/build-kernels > $O/build.txt 2>&1; echo "build-kernels rc $?"; tail -3 $O/build.txt
cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/
el build
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda; echo "harness rc $?"
timeout 200 build/harness kernel/kernels.fatbin check > $O/check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK|check receive" $O/check.txt | tail -6; grep -m5 FAIL $O/check.txt
el check
timeout 200 compute-sanitizer --tool memcheck --error-exitcode 3 build/harness kernel/kernels.fatbin small > $O/memcheck.txt 2>&1; echo "memcheck rc $?"; tail -4 $O/memcheck.txt
el memcheck
