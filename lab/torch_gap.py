"""Where PyTorch's one-op graph loses 0.1-0.2 µs a step against Go's
`tprun bench --graph enqueue` at shard 896 (lab/README.md): the same op
and steps, in variants that each change one thing. Run under
`tprun --tp 1 -- python3 lab/torch_gap.py OUTDIR`."""
import math
import os
import statistics
import sys

import ctypes

import torch

import tprun

libcuda = ctypes.CDLL("libcuda.so.1")

out_dir = sys.argv[1] if len(sys.argv) > 1 else "."
hidden, latent, rows = 896, 3584, ([int(os.environ["TORCH_GAP_M"])] if os.environ.get("TORCH_GAP_M") else range(1, 9))
g = tprun.join()
dev = torch.device("cuda", g.device)
torch.cuda.set_device(dev)
gen = torch.Generator(device=dev)
gen.manual_seed(1)
w = (torch.randn(hidden, latent, generator=gen, device=dev) * latent**-0.5).to(torch.bfloat16)
op = g.up_projection(hidden, latent, 8, w)
n = tprun.packed_weight_len(hidden, latent)
k = math.ceil(512 * 2**20 / (2 * n))
slab = torch.empty(k * n, dtype=torch.bfloat16, device=dev)
packs = [op.pack(w, out=slab[i * n:(i + 1) * n]) for i in range(k)]


class _CAI:
    """A raw device allocation seen by PyTorch (__cuda_array_interface__)."""

    def __init__(self, ptr, count):
        self.__cuda_array_interface__ = {"shape": (count,), "typestr": "<i2", "data": (ptr, False), "version": 2}


def slab_at(offset_bytes):
    """k packed copies side by side, starting offset_bytes into a PyTorch
    allocation."""
    extra = offset_bytes // 2
    buf = torch.empty(extra + k * n, dtype=torch.bfloat16, device=dev)
    return buf, [op.pack(w, out=buf[extra + i * n:extra + (i + 1) * n]) for i in range(k)]


slab1m, packs1m = slab_at(1 << 20)
slab64k, packs64k = slab_at(64 << 10)
# The same copies in memory from cuMemAlloc, as Go's bench holds them.
raw = ctypes.c_uint64()
rc = libcuda.cuMemAlloc_v2(ctypes.byref(raw), ctypes.c_size_t(2 * k * n))
if rc != 0:
    sys.exit(f"cuMemAlloc_v2: {rc}")
cu = torch.as_tensor(_CAI(raw.value, k * n), device=dev).view(torch.bfloat16)
packscu = [op.pack(w, out=cu[i * n:(i + 1) * n]) for i in range(k)]
seps = [op.pack(w) for _ in range(k)]
torch.cuda.synchronize()
mode = ctypes.c_int(-1)
libcuda.cuModuleGetLoadingMode(ctypes.byref(mode))  # 1: lazy, 2: eager
print(f"# PYTORCH_CUDA_ALLOC_CONF={os.environ.get('PYTORCH_CUDA_ALLOC_CONF')!r}, torch {torch.__version__}, "
      f"CUDA_MODULE_LOADING={os.environ.get('CUDA_MODULE_LOADING')!r}, loading mode {mode.value}", flush=True)
print(f"# weight copies at: torch slab {slab.data_ptr():#x} (mod 2 MiB {slab.data_ptr() % (2 << 20):#x}), "
      f"cuMemAlloc {raw.value:#x} (mod 2 MiB {raw.value % (2 << 20):#x}); separate copies mod 2 MiB: "
      + ", ".join(f"{p.data.data_ptr() % (2 << 20):#x}" for p in seps[:6]), flush=True)


def graph_of(steps):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for s in steps:
            s()
    torch.cuda.current_stream().wait_stream(side)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        for s in steps:
            s()
    return gr


CU = ctypes.c_uint64


class RawGraph:
    """steps captured through the driver API on a side stream, instantiated
    with no flags and launched on that stream, as Go's tp.CaptureStream
    does: the graph torch.cuda.graph would make, without PyTorch's capture
    and replay."""

    def __init__(self, steps, dot=None):
        self.s = torch.cuda.Stream()
        self.s.wait_stream(torch.cuda.current_stream())
        h = CU(self.s.cuda_stream)
        chk(libcuda.cuStreamBeginCapture_v2(h, 1), "cuStreamBeginCapture")  # thread-local, as Go's
        with torch.cuda.stream(self.s):
            for st in steps:
                st()
        self.g = CU()
        chk(libcuda.cuStreamEndCapture(h, ctypes.byref(self.g)), "cuStreamEndCapture")
        if dot:
            chk(libcuda.cuGraphDebugDotPrint(self.g, dot.encode(), ctypes.c_uint(1)), "cuGraphDebugDotPrint")
        self.e = CU()
        chk(libcuda.cuGraphInstantiateWithFlags(ctypes.byref(self.e), self.g, ctypes.c_ulonglong(0)), "cuGraphInstantiate")

    def replay(self):
        chk(libcuda.cuGraphLaunch(self.e, CU(self.s.cuda_stream)), "cuGraphLaunch")

    def close(self):
        self.s.synchronize()
        libcuda.cuGraphExecDestroy(self.e)
        libcuda.cuGraphDestroy(self.g)


def chk(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: CUresult {rc}")


def per_replay(gr, nsteps, replays=200, warmup=20, stream=None):
    if stream is not None:
        with torch.cuda.stream(stream):
            return per_replay(gr, nsteps, replays, warmup)
    for _ in range(warmup):
        gr.replay()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(replays + 1)]
    ev[0].record()
    for i in range(replays):
        gr.replay()
        ev[i + 1].record()
    torch.cuda.synchronize()
    return statistics.median(ev[i].elapsed_time(ev[i + 1]) * 1000.0 / nsteps for i in range(replays))


def one_pair(gr, nsteps, replays=200, warmup=20):
    for _ in range(warmup):
        gr.replay()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for i in range(replays):
        gr.replay()
    b.record()
    torch.cuda.synchronize()
    return a.elapsed_time(b) * 1000.0 / nsteps / replays


_raw = []


def cu_tensor(count):
    """A bf16 tensor of count elements in an allocation of its own from
    cuMemAlloc (freed at exit)."""
    p = ctypes.c_uint64()
    chk(libcuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(2 * count)), "cuMemAlloc")
    _raw.append(p.value)
    return torch.as_tensor(_CAI(p.value, count), device=dev).view(torch.bfloat16)


_clib = tprun._lib.lib()


def direct_step(m, lat, sh, out, w):
    """The step through tprun_op_step_weight by ctypes, with the tensors'
    addresses: the Python package's checks and the custom op left out."""
    rc = _clib.tprun_op_step_weight(op._handle(), m, lat.data_ptr(), w.data.data_ptr(), sh.data_ptr(), hidden,
                                    out.data_ptr(), torch.cuda.current_stream().cuda_stream)
    if rc != 0:
        raise RuntimeError(f"tprun_op_step_weight: {rc}: {_clib.tprun_last_error()}")


def variants(m):
    lat = torch.randn(m, latent, generator=gen, device=dev).to(torch.bfloat16)
    sh = torch.randn(m, hidden, generator=gen, device=dev).to(torch.bfloat16)
    outs = [torch.empty(m, hidden, dtype=torch.bfloat16, device=dev) for _ in range(k)]
    outslab = torch.empty(k, m, hidden, dtype=torch.bfloat16, device=dev)
    # Pools as Go's bench holds them: a different latent and residual per step.
    latp = torch.randn(k, m, latent, generator=gen, device=dev).to(torch.bfloat16)
    shp = torch.randn(k, m, hidden, generator=gen, device=dev).to(torch.bfloat16)
    # Latent, residual and outputs in memory of their own from cuMemAlloc,
    # as Go's bench holds them (pools uploaded once, outputs side by side).
    cl, cs, co = (cu_tensor(x) for x in (m * latent, m * hidden, k * m * hidden))
    cl.copy_(lat.view(-1))
    cs.copy_(sh.view(-1))
    cio = (cl.view(m, latent), cs.view(m, hidden), co.view(k, m, hidden))
    v = {
        "cu-io": [lambda i=i: op(cio[0], cio[1], out=cio[2][i], weight=packscu[i]) for i in range(k)],
        "base": [lambda i=i: op(lat, sh, out=outs[i], weight=packs[i]) for i in range(k)],
        "outslab": [lambda i=i: op(lat, sh, out=outslab[i], weight=packs[i]) for i in range(k)],
        "pools": [lambda i=i: op(latp[i], shp[i], out=outslab[i], weight=packs[i]) for i in range(k)],
        "ownweight": [lambda i=i: op(lat, sh, out=outs[i]) for i in range(k)],
        "slab+1M": [lambda i=i: op(lat, sh, out=outs[i], weight=packs1m[i]) for i in range(k)],
        "slab+64K": [lambda i=i: op(lat, sh, out=outs[i], weight=packs64k[i]) for i in range(k)],
        "cuMemAlloc": [lambda i=i: op(lat, sh, out=outs[i], weight=packscu[i]) for i in range(k)],
        "separate": [lambda i=i: op(lat, sh, out=outs[i], weight=seps[i]) for i in range(k)],
        # base's and cu-io's tensors, the C function called directly
        "direct": [lambda i=i: direct_step(m, lat, sh, outs[i], packs[i]) for i in range(k)],
        "direct-cu": [lambda i=i: direct_step(m, cio[0], cio[1], cio[2][i], packscu[i]) for i in range(k)],
    }
    return v, cio


names = None
for m in rows:
    v, cio = variants(m)
    if names is None:
        names = list(v) + ["base/1pair", "base/side", "raw"]
        print("#  M " + " ".join(f"{x:>11}" for x in names), flush=True)
    res = []
    for name, steps in v.items():
        gr = graph_of(steps)
        res.append(per_replay(gr, len(steps)))
        if name == "base":
            base = gr
        elif name == "cu-io":
            out_ok = all(bool(torch.isfinite(cio[2][i].float()).all()) for i in range(k))
            if not out_ok:
                print(f"# cu-io M {m}: a non-finite output", flush=True)
        else:
            del gr
    res.append(one_pair(base, k))
    side = torch.cuda.Stream()
    res.append(per_replay(base, k, stream=side))
    rg = RawGraph(v["base"])
    res.append(per_replay(rg, k, stream=rg.s))
    rg.close()
    if m == 6:
        # Diagnostics of three steps: the raw graph as DOT, PyTorch's own
        # dump, and (CGAP_PARAMS) the kernel parameter blocks.
        rg = RawGraph(v["base"][:3], dot=os.path.join(out_dir, "raw-graph-m6.dot"))
        if os.environ.get("CGAP_PARAMS"):
            dump = ctypes.CDLL(os.path.join(os.path.dirname(os.path.abspath(__file__)), "cgap", "libcgap.so"))
            more = {name: RawGraph(v[name][:3]) for name in ("cu-io", "direct", "direct-cu")}
            for name, gr in [("base", rg)] + list(more.items()):
                n = dump.cgap_dump_graph(ctypes.c_void_p(gr.g.value), f"{os.environ['CGAP_PARAMS']}.py-{name}.6.txt".encode(), 248)
                print(f"# {name}: kernel parameters of {n} nodes dumped", flush=True)
            for gr in more.values():
                gr.close()
        rg.close()
        try:
            dbg = torch.cuda.CUDAGraph()
            dbg.enable_debug_mode()
            side = torch.cuda.Stream()
            with torch.cuda.graph(dbg, stream=side):
                for s in v["base"][:3]:
                    s()
            dbg.debug_dump(os.path.join(out_dir, "torch-graph-m6.dot"))
        except Exception as e:  # the dump is a diagnostic
            print(f"# debug_dump: {e}", flush=True)
    print(f"  {m:>2} " + " ".join(f"{x:>11.2f}" for x in res), flush=True)
    del base
op.synchronize()
op.close()
del packscu, cu
libcuda.cuMemFree_v2(ctypes.c_uint64(raw.value))
g.close()
