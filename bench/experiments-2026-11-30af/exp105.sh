#!/bin/bash
# Session 2026-11-30 (16th, "af") call 2, nvidia-h200-x2: binaries of
# a2917c8: the library-user review's fixes (hub: a collective given up
# after it was sent ends the job, a rank that exits before joining fails
# the rendezvous at once; tp: the setup checks every rank's shape, a step
# ends when the job fails, ErrBusy; mailbox: ErrBroken only; the launcher's
# report). StepDevice, Capture and graph replays now run under the job
# watch, so the GPU tests and the fused step run again. Fatbin unchanged.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
BENCH_TAG=af2 OUT=$O/fc timeout 560 scripts/gpu-final-checks --note "binaries of a2917c8 (s16): library-user review fixes (hub, tp, mailbox, launcher); fatbin sha256 95bfe228, stamp a2c860c7; committed tables" > $O/final-checks.log 2>&1; echo "gpu-final-checks rc $?"
tail -32 $O/final-checks.log
mv $O/fc/* $O/ 2>/dev/null; rmdir $O/fc
ls -la $O
el done
