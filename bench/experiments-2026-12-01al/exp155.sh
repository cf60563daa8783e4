#!/bin/bash
# Session 2026-12-01 "al", call 2. Call 1 (exp154.sh): more polls in flight
# made the step 0.11-0.34 µs SLOWER at every M (D = 2: +0.11-0.17, D = 4:
# +0.28-0.34), M 1 as much as M 8. So the receive's polling costs the step
# something while it waits, most likely memory-system throughput taken from
# the weight stream (the receive CTAs poll from the kernel's start, ~6 µs
# before the peer's stores land). This call tests the converse: fewer polls.
# poll-sleep-receive.patch: __nanosleep(TPRUN_POLL_SLEEP) after each poll
# that saw a sentinel, for the first TPRUN_POLL_GATE ns of the wait (always
# without a gate). ctl is the committed sources built by build-exp, to show
# that an experiment build times as the embedded fatbin does.
#   1. five experiment fatbins (sm_90);
#   2. the harness check of n500g4000 (receive checks and fused receive);
#   3. scripts/step-ab, 5 interleaved rounds, against the embedded fatbin.
source scripts/device-call-prologue
tar xzf .dev/bin-tprun.tgz
mkdir -p .dev/sleep && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu .dev/sleep/ &&
	patch -d .dev/sleep -p0 receive.cu < bench/experiments-2026-12-01al/poll-sleep-receive.patch || exit 1
scripts/kernel-harness/build-exp ctl kernel & P0=$!
scripts/kernel-harness/build-exp n100 .dev/sleep -DTPRUN_POLL_SLEEP=100 & P1=$!
scripts/kernel-harness/build-exp n250g5000 .dev/sleep -DTPRUN_POLL_SLEEP=250 -DTPRUN_POLL_GATE=5000 & P2=$!
scripts/kernel-harness/build-exp n500g4000 .dev/sleep -DTPRUN_POLL_SLEEP=500 -DTPRUN_POLL_GATE=4000 & P3=$!
scripts/kernel-harness/build-exp n1000g3000 .dev/sleep -DTPRUN_POLL_SLEEP=1000 -DTPRUN_POLL_GATE=3000 & P4=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
wait $P0 $P1 $P2 $P3 $P4
el builds
timeout 150 build/harness build/n500g4000.fatbin check > $O/n500-check.txt 2>&1; echo "n500g4000 check rc $?"; grep -E "check receive|check fused|CHECK" $O/n500-check.txt | tail -12
el check
OUT=$O timeout 330 scripts/step-ab --rounds 5 base=embedded ctl=build/ctl.fatbin n100=build/n100.fatbin n250g5000=build/n250g5000.fatbin n500g4000=build/n500g4000.fatbin n1000g3000=build/n1000g3000.fatbin
el done
rm -rf $O/step-ab
