#!/bin/bash
# Session 2026-11-30 (16th, "af") call 6, nvidia-h200-x2: binaries of
# bcdd7fa, the final code (since call 5, host side only: the launcher's
# quiet-while-stopping filter by type, no leftovers line for stopped
# ranks, the stopped rank's message after a job-wide failure).
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
OUT=$O/gc timeout 200 scripts/gpu-checks tp1 tp2 kill > $O/gpu-checks.log 2>&1; echo "gpu-checks rc $?"
cat $O/gc/summary.txt 2>/dev/null | tail -12
el done
