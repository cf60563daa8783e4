#!/bin/bash
# Session 2026-11-30 (21st, "ak") call 5, nvidia-h200-x2: the final GPU
# checks of the binaries of dec3b59 (the "_t32pw" entry points and the
# kernel table that runs them at shard 896 M 5-6; step table unchanged),
# then the kernel bench on this host's GPU 0 (a third H200 for issue 4).
source scripts/device-call-prologue
tar xzf .dev/bin-ak.tgz
BENCH_TAG=ak OUT=$O timeout 450 scripts/gpu-final-checks --note "binaries of dec3b59 (the _t32pw entry points; kernel table ak)"
el "final checks"
if (( $(date +%s) - T0 < 480 )); then
  BENCH_TAG=ak5 OUT=$O/bk CUDA_VISIBLE_DEVICES=0 timeout 90 scripts/bench-kernel --no-build --no-check > $O/bk.console.txt 2>&1; echo "bench-kernel rc $?"
  grep -A12 '| 3584 | 896 | 1 ' $O/bk/kernel-h200-*.txt | head -8; grep -A4 'Targets' $O/bk/kernel-h200-*.txt
  cp $O/bk/kernel-h200-*.txt $O/ ; rm -rf $O/bk
  el "kernel bench"
fi
