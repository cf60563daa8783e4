#!/bin/bash
# Session 2026-11-30 (11th, "w") call 2, nvidia-h200: what the latent's L2
# reads cost. NOLAT (timing only, wrong results): the B fragments come from
# registers instead of the latent (no latent loads after the wait at all),
# -DTPRUN_NOLAT_EXP; base = the committed fatbin. Shard 896's table configs
# and 3584's, every M, 4 interleaved rounds.
set -u
O=$OUT
mkdir -p $O build
exec > >(tee -a $O/console.txt) 2>&1
date -u; nvidia-smi -L
S=.dev/w
( mkdir -p build/N && cp $S/skinny.cu $S/skinny.h $S/receive.cu build/N/ && cd build/N && printf '#include "receive.cu"\n#include "skinny.cu"\n' > k.cu && nvcc -fatbin -O3 -std=c++17 -DTPRUN_NOLAT_EXP -I . -gencode arch=compute_90,code=sm_90 -o ../N.fatbin k.cu > ../N-b.txt 2>&1 ) & P=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; cat build/h.txt
wait $P; ls -la build/N.fatbin; head -5 build/N-b.txt
date -u
AB="896:1,2,3,4,5,6,7,8:16/8/g/16/1/p,16/8/g/16/1/p/one,32/4/g/8/4/p;3584:1,2,4,8:32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/p/lb"
for r in 1 2 3 4; do
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/base r$r /" >> $O/kab.txt
  HARNESS_AB="$AB" HARNESS_AB_REPS=1 timeout 120 build/harness build/N.fatbin ab 2>&1 | grep '^ab' | sed "s/^/nolat r$r /" >> $O/kab.txt
  date -u
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "base nolat" | tee $O/kab-summary.txt
date -u
