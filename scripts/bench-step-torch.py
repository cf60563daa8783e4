#!/usr/bin/env python3
"""PyTorch baseline of tprun's fused step, for scripts/bench-step.

Per rank (one process per GPU, torch.multiprocessing, NCCL):
    local = mm(latent, W_shard^T) + shared_shard      (bf16)
    all_gather_into_tensor(out, local)
captured in one CUDA graph of K steps, step k using weight copy k, with the
copies covering at least --rotate-mb MiB per rank so the weights stream from
HBM (the same rotation tprun's benchmark uses). Each replay is timed with
CUDA events; the step time is replay time / K, and the reported number is
the slowest rank's median over the replays (p90 too). The all-gather alone is
measured the same way.

The NCCL environment (NCCL_NVLS_ENABLE and the rest) is used as the machine
sets it: this script never sets or unsets any NCCL variable.

With --tp 1 there is nothing to gather: one process, no torch.distributed,
the graph holds mm + add alone (the baseline of tprun bench --tp 1). --hidden
takes a comma list: each hidden in turn, in one process. M is any positive
row count (mm has no limit; tprun's is 128).

Rank 0 writes one JSON object per hidden and M to --out:
    {"hidden": 7168, "shard": 3584, "m": 1, "torch_us": ..., "torch_p90_us": ...,
     "allgather_us": ..., "allgather_p90_us": ..., "copies": K}
(allgather_us and allgather_p90_us null at --tp 1).
"""

import argparse
import json
import math
import os
import statistics
import sys
import tempfile


def parse_args():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tp", type=int, default=2)
    p.add_argument("--hidden", default="7168", help="comma list of hidden sizes, each a multiple of --tp")
    p.add_argument("--latent", type=int, default=3584)
    p.add_argument("--m", default="1,2,3,4,5,6,7,8", help="comma list of M values")
    p.add_argument("--replays", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--rotate-mb", type=int, default=512)
    p.add_argument("--out", required=True, help="JSON lines file rank 0 writes")
    a = p.parse_args()
    try:
        a.m = [int(x) for x in a.m.split(",")]
        a.hidden = [int(x) for x in a.hidden.split(",")]
    except ValueError as e:
        p.error(f"--m and --hidden take comma lists of integers: {e}")
    if a.tp < 1:
        p.error(f"--tp {a.tp} must be at least 1")
    if any(m < 1 for m in a.m):
        p.error(f"--m {a.m}: every M must be at least 1")
    for h in a.hidden:
        if h < 1 or h % a.tp:
            p.error(f"--hidden {h} is not a positive multiple of --tp {a.tp}")
    return a


def percentile(v, q):
    v = sorted(v)
    i = max(0, min(len(v) - 1, math.ceil(q * len(v)) - 1))
    return v[i]


def time_graph(torch, graph, replays, warmup, steps):
    """Replays graph warmup times, then replays times back to back with an
    event before and after each; returns per-step times in µs."""
    for _ in range(warmup):
        graph.replay()
    torch.cuda.synchronize()
    events = [torch.cuda.Event(enable_timing=True) for _ in range(replays + 1)]
    events[0].record()
    for i in range(replays):
        graph.replay()
        events[i + 1].record()
    torch.cuda.synchronize()
    return [events[i].elapsed_time(events[i + 1]) * 1000.0 / steps for i in range(replays)]


def worker(rank, args, init_file):
    import torch
    import torch.distributed as dist

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=args.tp, device_id=dev)
    try:
        run(torch, dist, rank, args, dev)
    finally:
        dist.destroy_process_group()


def run(torch, dist, rank, args, dev):
    """Every hidden in turn; rank 0 writes the results. dist is None at tp 1."""
    results = []
    for hidden in args.hidden:
        results += run_hidden(torch, dist, rank, args, dev, hidden)
        torch.cuda.empty_cache()
    if rank == 0:
        with open(args.out, "w") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")


def run_hidden(torch, dist, rank, args, dev, hidden):
    bf16 = torch.bfloat16
    shard, latent = hidden // args.tp, args.latent
    shard_bytes = shard * latent * 2
    copies = max(1, -(-(args.rotate_mb << 20) // shard_bytes))
    gen = torch.Generator(device=dev)
    gen.manual_seed(1000 + rank)
    weights = [torch.randn(shard, latent, device=dev, dtype=bf16, generator=gen) / latent**0.5 for _ in range(copies)]
    results = []
    for m in args.m:
        lat = torch.randn(m, latent, device=dev, dtype=bf16, generator=gen)
        shared = torch.randn(m, shard, device=dev, dtype=bf16, generator=gen)
        if dist is None:
            results.append(run_alone(torch, args, lat, shared, weights, shard, hidden, m))
            continue
        gathered = torch.empty(args.tp * m, shard, device=dev, dtype=bf16)
        alone_in = torch.randn(m, shard, device=dev, dtype=bf16, generator=gen)

        # Eager warm-up on a side stream: NCCL communicator, cuBLAS handles
        # and workspaces exist before the capture.
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for w in weights[:3]:
                dist.all_gather_into_tensor(gathered, torch.mm(lat, w.t()) + shared)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()

        full = torch.cuda.CUDAGraph()
        with torch.cuda.graph(full):
            for w in weights:
                dist.all_gather_into_tensor(gathered, torch.mm(lat, w.t()) + shared)
        alone = torch.cuda.CUDAGraph()
        with torch.cuda.graph(alone):
            for _ in range(copies):
                dist.all_gather_into_tensor(gathered, alone_in)

        # Both ranks replay in lockstep, as NCCL needs.
        dist.barrier(device_ids=[rank])
        t_full = time_graph(torch, full, args.replays, args.warmup, copies)
        dist.barrier(device_ids=[rank])
        t_alone = time_graph(torch, alone, args.replays, args.warmup, copies)

        mine = torch.tensor([statistics.median(t_full), percentile(t_full, 0.9),
                             statistics.median(t_alone), percentile(t_alone, 0.9)], device=dev, dtype=torch.float64)
        dist.all_reduce(mine, op=dist.ReduceOp.MAX)  # the slowest rank
        med, p90, ag, ag90 = mine.tolist()
        results.append({"hidden": hidden, "shard": shard, "m": m, "torch_us": round(med, 3), "torch_p90_us": round(p90, 3),
                        "allgather_us": round(ag, 3), "allgather_p90_us": round(ag90, 3), "copies": copies})
        if rank == 0:
            print(f"torch: hidden {hidden}, M={m}: mm+add+all_gather {med:.2f} us (p90 {p90:.2f}), all_gather alone {ag:.2f} us (p90 {ag90:.2f}); "
                  f"{copies} weight copies per graph", flush=True)
        del full, alone
        torch.cuda.synchronize()
    return results


def run_alone(torch, args, lat, shared, weights, shard, hidden, m):
    """tp 1: mm + add per weight copy in one graph, nothing to gather."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for w in weights[:3]:
            torch.mm(lat, w.t()) + shared
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [torch.mm(lat, w.t()) + shared for w in weights]
    t = time_graph(torch, graph, args.replays, args.warmup, len(weights))
    med, p90 = statistics.median(t), percentile(t, 0.9)
    print(f"torch: hidden {hidden}, M={m}: mm+add {med:.2f} us (p90 {p90:.2f}); {len(weights)} weight copies per graph", flush=True)
    del graph, outs
    torch.cuda.synchronize()
    return {"hidden": hidden, "shard": shard, "m": m, "torch_us": round(med, 3), "torch_p90_us": round(p90, 3),
            "allgather_us": None, "allgather_p90_us": None, "copies": len(weights)}


def main():
    args = parse_args()
    import torch
    import torch.multiprocessing as mp

    if torch.cuda.device_count() < args.tp:
        sys.exit(f"bench-step-torch: --tp {args.tp} needs {args.tp} GPUs, {torch.cuda.device_count()} visible")
    if args.tp == 1:
        print(f"torch {torch.__version__}, CUDA {torch.version.cuda}; tp 1: mm + add alone, no torch.distributed", flush=True)
        torch.cuda.set_device(0)
        run(torch, None, 0, args, torch.device("cuda", 0))
        return
    nccl = {k: v for k, v in os.environ.items() if k.startswith("NCCL_")}
    print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}; "
          f"NCCL environment as set: {nccl or 'none'}", flush=True)
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(worker, args=(args, os.path.join(d, "init")), nprocs=args.tp, join=True)


if __name__ == "__main__":
    main()
