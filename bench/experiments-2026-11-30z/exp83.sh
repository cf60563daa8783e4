#!/bin/bash
# Session 2026-11-30 (13th, "z") call 3, nvidia-h200: why "_d8pl" is slow
# at M 5-8 (shard 896), with the fragment-order layout (main at a58e344).
# Builds (sm_90, the committed sources with the "_d8pl" line of
# TPRUN_SKINNY_M changed for M > 4; nvcc 12.4 here: no spills in any):
#   A2: latent ring 2 pairs (U 8, 512 threads)
#   U4: weight ring 4 chunks, latent ring 4 pairs (512 threads)
#   B4: weight ring 8 chunks, latent ring 4 pairs, at most 256 threads
#   T : the committed sources with -DTPRUN_TRACE (where the time goes)
# Then the trace of M 4, 5, 8 and interleaved A/Bs (3 rounds) against the
# committed fatbin (base).
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
T0=$(date +%s)
el() { echo "-- t=$(( $(date +%s) - T0 )) s: $*"; }
date -u; nvidia-smi -L
L='  TPRUN_SKINNY_LENTRY(MM, _d8pl, 1, 8, (MM > 4 ? 1 : 4), 512, 1)     \\'
B() { # name, replacement of the _d8pl line, extra flags
  ( mkdir -p build/$1 && cp kernel/skinny.cu kernel/skinny.h kernel/receive.cu build/$1/ && cd build/$1 &&
    if [[ -n "$2" ]]; then grep -q "_d8pl, 1, 8, (MM > 4 ? 1 : 4), 512, 1)" skinny.cu || echo "$1: line not found"; sed -i "s|  TPRUN_SKINNY_LENTRY(MM, _d8pl, 1, 8, (MM > 4 ? 1 : 4), 512, 1)|  $2|" skinny.cu; grep -n "TPRUN_SKINNY_LENTRY(MM, _d8pl" skinny.cu; fi &&
    printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu &&
    nvcc -fatbin -O3 -std=c++17 $3 -Xptxas -v -I . -gencode arch=compute_90,code=sm_90 -o ../$1.fatbin k.cu > ../$1-b.txt 2>&1; echo "build $1 rc $?" )
}
B A2 'TPRUN_SKINNY_LENTRY(MM, _d8pl, 1, 8, (MM > 4 ? 2 : 4), 512, 1)' "" & P1=$!
B U4 'TPRUN_SKINNY_LENTRY(MM, _d8pl, 1, (MM > 4 ? 4 : 8), 4, 512, 1)' "" & P2=$!
B B4 'TPRUN_SKINNY_LENTRY(MM, _d8pl, 1, 8, 4, (MM > 4 ? 256 : 512), 1)' "" & P3=$!
B T "" "-DTPRUN_TRACE" & P4=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"
wait $P1 $P2 $P3 $P4; ls -la build/*.fatbin
for b in A2 U4 B4; do echo "$b: $(grep -A2 "m8_d8pl" build/$b-b.txt | grep -E "registers|spill" | tr -s ' ' | tr '\n' ' ')"; done
el builds
HARNESS_TRACE="896:4,5,8:16/8/l/16/1/p,32/4/g/8/4/p" timeout 90 build/harness build/T.fatbin trace $O/trace.tsv > $O/trace-run.txt 2>&1; echo "trace rc $?"; tail -6 $O/trace-run.txt
python3 scripts/kernel-harness/trace_report.py $O/trace.tsv > $O/trace-report.txt 2>&1; grep -E "^==|period|start->wait|wait -> MMAs|MMAs -> end|1st weight|1st latent|ring \(" $O/trace-report.txt
gzip -f $O/trace.tsv
el trace
AB="896:4,5,6,7,8:32/4/g/8/4/p,16/8/l/16/1/p,16/8/l/8/1/p,16/8/l/8/2/p,16/8/l/4/4/p"
AB8="896:4,5,6,7,8:32/4/g/8/4/p,16/8/l/8/1/p,16/8/l/8/2/p,16/8/l/4/4/p"
for r in 1 2 3; do
  (( $(date +%s) - T0 > 500 )) && break
  for e in base A2 U4 B4; do
    F=build/$e.fatbin; S="$AB"; [[ $e == base ]] && F=kernel/kernels.fatbin; [[ $e == B4 ]] && S="$AB8"
    HARNESS_AB="$S" HARNESS_AB_REPS=1 timeout 40 build/harness $F ab 2>&1 | grep '^ab' | sed "s/^/$e r$r /" >> $O/kab.txt
  done
  el "round $r"
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base A2 U4 B4" | tee $O/kab-summary.txt
el done
