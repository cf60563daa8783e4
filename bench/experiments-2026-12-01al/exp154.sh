#!/bin/bash
# Session 2026-12-01 "al", call 1: exp153.sh of 2026-11-30ak as prepared. The
# receive with several polls of each vector in flight (poll-depth-receive.patch,
# TPRUN_POLL_DEPTH loads issued TPRUN_POLL_STAGGER clocks apart, each
# re-issued as soon as it shows a sentinel). The idea: the step ends at the
# latest of M x 448 vector detections, and each detection lands at a random
# phase of a one-load-at-a-time poll loop (up to one L2 round trip late);
# with D staggered polls in flight, up to 1/D of one. That round trip is
# about the 0.13 µs tail measured in 2026-11-30ai; M 8 lacks 0.06-0.07 µs.
# With TPRUN_POLL_DEPTH unset (1) the patched sources compile to the same
# SASS as the committed ones (nvcc 12.4, sm_90, 0 of 97 functions differ).
#
# Run on nvidia-h200-x2 with bin/tprun built here (go build -ldflags='-s -w'
# -o bin/tprun ./cmd/tprun; tar czf .dev/bin-tprun.tgz bin/tprun) and
# carry .dev/bin-tprun.tgz:
#   1. four experiment fatbins (p2s64 added in al) (sm_90) from the patched sources;
#   2. the harness check of one (the receive checks: complete, timeout,
#      late arrival, abort word; the fused receive);
#   3. scripts/step-ab, 5 interleaved rounds, against the embedded fatbin.
source scripts/device-call-prologue
tar xzf .dev/bin-tprun.tgz
mkdir -p .dev/poll && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu .dev/poll/ &&
	patch -d .dev/poll -p0 receive.cu < bench/experiments-2026-11-30ak/poll-depth-receive.patch || exit 1
scripts/kernel-harness/build-exp p2s128 .dev/poll -DTPRUN_POLL_DEPTH=2 -DTPRUN_POLL_STAGGER=128 & P1=$!
scripts/kernel-harness/build-exp p2s256 .dev/poll -DTPRUN_POLL_DEPTH=2 -DTPRUN_POLL_STAGGER=256 & P2=$!
scripts/kernel-harness/build-exp p4s64 .dev/poll -DTPRUN_POLL_DEPTH=4 -DTPRUN_POLL_STAGGER=64 & P3=$!
scripts/kernel-harness/build-exp p2s64 .dev/poll -DTPRUN_POLL_DEPTH=2 -DTPRUN_POLL_STAGGER=64 & P4=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
wait $P1 $P2 $P3 $P4
el builds
timeout 150 build/harness build/p2s128.fatbin check > $O/p2-check.txt 2>&1; echo "p2s128 check rc $?"; grep -E "check receive|check fused|CHECK" $O/p2-check.txt | tail -12
el check
OUT=$O timeout 300 scripts/step-ab --rounds 5 base=embedded p2s128=build/p2s128.fatbin p2s256=build/p2s256.fatbin p4s64=build/p4s64.fatbin p2s64=build/p2s64.fatbin
el done
