#!/bin/bash
# Session 2026-12-01 "al", call 3. Calls 1-2: more polls in flight cost
# the step 0.11-0.34 µs; fewer polls (a nanosleep between polls for the
# first 3-5 µs) change nothing (+0.00-0.01), a 100 ns sleep throughout
# +0.04-0.05. 2026-11-30ai: concentrating the receive on half or a quarter
# of the CTAs (2 or 4 vectors a thread) cost 0.05-0.23. This call tries the
# other way: the receive spread over k times more CTAs, each using only the
# whole warps it needs for one vector a thread (recv-spread-skinny.patch,
# macro TPRUN_RECV_SPREAD_EXP), the count from a bin/tprun built with
# recv-spread-go.patch (TPRUN_DEV_RECEIVE_SPREAD=k multiplies ReceiveCTAs;
# unset, the binary launches as main's). At M 8: 28 CTAs of 4 warps (main),
# 56 of 2 (k 2), 112 of 1 (k 4); 448 tile CTAs beside them.
# Carry .dev/bin-tprun-spread.tgz (that bin/tprun).
#   1. the experiment fatbin (sm_90); the harness check of it (its own
#      receive CTA counts: one vector a thread as in main);
#   2. scripts/step-ab, 5 interleaved rounds: base (embedded), ctl (the
#      experiment fatbin, k 1: the same assignment as main), sp2, sp4.
source scripts/device-call-prologue
tar xzf .dev/bin-tprun-spread.tgz
mkdir -p .dev/spread && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu .dev/spread/ &&
	patch -d .dev/spread -p0 skinny.cu < bench/experiments-2026-12-01al/recv-spread-skinny.patch || exit 1
scripts/kernel-harness/build-exp spread .dev/spread -DTPRUN_RECV_SPREAD_EXP & P1=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
wait $P1
el builds
timeout 150 build/harness build/spread.fatbin check > $O/spread-check.txt 2>&1; echo "spread check rc $?"; grep -E "check fused|CHECK" $O/spread-check.txt | tail -6
el check
OUT=$O timeout 300 scripts/step-ab --rounds 5 base=embedded ctl=build/spread.fatbin sp2=build/spread.fatbin,TPRUN_DEV_RECEIVE_SPREAD=2 sp4=build/spread.fatbin,TPRUN_DEV_RECEIVE_SPREAD=4 sp8=build/spread.fatbin,TPRUN_DEV_RECEIVE_SPREAD=8
el done
rm -rf $O/step-ab
