#!/bin/bash
# Session 2026-11-30 (16th, "af") call 3, nvidia-h200-x2: binaries of
# e2b5123: call 2's code plus the fixes of a second review (no hub abort for
# ranks tprun stopped; a step keeps its own cancellation; the job's failure
# as the context's cause, also in the CUDA engine's wait; a step after the
# job failed fails before it writes; the report names the blamed rank; a
# rank's own abort logged). Fatbin unchanged.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
BENCH_TAG=af3 OUT=$O/fc timeout 560 scripts/gpu-final-checks --note "binaries of e2b5123 (s16): library-user review fixes and the second review's; fatbin sha256 95bfe228, stamp a2c860c7; committed tables" > $O/final-checks.log 2>&1; echo "gpu-final-checks rc $?"
tail -32 $O/final-checks.log
mv $O/fc/* $O/ 2>/dev/null; rmdir $O/fc
ls -la $O
el done
