#!/bin/bash
# Session 2026-11-30 (15th, "ae") call 4, nvidia-h200-x2: scripts/gpu-final-checks
# with the binaries of main after the launcher and default-job changes of
# this session (report lines, stopped ranks' exit, leftovers killed,
# progress lines, memory and mailbox checks, hub rendezvous clock and stale
# directories); fatbin unchanged (sha256 95bfe228).
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
BENCH_TAG=ae2 OUT=$O/fc timeout 560 scripts/gpu-final-checks --note "binaries of f665cff (s15): launcher and default-job changes; fatbin sha256 95bfe228, stamp a2c860c7; committed tables" > $O/final-checks.log 2>&1; echo "gpu-final-checks rc $?"
tail -32 $O/final-checks.log
mv $O/fc/* $O/ 2>/dev/null; rmdir $O/fc
ls -la $O
el done
