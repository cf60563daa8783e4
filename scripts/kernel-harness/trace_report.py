#!/usr/bin/env python3
"""Summarizes `harness FATBIN trace OUT` (a -DTPRUN_TRACE fatbin).

Each line of OUT is one CTA of one launch: %globaltimer at its start (g0),
after griddepcontrol.wait (g1), after its MMA loop was issued (g2) and after
its epilogue (g3), clock64 deltas from its start (c1..c3), its SM, block
index, weight buffer (wlo) and grid size. g4..g6 (c4..c6) mark the first
weight chunk, the first latent chunk, and every prologue chunk plus the
first latent chunks in registers (the prologue chunks only in the staged
"s" configs, whose latent comes through shared memory): each timer read waits on a comparison of
the loaded value. In trace fatbins built up to stamp a24d9b6e ptxas dropped
the reads meant to wait, so there they mark the loads' issue only
(bench/NOTES-kernel.md, 2026-11-30d and 30e). The marks serialize the
code around them (the refill loads after mark 6 issue only once it is
taken), so read them for order, not for speed. Launches are told apart by weight buffer and
time. Per config the report gives the period between launch ends, where a
CTA's time goes, and what happens at each kernel boundary: how long after
the previous grid's last CTA ended this grid's CTAs were released from the
wait, and how many of them were already resident by then; and, where the
weight mark exists, what sets apart the CTAs whose weights land last.

usage: trace_report.py trace.tsv
"""
import statistics as st
import sys
from collections import defaultdict


def q(v, f):
    v = sorted(v)
    return v[min(len(v) - 1, int(f * (len(v) - 1) + 0.5))]


def fmt(v):
    return "med %6.0f  p10 %6.0f  p90 %6.0f  max %6.0f" % (st.median(v), q(v, 0.1), q(v, 0.9), max(v))


def late_ctas(full):
    """The CTAs whose first weight chunk lands last after the wait (the
    slowest tenth of each grid, when that is slower than the grid's median)
    against the others of the same grids: when they started, whether the
    previous grid had used their SM, and how many CTAs of the next grid
    started on their SM before their weights landed."""
    cols = {"late": defaultdict(list), "rest": defaultdict(list)}
    for a, b, c in zip(full, full[1:], full[2:]):
        a_end = max(x["g3"] for x in a)
        a_sms = {x["smid"] for x in a}
        land = [x["g4"] - x["g1"] for x in b]
        thr, med = q(land, 0.9), st.median(land)
        for x in b:
            k = "late" if x["g4"] - x["g1"] >= thr and thr > med else "rest"
            cols[k]["start"].append(x["g0"] - a_end)
            cols[k]["prev_sm"].append(1 if x["smid"] in a_sms else 0)
            cols[k]["next_on_sm"].append(sum(1 for y in c if y["smid"] == x["smid"] and y["g0"] < x["g4"]))
    late, rest = cols["late"], cols["rest"]
    if not late["start"] or not rest["start"]:
        print("late CTAs: none stand out (the slowest tenth lands no later than the median)")
        return
    print("late CTAs (first weight chunk in the slowest tenth after the wait), %d of %d, against the rest:" %
          (len(late["start"]), len(late["start"]) + len(rest["start"])))
    print("              start, ns from prev grid's last end:   late med %6.0f   rest med %6.0f" %
          (st.median(late["start"]), st.median(rest["start"])))
    print("              on an SM the prev grid used:            late %5.0f %%   rest %5.0f %%" %
          (100 * st.mean(late["prev_sm"]), 100 * st.mean(rest["prev_sm"])))
    print("              next grid's CTAs on its SM before its weights landed: late mean %.2f   rest mean %.2f" %
          (st.mean(late["next_on_sm"]), st.mean(rest["next_on_sm"])))


def main(path):
    rows = defaultdict(list)
    with open(path) as f:
        head = f.readline().rstrip("\n").split("\t")
        for line in f:
            r = dict(zip(head, line.rstrip("\n").split("\t")))
            key = (int(r["shard"]), int(r["m"]), r["cfg"])
            rows[key].append({k: (int(v) if k != "cfg" else v) for k, v in r.items()})
    allg = sorted({x["g0"] for v in rows.values() for x in v})
    steps = [b - a for a, b in zip(allg, allg[1:]) if b > a]
    print("globaltimer: smallest step between distinct start stamps %d ns" % (min(steps) if steps else -1))
    for key, recs in rows.items():
        shard, m, cfg = key
        byw = defaultdict(list)
        for x in recs:
            byw[x["wlo"]].append(x)
        launches = []
        for v in byw.values():
            v.sort(key=lambda x: x["g0"])
            cur = [v[0]]
            for x in v[1:]:
                if x["g0"] - cur[-1]["g0"] > 30000:
                    launches.append(cur)
                    cur = []
                cur.append(x)
            launches.append(cur)
        nctas = recs[0]["nctas"]
        full = [L for L in launches if len(L) == nctas]
        full.sort(key=lambda L: max(x["g3"] for x in L))
        print("\n== shard %d M %d %s: %d CTAs per launch, %d complete launches of %d" %
              (shard, m, cfg, nctas, len(full), len(launches)))
        if len(full) < 3:
            continue
        ends = [max(x["g3"] for x in L) for L in full]
        per = [b - a for a, b in zip(ends, ends[1:])]
        print("period (last CTA end to last CTA end), ns: " + fmt(per))
        ctas = [x for L in full for x in L]
        print("per CTA, ns   start->wait return: " + fmt([x["g1"] - x["g0"] for x in ctas]))
        print("              wait -> MMAs done:  " + fmt([x["g2"] - x["g1"] for x in ctas]))
        print("              MMAs -> end:        " + fmt([x["g3"] - x["g2"] for x in ctas]))
        if "g4" in ctas[0]:
            print("              wait -> 1st weight chunk in registers: " + fmt([x["g4"] - x["g1"] for x in ctas]))
            lat = [x["g5"] - x["g4"] for x in ctas if x["g5"] >= x["g4"]]
            if lat:
                print("              then -> 1st latent chunk in registers: " + fmt(lat))
        if "g6" in ctas[0]:
            print("              wait -> ring (+ 1st latents) landed:   " + fmt([max(0, x["g6"] - x["g1"]) for x in ctas]))
            print("              landed -> MMAs issued:                 " + fmt([x["g2"] - max(x["g6"], x["g1"]) for x in ctas]))
        print("per CTA, cyc  wait -> MMAs done:  " + fmt([x["c2"] - x["c1"] for x in ctas]))
        print("              MMAs -> end:        " + fmt([x["c3"] - x["c2"] for x in ctas]))
        rel, early, place, spread, endspread = [], [], [], [], []
        for a, b in zip(full, full[1:]):
            a_end = max(x["g3"] for x in a)
            rel.append(min(x["g1"] for x in b) - a_end)
            early.append(sum(1 for x in b if x["g0"] < a_end) / len(b))
            place.append(max(x["g0"] for x in b) - a_end)
            spread.append(max(x["g1"] for x in b) - min(x["g1"] for x in b))
            endspread.append(max(x["g3"] for x in b) - q([x["g3"] for x in b], 0.5))
        print("boundary, ns  prev grid's last end -> first wait return: " + fmt(rel))
        print("              prev grid's last end -> last CTA start:    " + fmt(place))
        print("              wait-return spread within a grid:          " + fmt(spread))
        print("              median CTA end -> last CTA end:            " + fmt(endspread))
        print("              share of CTAs started before the prev grid's last end: med %.2f" % st.median(early))
        if "g4" in ctas[0]:
            late_ctas(full)
        # One launch in detail: CTAs by start time, where each phase ends.
        L = full[len(full) // 2]
        prev_end = max(x["g3"] for x in full[len(full) // 2 - 1])
        xs = sorted(L, key=lambda x: x["g0"])
        print("one launch, times from the previous grid's last end (ns): start / wait return / MMAs done / end")
        for x in xs[:: max(1, len(xs) // 12)]:
            print("   blk %4d sm %3d: %6d %6d %6d %6d" % (x["blk"], x["smid"], x["g0"] - prev_end, x["g1"] - prev_end,
                                                        x["g2"] - prev_end, x["g3"] - prev_end))


if __name__ == "__main__":
    main(sys.argv[1])
