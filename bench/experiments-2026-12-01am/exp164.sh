#!/bin/bash
# Session 2026-12-01 "am", call 2 (nvidia-h200-x2). The binaries of this
# tree (b1701d9: the "_t32pn" entry points; the step table naming them
# at 65 %, embedded): scripts/gpu-final-checks with a step sweep of 9
# interleaved rounds over the step's config on "_t32p" (main's before this
# session, g65), on "_t32pn" at 65 % (the embedded table) and at 50 %;
# every later check runs the table that the sweep picked.
source scripts/device-call-prologue
tar xzf .dev/bin-am.tgz
C=32/4/g/4/4/pf48.8l/p/lb/co65,32/4/n/4/4/pf48.8l/p/lb/co65,32/4/n/4/4/pf48.8l/p/lb/co50
BENCH_TAG=am OUT=$O timeout 540 scripts/gpu-final-checks --step-sweep $C --step-sweep-rounds 9 --note "binaries of b1701d9 (the _t32pn entry points; step table on _t32pn, stage 5, 65 %); every check runs the table this call's sweep picked"


el done
