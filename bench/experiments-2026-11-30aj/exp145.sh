#!/bin/bash
# Session 2026-11-30 (20th, "aj") call 12, nvidia-h200-x2 (a fourth pair):
# the last device seconds: scripts/bench-step with the committed tables
# (the step's 65 % carveout against its floor on a second pair), then the
# kernel bench on GPU 0 (a fourth H200 for shard 896 M 5-6).
source scripts/device-call-prologue
tar xzf .dev/bin-aj7.tgz
OUT=$O BENCH_TAG=aj4 timeout 60 scripts/bench-step > $O/bench-step.console.txt 2>&1; echo "bench-step rc $?"
grep -A9 '^  M   ours' $O/step-h200x2-*.txt
el bench-step
BENCH_TAG=aj5 OUT=$O/bk5 timeout 70 scripts/bench-kernel --no-build --no-check > $O/bk5.console.txt 2>&1; echo "bench-kernel rc $?"
grep '| 3584 | 896 ' $O/bk5/kernel-h200-*.txt; grep -A4 'Targets\|targets met' $O/bk5/kernel-h200-*.txt | tail -5
cp $O/bk5/kernel-h200-*.txt $O/ 2>/dev/null; rm -rf $O/bk5
el done
