#!/bin/bash
# Session 2026-11-30 (15th, "ae") call 6, nvidia-h200-x2: the binaries of
# f13673e (the last code change after call 5: drawing the weight shards
# looks at the rank's context every 64 rows) through tp1, tp2 and the kill
# test (scripts/gpu-checks), the launcher paths that change touches.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
RESULTS=/tmp/gc OUT=$O/gc timeout 200 scripts/gpu-checks tp1 tp2 kill > $O/gpu-checks.log 2>&1; echo "gpu-checks rc $?"
grep -E '^(tp1|tp2|kill):|every block|kill-test' /tmp/gc/summary.txt /tmp/gc/*.log | tail -12
el done
