"""The skinny kernel's launch configs as the harness writes them
(harness.cu, Cfg::str and parse_cfg), for the Python scripts:

    rows/depth/stage/warps/cluster[/pfH.S[o][l]][/p][/one][/sp|/lb][/coN]

stage g (latent from L2), s (staged), c (slab), l (whole lines), w (the
M = 8 code at every M, "_t32pw") or n (the latent and shared loads cached
in L2 only, "_t32pn", the fused step's family); pf: the
L2 prefetch plan (skinny.h: helpers H, sixteenths S, o own tile, l LSU
form); p packed weight; one the one-instance form; sp / lb the spread /
load-balancing cluster scheduling policy; co the preferred shared memory
carveout, N percent. A table row (kernel/config_table.tsv, a sweep's TSV) has
these as columns: tile_rows, depth, stage, warps, cluster, l2_prefetch,
packed, one, cluster_policy, carveout.
"""
import re

STAGES = "gsclwn"  # stage 0..5
# The entry point families (kernel/config.go, variants): (tile_rows, depth,
# stage, packed, one) of "", "_d8", "_t32", "_s8", "_s32", "_c", "_d8p",
# "_t32p", "_s8p", "_d8p1", "_d8pl", "_t32pw", "_t32pn".
ENTRIES = {(16, 4, 0, 0, 0), (16, 8, 0, 0, 0), (32, 4, 0, 0, 0), (16, 8, 1, 0, 0), (32, 4, 1, 0, 0),
           (16, 0, 2, 0, 0), (16, 8, 0, 1, 0), (32, 4, 0, 1, 0), (16, 8, 1, 1, 0), (16, 8, 0, 1, 1),
           (16, 8, 3, 1, 0), (32, 4, 4, 1, 0), (32, 4, 5, 1, 0)}
POLICIES = {"sp": 1, "lb": 2}


def name(row):
    """The config string of a table row (a dict of the columns, as strings)."""
    s = f'{row["tile_rows"]}/{row["depth"]}/{STAGES[int(row["stage"])]}/{row["warps"]}/{row["cluster"]}'
    pf = int(row.get("l2_prefetch", "0"))
    if pf:
        s += f'/pf{pf & 0xffff}.{(pf >> 16) & 0xff}{"o" if (pf >> 24) & 1 else ""}{"l" if (pf >> 25) & 1 else ""}'
    if row.get("packed", "0") != "0":
        s += "/p"
    if row.get("one", "0") != "0":
        s += "/one"
    policy = int(row.get("cluster_policy", "0"))
    for k, v in POLICIES.items():
        if v == policy:
            s += "/" + k
    co = int(row.get("carveout", "0"))
    if co:
        s += f"/co{co}"
    return s


def parse(s):
    """The table columns of a config string (ints); ValueError says what is wrong."""
    f = s.split("/")
    if len(f) < 5 or len(f[2]) != 1 or f[2] not in STAGES or not all(x.isdigit() for x in (f[0], f[1], f[3], f[4])):
        raise ValueError("not rows/depth/stage/warps/cluster[/pf...][/p][/one][/sp|/lb][/coN]")
    c = dict(tile_rows=int(f[0]), depth=int(f[1]), stage=STAGES.index(f[2]), warps=int(f[3]), cluster=int(f[4]),
             l2_prefetch=0, packed=0, one=0, cluster_policy=0, carveout=0)
    if not 1 <= c["warps"] <= 16 or not 1 <= c["cluster"] <= 8:
        raise ValueError("warps must be 1..16 and cluster 1..8")
    for x in f[5:]:
        if x == "p":
            c["packed"] = 1
        elif x in POLICIES:
            if c["cluster"] < 2:
                raise ValueError("a cluster scheduling policy needs a cluster of 2 or more")
            c["cluster_policy"] = POLICIES[x]
        elif x == "one":  # the one-instance form ("_d8p1": 16/8/g/.../p/one only)
            c["one"] = 1
        elif re.fullmatch(r"co\d+", x):
            if not 1 <= int(x[2:]) <= 100:
                raise ValueError("a carveout must be 1..100 percent")
            c["carveout"] = int(x[2:])
        else:
            m = re.fullmatch(r"pf(\d+)\.(\d+)(o?)(l?)", x)
            if not m:
                raise ValueError(f"unknown part {x}")
            if not 1 <= int(m[1]) <= 0xFFFF or int(m[2]) > 16:
                raise ValueError("prefetch helpers must be 1..65535 and sixteenths 0..16")
            c["l2_prefetch"] = int(m[1]) | int(m[2]) << 16 | (1 << 24 if m[3] else 0) | (1 << 25 if m[4] else 0)
    key = (c["tile_rows"], c["depth"], c["stage"], c["packed"], c["one"])
    if key not in ENTRIES:
        raise ValueError("no entry point has rows %d, depth %d, stage %s, packed %d, one %d" %
                         (key[0], key[1], STAGES[key[2]], key[3], key[4]))
    return c
