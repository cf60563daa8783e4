#!/bin/bash
# Session 2026-11-30 (12th, "x") call 2, nvidia-h200: why the "l" entry
# points run 0.3-0.9 us slower than their "g" twins (call 1). E1 as in
# call 1 plus trace marks 4/5 (no-ops without TPRUN_TRACE); E1T the same
# with -DTPRUN_TRACE. (1) A/B with the weights L2-resident (HARNESS_NBUF=1);
# (2) per-CTA traces.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
B() { # name, extra flags
  ( mkdir -p build/$1 && cp kernel/skinny.cu kernel/skinny.h kernel/receive.cu build/$1/ && cd build/$1 && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 $2 -I . -gencode arch=compute_90,code=sm_90 -o ../$1.fatbin k.cu > ../$1-b.txt 2>&1; echo "build $1 rc $?" )
}
B E1 "" & P1=$!
B E1T "-DTPRUN_TRACE" & P2=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"; cat build/h.txt
wait $P1; wait $P2; ls -la build/*.fatbin
date -u
G="896:1,4:16/8/g/16/1/p,16/8/l/16/1/p;3584:1,4:16/8/g/8/1/p,16/8/l/8/1/p,32/4/g/4/4/p,32/4/l/4/4/p"
for r in 1 2; do
  HARNESS_NBUF=1 HARNESS_AB="$G" HARNESS_AB_REPS=1 timeout 60 build/harness build/E1.fatbin ab 2>&1 | grep '^ab' | sed "s/^/l2 r$r /" >> $O/kab.txt
  HARNESS_AB="$G" HARNESS_AB_REPS=1 timeout 60 build/harness build/E1.fatbin ab 2>&1 | grep '^ab' | sed "s/^/hbm r$r /" >> $O/kab.txt
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "hbm l2" | tee $O/kab-summary.txt
date -u
HARNESS_TRACE="896:1,4:16/8/g/16/1/p,16/8/l/16/1/p;3584:1:16/8/g/8/1/p,16/8/l/8/1/p" timeout 120 build/harness build/E1T.fatbin trace $O/trace.tsv > $O/trace-run.txt 2>&1; echo "trace rc $?"; cat $O/trace-run.txt | tail -8
python3 scripts/kernel-harness/trace_report.py $O/trace.tsv > $O/trace-report.txt 2>&1; grep -E "^==|period|start->wait|wait -> MMAs|MMAs -> end|1st weight|1st latent|boundary|wait-return" $O/trace-report.txt
gzip -f $O/trace.tsv
date -u
