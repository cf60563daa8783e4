#!/bin/bash
# Session 2026-11-30 (17th, "ag") call 2, nvidia-h200-x2: binaries of
# the final code (call 1's code with 502db73 reverted: a replay batch's
# queued receives are not cut short after a timeout; docs). GPU tests,
# tp 1 and tp 4 on one GPU when only nvidia-h200 is lent (the two-GPU
# kind was not lent at the time); with two GPUs, tp 2 and the kill test too.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
if (($(nvidia-smi -L | grep -c '^GPU') >= 2)); then STEPS="tests tp1 tp2 kill"; else STEPS="tests tp1 tp4"; fi
echo "steps: $STEPS"
OUT=$O/gc timeout 500 scripts/gpu-checks $STEPS > $O/gpu-checks.log 2>&1; echo "gpu-checks rc $?"
cat $O/gc/summary.txt 2>/dev/null | tail -30
grep -h -A3 'MismatchedM' /tmp/gpu-checks/tests/tp.log 2>/dev/null | head -20
el done
