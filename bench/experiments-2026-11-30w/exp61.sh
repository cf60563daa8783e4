#!/bin/bash
# Session 2026-11-30 (11th, "w") call 3, nvidia-h200: per-warp latent
# staging (-DTPRUN_PWS_EXP): in the staged ("s") entry points every warp
# cp.asyncs only its own latent chunks into shared memory and waits for
# them alone, no CTA barrier: all of a warp's latent in one round trip,
# no registers. base = the committed fatbin. 4 interleaved rounds, then
# the harness check of the new build.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/w
( mkdir -p build/P && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/P/ && cd build/P && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_PWS_EXP -I . -gencode arch=compute_90,code=sm_90 -o ../P.fatbin k.cu > ../P-b.txt 2>&1 ) & P=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $P; ls -la build/P.fatbin; head -5 build/P-b.txt
date -u
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,16/8/s/16/1/p,16/8/s/16/1,16/8/g/16/1/p/one,16/8/s/8/2/p,32/4/g/8/4/p;3584:1,2,4,8:32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/pf48.8l/lb,32/4/s/4/4/pf48.8l/lb,32/4/s/4/4/lb"
for r in 1 2 3 4; do
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness build/P.fatbin ab 2>&1 | grep '^ab' | sed "s/^/pws r$r /" >> $O/kab.txt
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base pws" | tee $O/kab-summary.txt
date -u
timeout 240 build/harness build/P.fatbin check > $O/pws-check.txt 2>&1; echo "check rc $?"; tail -4 $O/pws-check.txt
date -u
