"""A whole tprun rank program in plain Python (standard library only).

Every rank holds its rows of an up-projection weight; each step multiplies
the same activation block by them, adds this rank's columns of a residual,
and every rank gets the whole block. This one runs the host backend (the
CPU, shared memory), so it needs no GPU. From the repository:

    pip install ./python                  # builds libtprun.so with Go, into the package
    go build -o tprun ./cmd/tprun         # the launcher
    ./tprun --tp 2 -- python3 examples/python/host_rank.py --check

or, without pip, build the library into the source tree:

    go build -buildmode=c-shared -o python/tprun/libtprun.so ./cmd/libtprun
    PYTHONPATH=python ./tprun --tp 2 -- python3 examples/python/host_rank.py --check

(or `torchrun --nproc-per-node 2 examples/python/host_rank.py`). With
--check every block is compared with the pure-Python reference and across
ranks.
"""

import argparse
import hashlib
import random

import tprun
from tprun import reference


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--hidden", type=int, default=192,
                   help="hidden size, split across the ranks: hidden / tp a multiple of 8 (the default suits tp 1, 2, 3, 4, 6 and 8)")
    p.add_argument("--latent", type=int, default=32, help="latent size")
    p.add_argument("--max-m", type=int, default=4, help="the most rows a step takes (1..128)")
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--check", action="store_true", help="check every block against the reference and across ranks")
    a = p.parse_args()

    g = tprun.join()
    shard = a.hidden // g.size
    # Every rank draws the same numbers, so every rank knows the whole
    # weight and every input; a real program holds only its own rows.
    rng = random.Random(a.seed)

    def draw(n, scale=1.0):
        return tprun.to_bf16(rng.gauss(0.0, scale) for _ in range(n))

    weight = draw(a.hidden * a.latent, a.latent**-0.5)  # [hidden, latent]
    mine = weight[g.rank * shard * a.latent:(g.rank + 1) * shard * a.latent]  # this rank's [shard, latent]

    wrong = differ = 0
    with g, g.up_projection(a.hidden, a.latent, a.max_m, mine) as op:
        for t in range(a.steps):
            m = 1 + t % a.max_m
            latent = draw(m * a.latent)  # [m, latent], the same on every rank
            shared = draw(m * a.hidden)  # [m, hidden]: the op takes this rank's columns
            out = op(latent, shared)  # [m, hidden], array('H') of bf16 bits
            if a.check:
                wrong += len(reference.check_block(out, latent, weight, shared, m, a.hidden, a.latent))
                digest = hashlib.sha256(out).digest()
                differ += sum(d != digest for d in g.all_gather(digest))
            if t == 0 and g.rank == 0:
                print(f"step 0, row 0: {[round(v, 3) for v in tprun.from_bf16(out[:6])]} ...")
        print(f"rank {g.rank}: {a.steps} steps on the {op.backend} backend ({op.backend_reason})"
              + (f", {wrong} wrong, {differ} blocks differ from another rank's" if a.check else ""))
    if wrong or differ:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
