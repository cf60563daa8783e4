#!/usr/bin/env python3
"""PyTorch baseline for the fused up-projection: torch.mm + add in bf16.

Same shapes and method as the harness's bench mode: weights rotated through
at least 512 MiB of distinct buffers (HBM, not L2), a CUDA graph of many
iterations replayed, events around each replay, median per iteration.

    torch_baseline.py OUT.tsv
"""
import statistics
import sys

import torch

SHAPES = [(3584, 7168, s) for s in (7168, 3584, 1792, 896, 448)] + [
    (1024, 4096, 1024),
    (2048, 8192, 1024),
]


def bench(latent, hidden, shard, m, reps=25):
    wbytes = shard * latent * 2
    nbuf = max(2, -(-(512 << 20) // wbytes))
    iters = nbuf * max(1, -(-96 // nbuf))
    dev = "cuda"
    pool = torch.empty(nbuf, shard, latent, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
    x = torch.empty(m, latent, dtype=torch.bfloat16, device=dev).uniform_(-1, 1)
    shared = torch.empty(m, hidden, dtype=torch.bfloat16, device=dev).uniform_(-16, 16)
    rank = hidden // shard - 1
    sv = shared[:, rank * shard:(rank + 1) * shard]
    tmp = torch.empty(m, shard, dtype=torch.bfloat16, device=dev)
    out = torch.empty(m, shard, dtype=torch.bfloat16, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for i in range(3):
            torch.mm(x, pool[i % nbuf].t(), out=tmp)
            torch.add(tmp, sv, out=out)
    torch.cuda.current_stream().wait_stream(s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(iters):
            torch.mm(x, pool[i % nbuf].t(), out=tmp)
            torch.add(tmp, sv, out=out)
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a = torch.cuda.Event(enable_timing=True)
        b = torch.cuda.Event(enable_timing=True)
        a.record()
        g.replay()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b) * 1000.0 / iters)
    del g, pool
    torch.cuda.empty_cache()
    return statistics.median(times)


def main():
    out = sys.argv[1]
    print("torch", torch.__version__, torch.cuda.get_device_name(0), flush=True)
    with open(out, "w") as f:
        f.write("latent\thidden\tshard\tm\ttorch_us\n")
        for latent, hidden, shard in SHAPES:
            for m in range(1, 9):
                us = bench(latent, hidden, shard, m)
                f.write(f"{latent}\t{hidden}\t{shard}\t{m}\t{us:.3f}\n")
                f.flush()
                print(f"torch latent {latent} shard {shard} M {m}: {us:.2f} us", flush=True)


if __name__ == "__main__":
    main()
