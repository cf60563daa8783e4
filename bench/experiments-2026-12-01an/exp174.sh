#!/bin/bash
# Session 2026-12-01 "an", a short pair call (nvidia-h200-x2): the checks
# that need two GPUs, with main b5542c6's binaries (.dev/bin-an.tgz) and
# the embedded step table ("_t32pn"): every package's GPU tests, tp 2, the
# kill and pause tests, and scripts/bench-step (PyTorch in the same run).
# No step sweep (exp173.sh has it).
source scripts/device-call-prologue
tar xzf .dev/bin-an.tgz
OUT=$O RESULTS=/tmp/gc BENCH_TAG=an timeout 400 scripts/gpu-checks tests tp2 kill pause pause-bench bench-step
cp bench/*an.txt $O/ 2>/dev/null
el done
