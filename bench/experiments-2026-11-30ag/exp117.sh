#!/bin/bash
# Session 2026-11-30 (17th, "ag") call 7, nvidia-h200-x2: binaries of the
# final code (since call 4: step checks, --devices parsed by topo's
# parser, tprun -h). tp 1, tp 2, the kill test, the tp GPU tests, and the
# default job on two GPUs with step checks on (TPRUN_CHECK_STEPS=1) and
# --devices 0-1.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
TEST_PKGS=tp OUT=$O/gc timeout 300 scripts/gpu-checks tests tp1 tp2 kill > $O/gpu-checks.log 2>&1; echo "gpu-checks rc $?"
cat $O/gc/summary.txt 2>/dev/null | tail -16
echo "== TPRUN_CHECK_STEPS=1 bin/tprun --tp 2 --devices 0-1 --iters 500"
TPRUN_CHECK_STEPS=1 timeout 120 bin/tprun --tp 2 --devices 0-1 --iters 500 > $O/checks-tp2.log 2>&1; echo "rc $?"
tail -8 $O/checks-tp2.log
el done
