#!/bin/bash
# Session 2026-11-30 (17th, "ag") call 3, nvidia-h200-x2: binaries of
# the final code (since call 2, host side only: SIGHUP/SIGQUIT/closed
# stdout stop the job, --devices ranges, --iters bound, a deep TMPDIR,
# the report's labels). GPU tests, tp 1, tp 2, the kill test, and tprun
# piped into head -3 on two GPUs.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
OUT=$O/gc timeout 400 scripts/gpu-checks tests tp1 tp2 kill > $O/gpu-checks.log 2>&1; echo "gpu-checks rc $?"
cat $O/gc/summary.txt 2>/dev/null | tail -30
echo "== tprun --tp 2 --devices 0-1 --iters 100000 | head -3"
bin/tprun --tp 2 --devices 0-1 --iters 100000 2> $O/head-stderr.txt | head -3; echo "pipestatus ${PIPESTATUS[*]}"
cat $O/head-stderr.txt
sleep 1; echo "tprun processes left:"; ps -eo pid,args | grep '[b]in/tprun' || echo none
el done
