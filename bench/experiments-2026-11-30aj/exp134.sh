#!/bin/bash
# Session 2026-11-30 (20th, "aj") call 1, nvidia-h200-x2: the final GPU
# checks of b493596 (the one-interface jobWatcher of 0a1e910, never run on
# a GPU, and the launcher's SIGCONT and paused-rank report), with the new
# pause step: SIGSTOP of rank 1 of a tp 2 job on two H200s, --deadline 2s.
source scripts/device-call-prologue
tar xzf .dev/bin-aj.tgz
BENCH_TAG=aj OUT=$O scripts/gpu-final-checks --note "binaries of b493596 (launcher: SIGCONT with SIGTERM, paused ranks in the report)"
el done
