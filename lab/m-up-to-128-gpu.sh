#!/usr/bin/env bash
# The GPU check of lab/m-up-to-128.patch on one H200 (lab/README.md says how
# to prepare it). Runs from the repository root of a main checkout on the GPU
# machine, with the test binaries built from the patched tree on a machine
# with Go and carried as .dev/bigm/bin.
#
#   bash lab/m-up-to-128-gpu.sh [STAGE ...]
#
# Stages, in this order when none is named (all):
#   apply   apply the patch to this copy (again where a fresh copy undid it)
#           and put .dev/bigm/bin in bin/
#   build   scripts/build-kernels (CUDA 13: sm_90, sm_100, PTX) into
#           build/bigm/kernels.fatbin, skipped when its stamp matches the
#           sources; the fatbin, stamp and ptxas report go to $OUT
#   kernel  scripts/gpu-test kernel (memcheck of TestGPUSmall included)
#   tp      scripts/gpu-test tp
#   job     scripts/gpu-test cmd/tprun/internal/job
#   run     tprun --tp 4 --devices 0,0,0,0 --m 16,64,128 --iters 10000
#   bench   tprun bench --tp 1 --m 16,32,64,128
#   sweep   scripts/bigm-sweep: the larger-M table's configs per shard
#           (7168, 3584, 896, 448; M 16..128), the picked table, PyTorch
#           mm + add and the HBM floor beside it; bigm_table.tsv,
#           bigm-sweep.tsv and bench/bigm-sweep-h200-<date>.txt to $OUT,
#           its logs into bigm-logs.tgz. Not in the default list: it needs
#           a device call of its own (apply build sweep; about 300 s,
#           SWEEP_BUDGET seconds if set).
# Every stage after build loads build/bigm/kernels.fatbin through
# TPRUN_KERNELS_FATBIN: the test binaries embed the fatbin of main, which
# lacks the larger-M entry points. So two kernel tests fail by design until
# that fatbin is committed: TestFatbinStampMatchesSources and
# TestFatbinIsAFatbin (they check the embedded one). The logs go to
# $OUT/bigm-logs.tgz, one line per stage to $OUT/summary.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/lab-out}
mkdir -p "$OUT/bigm-logs" build/bigm
logs=$OUT/bigm-logs
fat=build/bigm/kernels.fatbin
export TPRUN_MULTICAST=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
stages=("$@")
((${#stages[@]})) || stages=(apply build kernel tp job run bench)
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
	exit $status
}
trap finish EXIT

for st in "${stages[@]}"; do
	start=$SECONDS
	case $st in
	apply)
		if git apply --reverse --check lab/m-up-to-128.patch 2>/dev/null; then
			note "apply: already applied"
		else
			# Files the patch creates, left by an earlier call on this copy.
			awk '/^--- \/dev\/null/ { getline; sub(/^\+\+\+ b\//, ""); print }' lab/m-up-to-128.patch | xargs -r rm -f
			if git apply lab/m-up-to-128.patch 2>"$logs/apply.log" || patch -p1 <lab/m-up-to-128.patch >>"$logs/apply.log" 2>&1; then
				note "apply: ok"
			else
				note "apply: FAILED (log apply.log)"
				status=1
				exit
			fi
		fi
		rm -rf bin
		if [[ -f .dev/bigm/bin.tar.xz ]]; then
			tar xJf .dev/bigm/bin.tar.xz || { note "apply: bad .dev/bigm/bin.tar.xz"; status=1; exit; }
		else
			cp -r .dev/bigm/bin bin || { note "apply: no .dev/bigm/bin to carry"; status=1; exit; }
		fi
		;;
	build)
		# A fatbin from an earlier call, carried back in .dev/bigm/.
		if [[ -f .dev/bigm/kernels.fatbin.stamp && $(cat .dev/bigm/kernels.fatbin.stamp) == "$(scripts/build-kernels --hash)" ]]; then
			cp .dev/bigm/kernels.fatbin .dev/bigm/kernels.fatbin.stamp .dev/bigm/kernels.fatbin.ptxas.txt build/bigm/
		fi
		if [[ -f $fat.stamp && $(cat "$fat.stamp") == "$(scripts/build-kernels --hash)" ]]; then
			note "build: $fat is current"
		elif OUTFILE=$fat scripts/build-kernels >"$logs/build.log" 2>&1; then
			note "build: ok in $((SECONDS - start))s, $(wc -c <"$fat") bytes"
		else
			note "build: FAILED (log build.log)"
			status=1
			exit
		fi
		cp "$fat" "$fat.stamp" "$fat.ptxas.txt" "$OUT/"
		grep -A3 "tprun_bigm_" "$fat.ptxas.txt" | grep -E "Compiling|Used|spill" >"$logs/ptxas-bigm.txt"
		;;
	kernel | tp | job)
		pkg=$st
		[[ $st == job ]] && pkg=cmd/tprun/internal/job
		TPRUN_KERNELS_FATBIN=$PWD/$fat OUT=$logs/gpu-test-$st GPU_TEST_TIMEOUT=${GPU_TEST_TIMEOUT:-6m} \
			scripts/gpu-test "$pkg" >"$logs/gpu-test-$st.txt" 2>&1
		rc=$?
		((rc == 0)) || status=1
		note "$st: exit $rc in $((SECONDS - start))s"
		grep -E "^(PASS|FAIL) " "$logs/gpu-test-$st.txt" | tee -a "$OUT/summary.txt"
		grep -hE -- "--- FAIL" "$logs/gpu-test-$st"/*.log 2>/dev/null | head -20 | tee -a "$OUT/summary.txt"
		;;
	run)
		TPRUN_KERNELS_FATBIN=$PWD/$fat timeout 400 bin/tprun --tp 4 --devices 0,0,0,0 --m 16,64,128 --iters 10000 \
			>"$logs/run.log" 2>&1
		rc=$?
		((rc == 0)) || status=1
		note "run: exit $rc in $((SECONDS - start))s"
		grep -E "^\S*\s*(16|64|128)\s" "$logs/run.log" | tee -a "$OUT/summary.txt"
		;;
	bench)
		TPRUN_KERNELS_FATBIN=$PWD/$fat timeout 300 bin/tprun bench --tp 1 --m 16,32,64,128 \
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
		TPRUN_KERNELS_FATBIN=$PWD/$fat OUT=$OUT timeout $((budget + 60)) python3 scripts/bigm-sweep \
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
		export TPRUN_KERNELS_FATBIN=$PWD/$fat TPRUN_LIB=$PWD/bin/libtprun.so PYTHONPATH=$PWD/python
		pyrun py-tp1 240 bin/tprun --tp 1 -- python3 examples/python/torch_rank.py --check --compile --rows 1,2,3,4,5,6,7,8,16,64,128
		pyrun py-tp4 200 bin/tprun --tp 4 --devices 0,0,0,0 -- python3 examples/python/torch_rank.py --check --rows 1,8,128
		pyrun py-tp4-graph 300 bin/tprun --tp 4 --devices 0,0,0,0 -- python3 examples/python/torch_rank.py --check --iters 20 --graph ${GRAPH_REPLAYS:-10000} --rows ${GRAPH_ROWS:-8}
		TPRUN_BIN=$PWD/bin/tprun TPRUN_EXAMPLE_RANK_BIN=$PWD/bin/rank pyrun example-go 120 bin/rank.test -test.v -test.count=1
		unset TPRUN_LIB PYTHONPATH TPRUN_KERNELS_FATBIN
		;;
	torchrun)
		export TPRUN_KERNELS_FATBIN=$PWD/$fat TPRUN_LIB=$PWD/bin/libtprun.so PYTHONPATH=$PWD/python
		TPRUN_DEVICES=0,0,0,0 pyrun py-torchrun 300 torchrun --nproc-per-node 4 examples/python/torch_rank.py --check --iters 20 --graph ${GRAPH_REPLAYS:-10000} --rows ${GRAPH_ROWS:-8}
		unset TPRUN_LIB PYTHONPATH TPRUN_KERNELS_FATBIN
		;;
	opbench)
		# tp 1 at shards 7168 and 896: the Go forms and the PyTorch forms.
		export TPRUN_KERNELS_FATBIN=$PWD/$fat TPRUN_LIB=$PWD/bin/libtprun.so PYTHONPATH=$PWD/python
		for h in 7168 896; do
			for g in capture enqueue enqueue-ops; do
				timeout 120 bin/tprun bench --tp 1 --hidden $h --graph $g >"$logs/opbench-$g-$h.log" 2>&1
				note "opbench $g $h: exit $?"
				grep -E "^ *[0-9]+ " "$logs/opbench-$g-$h.log" | tee -a "$OUT/summary.txt"
			done
			timeout 120 bin/tprun --tp 1 -- python3 examples/python/torch_rank.py --bench --hidden $h >"$logs/opbench-torch-$h.log" 2>&1
			note "opbench torch $h: exit $?"
			grep -v "^W" "$logs/opbench-torch-$h.log" | tail -14 | tee -a "$OUT/summary.txt"
		done
		unset TPRUN_LIB PYTHONPATH TPRUN_KERNELS_FATBIN
		;;
	*)
		note "unknown stage $st"
		status=2
		exit
		;;
	esac
done
