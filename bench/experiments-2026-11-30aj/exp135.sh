#!/bin/bash
# Session 2026-11-30 (20th, "aj") call 2, nvidia-h200-x2: the new GPU test
# TestGPUUpProjectionCloseDuringReplayKeepsJob (Close of a Group op during a
# replay batch keeps the job: one device and two), three times; the same
# test built with the stall watch's self-abort check removed (bin/tp-mut.test:
# selfAborted always false), which must FAIL; then the pause-bench check
# (SIGSTOP of rank 1 during the step benchmark's graph replays, two H200s)
# and pause once more.
source scripts/device-call-prologue
tar xzf .dev/bin-aj2.tgz
cd tp
timeout 120 ../bin/tp.test -test.run 'CloseDuringReplayKeepsJob' -test.count 3 -test.v 2>&1 | grep -E '^\s*(---|ok|FAIL|PASS)|took|upproj_cuda_test'
el "new test x3"
echo "== mutant (self-abort check removed): must FAIL"
timeout 120 ../bin/tp-mut.test -test.run 'TestGPUUpProjectionCloseDuringReplayKeepsJob' -test.count 1 -test.v 2>&1 | grep -E '^\s*(---|ok|FAIL|PASS)|took|upproj_cuda_test' | cut -c1-400
el "mutant"
cd ..
RESULTS=$O/checks scripts/gpu-checks pause-bench pause
el done
