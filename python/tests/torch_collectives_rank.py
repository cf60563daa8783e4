"""tprun.join_torch on a gloo process group, as a rank program (needs
PyTorch; the launcher gives RANK and WORLD_SIZE):

    tprun --tp N -- python3 python/tests/torch_collectives_rank.py DIR SEED

The ranks make a torch.distributed gloo group on a file store in DIR, then
their tprun group on it with tprun.join_torch: the group's collectives with
fresh bytes from SEED, and the host backend on one node (its mailboxes
passed as descriptors over the node's sockets), steps of fresh inputs
checked against tprun.reference and equal on every rank.
Prints "rank R: ok ..." and exits 0, or prints each failure and exits 1.
"""

import os
import random
import sys

import collectives_rank  # its host_steps, beside this file
import torch.distributed as dist

import tprun

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)


def main():
    store_dir, seed = sys.argv[1], int(sys.argv[2])
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", init_method="file://" + os.path.join(store_dir, "store"), rank=rank, world_size=size)
    g = tprun.join_torch(device=0)
    if (g.rank, g.size) != (rank, size):
        fail(f"group says rank {g.rank} of {g.size}")
    checked = 0
    for i, n in enumerate((1, 9, 4096)):
        want = [random.Random(seed * 1000003 + i * 101 + r).randbytes(n) for r in range(size)]
        if g.all_gather(want[rank]) != want:
            fail(f"all_gather of {n} bytes, round {i}")
        checked += 1
    g.barrier()
    steps = collectives_rank.host_steps(g, seed)
    failures.extend(collectives_rank.failures)
    g.close()
    dist.barrier()
    dist.destroy_process_group()
    if failures:
        print(f"rank {rank}: {len(failures)} failures", flush=True)
        sys.exit(1)
    print(f"rank {rank}: ok: group on torch.distributed (gloo), {checked} all-gathers checked, host backend: {steps} steps checked", flush=True)


if __name__ == "__main__":
    main()
