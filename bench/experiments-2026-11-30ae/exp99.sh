#!/bin/bash
# Session 2026-11-30 (15th, "ae") call 3, nvidia-h200-x2: binaries of
# 1f0627f (the prologue helpers of skinny.cu: the same fatbin byte for byte,
# a new sources stamp). First GPU runs of what the fourteenth session wrote
# after its device time ran out:
#  1. the harness's handling of a config the fatbin lacks (ab with a "_t32pl"
#     config on the committed fatbin: "cannot launch", the other timed);
#  2. scripts/gpu-final-checks with its archive fix, and --step-sweep with
#     the committed step config alone (step-sweep's config names through
#     scripts/kernel-harness/cfgname.py), so the table it picks is the
#     committed one.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"
HARNESS_AB="3584:8:32/4/g/4/4/pf48.8l/p/lb,32/4/l/4/4/p/lb,32/4/g/4/4/p/lb" HARNESS_AB_REPS=2 timeout 60 build/harness kernel/kernels.fatbin ab > $O/harness-ab-missing.txt 2>&1; echo "harness ab rc $?"; cat $O/harness-ab-missing.txt
el harness
BENCH_TAG=ae OUT=$O/fc timeout 520 scripts/gpu-final-checks --step-sweep 32/4/g/4/4/pf48.8l/p/lb --note "binaries of 1f0627f (s15): skinny.cu prologue helpers, fatbin sha256 95bfe228 (unchanged), stamp a2c860c7; committed tables" > $O/final-checks.log 2>&1; echo "gpu-final-checks rc $?"
tail -40 $O/final-checks.log
ls -la $O/fc
mv $O/fc/* $O/ 2>/dev/null; rmdir $O/fc
ls -la $O
el done
