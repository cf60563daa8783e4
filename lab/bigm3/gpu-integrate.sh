#!/usr/bin/env bash
# One GPU call: the kernel parameter dump of the stream-ordered step from C
# and from Python (lab/cgap), then the warp-specialized larger-M form as
# the product runs it: sources, binaries and tests from .dev/bigw/all.tar.xz
# (kernel/, scripts/, bin/ of the branch), scripts/build-kernels, the
# larger-M GPU tests against the new fatbin, memcheck of the small larger-M
# cases, and scripts/bigm-sweep over the table's candidates with PyTorch
# beside them. Logs and results under $OUT.
set -u
cd "$(dirname "$0")/../.."
export TPRUN_MULTICAST=0 NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
L=$OUT/logs
mkdir -p "$L"
s() { echo "== $* ($(date -u +%T), ${SECONDS}s)" | tee -a "$OUT/summary.txt"; }

if [ -z "${SKIP_PARAMS:-}" ]; then
  s params
  rm -rf bin && tar xJf .dev/bigm/bin.tar.xz && cp .dev/bigm/cgap .dev/bigm/libcgap.so lab/cgap/
  CGAP_PARAMS=$OUT/params timeout 60 bin/tprun --tp 1 -- lab/cgap/cgap --seed 1 >"$L/cgap.log" 2>&1
  echo "cgap exit $?" | tee -a "$OUT/summary.txt"
  TPRUN_LIB=$PWD/bin/libtprun.so PYTHONPATH=$PWD/python TORCH_GAP_M=6 CGAP_PARAMS=$OUT/params \
    timeout 100 bin/tprun --tp 1 -- python3 lab/torch_gap.py "$L" >"$L/gap.log" 2>&1
  echo "torch_gap exit $?" | tee -a "$OUT/summary.txt"
  grep -v "^W" "$L/gap.log" | tail -4 | tee -a "$OUT/summary.txt"
fi

s build-kernels
rm -rf bin && tar xJf .dev/bigw/all.tar.xz || { echo "no .dev/bigw/all.tar.xz"; exit 1; }
scripts/build-kernels >"$L/build-kernels.log" 2>&1
rc=$?
echo "build-kernels exit $rc" | tee -a "$OUT/summary.txt"
tail -5 "$L/build-kernels.log" | tee -a "$OUT/summary.txt"
[ $rc -eq 0 ] || exit 1
cp kernel/kernels.fatbin kernel/kernels.fatbin.stamp kernel/kernels.fatbin.ptxas.txt "$OUT/"
grep -E "C7515|serializ" kernel/kernels.fatbin.ptxas.txt | head -3 | tee -a "$OUT/summary.txt"
export TPRUN_KERNELS_FATBIN=$PWD/kernel/kernels.fatbin

s kernel tests
timeout 240 bin/kernel.test -test.v -test.count=1 -test.run 'TestGPULargeMMatrix|TestGPULargeMWgmma|TestGPUSmall|TestGPUSlotRotation' >"$L/ktest.log" 2>&1
echo "kernel.test exit $?" | tee -a "$OUT/summary.txt"
grep -E "^(--- FAIL|FAIL|PASS|ok)" "$L/ktest.log" | head -20 | tee -a "$OUT/summary.txt"
grep -E "config tprun_bigw|config " "$L/ktest.log" | head -4 | tee -a "$OUT/summary.txt"

s memcheck
san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null)
if [ -n "$san" ]; then
  timeout 120 "$san" --tool memcheck --error-exitcode 9 bin/kernel.test -test.count=1 -test.run 'TestGPUSmall/larger_M$' >"$L/memcheck.log" 2>&1
  echo "memcheck exit $?" | tee -a "$OUT/summary.txt"
  grep -E "ERROR SUMMARY|^(--- FAIL|ok|PASS|FAIL)" "$L/memcheck.log" | head -5 | tee -a "$OUT/summary.txt"
fi

s sweep
timeout ${SWEEP_TIMEOUT:-230} python3 scripts/bigm-sweep --rounds 2 --budget ${SWEEP_BUDGET:-170} --work "$OUT/sweep" \
  --report "$OUT/bigm-sweep.txt" \
  --configs "7168=wg1k4/9/1/1/np,wg2k4/13/1/2/np,wg2k2/13/1/2/np;3584=wg1k4/9/1/2/np,wg2k2/13/1/4/np;896=wg1k4/9/1/8/np,wg1k2/9/1/8/np;448=wg1k4/9/1/8/np,wg1k2/9/1/8/np" \
  >"$L/sweep.log" 2>&1
echo "sweep exit $?" | tee -a "$OUT/summary.txt"
sed -n '/^## the picked table against/,$p' "$L/sweep.log" | tee -a "$OUT/summary.txt"
s done
tar czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$L"
