#!/usr/bin/env bash
# Builds bigm2 (sm_90a), then a correctness pass (small and odd shapes, every
# instantiated geometry) and a timing pass (the shards of the target table).
# Every config runs in its own process under a timeout, so a trap or a hang
# loses that config only. Logs go to $OUT (default ./out): build.txt,
# check.txt, time.txt, summary.txt.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-./out}
mkdir -p "$OUT"
B=./bigm2
T=${BIGM2_TIMEOUT:-90}

echo "== build" | tee "$OUT/build.txt"
t0=$(date +%s)
if ! nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v ${NVCC_EXTRA:-} -o bigm2 bigm2.cu >>"$OUT/build.txt" 2>&1; then
  echo "build failed" | tee -a "$OUT/build.txt"
  tail -40 "$OUT/build.txt"
  exit 1
fi
echo "build took $(( $(date +%s) - t0 )) s" | tee -a "$OUT/build.txt"
# Per kernel: registers, spills; and any wgmma serialization warning.
grep -E "Compiling entry|Used [0-9]+ registers|spill|wgmma|arning" "$OUT/build.txt" |
  grep -E "bigm2_kernel|Used|[1-9][0-9]* bytes spill|wgmma|arning" | head -150 >"$OUT/summary.txt"

run() {  # log, args...
  local log=$1
  shift
  echo "-- $B $*" >>"$log"
  timeout -k 5 "$T" "$B" "$@" >>"$log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && echo "!! exit $rc (124: timeout, 3: trap/context lost) for: $*" | tee -a "$log"
  return 0
}

if [ -n "${BIGM2_QUICK:-}" ]; then
  # A few configs only: correctness at odd shapes, then the best of a full run per shard.
  echo "== quick" | tee "$OUT/check.txt" "$OUT/time.txt"
  run "$OUT/check.txt" --desc 0 --time 0 --cfg wgn1.wgk2.cl8.d4 --latent 720 --shards 960,64 --m 9,17,128
  run "$OUT/check.txt" --desc 0 --time 0 --cfg wgn2.wgk1.cl4.d8 --latent 3584 --shards 960 --m 9,33,128
  run "$OUT/time.txt" --desc 0 --cfg wgn4.wgk1.cl4.d4 --latent 3584 --shards 7168,3584 --m 16,128 --verbose 0
  run "$OUT/time.txt" --desc 0 --cfg wgn2.wgk1.cl4.d8 --latent 3584 --shards 7168 --m 16,128 --verbose 0
  run "$OUT/time.txt" --desc 0 --cfg wgn1.wgk2.cl8.d4 --latent 3584 --shards 896,448 --m 16,128 --verbose 0
  run "$OUT/time.txt" --desc 0 --cfg wgn1.wgk1.cl8.d8 --latent 3584 --shards 896,448 --m 16,128 --verbose 0
  grep -hE "^RESULT|FATAL|^!!" "$OUT/check.txt" "$OUT/time.txt" | awk '{print $3, $7, $9, $11, $17, $21, $25, $27, $29}'
  exit 0
fi
echo "== descriptor probe" | tee "$OUT/check.txt"
timeout -k 5 "$T" $B --shards 64 --latent 32 --m 16 --cfg wgn1.wgk1.cl1.d4 --time 0 --desc -1 >>"$OUT/check.txt" 2>&1
DESC=$(grep -o "using mode [01]" "$OUT/check.txt" | tail -1 | awk '{print $3}')
DESC=${DESC:-0}
echo "descriptor mode $DESC" | tee -a "$OUT/check.txt"

echo "== correctness" | tee -a "$OUT/check.txt"
CHECK_CFGS="wgn1.wgk1.cl1.d4 wgn1.wgk1.cl1.d8 wgn2.wgk1.cl2.d4 wgn2.wgk1.cl4.d8 wgn1.wgk2.cl4.d4 wgn1.wgk2.cl8.d8
 wgn4.wgk1.cl2.d4 wgn2.wgk2.cl2.d4 wgn1.wgk4.cl8.d4 wgn1.wgk1.cl16.d4"
for c in $CHECK_CFGS; do
  run "$OUT/check.txt" --desc "$DESC" --time 0 --cfg "$c" --latent 3584 --shards 960,448 --m 9,16,24,33,64,100,128
  run "$OUT/check.txt" --desc "$DESC" --time 0 --cfg "$c" --latent 720 --shards 960,64 --m 9,17,32,128
done
run "$OUT/check.txt" --desc "$DESC" --time 0 --pf 1 --cfg wgn2.wgk1.cl4.d4 --latent 3584 --shards 960 --m 16,128

echo "== timing" | tee "$OUT/time.txt"
for c in wgn2.wgk1.cl2.d4 wgn2.wgk1.cl4.d4 wgn2.wgk1.cl4.d8 wgn4.wgk1.cl2.d4 wgn4.wgk1.cl4.d4 wgn2.wgk2.cl2.d4; do
  run "$OUT/time.txt" --desc "$DESC" --cfg "$c" --latent 3584 --shards 7168,3584 --m 16,32,64,128 --verbose 0
done
run "$OUT/time.txt" --desc "$DESC" --pf 1 --cfg wgn2.wgk1.cl4.d4 --latent 3584 --shards 7168,3584 --m 16,128 --verbose 0
for c in wgn1.wgk1.cl4.d4 wgn1.wgk1.cl8.d4 wgn1.wgk1.cl8.d8 wgn1.wgk2.cl4.d4 wgn1.wgk2.cl8.d4 wgn1.wgk4.cl4.d4 wgn2.wgk1.cl8.d4; do
  run "$OUT/time.txt" --desc "$DESC" --cfg "$c" --latent 3584 --shards 896,448 --m 16,32,64,128 --verbose 0
done
run "$OUT/time.txt" --desc "$DESC" --pf 1 --cfg wgn1.wgk1.cl8.d4 --latent 3584 --shards 896,448 --m 16,128 --verbose 0

{
  echo "== results (wrong must be 0, identical yes)"
  grep -hE "^RESULT|FATAL|^!!|launch failed|differs" "$OUT/check.txt" "$OUT/time.txt"
  echo "== configs"
  grep -h "^config " "$OUT/time.txt" | sort -u
} >>"$OUT/summary.txt"
grep -hE "FATAL|^!!" "$OUT/check.txt" "$OUT/time.txt" | head -20
grep -h '^RESULT' "$OUT/check.txt" "$OUT/time.txt" | awk '{n++; if ($17 != 0 || $21 != "yes") b++} END {printf "cases %d, wrong or not identical %d\n", n, b}' | tee -a "$OUT/summary.txt"
echo "shard M cfg pf wrong identical median_us p90_us GB/s"
grep -h "^RESULT" "$OUT/time.txt" | awk '{print $3, $7, $9, $11, $17, $21, $25, $27, $29}' | (if command -v column >/dev/null; then column -t; else cat; fi) | head -150
