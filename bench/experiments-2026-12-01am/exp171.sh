#!/bin/bash
# Session 2026-12-01 "am", call 9 (nvidia-h200; no pair lent). Issue 5's
# one-H200 checks with this session's binaries (.dev/bin-am.tgz): tp 4 and
# tp 8 ranks sharing GPU 0, 10,000 steps each (scripts/gpu-checks).
source scripts/device-call-prologue
tar xzf .dev/bin-am.tgz
OUT=$O RESULTS=/tmp/gc timeout 520 scripts/gpu-checks tp4 tp8
el done
