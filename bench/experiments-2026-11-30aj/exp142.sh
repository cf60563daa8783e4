#!/bin/bash
# Session 2026-11-30 (20th, "aj") call 9, nvidia-h200-x2 (another pair of
# H200s than call 8's): 1. scripts/bench-kernel --no-build --no-check with
# the committed table (shard 896 with carveouts), on GPU 0: does the
# 2.5 µs target hold on another H200? 2. scripts/step-sweep with the step
# table's config and the same with a 65 % carveout, 3 rounds.
source scripts/device-call-prologue
tar xzf .dev/bin-aj4.tgz
BENCH_TAG=aj2 OUT=$O/bk2 timeout 200 scripts/bench-kernel --no-build --no-check > $O/bk2.console.txt 2>&1; echo "bench-kernel rc $?"
grep '| 3584 | 896 ' $O/bk2/kernel-h200-*.txt; grep -A4 'Targets\|targets' $O/bk2/kernel-h200-*.txt | tail -5
cp $O/bk2/kernel-h200-*.txt $O/
el bench-kernel
BENCH_TAG=aj OUT=$O/ss timeout 200 scripts/step-sweep --rounds 3 --configs 32/4/g/4/4/pf48.8l/p/lb,32/4/g/4/4/pf48.8l/p/lb/co65,32/4/g/4/4/pf48.8l/p/co65 > $O/ss.console.txt 2>&1; echo "step-sweep rc $?"
sed -n '/^M  /,/^$/p' $O/ss.console.txt
cp bench/step-sweep-h200x2-*aj*.txt $O/ 2>/dev/null
tar czf $O/r.tgz -C $O bk2 ss bk2.console.txt ss.console.txt; rm -rf $O/bk2 $O/ss
el done
