#!/usr/bin/env python3
"""Which kernels of two builds differ in their machine code.

Compares, per function, the SASS encodings (instructions and their control
bits: stalls, barriers, scoreboards) that `cuobjdump -sass` prints for two
cubins or fatbins. A source change whose every table entry point compiles
to the same encodings cannot change the kernel's speed, so it needs no
timing A/B on a GPU (a correctness check still, since the sources changed).

    sass_diff.py [--arch sm_90] OLD NEW [FUNCTION ...]

Without FUNCTION, every function of OLD. Exits 1 when any differs.
Needs cuobjdump (from the CUDA toolkit; it needs no GPU).
"""
import collections
import re
import subprocess
import sys


def dump(path, arch):
    cmd = ["cuobjdump", "-sass"] + (["-arch", arch] if arch else []) + [path]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    code = collections.defaultdict(list)
    name = None
    for line in out.splitlines():
        m = re.search(r"Function : (\S+)", line)
        if m:
            name = m.group(1)
        elif name:
            code[name] += re.findall(r"/\* (0x[0-9a-f]{16}) \*/", line)
    return code


def main():
    args = sys.argv[1:]
    arch = None
    if args[:1] == ["--arch"]:
        arch, args = args[1], args[2:]
    if len(args) < 2:
        sys.exit(__doc__)
    old, new = dump(args[0], arch), dump(args[1], arch)
    names = args[2:] or sorted(old)
    missing = [n for n in names if n not in old or n not in new]
    if missing:
        sys.exit(f"not in both builds (or no SASS for that arch): {' '.join(missing)}")
    diff = [n for n in names if old[n] != new[n]]
    print(f"{len(diff)} of {len(names)} functions differ")
    for n in diff:
        print(f"  {n}: {len(old[n]) // 2} -> {len(new[n]) // 2} instructions")
    sys.exit(1 if diff else 0)


if __name__ == "__main__":
    main()
