#!/bin/bash
# Session 2026-11-30 (13th, "z") call 5, nvidia-h200-x2: the binaries of
# main as it ends the session (fatbin e303a877, kernel table of 953ac88,
# step table of a58e344 embedded, no override): scripts/gpu-final-checks.
set -u
tar xzf .dev/bin.tgz
BENCH_TAG=z4 scripts/gpu-final-checks --note "binaries of commit e9af0a8 (built on the CPU machine, Go 1.26); fatbin, kernel table and step table embedded as committed"
