#!/bin/bash
# Session 2026-11-30 (17th, "ag") call 6, nvidia-h200 (or x2): the tp GPU
# tests of the final code (since call 4: step checks, WithStepChecks /
# TPRUN_CHECK_STEPS; Capture's argument checks moved into a closure), and
# tp 1.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
TEST_PKGS=tp OUT=$O/gc timeout 300 scripts/gpu-checks tests tp1 > $O/gpu-checks.log 2>&1; echo "gpu-checks rc $?"
cat $O/gc/summary.txt 2>/dev/null | tail -12
el done
