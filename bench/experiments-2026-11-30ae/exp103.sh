#!/bin/bash
# Session 2026-11-30 (15th, "ae") call 7, nvidia-h200-x2: the binaries of
# 5a627ef (the last code changes: the owner file made under another name,
# the reference built a few columns at a time) through tp1, tp2 and the kill
# test (scripts/gpu-checks), the launcher paths that change touches.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
RESULTS=/tmp/gc OUT=$O/gc timeout 200 scripts/gpu-checks tp1 tp2 kill > $O/gpu-checks.log 2>&1; echo "gpu-checks rc $?"
grep -E '^(tp1|tp2|kill):|every block|kill-test' /tmp/gc/summary.txt /tmp/gc/*.log | tail -12
el done
