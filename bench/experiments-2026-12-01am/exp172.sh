#!/bin/bash
# Session 2026-12-01 "am", a short pair call (nvidia-h200-x2) if a pair is
# lent late: the checks that need two GPUs, with this session's binaries
# and the embedded step table ("_t32pn"): every package's GPU tests, tp 2,
# the kill and pause tests, and scripts/bench-step (PyTorch in the same
# run). No step sweep (exp164.sh has it).
source scripts/device-call-prologue
tar xzf .dev/bin-am.tgz
OUT=$O RESULTS=/tmp/gc BENCH_TAG=am timeout 400 scripts/gpu-checks tests tp2 kill pause pause-bench bench-step
cp bench/step-h200x2-*am*.txt $O/ 2>/dev/null
el done
