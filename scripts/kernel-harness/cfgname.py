"""The skinny kernel's launch configs as the harness writes them
(harness.cu, Cfg::str and parse_cfg), for the Python scripts; the launch
parameters of a config are the Go kernel package's (launchparams/):

    family/warps/cluster[/pfH.S[o][l]][/sp|/lb][/coN]

family: a row of kernel/families.tsv (read from there, the spec the Go
package and scripts/build-kernels read too); pf: the L2 prefetch plan
(skinny.h: helpers H, sixteenths S, o own tile, l LSU form); sp / lb the
spread / load-balancing cluster scheduling policy; co the preferred shared
memory carveout, N percent. A table row (kernel/config_table.tsv, a sweep's
TSV) has these as the columns family, warps, cluster, l2_prefetch,
cluster_policy, carveout.
"""
import os
import re

SPEC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "kernel", "families.tsv")
SPEC_HEADER = "family\ttile_rows\tdepth\tlatent\twide\tone\tl2only\twarps"
POLICIES = {"sp": 1, "lb": 2}
# The columns of a launch table after latent, shard and m, before median_us.
COLUMNS = ("family", "warps", "cluster", "l2_prefetch", "cluster_policy", "carveout")
TABLE_HEADER = "latent\tshard\tm\t" + "\t".join(COLUMNS) + "\tmedian_us"


def families(path=SPEC):
    """The families of the spec: name -> the row as a dict of strings."""
    out, header = {}, None
    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if header is None:
                if line != SPEC_HEADER:
                    raise ValueError(f"{path}: header {line!r}, want {SPEC_HEADER!r}")
                header = line.split("\t")
                continue
            row = dict(zip(header, line.split("\t")))
            out[row["family"]] = row
    return out


def name(row):
    """The config string of a table row (a dict of the columns, as strings)."""
    s = f'{row["family"]}/{row["warps"]}/{row["cluster"]}'
    pf = int(row.get("l2_prefetch", "0"))
    if pf:
        s += f'/pf{pf & 0xffff}.{(pf >> 16) & 0xff}{"o" if (pf >> 24) & 1 else ""}{"l" if (pf >> 25) & 1 else ""}'
    policy = int(row.get("cluster_policy", "0"))
    for k, v in POLICIES.items():
        if v == policy:
            s += "/" + k
    co = int(row.get("carveout", "0"))
    if co:
        s += f"/co{co}"
    return s


def parse(s, fams=None):
    """The table columns of a config string; ValueError says what is wrong."""
    fams = families() if fams is None else fams
    f = s.split("/")
    if len(f) < 3 or not f[1].isdigit() or not f[2].isdigit():
        raise ValueError("not family/warps/cluster[/pf...][/sp|/lb][/coN]")
    if f[0] not in fams:
        raise ValueError(f"no family {f[0]} in kernel/families.tsv ({', '.join(fams)})")
    c = dict(family=f[0], warps=int(f[1]), cluster=int(f[2]), l2_prefetch=0, cluster_policy=0, carveout=0)
    if not 1 <= c["warps"] <= int(fams[f[0]]["warps"]) or not 1 <= c["cluster"] <= 8:
        raise ValueError(f"warps must be 1..{fams[f[0]]['warps']} and cluster 1..8")
    for x in f[3:]:
        if x in POLICIES:
            if c["cluster"] < 2:
                raise ValueError("a cluster scheduling policy needs a cluster of 2 or more")
            c["cluster_policy"] = POLICIES[x]
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
    if name({k: str(v) for k, v in c.items()}) != s:
        raise ValueError(f"{s} is not written as the harness writes it ({name({k: str(v) for k, v in c.items()})})")
    return c
