#!/usr/bin/env python3
"""A whole PyTorch rank program with tprun's fused up-projection.

Every rank holds its rows of an up-projection weight (a bf16 CUDA tensor);
each step multiplies the same activation block by them, adds this rank's
columns of a residual, and every rank gets the whole [M, hidden] block,
queued on the current CUDA stream like any PyTorch op. Build once, from the
repository:

    pip install ./python                  # builds libtprun.so with Go, into the package
    go build -o tprun ./cmd/tprun         # the launcher

(without pip: `go build -buildmode=c-shared -o python/tprun/libtprun.so
./cmd/libtprun` and `export PYTHONPATH=$PWD/python`), then run one rank per
GPU, or several ranks on one GPU:

    ./tprun --tp 4 -- python3 examples/python/torch_rank.py --check
    ./tprun --tp 4 --devices 0,0,0,0 -- python3 examples/python/torch_rank.py --check --graph 10000
    torchrun --nproc-per-node 4 examples/python/torch_rank.py --check
    TPRUN_DEVICES=0,0,0,0 torchrun --nproc-per-node 4 examples/python/torch_rank.py --graph 10000 --rows 1,8
    torchrun --nproc-per-node 4 examples/python/torch_rank.py --join torch --check   # tprun.join_torch on a gloo group
    ./tprun --tp 1 -- python3 examples/python/torch_rank.py --bench [--hidden 896]

Without a GPU, --cpu runs --check (and --compile) on CPU tensors and the
host backend, through tprun.join() or, with --join torch and a fresh store
directory, tprun.join_torch():

    ./tprun --tp 2 -- python3 examples/python/torch_rank.py --cpu --hidden 1024 --latent 512
    ./tprun --tp 2 -- python3 examples/python/torch_rank.py --cpu --hidden 1024 --latent 512 --join torch --store "$(mktemp -d)"

A model's layers of one shape can share one op: each layer holds its
weight as op.pack(weight) and passes it with the step, op(latent, shared,
weight=packed). The checks below do that for a second "layer" on some steps.

What it runs (any combination; none given means --check):
  --check    every M of --rows, --iters steps each with fresh inputs: the block
             against a PyTorch float64 reference (the op's own roundings
             allowed, nothing else) and across ranks; a third of the steps
             pass a second layer's packed weight instead of the op's own
  --graph N  per M, a torch.cuda.graph holding one step between two
             PyTorch ops (a negation before, a scaling after) and a second
             step of the same op with a second layer's packed weight,
             captured largest M first into one shared memory pool; the
             graphs of every M replayed N times each, in one shuffled order
             (the same on every rank, from --seed) as a serving engine's
             batch sizes come, with fresh inputs and poisoned outputs each
             time; every replay checked as --check does
  --compile  the same function eager and under torch.compile, bit for bit
  --bench    tp 1 speed: per M, CUDA graphs of K steps whose weight copies
             cover --rotate-mb MiB (so the weights stream from HBM),
             replayed --replays times with an event pair around each; the
             table gives the median and p90 time per step (replay time / K)
             of three forms, to set beside `tprun bench --tp 1`:
               "K ops"  one step on each of K ops, each holding its weight
                        copy (`tprun bench --graph enqueue-ops`)
               "1 op"   K steps of one op, each passing its own packed
                        weight copy (op.pack), the form of a model whose
                        layers share one op
               "slab"   as "1 op", the K copies packed side by side into
                        one allocation (op.pack(w, out=...)), as `tprun
                        bench --graph enqueue` holds its copies
Each rank prints its findings; the program exits 1 if anything was wrong.
"""

import argparse
import math
import os
import random
import statistics
import struct
import sys
import time


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=7168, help="hidden size, split across the ranks")
    p.add_argument("--latent", type=int, default=3584, help="latent size")
    # --rows, not --m: torchrun parses the options after the script name
    # too, with prefix matching, and takes --m for its own --max-restarts,
    # --master-addr, ... (ambiguous). --m stays for a run without torchrun.
    p.add_argument("--rows", "--m", dest="rows", default="1,2,3,4,5,6,7,8", metavar="LIST",
                   help="comma list of M values (rows per step, 1..128)")
    p.add_argument("--seed", type=int, default=1, help="seed of the inputs (the same on every rank)")
    p.add_argument("--backend", default="auto", help="mailbox backend: auto, unicast or host")
    p.add_argument("--join", choices=("tprun", "torch"), default="tprun",
                   help="how the ranks make their tprun group: tprun.join() (tprun's rendezvous, under tprun, torchrun, "
                        "srun or mpirun), or tprun.join_torch() on a torch.distributed gloo group, as the worker "
                        "processes of an inference engine would")
    p.add_argument("--store", metavar="DIR",
                   help="--join torch without torchrun's MASTER_ADDR: a fresh directory every rank sees, for the "
                        "gloo group's file store (a store a failed run left there makes the next run's ranks wait "
                        "for gloo's timeout, 30 min: give a new one each run)")
    p.add_argument("--deadline", type=float, default=None, help="seconds a step waits for the peers (default 10)")
    p.add_argument("--check", action="store_true")
    p.add_argument("--iters", type=int, default=20, help="--check: steps per M")
    p.add_argument("--graph", type=int, default=0, metavar="N", help="replays per M of the captured step")
    p.add_argument("--compile", action="store_true")
    p.add_argument("--bench", action="store_true")
    p.add_argument("--cpu", action="store_true", help="CPU tensors on the host backend (--check and --compile only)")
    p.add_argument("--rotate-mb", type=int, default=512, help="--bench: MiB of weight copies the steps rotate through")
    p.add_argument("--replays", type=int, default=200, help="--bench: timed replays per M")
    p.add_argument("--warmup", type=int, default=20, help="--bench: untimed replays per M")
    a = p.parse_args()
    a.rows = [int(x) for x in a.rows.split(",")]
    if not (a.check or a.graph or a.compile or a.bench):
        a.check = True
    if a.cpu and (a.graph or a.bench):
        p.error("--graph and --bench need CUDA, not --cpu")
    if a.join == "torch" and not a.store and "MASTER_ADDR" not in os.environ:
        p.error("--join torch needs torchrun's MASTER_ADDR, or --store DIR")
    return a


# ---- the reference ------------------------------------------------------


def bf16_once(torch, x):
    """Rounds float64 x to bf16 in one rounding (not through a rounded
    float32): round to float32 by rounding to odd, then to nearest even."""
    f = x.float()
    back = f.double()
    inexact = back != x
    bits = f.view(torch.int32)
    bits = torch.where(inexact & (back.abs() > x.abs()), bits - 1, bits)  # toward zero
    bits = torch.where(inexact, bits | 1, bits)  # sticky bit
    return bits.view(torch.float32).to(torch.bfloat16)


def epilogue(torch, s, shared):
    """What the op stores for accumulated sum s (float64): bf16(s), plus
    shared in float32, rounded to bf16, -0 stored as +0."""
    t = bf16_once(torch, s).float() + shared.float()
    return (t.to(torch.bfloat16).float() + 0.0)  # + 0.0 turns -0 into +0


def bf16_neighbors(torch, s):
    """The bf16 values just below and just above float64 s (both s itself
    when s is one), as float32."""
    b = bf16_once(torch, s).float() + 0.0  # nearest, -0 as +0
    v = b.view(torch.int32)
    step = 0x10000  # one bf16 step in the float32 bits
    neg_min = torch.full_like(v, -(2**31) + step)  # the negative bf16 nearest zero
    up = torch.where(v >= 0, v + step, v - step).view(torch.float32)
    down = torch.where(v > 0, v - step, torch.where(v == 0, neg_min, v + step)).view(torch.float32)
    bd = b.double()
    return torch.where(bd > s, down, b), torch.where(bd < s, up, b)


class Reference:
    """The yardstick for whole [M, hidden] blocks made with weight
    [hidden, latent], in float64 on the GPU (the weight widened once)."""

    def __init__(self, torch, weight):
        self.torch = torch
        w64 = weight.double()
        self.w64t, self.a64t = w64.T, w64.abs().T
        self.k = weight.shape[1]

    def check(self, out, lat, shared):
        """Returns two 0-d counts for out (bf16) computed from lat and
        shared (the whole residual):

        wrong: elements outside the interval a correct op stays in. The
        op's fp32 sum lies within e = gamma_K*sum|l*w| + K*2^-149 of the
        exact S (Higham, Thm 4.4) and its epilogue is monotone, so an
        element lies between epilogue(S - e) and epilogue(S + e): the op's
        own roundings are allowed, nothing else. NaN and -0 are wrong too.

        beyond: elements outside one bf16 rounding of the GEMM (bf16(S)
        rounded either way, then the epilogue's add and rounding). An fp32
        sum can leave it where S nearly cancels, so this is a figure to
        read, not a check."""
        t = self.torch
        l64 = lat.double()
        s = l64 @ self.w64t
        a = l64.abs() @ self.a64t
        k = self.k
        e = (k * 2.0**-24 / (1 - k * 2.0**-24) + k * 2.0**-50) * a + k * 2.0**-149
        wrong = count_wrong(t, out, epilogue(t, s - e, shared), epilogue(t, s + e, shared))
        lo_b, hi_b = bf16_neighbors(t, s)
        sh = shared.float()
        lo1 = (lo_b + sh).to(t.bfloat16).float() + 0.0
        hi1 = (hi_b + sh).to(t.bfloat16).float() + 0.0
        return wrong, count_wrong(t, out, lo1, hi1)


def count_wrong(torch, out, lo, hi):
    """Elements of out (bf16) outside [lo, hi], NaN, or -0: a 0-d tensor."""
    got = out.float()
    negzero = out.view(torch.int16) == -32768
    return ((got < lo) | (got > hi) | torch.isnan(got) | negzero).sum()


def digest(torch, block, coeff):
    """A 64-bit digest of a block's bits (a 0-d int64 tensor): equal blocks
    give equal digests, different ones almost surely not."""
    bits = block.contiguous().view(torch.int16).to(torch.int64).flatten()
    return (bits * coeff[: bits.numel()]).sum()


def join_through_torch(torch, tprun, a):
    """The tprun group on a torch.distributed gloo group, as processes that
    an inference engine spawns (and that already share such a group) make
    it: RANK, WORLD_SIZE and LOCAL_RANK from the launcher; the GPU of this
    local rank from TPRUN_DEVICES where set (ranks sharing a GPU), else
    the local rank's own."""
    import torch.distributed as dist

    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    init = "env://" if "MASTER_ADDR" in os.environ else "file://" + os.path.join(a.store, "store")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=size)
    device = None
    if not a.cpu:
        devs = os.environ.get("TPRUN_DEVICES")
        device = int(devs.split(",")[local]) if devs else local
        torch.cuda.set_device(device)
    return tprun.join_torch(device=device)


class Rank:
    def __init__(self, torch, tprun, a):
        self.torch, self.tprun, self.a = torch, tprun, a
        self.g = tprun.join() if a.join == "tprun" else join_through_torch(torch, tprun, a)
        if a.cpu:
            self.dev = torch.device("cpu")
        else:
            self.dev = torch.device("cuda", self.g.device)
            torch.cuda.set_device(self.dev)
        self.shard = a.hidden // self.g.size
        # Every rank draws the same numbers from the same seed.
        self.gen = torch.Generator(device=self.dev)
        self.gen.manual_seed(a.seed)
        w = torch.randn(a.hidden, a.latent, generator=self.gen, device=self.dev) * a.latent**-0.5
        self.weight = w.to(torch.bfloat16)  # [hidden, latent]
        self.ref = Reference(torch, self.weight)
        r, s = self.g.rank, self.shard
        self.mine = self.weight[r * s:(r + 1) * s]  # this rank's [shard, latent] rows
        # A second "layer" of the same shape, sharing the op: its weight is
        # packed once by the op and passed with the steps that use it.
        w2 = torch.randn(a.hidden, a.latent, generator=self.gen, device=self.dev) * a.latent**-0.5
        self.weight2 = w2.to(torch.bfloat16)
        self.ref2 = Reference(torch, self.weight2)
        self.max_m = max(a.rows)
        # A coefficient per 16 bits of the largest block digest sees: two
        # per element of a float32 one (--graph's post).
        self.coeff = torch.randint(-(2**62), 2**62, (2 * self.max_m * a.hidden,), generator=self.gen, device=self.dev)
        self.op = self.g.up_projection(a.hidden, a.latent, self.max_m, self.mine, backend=a.backend,
                                       deadline=a.deadline)
        self.layer2 = self.op.pack(self.weight2[r * s:(r + 1) * s])
        self.failed = False
        where = "the CPU" if a.cpu else f"cuda:{self.g.device}"
        self.say(f"{self.op.backend} backend on {where} ({self.op.backend_reason})")

    def say(self, msg):
        print(f"rank {self.g.rank}: {msg}", flush=True)

    def fresh(self, m):
        """Fresh bf16 inputs: latent [m, latent], the whole residual [m, hidden]."""
        t = self.torch
        lat = t.randn(m, self.a.latent, generator=self.gen, device=self.dev).to(t.bfloat16)
        sh = t.randn(m, self.a.hidden, generator=self.gen, device=self.dev).to(t.bfloat16)
        return lat, sh

    def agree(self, what, values):
        """All-gathers this rank's values (ints) and reports whether every
        rank has the same."""
        mine = struct.pack(f"<{len(values)}q", *values)
        others = [r for r, b in enumerate(self.g.all_gather(mine)) if b != mine]
        if others:
            self.say(f"FAIL: {what}: ranks {others} differ from this rank")
            self.failed = True
        return not others

    def report(self, what, checked, wrong):
        ok = wrong == 0
        self.say(f"{what}: {checked} elements checked, {wrong} wrong" + ("" if ok else "  FAIL"))
        self.failed |= not ok

    # ---- --check --------------------------------------------------------

    def check(self):
        t, a = self.torch, self.a
        r, s = self.g.rank, self.shard
        digests, wrong, ref_wrong, differ, beyond, checked, second = [], 0, 0, 0, 0, 0, 0
        for m in a.rows:
            for it in range(a.iters):
                lat, sh = self.fresh(m)
                # Some steps pass the second layer's packed weight.
                layer2 = (it + m) % 3 == 1
                pw, full, yard = (self.layer2, self.weight2, self.ref2) if layer2 else (None, self.weight, self.ref)
                second += layer2
                if it % 2:  # a poisoned output of the caller's, and this rank's columns as a strided view
                    out = t.full((m, a.hidden), float("nan"), dtype=t.bfloat16, device=self.dev)
                    self.op(lat, sh[:, r * s:(r + 1) * s], out=out, weight=pw)
                else:
                    out = self.op(lat, sh, weight=pw)
                w, b = yard.check(out, lat, sh)
                wrong += int(w)
                beyond += int(b)
                # PyTorch's own fp32 GEMM is one of the sums the bound
                # allows: a check of the reference itself.
                ref = ((lat.float() @ full.float().T).to(t.bfloat16).float() + sh.float()).to(t.bfloat16)
                ref_wrong += int(yard.check(ref, lat, sh)[0])
                differ += int((out.float() != ref.float()).sum())
                digests.append(int(digest(t, out, self.coeff)))
                checked += m * a.hidden
        self.op.synchronize()
        self.report(f"check, M {a.rows}, {a.iters} steps each", checked, wrong)
        self.say(f"check: {second} of the steps passed a second layer's packed weight (op.pack), the rest the op's own")
        if ref_wrong:
            self.say(f"FAIL: PyTorch's fp32 reference falls outside the bound {ref_wrong} times")
            self.failed = True
        self.say(f"check: {differ} of {checked} elements differ from PyTorch's own (fp32 GEMM, bf16, + shared); "
                 f"{beyond} lie beyond one bf16 rounding of the exact GEMM")
        if self.agree("check blocks", digests):
            self.say(f"check: all {len(digests)} blocks identical on every rank")

    # ---- --graph N ------------------------------------------------------

    def graph(self):
        t, a = self.torch, self.a
        # One graph per M, as a serving engine captures one per batch size:
        # largest M first, into one shared memory pool, as vLLM and SGLang
        # capture theirs (a smaller graph's memory fits in what the larger
        # ones freed).
        graphs = []
        pool = t.cuda.graph_pool_handle()
        for m in sorted(a.rows, reverse=True):
            src = t.empty(m, a.latent, dtype=t.bfloat16, device=self.dev)
            sh = t.empty(m, a.hidden, dtype=t.bfloat16, device=self.dev)
            out = t.empty(m, a.hidden, dtype=t.bfloat16, device=self.dev)
            out2 = t.empty(m, a.hidden, dtype=t.bfloat16, device=self.dev)
            src.copy_(self.fresh(m)[0])
            sh.copy_(self.fresh(m)[1])
            # One eager round on a side stream first, as torch.cuda.graph
            # recommends (every rank runs it: its steps are steps like any other).
            side = t.cuda.Stream()
            side.wait_stream(t.cuda.current_stream())
            with t.cuda.stream(side):
                self.op(t.neg(src), sh, out=out)
                self.op(t.neg(src), sh, out=out2, weight=self.layer2)
            t.cuda.current_stream().wait_stream(side)
            g = t.cuda.CUDAGraph()
            with t.cuda.graph(g, pool=pool):
                lat = t.neg(src)  # a PyTorch op before the step
                self.op(lat, sh, out=out)
                post = out.float() * 2.0  # and one after it
                self.op(lat, sh, out=out2, weight=self.layer2)  # the second layer, the same op
            zero = [t.zeros((), dtype=t.int64, device=self.dev) for _ in range(3)]  # wrong, beyond, digest
            graphs.append((m, g, src, sh, out, out2, post, zero))
        # The replays mix the graphs in a shuffled order, as a batch's size
        # changes from one step to the next; the seed makes the order the
        # same on every rank, as every rank of an engine replays the same M.
        order = [i for i in range(len(graphs)) for _ in range(a.graph)]
        random.Random(a.seed).shuffle(order)
        start = time.monotonic()
        for i in order:
            m, g, src, sh, out, out2, post, (wrong, beyond, dig) = graphs[i]
            nsrc, nsh = self.fresh(m)
            src.copy_(nsrc)
            sh.copy_(nsh)
            out.fill_(float("nan"))  # poison: whatever the step leaves unwritten fails
            out2.fill_(float("nan"))
            g.replay()
            w, b = self.ref.check((post * 0.5).to(t.bfloat16), t.neg(nsrc), nsh)
            w2, b2 = self.ref2.check(out2, t.neg(nsrc), nsh)
            wrong += w + w2
            beyond += b + b2
            dig += digest(t, post, self.coeff) + digest(t, out2, self.coeff)
        t.cuda.synchronize()
        self.op.check()
        took = time.monotonic() - start
        mixed = f", mixed with M {','.join(str(m) for m in a.rows)} in one shuffled order" if len(graphs) > 1 else ""
        self.say(f"graph: {len(order)} replays of {len(graphs)} graphs{mixed} ({took:.1f} s)")
        for m, g, _, _, _, _, _, (wrong, beyond, dig) in graphs:
            self.report(f"graph, M {m}: {a.graph} replays of 2 steps, the second with a packed weight",
                        2 * a.graph * m * a.hidden, int(wrong))
            self.say(f"graph, M {m}: {int(beyond)} elements beyond one bf16 rounding of the exact GEMM")
            if self.agree(f"graph M {m} blocks", [int(dig)]):
                self.say(f"graph, M {m}: every replay's block identical on every rank")
        del graphs

    # ---- --compile ------------------------------------------------------

    def compiled(self):
        t, a = self.torch, self.a
        op, layer2 = self.op, self.layer2

        def f(src, sh):
            # Two steps of the op: its own weight, then the second layer's.
            return op(t.neg(src), sh).float() * 2.0, op(t.neg(src), sh, weight=layer2)

        if not hasattr(t, "compile"):
            self.say(f"FAIL: --compile needs torch.compile (PyTorch 2), this is {t.__version__}")
            self.failed = True
            return
        cf = t.compile(f)
        wrong = differ = 0
        for m in a.rows:
            for _ in range(3):
                src, sh = self.fresh(m)
                want, want2 = f(src, sh)  # two steps
                got, got2 = cf(src, sh)  # two more, same inputs: the same blocks
                differ += int((got.view(t.int32) != want.view(t.int32)).sum())
                differ += int((got2.view(t.int16) != want2.view(t.int16)).sum())
                wrong += int(self.ref.check((got * 0.5).to(t.bfloat16), t.neg(src), sh)[0])
                wrong += int(self.ref2.check(got2, t.neg(src), sh)[0])
        self.op.synchronize()
        self.report(f"compile, M {a.rows}, with and without a packed weight", 6 * sum(a.rows) * a.hidden, wrong + differ)
        if differ:
            self.say(f"FAIL: compile: {differ} elements differ between eager and compiled")

    # ---- --bench --------------------------------------------------------

    def bench(self):
        t, a = self.torch, self.a
        shard_bytes = self.shard * a.latent * 2
        k = max(math.ceil(a.rotate_mb * 2**20 / shard_bytes), 1)
        self.say(f"bench: hidden {a.hidden}, latent {a.latent}, shard {self.shard}: {k} weight copies "
                 f"cover {k * shard_bytes / 2**20:.0f} MiB, in each form")
        # "K ops": one step on each of K ops, each holding its weight copy.
        ops = [self.op] + [self.g.up_projection(a.hidden, a.latent, self.max_m, self.mine, backend=a.backend,
                                                deadline=a.deadline) for _ in range(k - 1)]
        # "1 op": K steps of this op, each passing its own packed copy.
        packs = [self.op.pack(self.mine) for _ in range(k)]
        # "slab": the same, the copies side by side in one allocation.
        n = self.tprun.packed_weight_len(self.shard, a.latent)
        slab = t.empty(k * n, dtype=t.bfloat16, device=self.dev)
        slabs = [self.op.pack(self.mine, out=slab[i * n:(i + 1) * n]) for i in range(k)]
        forms = {"K ops": [(op, None) for op in ops], "1 op": [(self.op, w) for w in packs],
                 "slab": [(self.op, w) for w in slabs]}
        rows = []
        for m in a.rows:
            lat, sh = self.fresh(m)
            row = [m]
            wrong = 0
            for steps in forms.values():
                med, p90, w = self.time_graph(steps, lat, sh, m, k)
                row += [med, p90]
                wrong += w
            rows.append(row + [wrong])
        for op in ops[1:]:
            op.close()
        for w in packs + slabs:
            w.close()
        del slab
        if self.g.rank == 0:
            print(f"# torch_rank.py --bench: tp {self.g.size}, hidden {a.hidden}, latent {a.latent}, {self.op.backend}, "
                  f"{k} steps per graph, {a.replays} replays; time per step = replay time / {k}")
            print("#   K ops: one step on each of K ops holding their weight copies; "
                  "1 op: K steps of one op, each passing its packed copy (op.pack); "
                  "slab: as 1 op, the copies packed side by side into one allocation (op.pack(w, out=...))")
            print(f"# {'M':>3} " + " ".join(f"{f + ' ' + q:>13}" for f in forms for q in ("med µs", "p90 µs")) + f" {'#wrong':>7}")
            for row in rows:
                print(f"  {row[0]:>3} " + " ".join(f"{x:>13.2f}" for x in row[1:-1]) + f" {row[-1]:>7}")
            sys.stdout.flush()
        for row in rows:
            if row[-1]:
                self.say(f"FAIL: bench M {row[0]}: {row[-1]} wrong elements")
                self.failed = True

    def time_graph(self, steps, lat, sh, m, k):
        """Captures steps ((op, packed weight or None) each) into one graph,
        checks one poisoned replay, and times --replays more: the median and
        p90 µs per step, and the wrong elements."""
        t, a = self.torch, self.a
        outs = [t.empty(m, a.hidden, dtype=t.bfloat16, device=self.dev) for _ in steps]
        side = t.cuda.Stream()
        side.wait_stream(t.cuda.current_stream())
        with t.cuda.stream(side):
            for (op, w), out in zip(steps, outs):
                op(lat, sh, out=out, weight=w)
        t.cuda.current_stream().wait_stream(side)
        g = t.cuda.CUDAGraph()
        with t.cuda.graph(g):
            for (op, w), out in zip(steps, outs):
                op(lat, sh, out=out, weight=w)
        for _ in range(a.warmup):
            g.replay()
        for out in outs:
            out.fill_(float("nan"))
        g.replay()
        wrong = sum(int(self.ref.check(out, lat, sh)[0]) for out in outs)
        ev = [t.cuda.Event(enable_timing=True) for _ in range(a.replays + 1)]
        ev[0].record()
        for i in range(a.replays):
            g.replay()
            ev[i + 1].record()
        t.cuda.synchronize()
        for op in {id(op): op for op, _ in steps}.values():
            op.check()
        us = sorted(ev[i].elapsed_time(ev[i + 1]) * 1000.0 / k for i in range(a.replays))
        del g
        return statistics.median(us), us[max(0, math.ceil(0.9 * len(us)) - 1)], wrong


def main():
    a = parse_args()
    import torch

    import tprun

    if not a.cpu and not torch.cuda.is_available():
        sys.exit("torch_rank.py needs a CUDA device, or --cpu")
    try:
        r = Rank(torch, tprun, a)  # joins and makes the op: a collective
    except tprun.TprunError as e:
        who = "" if e.rank is None else f" (rank {e.rank})"
        sys.exit(f"FAIL: {type(e).__name__}{who}: {e}")  # a joined group closes at exit
    try:
        if a.check:
            r.check()
        if a.graph:
            r.graph()
        if a.compile:
            r.compiled()
        if a.bench:
            r.bench()
    except tprun.TprunError as e:
        who = "" if e.rank is None else f" (rank {e.rank})"
        r.say(f"FAIL: {type(e).__name__}{who}: {e}")
        r.g.abort(f"{type(e).__name__}: {e}")
        sys.exit(1)
    r.op.close()
    r.g.close()
    if a.join == "torch":
        import torch.distributed as dist

        dist.barrier()
        dist.destroy_process_group()
    r.say("FAIL" if r.failed else "PASS")
    sys.exit(1 if r.failed else 0)


if __name__ == "__main__":
    main()
