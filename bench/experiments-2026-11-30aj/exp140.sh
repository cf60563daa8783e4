#!/bin/bash
# Session 2026-11-30 (20th, "aj") call 7, nvidia-h200: shard 896, the
# candidate configs of M 5-8 (and the table's M 1-4 form) under each
# carveout the H200 offers above the default: 164 KiB (65 %), 196 KiB
# (80 %) and 228 KiB (100 %), as a launch attribute (HARNESS_LAUNCH_CARVEOUT,
# carveout-harness.patch). Committed fatbin, interleaved rounds.
source scripts/device-call-prologue
cp .dev/co/harness.cu scripts/kernel-harness/harness-co.cu
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness-co.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
el build
SPEC="896:5,6,7,8:32/4/g/16/2/p,32/4/g/8/4/p,32/4/g/8/4/pf40.8l/p,32/4/g/8/4/pf48.8l/p,32/4/g/4/8/p,32/4/g/8/2/p,32/4/g/4/4/p,16/8/g/16/1/p/one,16/8/g/8/2/p;896:1,2,3,4:16/8/l/16/1/p,32/4/g/16/2/p"
F=kernel/kernels.fatbin
for r in 1 2 3 4 5; do
  (( $(date +%s) - T0 > 420 )) && { echo "time is up after $((r - 1)) rounds"; break; }
  for v in base l65 l80 l100; do
    case $v in
      base) E=() ;; l*) E=(HARNESS_LAUNCH_CARVEOUT=${v#l}) ;;
    esac
    env "${E[@]}" HARNESS_AB="$SPEC" HARNESS_AB_REPS=1 timeout 100 build/harness $F ab 2>&1 | grep '^ab' | sed "s/^/$v r$r /" >> $O/kab.txt
  done
  el "round $r"
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base l65 l80 l100" | tee $O/kab-summary.txt
el done
