#!/usr/bin/env python3
"""Turns a sweep (harness sweep OUT.tsv) into kernel/config_table.tsv: for
every (latent, shard, M) the launch config with the lowest median time.
A config within 1% of the best that uses fewer CTAs (smaller cluster, then
fewer warps, then 16 rows, depth 4, unstaged) wins the tie, as the cheaper choice when timings are that close.

    pick_table.py SWEEP.tsv "provenance line" > kernel/config_table.tsv
"""
import sys


def main():
    best = {}
    with open(sys.argv[1]) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            r = dict(zip(header, line.rstrip("\n").split("\t")))
            us = float(r["us"])
            if us <= 0:
                continue
            key = (int(r["latent"]), int(r["shard"]), int(r["m"]))
            cfg = (int(r["tile_rows"]), int(r["depth"]), int(r["stage"]), int(r["warps"]), int(r["cluster"]))
            best.setdefault(key, []).append((us, cfg))
    print("# Launch configs of the skinny kernel, measured on one H200 by the sweep of")
    print("# scripts/bench-kernel (harness sweep); read by kernel/config.go and the harness.")
    if len(sys.argv) > 2:
        print("# " + sys.argv[2])
    print("# latent\tshard\tm\ttile_rows\tdepth\tstage\twarps\tcluster\tmedian_us")
    for key in sorted(best):
        runs = best[key]
        lo = min(us for us, _ in runs)
        near = [(cfg[4], cfg[3], cfg[0], cfg[1], cfg[2], us, cfg) for us, cfg in runs if us <= lo * 1.01]
        near.sort()
        us, cfg = near[0][5], near[0][6]
        print(f"{key[0]}\t{key[1]}\t{key[2]}\t{cfg[0]}\t{cfg[1]}\t{cfg[2]}\t{cfg[3]}\t{cfg[4]}\t{us:.3f}")


if __name__ == "__main__":
    main()
