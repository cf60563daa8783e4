"""The package with PyTorch CPU tensors, on the host backend, as a rank
program (needs torch; no GPU):

    tprun --tp 2 -- python3 python/tests/torch_cpu_rank.py SEED

Every rank draws the same inputs, steps with bf16 CPU tensors (the whole
residual, this rank's columns as a strided view, a given out; the op's own
weight and per-step weights of several "layers" from op.pack), checks every
block against tprun.reference and across ranks, then the tensor argument
checks (ValueError naming the argument). It also proves the packing that
op.pack runs on CUDA tensors (PyTorch ops only) on CPU tensors: bit for bit
the library's tprun_pack_weight, on fresh random weights of awkward and real
shapes. Prints "rank R: ok ..." and exits 0, or prints each failure and
exits 1.
"""

import hashlib
import sys
from array import array

import torch

import tprun
from tprun import _torch, reference

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


def check_packing():
    """The PyTorch permutation (tprun._torch.pack_tensor, what op.pack runs
    on a CUDA tensor) against the library's packing, bit for bit. Returns
    the number of packed elements compared."""
    compared = 0
    for shard, latent in ((24, 40), (8, 8), (40, 72), (16, 32), (8, 1000), (896, 3584)):
        w = torch.randn(shard, latent).to(torch.bfloat16)
        n = tprun.packed_weight_len(shard, latent)
        want = torch.full((n,), float("nan"), dtype=torch.bfloat16)  # poisoned: an unwritten element differs
        tprun._pack_host(want.data_ptr(), w.data_ptr(), shard, latent)
        into = torch.full((n + 16,), float("nan"), dtype=torch.bfloat16)[8:8 + n]  # a poisoned slice of a larger tensor
        for desc, src, dst in (("contiguous", w, None), ("a transposed view", w.t().contiguous().t(), None),
                               ("into a slice (out=)", w, into)):
            got = _torch.pack_tensor(src, dst)
            if dst is not None and got.data_ptr() != dst.data_ptr():
                fail(f"pack_tensor {shard}x{latent} ({desc}): returned other memory than dst")
            if got.dtype != torch.bfloat16 or tuple(got.shape) != (n,) or not got.is_contiguous():
                fail(f"pack_tensor {shard}x{latent} ({desc}): {got.dtype} {tuple(got.shape)}, want bf16 ({n},) contiguous")
                continue
            diff = (got.view(torch.int16) != want.view(torch.int16)).nonzero().flatten()
            if diff.numel():
                i = int(diff[0])
                fail(f"pack_tensor {shard}x{latent} ({desc}): {diff.numel()} of {n} elements differ from "
                     f"tprun_pack_weight, first [{i}] = {bits(got[i:i + 1])}, want {bits(want[i:i + 1])}")
            compared += n
        # Every weight element appears once: the packing is a permutation.
        nonzero = int((want.view(torch.int16) != 0).sum())
        if nonzero != int((w.view(torch.int16) != 0).sum()):
            fail(f"tprun_pack_weight {shard}x{latent}: {nonzero} nonzero elements, the weight has "
                 f"{int((w.view(torch.int16) != 0).sum())}")
    return compared


def main():
    seed = int(sys.argv[1])
    torch.manual_seed(seed)
    g = tprun.join()
    hidden, latent, max_m = 16 * g.size, 24, 4
    r, s = g.rank, 16
    bf = torch.bfloat16
    weight = (torch.randn(hidden, latent) * latent**-0.5).to(bf)
    packed = check_packing()
    op = g.up_projection(hidden, latent, max_m, weight[r * s:(r + 1) * s])
    # An op of another shape, for a PackedWeight the first op must refuse
    # (made here on every rank: creating an op is a collective).
    other = g.up_projection(hidden, latent + 8, 1, device="host")
    if op.backend != "host" or op.device is not None:
        fail(f"a CPU weight gave backend {op.backend}, device {op.device}")
    # Three "layers" sharing the op, each with its weight packed by it (on the
    # host backend: kept row-major, a copy of the caller's tensor).
    layers = []
    for i in range(3):
        full = (torch.randn(hidden, latent) * latent**-0.5).to(bf)
        mine = full[r * s:(r + 1) * s]
        # A strided view packs as well, and a buffer's PackedWeight serves tensor steps.
        src = [mine.t().contiguous().t(), mine, array("H", bits(mine))][i]
        pw = op.pack(src)
        held = bits(pw.data) if isinstance(pw.data, torch.Tensor) else list(pw.data)
        if pw.packed or pw.device is not None or held != bits(mine):
            fail(f"op.pack on the host backend: {pw!r}, want a row-major copy of the weight")
        if isinstance(pw.data, torch.Tensor) and pw.data.data_ptr() == mine.data_ptr():
            fail("op.pack kept the caller's tensor, not a copy")
        layers.append((full, pw))
    steps = layer_steps = 0
    for m in range(1, max_m + 1):
        for i, how in enumerate(("whole", "view", "out")):
            lat = torch.randn(m, latent).to(bf)
            sh = torch.randn(m, hidden).to(bf)
            # Every other step names a layer's weight, the rest use the op's own.
            full, pw = layers[(m + i) % 3] if (m + i) % 2 else (weight, None)
            if how == "whole":
                out = op(lat, sh, weight=pw)
            elif how == "view":
                out = op(lat, sh[:, r * s:(r + 1) * s], weight=pw)
            else:
                out = torch.full((m, hidden), float("nan"), dtype=bf)
                res = op(lat, sh, out=out, weight=pw)
                if res is not out:
                    fail("the out returned is not the one passed")
            if out.dtype != bf or tuple(out.shape) != (m, hidden):
                fail(f"out is {out.dtype} {tuple(out.shape)}")
                continue
            ob = bits(out)
            wrong = reference.check_block(ob, bits(lat), bits(full), bits(sh), m, hidden, latent)
            layer_steps += pw is not None
            if wrong:
                fail(f"M {m} ({how}, {'own weight' if pw is None else 'weight passed'}): {len(wrong)} wrong, "
                     f"first {wrong[0]}")
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
        ("pack of another shape", ["weight", "shape"], lambda: op.pack(torch.ones(s, latent + 8, dtype=bf))),
        ("pack float32", ["weight", "dtype"], lambda: op.pack(torch.ones(s, latent))),
        ("pack into out on the host backend", ["out", "row-major"], lambda: op.pack(torch.ones(s, latent, dtype=bf), out=torch.empty(tprun.packed_weight_len(s, latent), dtype=bf))),
        ("step weight a tensor", ["weight", "Tensor", "op.pack"], lambda: op(lat, sh, weight=torch.ones(s, latent, dtype=bf))),
        ("step weight closed", ["weight", "closed"], lambda: op(lat, sh, weight=_closed(op.pack(torch.ones(s, latent, dtype=bf))))),
        ("step weight of another op's shape", ["weight", f"latent {latent + 8}"], lambda: op(lat, sh, weight=other.pack(torch.ones(s, latent + 8, dtype=bf)))),
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
    print(f"rank {g.rank}: ok: {steps} steps with torch {torch.__version__} CPU tensors ({layer_steps} with a weight "
          f"of their own), 0 wrong, every block identical on all {g.size} ranks; PyTorch's packing bit-identical to "
          f"the library's on {packed} elements (seed {seed})", flush=True)


def _closed(w):
    w.close()
    return w


def _overlap(op, lat, sh):
    """out shares memory with latent: one buffer holds both."""
    m, latent, hidden = lat.shape[0], lat.shape[1], op.hidden
    buf = torch.empty(m * hidden + m * latent, dtype=torch.bfloat16)
    lat2 = buf[:m * latent].view(m, latent).copy_(lat)
    out = buf[:m * hidden].view(m, hidden)
    return op(lat2, sh, out=out)


if __name__ == "__main__":
    main()
