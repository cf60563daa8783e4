#!/bin/bash
# Session 2026-11-30 (20th, "aj") call 5, nvidia-h200: a finer sweep of the L1 / shared
# memory carveout, never set so far (every entry point only gets
# MAX_DYNAMIC_SHARED_SIZE_BYTES = 200 KiB). Same committed fatbin, the
# harness (carveout-harness.patch) setting
# CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT from HARNESS_CARVEOUT
# and the max dynamic size from HARNESS_MAXDYN: default, 0 (most L1), 100
# (most shared memory) and values between.
# rounds at shard 896 (the table's configs), 3584 and 7168.
source scripts/device-call-prologue
cp .dev/co/harness.cu scripts/kernel-harness/harness-co.cu
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness-co.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
el build
SPEC="896:1,2,4,5,6,7,8:16/8/l/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,4,6,7,8:32/4/g/4/4/pf48.8l/p/lb;7168:1,8:32/4/g/4/4/p/lb"
F=kernel/kernels.fatbin
for r in 1 2 3 4 5 6; do
  (( $(date +%s) - T0 > 420 )) && { echo "time is up after $((r - 1)) rounds"; break; }
  for v in base co20 co35 co65 co80 co90 co100; do
    case $v in
      base) E=() ;; co*) E=(HARNESS_CARVEOUT=${v#co}) ;;
    esac
    env "${E[@]}" HARNESS_AB="$SPEC" HARNESS_AB_REPS=1 timeout 100 build/harness $F ab 2>&1 | grep '^ab' | sed "s/^/$v r$r /" >> $O/kab.txt
  done
  el "round $r"
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base co20 co35 co65 co80 co90 co100" | tee $O/kab-summary.txt
el done
