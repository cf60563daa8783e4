#!/usr/bin/env bash
# The GPU runs still owed by the larger-M path and the PyTorch op, on one
# H200, from binaries built on a machine with Go and carried as
# .dev/bigm/bin.tar.xz (lab/README.md says how):
#
#   bash lab/gpu-pending.sh [STAGE ...]
#
# Stages (in this order when none is named: unpack job run py opbench):
#   unpack   bin/ from .dev/bigm/bin.tar.xz
#   kernel   scripts/gpu-test kernel (memcheck of TestGPUSmall included)
#   tp       scripts/gpu-test tp
#   job      scripts/gpu-test cmd/tprun/internal/job
#   run      tprun --tp 4 --devices 0,0,0,0 --m 16,64,128 --iters 3334
#            (10,002 steps in all, about 100 s)
#   bench    tprun bench --tp 1 --m 16,32,64,128
#   sweep    scripts/bigm-sweep (SWEEP_BUDGET seconds, default 300): the
#            larger-M table, PyTorch mm + add and the floor beside it
#   py       the PyTorch rank program: tp 1 every M with --compile, tp 4 on
#            one GPU, a captured step replayed GRAPH_REPLAYS (10000) times,
#            the same joined through a gloo group (--join torch); the Go
#            example's test
#   torchrun the captured step under torchrun, tp 4 on one GPU, and
#            --join torch under torchrun
#   opbench  tp 1, shards 7168 and 896, M 1..8 then 16, 32, 64, 128:
#            tprun bench --graph capture, enqueue, enqueue-ops and
#            torch_rank.py --bench
#   layout   shard 896, tp 1, M 1..8, two interleaved rounds: tprun bench
#            --graph capture, enqueue, enqueue-ops and torch_rank.py --bench
#            (its K ops, 1 op and slab forms): where the weight copies live
#   gap      lab/torch_gap.py beside tprun bench --graph enqueue (shard 896)
#   lazy     Go's enqueue and lab/torch_gap.py under CUDA_MODULE_LOADING=LAZY
#            and EAGER (shard 896)
#   ncu      the larger-M kernel under ncu at M 128, shards 448 and 7168
# One line per stage in $OUT/summary.txt, logs in $OUT/pending-logs.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/lab-out}
# The logs go back as one archive: the device tool returns only so many files.
logs=$PWD/build/pending-logs
rm -rf "$logs" && mkdir -p "$OUT" "$logs"
export TPRUN_MULTICAST=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
stages=("$@")
((${#stages[@]})) || stages=(unpack job run py opbench)
status=0
note() {
	echo "$*" | tee -a "$OUT/summary.txt"
}
pyrun() { # name, timeout, command...
	local name=$1 t=$2 s=$SECONDS
	shift 2
	timeout "$t" "$@" >"$logs/$name.log" 2>&1
	local rc=$?
	((rc == 0)) || status=1
	note "$name: exit $rc in $((SECONDS - s))s: $*"
	grep -E "wrong|identical|exceeded|Error|error" "$logs/$name.log" | grep -v "^W" | tail -6 | tee -a "$OUT/summary.txt"
}
finish() {
	tar czf "$OUT/pending-logs.tgz" -C build pending-logs
	exit $status
}
trap finish EXIT

for st in "${stages[@]}"; do
	# The archive after every stage too: a call killed at its limit may
	# never reach the EXIT trap.
	tar czf "$OUT/pending-logs.tgz" -C build pending-logs
	start=$SECONDS
	case $st in
	unpack)
		rm -rf bin && tar xJf .dev/bigm/bin.tar.xz || { note "unpack: no .dev/bigm/bin.tar.xz"; status=1; exit; }
		note "unpack: $(ls bin | tr '\n' ' ')"
		;;
	kernel | tp | job)
		pkg=$st
		[[ $st == job ]] && pkg=cmd/tprun/internal/job
		OUT=$logs/gpu-test-$st GPU_TEST_TIMEOUT=${GPU_TEST_TIMEOUT:-6m} \
			scripts/gpu-test "$pkg" >"$logs/gpu-test-$st.txt" 2>&1
		rc=$?
		((rc == 0)) || status=1
		note "$st: exit $rc in $((SECONDS - start))s"
		grep -E "^(PASS|FAIL) " "$logs/gpu-test-$st.txt" | tee -a "$OUT/summary.txt"
		grep -hE -- "--- FAIL" "$logs/gpu-test-$st"/*.log 2>/dev/null | head -20 | tee -a "$OUT/summary.txt"
		;;
	run)
		timeout 300 bin/tprun --tp 4 --devices 0,0,0,0 --m 16,64,128 --iters ${RUN_ITERS:-3334} \
			>"$logs/run.log" 2>&1
		rc=$?
		((rc == 0)) || status=1
		note "run: exit $rc in $((SECONDS - start))s"
		grep -E "^(\[rank 0\] )? +(16|64|128) " "$logs/run.log" | tee -a "$OUT/summary.txt"
		;;
	bench)
		timeout 300 bin/tprun bench --tp 1 --m 16,32,64,128 \
			--json-out "$logs/bench.json" >"$logs/bench.log" 2>&1
		rc=$?
		((rc == 0)) || status=1
		note "bench: exit $rc in $((SECONDS - start))s"
		tail -8 "$logs/bench.log" | tee -a "$OUT/summary.txt"
		;;
	sweep)
		# The larger-M table's sweep within SWEEP_BUDGET seconds: by
		# default 300, or what is left of a 600 s device call after the
		# stages before it (less a margin); runs that would pass it are
		# skipped and recorded.
		budget=${SWEEP_BUDGET:-$((540 - SECONDS < 300 ? 540 - SECONDS : 300))}
		rm -rf "$logs/sweep"
		OUT=$OUT timeout $((budget + 60)) python3 scripts/bigm-sweep \
			--budget "$budget" --work "$logs/sweep" >"$logs/sweep.log" 2>&1
		rc=$?
		((rc == 0)) || status=1
		note "sweep: exit $rc in $((SECONDS - start))s (budget ${budget}s)"
		report=$(ls -t bench/bigm-sweep-h200-*.txt 2>/dev/null | head -1)
		[[ -n $report ]] && cp "$report" "$OUT/"
		sed -n '/^## the picked table against/,$p' "$logs/sweep.log" | tee -a "$OUT/summary.txt"
		;;
	py)
		# The PyTorch rank program on the patched tree's libtprun.so.
		export TPRUN_LIB=$PWD/bin/libtprun.so PYTHONPATH=$PWD/python
		pyrun py-tp1 240 bin/tprun --tp 1 -- python3 examples/python/torch_rank.py --check --compile --rows 1,2,3,4,5,6,7,8,16,64,128
		pyrun py-tp4 200 bin/tprun --tp 4 --devices 0,0,0,0 -- python3 examples/python/torch_rank.py --check --rows 1,8,128
		pyrun py-tp4-graph 300 bin/tprun --tp 4 --devices 0,0,0,0 -- python3 examples/python/torch_rank.py --check --iters 20 --graph ${GRAPH_REPLAYS:-10000} --rows ${GRAPH_ROWS:-8}
		pyrun py-tp4-graph-large 200 bin/tprun --tp 4 --devices 0,0,0,0 -- python3 examples/python/torch_rank.py --check --iters 20 --graph 500 --rows 1,9,64,128
		# tprun.join_torch on a gloo group: the GPU mailbox's descriptors over the node's sockets.
		store=$(mktemp -d)
		pyrun py-join-torch 200 bin/tprun --tp 4 --devices 0,0,0,0 -- python3 examples/python/torch_rank.py --join torch --store "$store" --check --iters 20 --graph 1000 --rows 1,8,64
		TPRUN_BIN=$PWD/bin/tprun TPRUN_EXAMPLE_RANK_BIN=$PWD/bin/rank pyrun example-go 120 bin/rank.test -test.v -test.count=1
		unset TPRUN_LIB PYTHONPATH
		;;
	torchrun)
		export TPRUN_LIB=$PWD/bin/libtprun.so PYTHONPATH=$PWD/python
		TPRUN_DEVICES=0,0,0,0 pyrun py-torchrun 300 torchrun --nproc-per-node 4 examples/python/torch_rank.py --check --iters 20 --graph ${GRAPH_REPLAYS:-10000} --rows ${GRAPH_ROWS:-8}
		TPRUN_DEVICES=0,0,0,0 pyrun py-torchrun-join-torch 120 torchrun --nproc-per-node 4 examples/python/torch_rank.py --join torch --check --iters 20 --rows 1,8,64
		unset TPRUN_LIB PYTHONPATH
		;;
	opbench)
		# tp 1 at shards 7168 and 896: the Go forms and the PyTorch forms.
		export TPRUN_LIB=$PWD/bin/libtprun.so PYTHONPATH=$PWD/python
		# M 1..8 first, then the larger M (a failure there keeps the first).
		for ms in 1,2,3,4,5,6,7,8 16,32,64,128; do
			sfx=""
			[[ $ms == 16,* ]] && sfx=-large
			for h in 7168 896; do
				for g in capture enqueue enqueue-ops; do
					timeout 120 bin/tprun bench --tp 1 --hidden $h --m $ms --graph $g >"$logs/opbench-$g-$h$sfx.log" 2>&1
					note "opbench $g $h M $ms: exit $?"
					grep -E "^(\[rank 0\] )? *[0-9]+ " "$logs/opbench-$g-$h$sfx.log" | tee -a "$OUT/summary.txt"
				done
				timeout 150 bin/tprun --tp 1 -- python3 examples/python/torch_rank.py --bench --hidden $h --rows $ms >"$logs/opbench-torch-$h$sfx.log" 2>&1
				note "opbench torch $h M $ms: exit $?"
				grep -v "^W" "$logs/opbench-torch-$h$sfx.log" | tail -14 | tee -a "$OUT/summary.txt"
			done
		done
		unset TPRUN_LIB PYTHONPATH
		;;
	layout)
		# Where the weight copies live: Go's forms (one allocation for
		# capture and enqueue, an allocation per op for enqueue-ops) and
		# the PyTorch forms (K ops, 1 op with a tensor per copy, slab with
		# the copies in one tensor), two interleaved rounds at shard 896.
		export TPRUN_LIB=$PWD/bin/libtprun.so PYTHONPATH=$PWD/python
		for round in 1 2; do
			for g in capture enqueue enqueue-ops; do
				timeout 120 bin/tprun bench --tp 1 --hidden 896 --graph $g >"$logs/layout-$g-$round.log" 2>&1
				note "layout round $round $g: exit $?"
				grep -E "^(\[rank 0\] )? *[0-9]+ " "$logs/layout-$g-$round.log" | tee -a "$OUT/summary.txt"
			done
			timeout 150 bin/tprun --tp 1 -- python3 examples/python/torch_rank.py --bench --hidden 896 >"$logs/layout-torch-$round.log" 2>&1
			note "layout round $round torch: exit $?"
			grep -v "^W" "$logs/layout-torch-$round.log" | tail -12 | tee -a "$OUT/summary.txt"
		done
		unset TPRUN_LIB PYTHONPATH
		;;
	gap)
		# PyTorch's one-op graph in variants that each change one thing
		# (lab/torch_gap.py), beside Go's enqueue.
		export TPRUN_LIB=$PWD/bin/libtprun.so PYTHONPATH=$PWD/python
		mkdir -p "$logs/gap"
		timeout 120 bin/tprun bench --tp 1 --hidden 896 --graph enqueue >"$logs/gap-enqueue.log" 2>&1
		note "gap enqueue: exit $?"
		grep -E "^(\[rank 0\] )? *[0-9]+ " "$logs/gap-enqueue.log" | tee -a "$OUT/summary.txt"
		timeout 200 bin/tprun --tp 1 -- python3 lab/torch_gap.py "$logs/gap" >"$logs/gap-torch.log" 2>&1
		note "gap torch: exit $?"
		grep -v "^W" "$logs/gap-torch.log" | tail -14 | tee -a "$OUT/summary.txt"
		unset TPRUN_LIB PYTHONPATH
		;;
	lazy)
		# The driver's module loading mode (PyTorch sets CUDA_MODULE_LOADING=LAZY
		# unless it is set): Go's enqueue under each, PyTorch's under EAGER.
		export TPRUN_LIB=$PWD/bin/libtprun.so PYTHONPATH=$PWD/python
		for mode in LAZY EAGER; do
			CUDA_MODULE_LOADING=$mode timeout 120 bin/tprun bench --tp 1 --hidden 896 --graph enqueue >"$logs/lazy-go-$mode.log" 2>&1
			note "lazy: go enqueue CUDA_MODULE_LOADING=$mode: exit $?"
			grep -E "^(\[rank 0\] )? *[0-9]+ " "$logs/lazy-go-$mode.log" | tee -a "$OUT/summary.txt"
		done
		TPRUN_DEV_GRAPH_DOT=$logs/go-graph timeout 120 bin/tprun bench --tp 1 --hidden 896 --m 6 --graph enqueue >"$logs/lazy-go-dot.log" 2>&1
		note "lazy: go enqueue M 6 with its graph as DOT: exit $?"
		for mode in EAGER LAZY; do
			mkdir -p "$logs/lazy-$mode"
			CUDA_MODULE_LOADING=$mode timeout 200 bin/tprun --tp 1 -- python3 lab/torch_gap.py "$logs/lazy-$mode" >"$logs/lazy-torch-$mode.log" 2>&1
			note "lazy: torch_gap CUDA_MODULE_LOADING=$mode: exit $?"
			grep -v "^W" "$logs/lazy-torch-$mode.log" | grep -v "debug_dump\|UserWarning" | tail -11 | tee -a "$OUT/summary.txt"
		done
		unset TPRUN_LIB PYTHONPATH
		;;
	ncu)
		# Where the larger-M kernel spends its time: one launch at M 128 per
		# shard, the counters' stall reasons (clocks left alone).
		for h in 448 7168; do
			timeout 120 ncu --clock-control none -k regex:tprun_bigm -s 3 -c 1 \
				--section SpeedOfLight --section WarpStateStats --section SchedulerStats \
				--section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
				bin/tprun --tp 1 --hidden $h --m 128 --iters 6 >"$logs/ncu-$h.log" 2>&1
			note "ncu shard $h M 128: exit $?"
			grep -E "Duration|Throughput|Stall|Warp Cycles|Issued|Eligible|Registers|Block Size|Grid Size|Achieved Occupancy|L2 Hit|Mem Busy|Max Bandwidth|One or More|No Eligible" "$logs/ncu-$h.log" | head -40 | tee -a "$OUT/summary.txt"
		done
		;;
	*)
		note "unknown stage $st"
		status=2
		exit
		;;
	esac
done
