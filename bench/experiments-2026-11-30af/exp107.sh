#!/bin/bash
# Session 2026-11-30 (16th, "af") call 4, nvidia-h200-x2: binaries of the
# final code (host-side changes since call 3: the launcher's quiet hub
# while stopping, the stopped rank's message). Also the harness fix of
# ce8c816 (no register report for an entry point the fatbin lacks), on the
# fatbin of 9b60045^ as in call 1.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
gunzip -c .dev/oldfb/nol.fatbin.gz > build/nol.fatbin
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"
HARNESS_AB="896:4:16/8/g/16/1/p,16/8/l/16/1/p" HARNESS_AB_REPS=2 timeout 60 build/harness build/nol.fatbin ab > $O/harness-ab-missing.txt 2>&1; echo "harness ab (old fatbin) rc $?"; tail -4 $O/harness-ab-missing.txt
el harness
OUT=$O/gc timeout 200 scripts/gpu-checks tp1 tp2 kill > $O/gpu-checks.log 2>&1; echo "gpu-checks rc $?"
tail -14 $O/gpu-checks.log
el done
