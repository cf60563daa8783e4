#!/bin/bash
# Session 2026-11-30 (16th, "af") call 7, nvidia-h200-x2: binaries of
# a3f59c1, the final code (since call 6: tp docs, OpenGPU maps a no-device
# cuInit to ErrNoGPU, a launcher test). GPU tests, tp 1, tp 2, the kill test.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
OUT=$O/gc timeout 400 scripts/gpu-checks tests tp1 tp2 kill > $O/gpu-checks.log 2>&1; echo "gpu-checks rc $?"
cat $O/gc/summary.txt 2>/dev/null | tail -30
el done
