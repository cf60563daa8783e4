#!/bin/bash
# Session 2026-11-30 (15th, "ae") call 5, nvidia-h200-x2: scripts/gpu-final-checks
# with the binaries of b608b66: call 4's launcher and default-job changes
# plus the review fixes (flock'ed hub directories, leftovers killed at reap,
# inputs cancellable, cgroup memory limit, --hidden blamed for a too-large
# mailbox); fatbin unchanged (sha256 95bfe228).
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
BENCH_TAG=ae3 OUT=$O/fc timeout 560 scripts/gpu-final-checks --note "binaries of b608b66 (s15): launcher, default-job and review changes; fatbin sha256 95bfe228, stamp a2c860c7; committed tables" > $O/final-checks.log 2>&1; echo "gpu-final-checks rc $?"
tail -32 $O/final-checks.log
mv $O/fc/* $O/ 2>/dev/null; rmdir $O/fc
ls -la $O
el done
