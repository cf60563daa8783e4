#!/bin/bash
# Session 2026-11-30 (17th, "ag") call 1, nvidia-h200-x2: binaries of
# 502db73: one region per M in every mailbox slot (ranks that pass
# different M for a step all time out, naming the others' M), and a batch
# of graph replays that aborts its queued receives once one timed out.
# Fatbin unchanged. All final checks, with the two new GPU tests.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
BENCH_TAG=ag OUT=$O/fc timeout 560 scripts/gpu-final-checks --note "binaries of 502db73 (s17): a region per M in every mailbox slot, replay batches abort after a timeout; fatbin sha256 95bfe228, stamp a2c860c7; committed tables" > $O/final-checks.log 2>&1; echo "gpu-final-checks rc $?"
tail -32 $O/final-checks.log
mv $O/fc/* $O/ 2>/dev/null; rmdir $O/fc
ls -la $O
el done
