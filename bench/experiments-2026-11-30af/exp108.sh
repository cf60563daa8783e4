#!/bin/bash
# Session 2026-11-30 (16th, "af") call 5, nvidia-h200-x2: binaries of
# 4c64f3a, the final code (since call 4: the launcher's one stopping flag,
# Shape.ValidateCapacity removed). GPU tests, tp 1, tp 2, the kill test.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
OUT=$O/gc timeout 400 scripts/gpu-checks tests tp1 tp2 kill > $O/gpu-checks.log 2>&1; echo "gpu-checks rc $?"
cat $O/gc/summary.txt 2>/dev/null | tail -30
el done
