#!/bin/bash
# Session 2026-11-30 (14th, "aa") call 2, nvidia-h200-x2: step sweep of L2
# prefetch plans around the table's 48.8l (binaries of 86ba2d4: the
# refactored skinny.cu, fatbin stamp 6a44459c, sm_90 SASS identical).
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
C=32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/pf52.8l/p/lb,32/4/g/4/4/pf44.8l/p/lb,32/4/g/4/4/pf48.9l/p/lb,32/4/g/4/4/pf48.10l/p/lb,32/4/g/4/4/pf56.10l/p/lb,32/4/g/4/4/pf50.8l/p/lb
BENCH_TAG=aa OUT=/tmp/ss timeout 560 scripts/step-sweep --configs $C > $O/ss.log 2>&1; echo "step-sweep rc $?"
tail -15 $O/ss.log
cp /tmp/ss/step_table.tsv /tmp/ss/step-sweep.tsv $O/ 2>/dev/null; cp bench/step-sweep-h200x2-*aa*.txt $O/ 2>/dev/null; ls $O
el done
