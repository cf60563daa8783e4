#!/usr/bin/env python3
"""Compares two parameter dumps of cgap_dump_graph (lab/cgap/dumpparams.c):
the tprun_skinny_params block of the first kernel nodes, field by field
(kernel/skinny.h's layout), each pointer with its alignment and its step
from the node before, then the nodes' functions and launch attributes and
the edge types. Usage: cmpparams.py A.txt B.txt [NODES]"""
import re
import sys

# (offset, bytes, name) of tprun_skinny_params (kernel/skinny.h).
FIELDS = [(0, 8, "latent"), (8, 8, "weight"), (16, 8, "shared")] + [(24 + 8 * d, 8, f"dst[{d}]") for d in range(16)] + [
    (152, 4, "latent_dim"), (156, 4, "shard"), (160, 4, "hidden"), (164, 4, "rank"), (168, 4, "shared_stride"),
    (172, 4, "ndst"), (176, 4, "tile_rows"), (180, 4, "l2_prefetch"), (184, 8, "recv_slot"), (192, 8, "recv_out"),
    (200, 8, "recv_status"), (208, 8, "recv_timeout_ns"), (216, 4, "recv_flags"), (220, 4, "flags"),
    (224, 8, "rot_counter"), (232, 8, "rot_stride"), (240, 4, "rot_slots"), (244, 4, "rot_dst_mask")]
POINTERS = {"latent", "weight", "shared", "recv_slot", "recv_out", "recv_status", "rot_counter"} | {f"dst[{d}]" for d in range(16)}


def read(path):
    """node index -> (grid, block, smem, bytes), the other lines."""
    nodes, other = {}, []
    with open(path) as f:
        for line in f:
            m = re.match(r"node (\d+) grid (\d+) block (\d+) smem (\d+):(.*)", line)
            if m:
                raw = bytes.fromhex(m.group(5).replace(" ", ""))
                nodes[int(m.group(1))] = (int(m.group(2)), int(m.group(3)), int(m.group(4)), raw)
            else:
                other.append(line.rstrip("\n"))
    return nodes, other


def fields(raw):
    return {name: int.from_bytes(raw[off:off + n], "little", signed=n == 4) for off, n, name in FIELDS if off + n <= len(raw)}


def align(v):
    return 0 if v == 0 else (v & -v)


def show(name, v, prev):
    if name not in POINTERS or v == 0:
        return str(v)
    step = f" step {v - prev:+#x}" if prev is not None else ""
    return f"{v:#x} (align {align(v)}, mod 2M {v % (2 << 20):#x}{step})"


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    a_nodes, a_other = read(sys.argv[1])
    b_nodes, b_other = read(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    ak, bk = sorted(a_nodes)[:count], sorted(b_nodes)[:count]
    print(f"A {sys.argv[1]}: {len(a_nodes)} kernel nodes; B {sys.argv[2]}: {len(b_nodes)}")
    prev_a = prev_b = None
    for i, (na, nb) in enumerate(zip(ak, bk)):
        ga, gb = a_nodes[na], b_nodes[nb]
        fa, fb = fields(ga[3]), fields(gb[3])
        print(f"-- step {i} (A node {na}, B node {nb}): grid {ga[0]}/{gb[0]} block {ga[1]}/{gb[1]} smem {ga[2]}/{gb[2]}"
              + ("" if ga[:3] == gb[:3] else "   <- launch differs"))
        for _, _, name in FIELDS:
            if name not in fa:
                continue
            va, vb = fa[name], fb.get(name)
            if name.startswith("dst[") and va == 0 and vb == 0:
                continue
            pa, pb = (prev_a or {}).get(name), (prev_b or {}).get(name)
            same = va == vb or (name in POINTERS and va != 0 and vb != 0)
            mark = "" if same else "   <- differs"
            print(f"   {name:>15}  A {show(name, va, pa)}")
            print(f"   {'':>15}  B {show(name, vb, pb)}{mark}")
        prev_a, prev_b = fa, fb
    print("-- A's other lines (first 8):")
    for line in a_other[:8]:
        print("   " + line)
    print("-- B's other lines (first 8):")
    for line in b_other[:8]:
        print("   " + line)


if __name__ == "__main__":
    main()
