#!/usr/bin/env python3
"""Joins the harness's bench output with the PyTorch baseline into the table
of bench/kernel-h200-<date>.txt, and checks the kernel's speed targets.

    report.py OURS.tsv TORCH.tsv HEADER.txt > REPORT.txt
"""
import sys

import cfgname


def read_tsv(path):
    rows, comments = [], []
    with open(path) as f:
        header = None
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("#"):
                comments.append(line)
                continue
            if header is None:
                header = line.split("\t")
                continue
            rows.append(dict(zip(header, line.split("\t"))))
    return rows, comments


def main():
    ours, comments = read_tsv(sys.argv[1])
    torch_rows, _ = read_tsv(sys.argv[2])
    with open(sys.argv[3]) as f:
        sys.stdout.write(f.read())
    for c in comments:
        print(c)
    tt = {(r["latent"], r["shard"], r["m"]): float(r["torch_us"]) for r in torch_rows}
    print()
    print("| latent | shard | M | config (family/warps/cluster[/L2 prefetch][/lb: load-balancing cluster scheduling][/coN: N % shared memory carveout]) | ours µs | floor µs | ours/floor "
          "| no-PDL µs | torch µs | speedup | target |")
    print("| ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |")
    misses = []
    for r in ours:
        key = (r["latent"], r["shard"], r["m"])
        us, fl = float(r["ours_us"]), float(r["floor_us"])
        t = tt.get(key)
        ratio = us / fl
        shard, m = int(r["shard"]), int(r["m"])
        target = ""
        if r["latent"] == "3584" and shard in (7168, 3584):
            lim = 1.15 if m <= 4 else (1.3 if m == 8 else None)
            if lim is not None:
                ok = ratio <= lim
                target = f"≤{lim}× floor: {'ok' if ok else 'MISS'}"
                if not ok:
                    misses.append(f"shard {shard} M {m}: {ratio:.2f}× floor > {lim}")
        if r["latent"] == "3584" and shard == 896:
            ok1 = us <= 2.5
            ok2 = t is not None and t / us >= 3.5
            target = f"≤2.5µs: {'ok' if ok1 else 'MISS'}; ≥3.5× torch: {'ok' if ok2 else 'MISS'}"
            if not ok1:
                misses.append(f"shard 896 M {m}: {us:.2f} µs > 2.5")
            if not ok2:
                misses.append(f"shard 896 M {m}: speedup {t / us if t else 0:.2f} < 3.5")
        cfg = cfgname.name(r)
        ts = f"{t:.2f}" if t is not None else "-"
        sp = f"{t / us:.2f}×" if t is not None else "-"
        print(f"| {r['latent']} | {shard} | {m} | {cfg} | {us:.2f} | {fl:.2f} | {ratio:.2f} | "
              f"{float(r['nopdl_us']):.2f} | {ts} | {sp} | {target} |")
    print()
    if misses:
        print("Targets missed:")
        for x in misses:
            print("- " + x)
    else:
        print("All speed targets met.")


if __name__ == "__main__":
    main()
