#!/bin/bash
# Session 2026-11-30 (19th, "ai") call 11, nvidia-h200: the tp GPU tests
# after the second review's fix (the stall watch waits on the job itself,
# not on ctx): three times the stalled-peer family, then the whole tp
# package once.
source scripts/device-call-prologue
tar xzf .dev/bin-final.tgz
cd tp
timeout 120 ../bin/tp.test -test.run 'StalledPeer|CloseDuringReplayKeepsJob|CloseDuringWait' -test.count 3 -test.v 2>&1 | grep -E '^(---|ok|FAIL|PASS)|replays of'
el "stalled tests"
timeout 300 ../bin/tp.test -test.count 1 -test.v > $O/tp-all.txt 2>&1; echo "tp.test rc $?"
grep -cE '^\s*--- PASS' $O/tp-all.txt; grep -E '^\s*--- (FAIL|SKIP)' $O/tp-all.txt | head
tail -3 $O/tp-all.txt
el done
