#!/bin/bash
# Session 2026-12-01 "an", call 1 (nvidia-h200; the pair kinds are withheld
# this session). (1) skinny.cu: TPRUN_LD_V4_PRED parenthesizes its v, and
# two unused constants are gone (nvcc 12.4 here: byte-identical sm_90 PTX).
# scripts/build-kernels (nvcc 13), then the new fatbin compared byte for
# byte and by SASS with the committed one, and its stamp with the one
# committed here (scripts/build-kernels --hash). (2) Every package's GPU
# tests, memcheck, the ABI check and tp 1 from this tree's binaries
# (.dev/bin-an.tgz, built with that stamp), then tp 4 on GPU 0.
source scripts/device-call-prologue
tar xzf .dev/bin-an.tgz
cp kernel/kernels.fatbin build/old.fatbin
cp kernel/kernels.fatbin.stamp build/want.stamp
cp kernel/kernels.fatbin.ptxas.txt build/old.ptxas.txt
timeout 200 scripts/build-kernels > $O/build-kernels.txt 2>&1; echo "build-kernels rc $?"; tail -1 $O/build-kernels.txt
cmp build/old.fatbin kernel/kernels.fatbin && echo "fatbin byte-identical to the committed one"
cmp build/want.stamp kernel/kernels.fatbin.stamp && echo "stamp as committed"
cmp build/old.ptxas.txt kernel/kernels.fatbin.ptxas.txt && echo "ptxas report identical"
for a in sm_90 sm_100; do python3 scripts/kernel-harness/sass_diff.py --arch $a build/old.fatbin kernel/kernels.fatbin 2>&1 | tail -1; done
cp kernel/kernels.fatbin.stamp $O/
cmp -s build/old.fatbin kernel/kernels.fatbin || cp kernel/kernels.fatbin kernel/kernels.fatbin.ptxas.txt $O/
el build
OUT=$O/gc RESULTS=/tmp/gc timeout 330 scripts/gpu-checks tests tp1 tp4 > $O/gpu-checks.txt 2>&1; echo "gpu-checks rc $?"
cat /tmp/gc/summary.txt; cp /tmp/gc/summary.txt $O/summary.txt
el done
