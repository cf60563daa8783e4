#!/usr/bin/env python3
"""Summarizes interleaved A/B runs of `harness FATBIN ab` over several builds.

Input: the harness's "ab ..." lines, each prefixed with the build's name and
the round ("NAME rR ab shard S M m CFG median X us (...)"), as the device
scripts collect them: for each round, for each build,

    HARNESS_AB=... HARNESS_AB_REPS=1 build/harness build/NAME.fatbin ab |
        grep '^ab' | sed "s/^/NAME rR /" >> kab.txt

Output: one line per (shard, config, M): the median over rounds of each
build, then each build's difference from the first.

usage: ab_summary.py kab.txt "NAME1 NAME2 ..."
"""
import collections
import statistics
import sys


def main():
    path, names = sys.argv[1], sys.argv[2].split()
    d = collections.defaultdict(list)
    with open(path) as f:
        for line in f:
            x = line.split()
            if len(x) < 10 or x[8] != "median":
                continue
            d[(x[4], x[7], int(x[6]), x[0])].append(float(x[9]))
    print("shard config M " + " ".join(names) + "  (deltas against " + names[0] + ")")
    for k in sorted({k[:3] for k in d}, key=lambda k: (int(k[0]), k[1], k[2])):
        v = [statistics.median(d[k + (n,)]) if d.get(k + (n,)) else float("nan") for n in names]
        print(k[0], k[1], k[2], " ".join(f"{x:.3f}" for x in v), " ".join(f"{x - v[0]:+.3f}" for x in v[1:]))


if __name__ == "__main__":
    main()
