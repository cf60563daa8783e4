#!/bin/bash
# Session 2026-11-30 (14th, "aa") call 4, nvidia-h200-x2: second step sweep of L2
# prefetch plans : forms, policy, helper counts (binaries of 86ba2d4: the
# refactored skinny.cu, fatbin stamp 6a44459c, sm_90 SASS identical).
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
C=32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/pf48.8ol/p/lb,32/4/g/4/4/pf48.8/p/lb,32/4/g/4/4/pf48.8l/p/sp,32/4/g/4/4/pf46.8l/p/lb,32/4/g/4/4/pf48.7l/p/lb,32/4/g/8/2/pf48.8l/p/lb,32/4/g/4/4/pf24.8l/p/lb
BENCH_TAG=ab OUT=/tmp/ss timeout 560 scripts/step-sweep --configs $C > $O/ss.log 2>&1; echo "step-sweep rc $?"
tail -15 $O/ss.log
cp /tmp/ss/step_table.tsv /tmp/ss/step-sweep.tsv $O/ 2>/dev/null; cp bench/step-sweep-h200x2-*ab*.txt $O/ 2>/dev/null; ls $O
el done
