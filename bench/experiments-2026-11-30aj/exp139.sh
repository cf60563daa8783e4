#!/bin/bash
# Session 2026-11-30 (20th, "aj") call 6, nvidia-h200: is the carveout
# honoured when it is a launch attribute
# (CU_LAUNCH_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, HARNESS_LAUNCH_CARVEOUT)
# of launches captured into the harness's CUDA graphs, as it is when it is a
# function attribute (HARNESS_CARVEOUT)? Committed fatbin, interleaved rounds.
source scripts/device-call-prologue
cp .dev/co/harness.cu scripts/kernel-harness/harness-co.cu
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness-co.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
el build
SPEC="896:1,2,3,4,5,6,7,8:16/8/l/16/1/p,32/4/g/8/4/p,32/4/g/16/2/p;3584:1,8:32/4/g/4/4/pf48.8l/p/lb"
F=kernel/kernels.fatbin
for r in 1 2 3 4 5 6; do
  (( $(date +%s) - T0 > 300 )) && { echo "time is up after $((r - 1)) rounds"; break; }
  for v in base f65 l65 f80 l80; do
    case $v in
      base) E=() ;; f*) E=(HARNESS_CARVEOUT=${v#f}) ;; l*) E=(HARNESS_LAUNCH_CARVEOUT=${v#l}) ;;
    esac
    env "${E[@]}" HARNESS_AB="$SPEC" HARNESS_AB_REPS=1 timeout 100 build/harness $F ab 2>&1 | grep '^ab' | sed "s/^/$v r$r /" >> $O/kab.txt
  done
  el "round $r"
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base f65 l65 f80 l80" | tee $O/kab-summary.txt
el done
