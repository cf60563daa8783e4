#!/bin/bash
# Session 2026-11-30 (19th, "ai") call 2, nvidia-h200-x2. Binaries of the
# commit named in the note (the stalled-batch watch in tp, and the
# launcher/hub fixes of the eighteenth session, which never ran on a GPU).
# 1. The new GPU test TestGPUUpProjectionStalledPeerReplay three times,
#    with the fake tests of the same family.
# 2. scripts/gpu-final-checks (every GPU test, tp 1/2/4/8, kill, bench-step).
# Everything comes back in all.tgz, plus the gpu-runs and step files.
source scripts/device-call-prologue
tar xzf .dev/bin.tgz
R=$O/r; mkdir -p $R
el "stalled-peer tests"
(cd tp && timeout 120 ../bin/tp.test -test.run 'StalledPeer|CloseDuringReplayKeepsJob' -test.count 3 -test.v > $R/stalled.txt 2>&1; echo "tp.test rc $?" >> $R/stalled.txt)
grep -E '^(---|ok|FAIL|PASS)|replays of|rc ' $R/stalled.txt
el "final checks"
OUT=$R/fc BENCH_TAG=ai timeout 480 scripts/gpu-final-checks --note "$1" > $R/final-checks.txt 2>&1; echo "final checks rc $?"
tail -40 $R/final-checks.txt
cp bench/gpu-runs-h200x2-*ai*.txt bench/step-h200x2-*ai*.txt $O/ 2>/dev/null
tar czf $O/all.tgz -C $R . && rm -rf $R
el done
