#!/bin/bash
# Session 2026-12-01 "al", call 8 (nvidia-h200). Calls 4 and 7: the latent
# load as .cg takes 0.04-0.07 µs off the step at M 5-7. Shipping it as a
# change of ld_act changes every entry point, so: what does it do to the
# kernel table's configs at every benchmark shape (issue 4's targets
# included)? `harness FATBIN bench kernel/config_table.tsv`, alternating
# main's fatbin and the cg build (act-load-skinny.patch, form 1, sm_90),
# rounds until the time is up; per (shape, M) the median of ours_us.
source scripts/device-call-prologue
mkdir -p .dev/act && cp kernel/skinny.h kernel/skinny.cu kernel/receive.cu .dev/act/ &&
	patch -d .dev/act -p0 skinny.cu < bench/experiments-2026-12-01al/act-load-skinny.patch || exit 1
scripts/kernel-harness/build-exp cg .dev/act -DTPRUN_ACT_LD_FORM=1 & P=$!
nvcc -O3 -std=c++17 -arch=sm_90 -o build/harness scripts/kernel-harness/harness.cu -lcuda > build/h.txt 2>&1; tail -3 build/h.txt
wait $P
el builds
mkdir -p $O/tb
for r in 1 2 3 4 5; do
	(($(date +%s) - T0 > 330)) && { echo "time is up after $((r - 1)) rounds"; break; }
	for b in base cg; do
		f=kernel/kernels.fatbin; [[ $b == cg ]] && f=build/cg.fatbin
		timeout 90 build/harness $f bench kernel/config_table.tsv $O/tb/$b-$r.tsv > $O/tb/$b-$r.log 2>&1 || echo "$b round $r: harness exit $?"
	done
	el "round $r"
done
python3 - "$O/tb" <<'PY'
import csv, glob, statistics, sys
d = {}
for f in glob.glob(sys.argv[1] + "/*.tsv"):
    b = f.rsplit("/", 1)[1].split("-")[0]
    rows = [l for l in open(f) if not l.startswith("#")]
    for r in csv.DictReader(rows, delimiter="\t"):
        d.setdefault((int(r["latent"]), int(r["shard"]), int(r["m"])), {}).setdefault(b, []).append(float(r["ours_us"]))
print("latent shard M   base_us  cg_us  delta  (medians over rounds)")
for k in sorted(d, key=lambda k: (k[0], -k[1], k[2])):
    v = d[k]
    if "base" in v and "cg" in v:
        a, c = statistics.median(v["base"]), statistics.median(v["cg"])
        print(f"{k[0]:6d} {k[1]:5d} {k[2]}  {a:8.3f} {c:6.3f} {c - a:+.3f}")
PY
el done
