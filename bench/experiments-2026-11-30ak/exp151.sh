#!/bin/bash
# Session 2026-11-30 (21st, "ak") call 6, nvidia-h200-x2: the step's
# carveout, never tried above 65 % (or below the default) in the step:
# scripts/gpu-final-checks --step-sweep over the step table's config at 65
# (the table's), 80, 100 and 30 %, the "_t32pw" form at 65 and 80 %, and
# 32/4/g/8/2 at 80 %, 5 interleaved rounds; then every final check with the
# step table it picked (binaries of dec3b59).
source scripts/device-call-prologue
tar xzf .dev/bin-ak.tgz
C=32/4/g/4/4/pf48.8l/p/lb/co65,32/4/g/4/4/pf48.8l/p/lb/co80,32/4/g/4/4/pf48.8l/p/lb/co100,32/4/g/4/4/pf48.8l/p/lb/co30,32/4/w/4/4/pf48.8l/p/lb/co65,32/4/w/4/4/pf48.8l/p/lb/co80,32/4/g/8/2/pf48.8l/p/lb/co80
BENCH_TAG=ak2 OUT=$O timeout 560 scripts/gpu-final-checks --step-sweep $C --step-sweep-rounds 5 --note "binaries of dec3b59 (the _t32pw entry points; kernel table ak); step table from this call's sweep"
el done
