"""The package with PyTorch CPU tensors, on the host backend, as a rank
program (needs torch; no GPU):

    tprun --tp 2 -- python3 python/tests/torch_cpu_rank.py SEED

Every rank draws the same inputs, steps with bf16 CPU tensors (the whole
residual, this rank's columns as a strided view, a given out), checks every
block against tprun.reference and across ranks, then the tensor argument
checks (ValueError naming the argument). Prints "rank R: ok ..." and exits
0, or prints each failure and exits 1.
"""

import hashlib
import sys

import torch

import tprun
from tprun import reference

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)


def bits(t):
    """A bf16 tensor's bit patterns as a list of ints."""
    return [b & 0xFFFF for b in t.contiguous().view(torch.int16).flatten().tolist()]


def expect_value_error(desc, words, f):
    try:
        f()
    except ValueError as e:
        for w in words:
            if w not in str(e):
                fail(f"{desc}: {str(e)!r} does not name {w!r}")
        return
    except Exception as e:  # noqa: BLE001 - any other exception is the failure reported
        fail(f"{desc}: {type(e).__name__}: {e}, want ValueError")
        return
    fail(f"{desc}: no ValueError")


def main():
    seed = int(sys.argv[1])
    torch.manual_seed(seed)
    g = tprun.join()
    hidden, latent, max_m = 16 * g.size, 24, 4
    r, s = g.rank, 16
    bf = torch.bfloat16
    weight = (torch.randn(hidden, latent) * latent**-0.5).to(bf)
    op = g.up_projection(hidden, latent, max_m, weight[r * s:(r + 1) * s])
    if op.backend != "host" or op.device is not None:
        fail(f"a CPU weight gave backend {op.backend}, device {op.device}")
    steps = 0
    for m in range(1, max_m + 1):
        for how in ("whole", "view", "out"):
            lat = torch.randn(m, latent).to(bf)
            sh = torch.randn(m, hidden).to(bf)
            if how == "whole":
                out = op(lat, sh)
            elif how == "view":
                out = op(lat, sh[:, r * s:(r + 1) * s])
            else:
                out = torch.full((m, hidden), float("nan"), dtype=bf)
                res = op(lat, sh, out=out)
                if res is not out:
                    fail("the out returned is not the one passed")
            if out.dtype != bf or tuple(out.shape) != (m, hidden):
                fail(f"out is {out.dtype} {tuple(out.shape)}")
                continue
            ob = bits(out)
            wrong = reference.check_block(ob, bits(lat), bits(weight), bits(sh), m, hidden, latent)
            if wrong:
                fail(f"M {m} ({how}): {len(wrong)} wrong, first {wrong[0]}")
            digest = hashlib.sha256(bytes(str(ob), "ascii")).digest()
            for q, d in enumerate(g.all_gather(digest)):
                if d != digest:
                    fail(f"M {m} ({how}): rank {q}'s block differs")
            steps += 1

    lat, sh = torch.ones(2, latent, dtype=bf), torch.ones(2, hidden, dtype=bf)
    cases = [
        ("latent float32", ["latent", "dtype"], lambda: op(lat.float(), sh)),
        ("latent 1-D", ["latent", "dimensions"], lambda: op(lat[0], sh)),
        ("latent of another width", ["latent", f"(M, {latent})"], lambda: op(torch.ones(2, latent + 8, dtype=bf), sh)),
        ("M above max_m", ["latent", f"1..{max_m}"], lambda: op(torch.ones(max_m + 1, latent, dtype=bf), torch.ones(max_m + 1, hidden, dtype=bf))),
        ("latent not contiguous", ["latent", "contiguous"], lambda: op(torch.ones(latent, 2, dtype=bf).t(), sh)),
        ("shared a list", ["shared", "list"], lambda: op(lat, [1, 2])),
        ("shared of another M", ["shared", "shape"], lambda: op(lat, torch.ones(3, hidden, dtype=bf))),
        ("shared of another width", ["shared", "shape"], lambda: op(lat, torch.ones(2, s + 8, dtype=bf))),
        ("shared columns strided", ["shared", "strides"], lambda: op(lat, torch.ones(2, 2 * hidden, dtype=bf)[:, ::2])),
        ("out of another shape", ["out", "shape"], lambda: op(lat, sh, out=torch.empty(2, hidden + 8, dtype=bf))),
        ("out float32", ["out", "dtype"], lambda: op(lat, sh, out=torch.empty(2, hidden))),
        ("out not contiguous", ["out", "contiguous"], lambda: op(lat, sh, out=torch.empty(hidden, 2, dtype=bf).t())),
        ("out overlapping latent", ["out", "overlaps"], lambda: _overlap(op, lat, sh)),
        ("weight of another shape", ["weight", "shape"], lambda: op.set_weight(torch.ones(s + 8, latent, dtype=bf))),
        ("weight float32", ["weight", "dtype"], lambda: op.set_weight(torch.ones(s, latent))),
    ]
    for desc, words, f in cases:
        expect_value_error(desc, words, f)
    # The op still works after the refused calls.
    lat, sh = torch.randn(1, latent).to(bf), torch.randn(1, hidden).to(bf)
    out = op(lat, sh)
    if reference.check_block(bits(out), bits(lat), bits(weight), bits(sh), 1, hidden, latent):
        fail("the step after the refused calls is wrong")
    op.close()
    g.close()
    if failures:
        print(f"rank {g.rank}: FAIL: {len(failures)} checks failed", file=sys.stderr)
        sys.exit(1)
    print(f"rank {g.rank}: ok: {steps} steps with torch {torch.__version__} CPU tensors, 0 wrong, "
          f"every block identical on all {g.size} ranks (seed {seed})", flush=True)


def _overlap(op, lat, sh):
    """out shares memory with latent: one buffer holds both."""
    m, latent, hidden = lat.shape[0], lat.shape[1], op.hidden
    buf = torch.empty(m * hidden + m * latent, dtype=torch.bfloat16)
    lat2 = buf[:m * latent].view(m, latent).copy_(lat)
    out = buf[:m * hidden].view(m, hidden)
    return op(lat2, sh, out=out)


if __name__ == "__main__":
    main()
