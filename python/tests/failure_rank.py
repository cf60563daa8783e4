"""A peer fails while rank 0 waits in a step; rank 0 must get an exception
naming it, soon, and go on running Python (stdlib only):

    tprun --tp 2 -- python3 python/tests/failure_rank.py MODE [torch]

MODE is what rank 1 does after a few steps, while rank 0 waits in the next:
    exit    leaves the process (os._exit(0), no goodbye)
    kill    kills itself with SIGKILL
    abort   fails the job (Group.abort) and exits
    raise   raises an exception it does not catch (the package aborts at exit)
    with    raises an exception out of a `with group:` block (which aborts)
    hooked  replaces sys.excepthook with one that does not call the one it
            found (as a framework's traceback printer may), then raises an
            exception it does not catch (the package still aborts at exit)
    stall   sleeps (rank 0's deadline is 1 s)
    sigint  sleeps, and rank 0 gets SIGINT 1 s into its wait (deadline 4 s):
            KeyboardInterrupt must come when the step returns

With "torch" the ranks join through a torch.distributed gloo group
(tprun.join_torch) on a file store in $TMPDIR, as framework-spawned
workers on one node do, instead of tprun.join (the ranks run under
torchrun's variables then, not under tprun).

Rank 0 prints "rank 0: caught NAME rank=R after T s: MESSAGE" (NAME the
exception's class, R its rank attribute) and exits 3; any other outcome
prints "rank 0: FAIL ..." and exits 1.
"""

import os
import signal
import sys
import threading
import time
from array import array

import tprun

HIDDEN, LATENT, STEPS_BEFORE = 32, 16, 3


def main():
    mode = sys.argv[1]
    if sys.argv[2:] == ["torch"]:
        import torch.distributed as dist

        store = "file://" + os.path.join(os.environ["TMPDIR"], "store")
        dist.init_process_group("gloo", init_method=store, rank=int(os.environ["RANK"]), world_size=int(os.environ["WORLD_SIZE"]))
        g = tprun.join_torch()
    else:
        g = tprun.join()
    deadline = {"stall": 1.0, "sigint": 4.0}.get(mode, 30.0)
    shard = HIDDEN // g.size
    op = g.up_projection(HIDDEN, LATENT, 2, array("H", [0x3F80]) * (shard * LATENT), deadline=deadline)
    lat, shared = array("H", [0x3F80]) * LATENT, array("H", [0x3F80]) * HIDDEN
    for _ in range(STEPS_BEFORE):
        op(lat, shared)
    if g.rank != 0:
        time.sleep(0.3)  # rank 0 is waiting in its next step by now
        if mode == "exit":
            os._exit(0)
        elif mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        elif mode == "abort":
            g.abort(f"rank {g.rank} gives up")
            os._exit(0)
        elif mode == "raise":
            raise RuntimeError(f"rank {g.rank} gives up")
        elif mode == "hooked":
            sys.excepthook = lambda kind, value, tb: print(f"framework hook: {kind.__name__}: {value}", file=sys.stderr)
            raise RuntimeError(f"rank {g.rank} gives up")
        elif mode == "with":
            with g:
                raise RuntimeError(f"rank {g.rank} gives up")
        time.sleep(300)
        sys.exit(0)
    if mode == "sigint":
        threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGINT)).start()
    start = time.monotonic()
    try:
        op(lat, shared)
    except KeyboardInterrupt:
        took = time.monotonic() - start
        print(f"rank 0: caught KeyboardInterrupt rank=None after {took:.2f} s: (SIGINT during a step)", flush=True)
        sys.exit(3)
    except tprun.TprunError as e:
        took = time.monotonic() - start
        print(f"rank 0: caught {type(e).__name__} rank={e.rank} after {took:.2f} s: {e}", flush=True)
        # The interpreter and the library are still fine: closing works.
        op.close()
        g.close()
        sys.exit(3)
    except BaseException as e:  # noqa: BLE001 - reported as the failure it is
        print(f"rank 0: FAIL: {type(e).__name__}: {e}", flush=True)
        sys.exit(1)
    print("rank 0: FAIL: the step succeeded", flush=True)
    sys.exit(1)


if __name__ == "__main__":
    main()
