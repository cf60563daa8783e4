#!/bin/bash
# Session 2026-11-30 (14th, "aa") call 1, nvidia-h200.
#  1. main's kernel.test (6b0b4f8, the dc7b603 test fix) 4 times in a row;
#  2. meanwhile scripts/build-kernels (nvcc 13, sm_90 + sm_100 + PTX) of
#     A = main + setup-refactor-sass-identical.patch and
#     B = A + "_t64p" entry points (64 rows, 4 chunks in flight, <= 256 threads);
#  3. sass_diff: committed fatbin vs A (sm_90, sm_100); A vs B (A's functions);
#  4. harness check of A and of B (B includes the _t64p configs);
#  5. interleaved A/B (3 rounds) of _t64p against the table's configs.
source scripts/device-call-prologue
nvcc --version | tail -1
( for b in A B; do .dev/$b/scripts/build-kernels > $O/build-$b.txt 2>&1; echo "build $b rc $?" >> $O/build-$b.txt; done ) & PB=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; echo "harness rc $?"
( cd kernel && for i in 1 2 3 4; do timeout 90 ../bin/kernel.test -test.v -test.count=1 -test.timeout 85s > $O/ktest$i.log 2>&1; echo "kernel.test run $i rc $? $(grep -c '^--- PASS' $O/ktest$i.log) passed $(grep -c '^--- FAIL' $O/ktest$i.log) failed"; grep -E "own order|^--- FAIL" $O/ktest$i.log | head -5; done )
el tests
wait $PB; tail -1 $O/build-A.txt $O/build-B.txt; ls -la .dev/A/kernel .dev/B/kernel
el builds
for a in sm_90 sm_100; do echo "== committed vs A $a"; python3 scripts/kernel-harness/sass_diff.py --arch $a kernel/kernels.fatbin .dev/A/kernel/kernels.fatbin; done
echo "== A vs B sm_90 (A's functions)"; python3 scripts/kernel-harness/sass_diff.py --arch sm_90 .dev/A/kernel/kernels.fatbin .dev/B/kernel/kernels.fatbin
grep -A2 "m[18]_t64p" .dev/B/kernel/kernels.fatbin.ptxas.txt | grep -E "Compiling|Used|spill"
el sass
for b in B A; do timeout 240 build/harness .dev/$b/kernel/kernels.fatbin check > $O/check-$b.txt 2>&1; echo "check $b rc $?"; grep -E "check skinny:|CHECK|check receive" $O/check-$b.txt | tail -4; grep -m5 FAIL $O/check-$b.txt; el "check $b"; (( $(date +%s) - T0 > 330 )) && break; done
S1="3584:1,2,4,6,7,8:32/4/g/4/4/pf48.8l/p/lb,64/4/g/4/4/p/lb,64/4/g/4/4/pf24.8l/p/lb,64/4/g/4/4/p,64/4/g/8/2/p/lb,64/4/g/2/8/p/lb"
S2="896:4,5,6,7,8:32/4/g/8/4/p,32/4/g/16/2/p,64/4/g/8/4/p,64/4/g/4/4/p,64/4/g/4/8/p,64/4/g/8/2/p"
for r in 1 2 3; do
  (( $(date +%s) - T0 > 520 )) && break
  for S in "$S1" "$S2"; do
    HARNESS_AB="$S" HARNESS_AB_REPS=1 timeout 40 build/harness .dev/B/kernel/kernels.fatbin ab 2>&1 | grep '^ab' | sed "s/^/B r$r /" >> $O/kab.txt
  done
  el "round $r"
done
python3 scripts/kernel-harness/ab_summary.py $O/kab.txt "B" > $O/kab-summary.txt 2>&1; cat $O/kab-summary.txt
mkdir -p $O/fat && cp .dev/A/kernel/kernels.fatbin* $O/fat/ && mv $O/fat/kernels.fatbin $O/fat/A.fatbin; cp .dev/B/kernel/kernels.fatbin $O/fat/B.fatbin
cd $O && tar czf logs.tgz ktest*.log check-*.txt build-*.txt kab.txt && rm -f kab.txt ktest*.log check-*.txt build-*.txt
el done
