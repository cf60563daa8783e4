#!/bin/bash
# Session 2026-11-30 (17th, "ag") call 2, nvidia-h200-x2: binaries of
# the final code (call 1's code with 502db73 reverted: a replay batch's
# queued receives are not cut short after a timeout; docs). GPU tests,
# tp 1, tp 2, the kill test.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
OUT=$O/gc timeout 400 scripts/gpu-checks tests tp1 tp2 kill > $O/gpu-checks.log 2>&1; echo "gpu-checks rc $?"
cat $O/gc/summary.txt 2>/dev/null | tail -30
grep -h -A3 'MismatchedM' /tmp/gpu-checks/tests/tp.log 2>/dev/null | head -20
el done
