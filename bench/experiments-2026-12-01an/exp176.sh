#!/bin/bash
# Session 2026-12-01 "an", call 2 (nvidia-h200; the pair kinds are
# withheld). Issue 5's dead-peer checks with this tree's binaries
# (.dev/bin-an.tgz, b5542c6) where one GPU allows them: tp 2 with both
# ranks on GPU 0 (unicast through POSIX FDs): SIGKILL of rank 1 and of
# rank 0 mid-run (the job must end within 5 s naming the rank, no process
# left), SIGSTOP of rank 1 in the default job and in the bench's graph
# replay (the peer's receive deadline, 2 s), and tp 2 for 10,000 steps.
source scripts/device-call-prologue
tar xzf .dev/bin-an.tgz
k() { local n=$1; shift; echo "== $n: $*"; timeout -k 5 60 "$@" > $O/$n.log 2>&1; echo "$n: exit $?"; grep -h 'kill-test\|failed first\|suspended\|deadline' $O/$n.log | tail -6; }
k kill1 scripts/kill-test bin/tprun 1 --tp 2 --devices 0,0 --iters 10000000 --m 8
k kill0 scripts/kill-test bin/tprun 0 --tp 2 --devices 0,0 --iters 10000000 --m 8
k pause env SIGNAL=STOP LIMIT_MS=6000 scripts/kill-test bin/tprun 1 --tp 2 --devices 0,0 --iters 10000000 --m 8 --deadline 2s
k pause-bench env SIGNAL=STOP LIMIT_MS=8000 READY='one CUDA graph' scripts/kill-test bin/tprun 1 --tp 2 --devices 0,0 -- bin/tprun __bench --m 8 --warmup 1000000 --replays 1 --deadline 2s
el kill tests
timeout -k 5 150 bin/tprun --tp 2 --devices 0,0 --backend cuda --iters 2500 > $O/tp2.log 2>&1; echo "tp2 (GPU 0 twice): exit $?"; tail -3 $O/tp2.log
tar czf $O/logs.tgz -C $O kill1.log kill0.log pause.log pause-bench.log tp2.log && rm -f $O/kill1.log $O/kill0.log $O/pause.log $O/pause-bench.log
el done
