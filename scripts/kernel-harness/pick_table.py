#!/usr/bin/env python3
"""Turns sweeps (harness sweep / pfsweep OUT.tsv) into kernel/config_table.tsv.

For every (latent, shard, M), the launch config with the lowest median time;
a config within 1% of the best that uses fewer CTAs (smaller cluster, then
fewer warps, then no L2 prefetch, the default cluster scheduling policy,
the driver's shared memory carveout) wins the tie, as the cheaper choice
when timings are that close.

With several sweeps, a later one replaces an earlier one's configs for
every (latent, shard, M) it measured: the configs of one M are never
compared across runs.

    pick_table.py SWEEP.tsv [SWEEP2.tsv ...] "provenance line" > kernel/config_table.tsv
"""
import sys

import cfgname


def read_sweep(path):
    shapes = {}
    with open(path) as f:
        header = f.readline().rstrip("\n").split("\t")
        for line in f:
            r = dict(zip(header, line.rstrip("\n").split("\t")))
            us = float(r["us"])
            if us <= 0:
                continue
            cfg = tuple(r[c] for c in cfgname.COLUMNS)
            shapes.setdefault((int(r["latent"]), int(r["shard"])), {}).setdefault(int(r["m"]), []).append((us, cfg))
    return shapes


def pick(rs):
    lo = min(us for us, _ in rs)
    # family, warps, cluster, l2_prefetch, cluster_policy, carveout
    near = [(int(c[2]), int(c[1]), c[3] != "0", int(c[4]), c[5] != "0", us, c) for us, c in rs if us <= lo * 1.01]
    near.sort()
    return near[0][5], near[0][6]


def main():
    args = sys.argv[1:]
    provenance = args.pop() if args and not args[-1].endswith(".tsv") else None
    runs = {}
    for path in args:
        for shape, by_m in read_sweep(path).items():
            runs.setdefault(shape, {}).update(by_m)
    print("# Launch configs of the skinny kernel, one per (latent, shard, m): the")
    print("# fastest of the sweeps of scripts/bench-kernel (--sweep, --pf); read by")
    print("# kernel/config.go (ConfigFor) and the kernel harness. family names a row of")
    print("# kernel/families.tsv; median_us is the kernel's time in that sweep.")
    if provenance:
        print("# " + provenance)
    print(cfgname.TABLE_HEADER)
    for shape in sorted(runs):
        by_m = runs[shape]
        for m in range(1, 9):
            if not by_m.get(m):
                sys.exit(f"pick_table: shape {shape} lacks M {m}")
            us, cfg = pick(by_m[m])
            print("\t".join([str(shape[0]), str(shape[1]), str(m)] + list(cfg) + [f"{us:.3f}"]))


if __name__ == "__main__":
    main()
