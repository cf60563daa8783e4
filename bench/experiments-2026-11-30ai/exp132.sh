#!/bin/bash
# Session 2026-11-30 (19th, "ai") call 10, nvidia-h200-x2: scripts/step-ab,
# written after calls 3-8 repeated its loop, checked once: an A/A of the
# embedded fatbin against the committed file, one round, M 1 and 8.
source scripts/device-call-prologue
tar xzf .dev/bin-final.tgz
scripts/step-ab --rounds 1 --m 1,8 embedded=embedded file=kernel/kernels.fatbin
ls $O/step-ab | head
el done
