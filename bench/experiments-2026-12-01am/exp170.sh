#!/bin/bash
# Session 2026-12-01 "am", call 8 (nvidia-h200; still no pair lent). The
# GPU tests of every package from this tree's binaries (.dev/bin-am.tgz:
# the "_t32pn" entry points, the step table on them) on one H200, and the
# tp 1 run; the tests that need two GPUs skip (they say so).
source scripts/device-call-prologue
tar xzf .dev/bin-am.tgz
OUT=$O RESULTS=/tmp/gc timeout 250 scripts/gpu-checks tests tp1
el done
