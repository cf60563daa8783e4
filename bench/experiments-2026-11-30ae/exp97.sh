#!/bin/bash
# Session 2026-11-30 (15th, "ae") call 1, nvidia-h200.
#  1. scripts/build-kernels (nvcc 13, sm_90 + sm_100 + PTX) of the working
#     tree: skinny.cu with the prologue helpers (D59); beside it build-exp of
#     the same sources (sm_90 only), first run of that script on a GPU machine;
#  2. sass_diff: committed fatbin vs the new one (sm_90, sm_100), and the
#     build-exp fatbin vs the new one (sm_90);
#  3. harness check of the new fatbin;
#  4. ab-rounds (its first GPU run), 5 rounds: committed vs new fatbin on
#     shard 896 M 5-8 configs (the table's two, their LSU plans, and
#     K splits of 8 CTAs that the default sweep leaves out at shard >= 896).
source scripts/device-call-prologue
nvcc --version | tail -1
cp kernel/kernels.fatbin build/committed.fatbin
( scripts/build-kernels > $O/build-kernels.txt 2>&1; echo "build-kernels rc $?" >> $O/build-kernels.txt ) & PB=$!
( scripts/kernel-harness/build-exp d59exp kernel > $O/build-exp.txt 2>&1; echo "rc $?" >> $O/build-exp.txt ) & PE=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"
wait $PB; tail -2 $O/build-kernels.txt; wait $PE; cat $O/build-exp.txt
el builds
sha256sum build/committed.fatbin kernel/kernels.fatbin; cat kernel/kernels.fatbin.stamp
for a in sm_90 sm_100; do echo "== committed vs new $a"; python3 scripts/kernel-harness/sass_diff.py --arch $a build/committed.fatbin kernel/kernels.fatbin | head -12; done
echo "== build-exp vs new sm_90"; python3 scripts/kernel-harness/sass_diff.py --arch sm_90 build/d59exp.fatbin kernel/kernels.fatbin | head -5
el sass
timeout 240 build/harness kernel/kernels.fatbin check > $O/check.txt 2>&1; echo "check rc $?"; grep -E "check skinny:|CHECK|check receive" $O/check.txt | tail -4; grep -m5 FAIL $O/check.txt
el check
S="896:5,6,7,8:32/4/g/16/2/p,32/4/g/8/4/p,32/4/g/8/4/pf20.8l/p,32/4/g/8/4/pf40.8l/p,32/4/g/8/4/pf48.8l/p,32/4/g/4/8/p,16/8/g/8/4/p,16/8/g/4/8/p,32/4/g/8/8/p,32/4/g/16/4/p"
AB_UNTIL=$((T0 + 540)) scripts/kernel-harness/ab-rounds $O/kab 5 "$S" committed=build/committed.fatbin new=kernel/kernels.fatbin
el ab
mkdir -p $O/fat && cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/fat/ && (cd $O && tar czf fat.tgz fat && rm -rf fat)
cd $O && tar czf logs.tgz check.txt build-kernels.txt build-exp.txt kab.txt && rm -f check.txt kab.txt
ls -la $O
el done
