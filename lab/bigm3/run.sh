#!/usr/bin/env bash
# Builds bigm3 (sm_90a), then a correctness pass (odd shapes, every
# geometry) and a timing pass (the shards of the target table). Every config
# runs in its own process under a timeout, so a trap or a hang loses that
# config only. Logs go to $OUT (default ./out): build.txt, check.txt,
# time.txt, summary.txt.
set -u
cd "$(dirname "$0")"
OUT=${OUT:-./out}
mkdir -p "$OUT"
B=./bigm3
T=${BIGM3_TIMEOUT:-60}

echo "== build" | tee "$OUT/build.txt"
t0=$(date +%s)
if ! nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -lineinfo -Xptxas -v ${NVCC_EXTRA:-} -o bigm3 bigm3.cu >>"$OUT/build.txt" 2>&1; then
  echo "build failed" | tee -a "$OUT/build.txt"
  tail -40 "$OUT/build.txt"
  exit 1
fi
echo "build took $(( $(date +%s) - t0 )) s" | tee -a "$OUT/build.txt"
grep -E "Compiling entry|Used [0-9]+ registers|spill|wgmma|arning" "$OUT/build.txt" |
  grep -E "bigm3_kernel|Used|[1-9][0-9]* bytes spill|wgmma|arning" | head -80 >"$OUT/summary.txt"
grep -cE "C7515|serializ" "$OUT/build.txt" | sed 's/^/wgmma serialization warnings: /' | tee -a "$OUT/summary.txt"

run() {  # log, args... (B: the binary)
  local log=$1
  shift
  echo "-- $B $*" >>"$log"
  timeout -k 5 "$T" "$B" "$@" >>"$log" 2>&1
  local rc=$?
  [ $rc -ne 0 ] && echo "!! exit $rc (124: timeout, 3: trap/context lost) for: $*" | tee -a "$log"
  return 0
}

echo "== correctness" | tee "$OUT/check.txt"
for lat in 0 1; do
  for c in wgn1.cl1 wgn2.cl2 wgn1.cl16 wgn2.kc4.cl8 wgn1.kc1.cl8; do
    run "$OUT/check.txt" --time 0 --lat $lat --cfg "$c" --latent 3584 --shards 960,448 --m 9,16,33,64,100,128
    run "$OUT/check.txt" --time 0 --lat $lat --cfg "$c" --latent 720 --shards 960,64 --m 9,17,32,128
  done
done

echo "== the mma.sync form (what sm_100 runs), forced on sm_90a" | tee -a "$OUT/check.txt"
if nvcc -O3 -std=c++17 -gencode arch=compute_90a,code=sm_90a -DBIGM3_FORCE_MMA -o bigm3_mma bigm3.cu >"$OUT/build-mma.txt" 2>&1; then
  for c in wgn1.cl1 wgn2.cl2 wgn1.kc1.cl8; do
    B=./bigm3_mma run "$OUT/check.txt" --time 0 --cfg "$c" --latent 3584 --shards 960,448 --m 9,16,33,64,100,128
    B=./bigm3_mma run "$OUT/check.txt" --time 0 --cfg "$c" --latent 720 --shards 960,64 --m 9,17,32,128
  done
  B=./bigm3_mma run "$OUT/time-mma.txt" --cfg wgn2.kc4.cl2 --latent 3584 --shards 7168,896 --m 16,64,128 --verbose 0
  grep -h "^RESULT" "$OUT/time-mma.txt" | awk '{print "mma.sync:", $3, $7, $9, $16, $20, $24}'
else
  echo "mma.sync build failed" | tee -a "$OUT/check.txt"; tail -20 "$OUT/build-mma.txt"
fi

echo "== timing" | tee -a "$OUT/time.txt"
for lat in -1 1; do
  for c in wgn1.cl1 wgn2.cl2 wgn1.kc2.cl1 wgn2.kc4.cl2 wgn2.kc1.cl2; do
    run "$OUT/time.txt" --lat $lat --cfg "$c" --latent 3584 --shards 7168 --m 16,32,64,128 --verbose 0
  done
  for c in wgn1.cl2 wgn2.cl4 wgn1.kc2.cl2; do
    run "$OUT/time.txt" --lat $lat --cfg "$c" --latent 3584 --shards 3584 --m 16,32,64,128 --verbose 0
  done
  for c in wgn1.cl8 wgn1.kc2.cl8 wgn2.cl16; do
    run "$OUT/time.txt" --lat $lat --cfg "$c" --latent 3584 --shards 896 --m 16,32,64,128 --verbose 0
  done
  for c in wgn1.cl16 wgn1.cl8 wgn1.kc2.cl16; do
    run "$OUT/time.txt" --lat $lat --cfg "$c" --latent 3584 --shards 448 --m 16,32,64,128 --verbose 0
  done
done
run "$OUT/time.txt" --pdl 0 --cfg wgn2.kc4.cl2 --latent 3584 --shards 7168 --m 16,128 --verbose 0
run "$OUT/time.txt" --pdl 0 --cfg wgn1.cl8 --latent 3584 --shards 896 --m 16,128 --verbose 0

{
  echo "== results (wrong must be 0, identical yes)"
  grep -hE "^RESULT|FATAL|^!!|launch failed|differs" "$OUT/check.txt" "$OUT/time.txt"
  echo "== configs"
  grep -h "^config " "$OUT/check.txt" "$OUT/time.txt" | sort -u
} >>"$OUT/summary.txt"
grep -hE "FATAL|^!!" "$OUT/check.txt" "$OUT/time.txt" | head -20
grep -h '^RESULT' "$OUT/check.txt" "$OUT/time.txt" | awk '{n++; if ($16 != 0 || $20 != "yes") b++} END {printf "cases %d, wrong or not identical %d\n", n, b}' | tee -a "$OUT/summary.txt"
echo "shard M cfg lat.pdl wrong identical median_us p90_us GB/s"
grep -h "^RESULT" "$OUT/time.txt" | awk '{print $3, $7, $9, $12, $16, $20, $24, $26, $28}' | (if command -v column >/dev/null; then column -t; else cat; fi) | head -150
