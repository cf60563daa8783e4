#!/usr/bin/env python3
"""Turns sweeps (harness sweep / pfsweep OUT.tsv) into kernel/config_table.tsv:
for every (latent, shard, M) the launch config with the lowest median time.
A config within 1% of the best that uses fewer CTAs (smaller cluster, then
fewer warps, then 16 rows, depth 4, unstaged, no L2 prefetch) wins the tie,
as the cheaper choice when timings are that close.

With several sweeps, a later one replaces an earlier one's configs for
every (latent, shard, M) it measured: times from different runs are never
compared with each other. Sweeps without an l2_prefetch column count as 0.

    pick_table.py SWEEP.tsv [SWEEP2.tsv ...] "provenance line" > kernel/config_table.tsv
"""
import sys


def read_sweep(path):
    best = {}
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            r = dict(zip(header, line.rstrip("\n").split("\t")))
            us = float(r["us"])
            if us <= 0:
                continue
            key = (int(r["latent"]), int(r["shard"]), int(r["m"]))
            cfg = (int(r["tile_rows"]), int(r["depth"]), int(r["stage"]), int(r["warps"]), int(r["cluster"]),
                   int(r.get("l2_prefetch", "0")))
            best.setdefault(key, []).append((us, cfg))
    return best


def main():
    args = sys.argv[1:]
    provenance = args.pop() if args and not args[-1].endswith(".tsv") else None
    runs = {}
    for path in args:
        runs.update(read_sweep(path))
    print("# Launch configs of the skinny kernel, measured on one H200 by the sweeps of")
    print("# scripts/bench-kernel (harness sweep, pfsweep); read by kernel/config.go and the harness.")
    if provenance:
        print("# " + provenance)
    print("# latent\tshard\tm\ttile_rows\tdepth\tstage\twarps\tcluster\tl2_prefetch\tmedian_us")
    for key in sorted(runs):
        rs = runs[key]
        lo = min(us for us, _ in rs)
        near = [(cfg[4], cfg[3], cfg[0], cfg[1], cfg[2], cfg[5] != 0, us, cfg) for us, cfg in rs if us <= lo * 1.01]
        near.sort()
        us, cfg = near[0][6], near[0][7]
        print(f"{key[0]}\t{key[1]}\t{key[2]}\t{cfg[0]}\t{cfg[1]}\t{cfg[2]}\t{cfg[3]}\t{cfg[4]}\t{cfg[5]}\t{us:.3f}")


if __name__ == "__main__":
    main()
