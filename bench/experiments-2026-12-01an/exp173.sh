#!/bin/bash
# Session 2026-12-01 "an", the pair call (nvidia-h200-x2). The binaries of
# main b5542c6 (the "_t32pn" entry points; the step table naming them at
# 65 %, embedded), built here by scripts/build-gpu-tests and carried as
# .dev/bin-an.tgz: scripts/gpu-final-checks with a step sweep of 9
# interleaved rounds over the step's config on "_t32p" (g65, main's table
# before session am), on "_t32pn" at 65 % (the embedded table) and at 50 %;
# every later check runs the table that the sweep picked.
source scripts/device-call-prologue
tar xzf .dev/bin-an.tgz
C=32/4/g/4/4/pf48.8l/p/lb/co65,32/4/n/4/4/pf48.8l/p/lb/co65,32/4/n/4/4/pf48.8l/p/lb/co50
BENCH_TAG=an OUT=$O timeout 560 scripts/gpu-final-checks --step-sweep $C --step-sweep-rounds 9 --note "binaries of b5542c6 (the _t32pn entry points; step table on _t32pn, stage 5, 65 %); every check runs the table this call's sweep picked"
cp bench/*an.txt $O/ 2>/dev/null
el done
