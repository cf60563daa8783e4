"""The Python package on the host backend, as a rank program (stdlib only):

    tprun --tp 2 -- python3 python/tests/host_rank.py SEED

Every rank draws the same inputs from SEED, fresh for every step, steps two
ops of different shapes with every kind of buffer the package takes (one of
them also with per-step weights of several "layers", op.pack, interleaved
with its own weight), checks
every element of every block against tprun.reference (pure Python), and
checks that every rank holds the same bytes. Then the argument checks
(ValueError naming the argument), the library's errors as exceptions, and
the per-thread last error through two Python threads. Prints
"rank R: ok ..." and exits 0, or prints each failure and exits 1.
"""

import hashlib
import random
import sys
import threading
from array import array

import tprun
from tprun import _lib, reference

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)


class Shape:
    def __init__(self, g, rng, hidden, latent, max_m, deadline=None):
        self.g, self.rng = g, rng
        self.hidden, self.latent, self.max_m = hidden, latent, max_m
        self.shard = hidden // g.size
        self.op = g.up_projection(hidden, latent, max_m, deadline=deadline)
        self.new_weight()

    def draw(self, n, scale=1.0):
        """n fresh bf16 values, never zero (no result may hinge on zeros)."""
        vals = array("H")
        for _ in range(n):
            v = tprun.bf16_from_float(self.rng.gauss(0.0, scale))
            if v & 0x7FFF == 0:
                v |= tprun.bf16_from_float(scale)
            vals.append(v)
        return vals

    def new_weight(self):
        self.weight = self.draw(self.hidden * self.latent, self.latent**-0.5)
        r, s, k = self.g.rank, self.shard, self.latent
        self.op.set_weight(self.weight[r * s * k:(r + 1) * s * k])


stats = {"steps": 0, "elements": 0, "layer steps": 0}


def step(sh, m, kind, layer=None):
    """One step with fresh inputs, passed as the buffer kind names; layer,
    when given, is (the full weight, this rank's PackedWeight of it), passed
    with the step."""
    g = sh.g
    full, packed = (sh.weight, None) if layer is None else layer
    lat = sh.draw(m * sh.latent)
    shared = sh.draw(m * sh.hidden)
    mine = array("H")
    for i in range(m):
        mine.extend(shared[i * sh.hidden + g.rank * sh.shard:i * sh.hidden + (g.rank + 1) * sh.shard])
    poison = array("H", [0xFFFF]) * (m * sh.hidden)  # NaN: what the op leaves unwritten fails
    if kind == "array":
        out = sh.op(lat, shared, out=poison, weight=packed)
    elif kind == "bytes":  # read-only inputs (copied), packed slice, a new output array
        out = sh.op(bytes(lat), bytes(mine), weight=packed)
    elif kind == "memoryview":
        ba = bytearray(poison.tobytes())
        res = sh.op(memoryview(bytearray(lat.tobytes())), memoryview(mine), out=memoryview(ba), weight=packed)
        if res.obj is not ba:
            fail("the memoryview returned is not the one passed")
        out = array("H", ba)
    else:
        raise AssertionError(kind)
    if not isinstance(out, array) or len(out) != m * sh.hidden:
        fail(f"{kind}: out is {type(out).__name__} of {len(out)}, want array('H') of {m * sh.hidden}")
        return
    wrong = reference.check_block(out, lat, full, shared, m, sh.hidden, sh.latent)
    what = "own weight" if packed is None else "weight passed"
    if wrong:
        i, n, got, lo, hi = wrong[0]
        fail(f"hidden {sh.hidden} M {m} ({kind}, {what}): {len(wrong)} wrong, first out[{i},{n}] = {got}, "
             f"want [{lo}, {hi}]")
    digest = hashlib.sha256(out.tobytes()).digest()
    for r, d in enumerate(g.all_gather(digest)):
        if d != digest:
            fail(f"hidden {sh.hidden} M {m} ({kind}): rank {r}'s block differs from rank {g.rank}'s")
    stats["steps"] += 1
    stats["elements"] += m * sh.hidden
    if packed is not None:
        stats["layer steps"] += 1


def new_layers(sh, n):
    """n layers: fresh full weights, and this rank's rows of each packed by
    the op from a different kind of buffer (the package keeps a copy)."""
    r, s, k = sh.g.rank, sh.shard, sh.latent
    layers = []
    for i in range(n):
        full = sh.draw(sh.hidden * sh.latent, sh.latent**-0.5)
        mine = full[r * s * k:(r + 1) * s * k]
        src = [mine, bytes(mine), memoryview(bytearray(mine.tobytes()))][i % 3]
        w = sh.op.pack(src)
        if not isinstance(w, tprun.PackedWeight) or w.packed or w.device is not None or (w.shard, w.latent) != (s, k):
            fail(f"op.pack gave {w!r}: want a row-major host PackedWeight of shard {s}, latent {k}")
        if isinstance(src, memoryview):
            src[:2] = b"\xff\xff"  # the caller's buffer changes; the PackedWeight's copy must not
        layers.append((full, w))
    return layers

def expect(desc, exc, words, f):
    try:
        f()
    except exc as e:
        for w in words:
            if w not in str(e):
                fail(f"{desc}: {type(e).__name__} {str(e)!r} does not name {w!r}")
        return e
    except Exception as e:  # noqa: BLE001 - any other exception is the failure reported
        fail(f"{desc}: {type(e).__name__}: {e}, want {exc.__name__}")
        return None
    fail(f"{desc}: no exception, want {exc.__name__}")
    return None


def check_mailbox_bytes(rng):
    """tprun.mailbox_bytes against the layout python/tprun/README.md writes
    out ("Memory"), counted row by row on random shapes, and its refusals."""
    for _ in range(50):
        hidden, max_m = 8 * rng.randint(1, 2048), rng.randint(1, 128)
        rows = sum(range(1, min(max_m, 8) + 1)) + (max_m if max_m > 8 else 0)
        want = 3 * ((rows * hidden * 2 + 63) // 64 * 64)
        got = tprun.mailbox_bytes(hidden, max_m)
        if got != want:
            fail(f"mailbox_bytes({hidden}, {max_m}) = {got}, want {want}")
    for hidden, max_m, word in ((7172, 4, "hidden"), (7168, 0, "maxM"), (7168, 129, "maxM")):
        expect(f"mailbox_bytes({hidden}, {max_m})", tprun.InvalidArgumentError, [word],
               lambda: tprun.mailbox_bytes(hidden, max_m))


def check_arguments(sh):
    op, k, h, s = sh.op, sh.latent, sh.hidden, sh.shard
    lat, shared, out = array("H", [1]) * (2 * k), array("H", [1]) * (2 * h), array("H", [0]) * (2 * h)
    cases = [
        ("latent not a whole number of rows", ["latent", "M*latent"], lambda: op(lat[:-1], shared)),
        ("M above max_m", ["latent", f"1..{sh.max_m}"], lambda: op(array("H", [1]) * ((sh.max_m + 1) * k), shared)),
        ("latent of floats", ["latent", "'f'"], lambda: op(array("f", [1.0]) * (2 * k), shared)),
        ("latent of odd bytes", ["latent", "even"], lambda: op(bytes(2 * k + 1), shared)),
        ("latent a list", ["latent", "list"], lambda: op([1] * (2 * k), shared)),
        ("latent not contiguous", ["latent", "contiguous"], lambda: op(memoryview(array("H", [1]) * (4 * k))[::2], shared)),
        ("shared of a wrong length", ["shared", f"M*shard = 2*{s}"], lambda: op(lat, shared[:-8])),
        ("out of a wrong length", ["out", str(2 * h)], lambda: op(lat, shared, out=out[:-1])),
        ("out read-only", ["out", "read-only"], lambda: op(lat, shared, out=bytes(4 * h))),
        ("out misaligned", ["out", "aligned"], lambda: op(lat, shared, out=memoryview(bytearray(4 * h + 1))[1:])),
        ("weight of a wrong length", ["weight", str(s * k)], lambda: op.set_weight(array("H", [1]) * (s * k - 1))),
        ("pack of a wrong length", ["weight", str(s * k)], lambda: op.pack(array("H", [1]) * (s * k + 1))),
        ("pack of floats", ["weight", "'f'"], lambda: op.pack(array("f", [1.0]) * (s * k))),
        ("step weight a raw buffer", ["weight", "array", "op.pack"], lambda: op(lat, shared, weight=array("H", [1]) * (s * k))),
        ("step weight of another shape", ["weight", f"latent {k}"], lambda: op(lat, shared, weight=sh.other.op.pack(
            array("H", [1]) * (sh.other.shard * sh.other.latent)))),
        ("step weight closed", ["weight", "closed"], lambda: op(lat, shared, weight=_closed(op.pack(array("H", [1]) * (s * k))))),
        ("hidden not an int", ["hidden"], lambda: sh.g.up_projection(8.0, k, 1)),
        ("device not a device", ["device"], lambda: sh.g.up_projection(h, k, 1, device="gpu")),
        ("deadline not positive", ["deadline"], lambda: sh.g.up_projection(h, k, 1, deadline=-1)),
        ("backend not a string", ["backend"], lambda: sh.g.up_projection(h, k, 1, backend=3)),
    ]
    for desc, words, f in cases:
        expect(desc, ValueError, words, f)


def _closed(w):
    w.close()
    return w


def check_errors(g, sh):
    # The codes the package restates name themselves in the library
    # (tprun_status_name follows tprun.h).
    for name in ("OK", "EINVAL", "EABORTED", "ETIMEOUT", "EUNAVAILABLE", "EBUSY", "ECLOSED", "EINTERNAL"):
        got = _lib.lib().tprun_status_name(getattr(_lib, name)).decode()
        if got != "TPRUN_" + name:
            fail(f"tprun._lib.{name} = {getattr(_lib, name)}: the library names it {got}")
    # A shape every rank gets wrong: the library's own check, on every rank.
    e = expect("hidden not a multiple of 8 per rank", tprun.InvalidArgumentError, ["hidden"],
               lambda: g.up_projection(g.size * 8 + 1, 8, 1))
    if e is not None and not (isinstance(e, ValueError) and e.status_name == "TPRUN_EINVAL" and e.rank is None):
        fail(f"invalid shape: {type(e).__mro__}, status {e.status_name}, rank {e.rank}")
    if e is not None and f"{type(e).__module__}.{type(e).__qualname__}" != "tprun.InvalidArgumentError":
        fail(f"invalid shape: raised as {type(e).__module__}.{type(e).__qualname__}, want tprun.InvalidArgumentError")
    # A backend that does not exist, named by the library (every rank).
    expect("backend 'carrier pigeon'", tprun.InvalidArgumentError, ["carrier pigeon"],
           lambda: g.up_projection(sh.hidden, sh.latent, 1, device=0, backend="carrier pigeon"))
    # A device step on the host backend.
    expect("device step on the host backend", tprun.BackendUnavailableError, ["host backend"],
           lambda: sh.op._step_device(1, 1 << 20, 1 << 20, sh.shard, 2 << 20, 0))


def check_thread_errors(sh):
    """Two threads fail at once with different arguments; each must read
    its own last error."""
    bad = []
    buf = array("H", [0]) * (sh.hidden * 16)
    ptr = buf.buffer_info()[0]

    def run(m):
        for _ in range(300):
            try:
                sh.op._step_host(m, ptr, ptr, sh.shard, ptr)
                bad.append(f"m = {m}: no error")
            except tprun.InvalidArgumentError as e:
                if f"m = {m}:" not in str(e):
                    bad.append(f"m = {m}: read another thread's error: {e}")

    ts = [threading.Thread(target=run, args=(m,)) for m in (0, sh.max_m + 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for b in bad[:3]:
        fail(b)


def main():
    seed = int(sys.argv[1])
    g = tprun.join()
    rng = random.Random(seed)
    a = Shape(g, rng, 24 * g.size, 40, 8)
    b = Shape(g, rng, 8 * g.size, 16, 3, deadline=30)
    if a.op.backend != "host" or "host memory" not in a.op.backend_reason or a.op.device is not None:
        fail(f"backend {a.op.backend!r} ({a.op.backend_reason!r}), device {a.op.device}: want the host backend,"
             " for host memory")
    for name in ("host", "Host"):  # the library reads backend names in any case
        explicit = g.up_projection(8 * g.size, 8, 1, backend=name)
        if explicit.backend_reason != "host asked for":
            fail(f"backend={name!r}: reason {explicit.backend_reason!r}, want 'host asked for'")
        explicit.close()
    kinds = ["array", "bytes", "memoryview"]
    layers = new_layers(a, 3)
    for rnd in range(2):
        for m in range(1, a.max_m + 1):
            # Op a's steps alternate between its own weight and the layers'.
            which = (m + rnd) % (len(layers) + 1)
            step(a, m, kinds[(m + rnd) % 3], None if which == len(layers) else layers[which])
            step(b, 1 + (m + rnd) % b.max_m, kinds[(m + rnd + 1) % 3])
        a.new_weight()
        layers = new_layers(a, 3)
    for full, w in layers:  # every layer once more, after the op's own weight changed
        step(a, a.max_m, "array", (full, w))
    a.other = b
    check_arguments(a)
    check_errors(g, a)
    check_thread_errors(a)
    step(a, a.max_m, "array")  # the op still works after all that

    # M past the skinny kernels: the host backend takes max_m up to 128 too.
    c = Shape(g, rng, 8 * g.size, 24, 128)
    for i, m in enumerate((128, 9, 100, 31)):
        step(c, m, kinds[i % 3])
    c.op.close()
    check_mailbox_bytes(rng)
    expect("max_m above 128", tprun.InvalidArgumentError, ["maxM = 129", "1..128"],
           lambda: g.up_projection(8 * g.size, 24, 129))

    b.op.close()
    b.op.close()  # a second close does nothing
    expect("step after close", tprun.ClosedError, ["closed"], lambda: b.op(array("H", [1]) * b.latent, array("H", [1]) * b.shard))
    g.close()
    expect("collective after the group's close", tprun.ClosedError, ["closed"], g.barrier)
    expect("op after its group's close", tprun.ClosedError, [], lambda: a.op._step_host(1, 16, 16, a.shard, 16))

    if failures:
        print(f"rank {g.rank}: FAIL: {len(failures)} checks failed", file=sys.stderr)
        sys.exit(1)
    print(f"rank {g.rank}: ok: {stats['steps']} steps, {stats['elements']} elements checked, 0 wrong, every block "
          f"identical on all {g.size} ranks; {stats['layer steps']} steps with a weight of their own (seed {seed})",
          flush=True)


if __name__ == "__main__":
    main()
