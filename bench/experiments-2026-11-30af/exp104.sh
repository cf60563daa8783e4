#!/bin/bash
# Session 2026-11-30 (16th, "af") call 1, nvidia-h200-x2: binaries of
# fbbfdac (the last code of the fifteenth session; the full final checks
# last ran with b608b66's).
#  1. the harness with a config that parses but whose entry point the
#     fatbin lacks: the fatbin of 9b60045^ (no "_d8pl" entry points, the
#     same parameter struct), 16/8/l/16/1/p must print "cannot launch" and
#     16/8/g/16/1/p must be timed;
#  2. scripts/gpu-final-checks.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
gunzip -c .dev/oldfb/nol.fatbin.gz > build/nol.fatbin
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"
HARNESS_AB="896:4:16/8/g/16/1/p,16/8/l/16/1/p" HARNESS_AB_REPS=2 timeout 60 build/harness build/nol.fatbin ab > $O/harness-ab-missing.txt 2>&1; echo "harness ab (old fatbin) rc $?"; tail -8 $O/harness-ab-missing.txt
HARNESS_AB="896:4:16/8/g/16/1/p,16/8/l/16/1/p" HARNESS_AB_REPS=2 timeout 60 build/harness kernel/kernels.fatbin ab > $O/harness-ab-committed.txt 2>&1; echo "harness ab (committed fatbin) rc $?"; tail -4 $O/harness-ab-committed.txt
el harness
BENCH_TAG=af OUT=$O/fc timeout 540 scripts/gpu-final-checks --note "binaries of fbbfdac (s16): the fifteenth session's final code; fatbin sha256 95bfe228, stamp a2c860c7; committed tables" > $O/final-checks.log 2>&1; echo "gpu-final-checks rc $?"
tail -32 $O/final-checks.log
mv $O/fc/* $O/ 2>/dev/null; rmdir $O/fc
ls -la $O
el done
