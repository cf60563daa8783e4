#!/bin/bash
# Session 2026-11-30 (8th) call 8, nvidia-h200 (CPU only: nvcc): rebuild
# the fatbin after a comment-only change to kernel/skinny.cu; compare bytes.
set -u
O=$OUT
exec > >(tee -a $O/console.txt) 2>&1
cp kernel/kernels.fatbin /tmp/before.fatbin
scripts/build-kernels > /tmp/b.txt 2>&1; echo "build rc $?"; tail -1 /tmp/b.txt
cmp /tmp/before.fatbin kernel/kernels.fatbin && echo "fatbin byte-identical" || cp kernel/kernels.fatbin $O/
sha256sum /tmp/before.fatbin kernel/kernels.fatbin
cp kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt $O/
