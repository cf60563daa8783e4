#!/bin/bash
# Session 2026-11-30 (17th, "ag") call 4, nvidia-h200-x2: binaries of
# the final code (since call 3, host side only: review fixes to signals,
# the report, topo --json without a driver). All final checks.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
BENCH_TAG=ag2 OUT=$O/fc timeout 560 scripts/gpu-final-checks --note "binaries of the final code of s17 (a region per M in every mailbox slot; launcher and report fixes); fatbin sha256 95bfe228, stamp a2c860c7; committed tables" > $O/final-checks.log 2>&1; echo "gpu-final-checks rc $?"
tail -32 $O/final-checks.log
mv $O/fc/* $O/ 2>/dev/null; rmdir $O/fc
el done
