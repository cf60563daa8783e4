#!/bin/bash
# Session 2026-11-30 (20th, "aj") call 10, nvidia-h200-x2: the final GPU
# checks of the final binaries (kernel table with carveouts at shard 896, step table with 65 %, the launcher changes).
# a GPU, and the launcher's SIGCONT and paused-rank report), with the new
# pause step: SIGSTOP of rank 1 of a tp 2 job on two H200s, --deadline 2s.
source scripts/device-call-prologue
tar xzf .dev/bin-aj5.tgz
BENCH_TAG=aj3 OUT=$O scripts/gpu-final-checks --note "final binaries of the twentieth session (carveouts; launcher SIGCONT and suspended ranks)"
el done
