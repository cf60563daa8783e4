#!/usr/bin/env bash
# The GPU runs owed by the warp-specialized larger-M form and the
# register-ring tile's larger-M families (branch widem, on bigwgo) and the
# stream-ordered step's parameter comparison, in stages that fit
# the device calls (600 s each). Carry .dev/bigm and .dev/bigw:
# .dev/bigw/all.tar.xz is kernel/, scripts/ and bin/ (kernel.test, tprun)
# of the branch (lab/README.md, "bigm3"); .dev/bigw/kernels.fatbin, once
# there, is the fatbin the first call built.
#
#   bash lab/bigm3/gpu-integrate.sh params build tests    # call 1, about 500 s
#   bash lab/bigm3/gpu-integrate.sh sweep final           # call 2, about 500 s
# (a stage that would pass CALL_LIMIT, 585 s, is cut or skipped and says
# so: run it again in the next call)
#
# params  the kernel parameter blocks of the same steps queued by lab/cgap
#         (C) and by the Python package (lab/torch_gap.py, M 6)
# build   scripts/build-kernels (sm_90a, sm_100): kernels.fatbin, its stamp
#         and ptxas report to $OUT (commit them on the branch)
# tests   the larger-M GPU tests (the table's picks, random wgmma and
#         ringmt tables) and memcheck of the small larger-M cases against
#         that fatbin
# sweep   scripts/bigm-sweep over the table's candidates, PyTorch beside
#         them, with .dev/bigw/kernels.fatbin (or this call's build)
# final   tprun --tp 4 --devices 0,0,0,0 --m 16,64,128 for 10,002 steps
#         with the new fatbin and the sweep's table (after sweep, or in a
#         later call with the table copied to .dev/bigw/bigm_table.tsv)
set -u
cd "$(dirname "$0")/../.."
export TPRUN_MULTICAST=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L=$OUT/logs
mkdir -p "$L"
s() { echo "== $* ($(date -u +%T), ${SECONDS}s)" | tee -a "$OUT/summary.txt"; }
# A device call ends at 600 s: each run gets at most its own limit and
# what is left of CALL_LIMIT seconds, and one with too little left is
# skipped (and says so), so that the stages' files still come back.
CALL_LIMIT=${CALL_LIMIT:-585}
lim() {  # lim N: the seconds a run may take
  local left=$((CALL_LIMIT - SECONDS))
  ((left < $1)) && echo "$left" || echo "$1"
}
enough() {  # enough N WHAT: whether N s or more are left, else says WHAT was skipped
  local n=$1
  shift
  (($(lim "$n") >= n)) && return 0
  echo "skipped $* ($((CALL_LIMIT - SECONDS)) s left of the call)" | tee -a "$OUT/summary.txt"
  return 1
}
branch() {  # the branch's sources and binaries, once per call
  [ -f .dev/bigw/.unpacked ] && return 0
  rm -rf bin && tar xJf .dev/bigw/all.tar.xz || { echo "no .dev/bigw/all.tar.xz"; exit 1; }
  touch .dev/bigw/.unpacked
}
trap 'rm -f .dev/bigw/.unpacked; tar czf "$OUT/logs.tgz" -C "$OUT" logs' EXIT

for st in "$@"; do
  case $st in
  params)
    s params
    rm -rf bin && tar xJf .dev/bigm/bin.tar.xz && cp .dev/bigm/cgap .dev/bigm/libcgap.so lab/cgap/
    rm -f .dev/bigw/.unpacked  # bin/ is main's now: a later stage unpacks the branch's again
    CGAP_PARAMS=$OUT/params timeout 40 bin/tprun --tp 1 -- lab/cgap/cgap --seed 1 >"$L/cgap.log" 2>&1
    echo "cgap exit $?" | tee -a "$OUT/summary.txt"
    TPRUN_LIB=$PWD/bin/libtprun.so PYTHONPATH=$PWD/python TORCH_GAP_M=6 CGAP_PARAMS=$OUT/params \
      timeout 60 bin/tprun --tp 1 -- python3 lab/torch_gap.py "$L" >"$L/gap.log" 2>&1
    echo "torch_gap exit $?" | tee -a "$OUT/summary.txt"
    grep -v "^W" "$L/gap.log" | tail -4 | tee -a "$OUT/summary.txt"
    for py in base cu-io direct direct-cu; do
      [ -f "$OUT/params.6.txt" ] && [ -f "$OUT/params.py-$py.6.txt" ] || continue
      python3 lab/cgap/cmpparams.py "$OUT/params.6.txt" "$OUT/params.py-$py.6.txt" >"$OUT/params-cmp-$py.txt" 2>&1
      echo "C against Python $py: $(grep -c differs "$OUT/params-cmp-$py.txt") differing lines" | tee -a "$OUT/summary.txt"
      grep -B1 "differs" "$OUT/params-cmp-$py.txt" | head -12 | tee -a "$OUT/summary.txt"
    done
    ;;
  build)
    s build-kernels
    branch
    cp kernel/kernels.fatbin "$L/main.fatbin"  # main's: the branch's files leave it
    enough 120 build-kernels || exit 1
    timeout "$(lim 450)" scripts/build-kernels >"$L/build-kernels.log" 2>&1
    rc=$?
    echo "build-kernels exit $rc" | tee -a "$OUT/summary.txt"
    tail -3 "$L/build-kernels.log" | tee -a "$OUT/summary.txt"
    [ $rc -eq 0 ] || exit 1
    cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt "$OUT/"
    # The M <= 8 entry points and the receive must compile as before
    # (sm_100: the arch both builds have).
    fns=$(cuobjdump -sass -arch sm_100 "$L/main.fatbin" | grep -o "Function : tprun_\(skinny_m[1-8]_\|receive\)[a-z0-9_]*" | cut -d' ' -f3 | sort -u)
    python3 scripts/kernel-harness/sass_diff.py --arch sm_100 "$L/main.fatbin" kernel/kernels.fatbin $fns >"$L/sass_diff.log" 2>&1
    rc=$?
    echo "sass_diff (sm_100, $(echo $fns | wc -w) functions: skinny M <= 8 and receive) exit $rc" | tee -a "$OUT/summary.txt"
    tail -3 "$L/sass_diff.log" | tee -a "$OUT/summary.txt"
    grep -E "Potential Performance Loss|[1-9][0-9]* bytes spill" kernel/kernels.fatbin.ptxas.txt | sort | uniq -c | head -5 | tee -a "$OUT/summary.txt"
    ;;
  tests)
    s kernel tests
    branch
    export TPRUN_KERNELS_FATBIN=$PWD/kernel/kernels.fatbin
    [ -f .dev/bigw/kernels.fatbin ] && [ ! -f "$OUT/kernels.fatbin" ] && TPRUN_KERNELS_FATBIN=$PWD/.dev/bigw/kernels.fatbin
    enough 60 kernel tests || continue
    timeout $(lim 260) bin/kernel.test -test.v -test.count=1 -test.run 'TestGPULargeMMatrix|TestGPULargeMRingMT|TestGPULargeMWgmma|TestGPUSmall|TestGPUSlotRotation' >"$L/ktest.log" 2>&1
    echo "kernel.test exit $?" | tee -a "$OUT/summary.txt"
    grep -E "^(--- FAIL|FAIL|PASS|ok)" "$L/ktest.log" | head -20 | tee -a "$OUT/summary.txt"
    grep -E "config " "$L/ktest.log" | head -2 | tee -a "$OUT/summary.txt"
    s memcheck
    san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
    if [ -n "$san" ] && enough 30 memcheck; then
      timeout $(lim 90) "$san" --tool memcheck --error-exitcode 9 bin/kernel.test -test.count=1 -test.run 'TestGPUSmall/larger_M$' >"$L/memcheck.log" 2>&1
      echo "memcheck exit $?" | tee -a "$OUT/summary.txt"
      grep -E "ERROR SUMMARY|^(--- FAIL|ok|PASS|FAIL)" "$L/memcheck.log" | head -5 | tee -a "$OUT/summary.txt"
    fi
    ;;
  sweep)
    s sweep
    # The warp-specialized candidates, then the register-ring tile's
    # (ringmt: MT 16, 32 and 64 only) in the skinny kernel's geometries.
    CONFIGS="7168=wg1k4/9/1/1/np,wg2k4/13/1/2/np,wg2k2/13/1/2/np,r32d4/4/1/4/np,r32d4/8/1/1/np,r32d4/8/1/2/np,r16d8/8/1/2/np,r16d4/4/1/4/np"
    CONFIGS+=";3584=wg1k4/9/1/2/np,wg2k2/13/1/4/np,r32d4/4/1/4/np,r32d4/8/1/2/np,r16d8/8/1/2/np,r16d8/4/1/4/np"
    CONFIGS+=";896=wg1k4/9/1/8/np,wg1k2/9/1/8/np,r16d4/8/1/2/np,r16d4/8/1/1/np,r32d4/8/1/4/np,r16d8/8/1/2/np,r32d4/8/1/2/np"
    CONFIGS+=";448=wg1k4/9/1/8/np,wg1k2/9/1/8/np,r32d4/4/1/8/np,r16d8/4/1/4/np,r16d4/4/1/4/np,r16d8/8/1/4/np,r16d4/8/1/4/np"
    branch
    export TPRUN_KERNELS_FATBIN=$PWD/kernel/kernels.fatbin
    [ -f "$OUT/kernels.fatbin" ] || TPRUN_KERNELS_FATBIN=$PWD/.dev/bigw/kernels.fatbin
    enough 200 sweep || continue
    t=$(lim ${SWEEP_TIMEOUT:-480})
    budget=$((t - 80 < ${SWEEP_BUDGET:-400} ? t - 80 : ${SWEEP_BUDGET:-400}))  # a margin over the sweep's own estimate
    timeout "$t" python3 scripts/bigm-sweep --rounds 2 --budget "$budget" --work "$OUT/sweep" \
      --report "$OUT/bigm-sweep.txt" \
      --configs "$CONFIGS" \
      >"$L/sweep.log" 2>&1
    echo "sweep exit $?" | tee -a "$OUT/summary.txt"
    sed -n '/^## the picked table against/,$p' "$L/sweep.log" | tee -a "$OUT/summary.txt"
    ;;
  final)
    # The issue's 10,000-step run with the new kernel and the sweep's
    # table (this call's, or .dev/bigw/bigm_table.tsv from the sweep call).
    s final
    branch
    export TPRUN_KERNELS_FATBIN=$PWD/kernel/kernels.fatbin
    [ -f "$OUT/kernels.fatbin" ] || TPRUN_KERNELS_FATBIN=$PWD/.dev/bigw/kernels.fatbin
    table=$OUT/bigm_table.tsv
    [ -f "$table" ] || table=$PWD/.dev/bigw/bigm_table.tsv
    [ -f "$table" ] && export TPRUN_KERNELS_BIGM_TABLE=$table
    echo "fatbin $TPRUN_KERNELS_FATBIN, table ${TPRUN_KERNELS_BIGM_TABLE:-embedded}" | tee -a "$OUT/summary.txt"
    enough 60 the larger-M run || continue
    timeout $(lim 300) bin/tprun --tp 4 --devices 0,0,0,0 --m 16,64,128 --iters ${RUN_ITERS:-3334} >"$L/run.log" 2>&1
    echo "tprun --tp 4 --devices 0,0,0,0 --m 16,64,128 --iters ${RUN_ITERS:-3334} ($((3 * ${RUN_ITERS:-3334})) steps): exit $?" | tee -a "$OUT/summary.txt"
    grep -E "^(\[rank 0\] )? +(16|64|128) |wrong" "$L/run.log" | head -8 | tee -a "$OUT/summary.txt"
    ;;
  *)
    echo "unknown stage $st (params, build, tests, sweep, final)"
    exit 2
    ;;
  esac
done
s done
