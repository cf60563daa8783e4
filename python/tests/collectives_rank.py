"""The group through the caller's own collectives, as a rank program
(stdlib only):

    tprun --tp N -- python3 python/tests/collectives_rank.py DIR SEED

The ranks do not use tprun's rendezvous for their group: they build their
own all-gather and barrier over a Unix socket in DIR (rank 0 gathers and
sends the result back), as a framework's process group would offer them,
and make their tprun group on it with tprun.join_collectives. Then: the
group's collectives with fresh bytes from SEED, on the caller's thread
only; the host backend on one node, its mailboxes passed as descriptors
over the node's sockets, every step of fresh inputs checked against
tprun.reference and equal on every rank (or, with TPRUN_FORCE_NODE set,
as if across nodes: refused with an error that names the route); a rank
that passes another rank than its own refused, naming it; a callback that
fails raising the library's error with the Python exception as its
cause, and the group refusing further collectives. Prints "rank R: ok ..."
and exits 0, or prints each failure and exits 1.
"""

import os
import random
import socket
import struct
import sys
import threading
import time

from array import array

import tprun
from tprun import reference

failures = []


def fail(msg):
    failures.append(msg)
    print(f"FAIL: {msg}", file=sys.stderr, flush=True)


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("peer closed the socket")
        buf += chunk
    return bytes(buf)


def send_blob(s, b):
    s.sendall(struct.pack("<Q", len(b)) + b)


def recv_blob(s):
    (n,) = struct.unpack("<Q", recv_exact(s, 8))
    return recv_exact(s, n)


class SocketCollectives:
    """An all-gather and a barrier among the rank processes over a Unix
    socket: what a framework's process group offers, built from scratch.
    It records the threads it is called on."""

    def __init__(self, path, rank, size):
        self.rank, self.size = rank, size
        self.threads = set()
        self.calls = 0
        self.fail_next = None  # an exception to raise instead of the next call
        if rank == 0:
            srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            srv.bind(path)
            srv.listen(size)
            self.peers = [None] * size
            for _ in range(size - 1):
                c, _ = srv.accept()
                (r,) = struct.unpack("<I", recv_exact(c, 4))
                self.peers[r] = c
            srv.close()
        else:
            deadline = time.monotonic() + 30
            while True:
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(path)
                    break
                except OSError:
                    s.close()
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
            s.sendall(struct.pack("<I", rank))
            self.sock = s

    def allgather(self, data):
        self.threads.add(threading.get_ident())
        self.calls += 1
        if self.fail_next is not None:
            e, self.fail_next = self.fail_next, None
            raise e
        data = bytes(data)
        if self.rank == 0:
            got = [data] + [recv_blob(self.peers[r]) for r in range(1, self.size)]
            packed = b"".join(struct.pack("<Q", len(b)) + b for b in got)
            for r in range(1, self.size):
                send_blob(self.peers[r], packed)
            return got
        send_blob(self.sock, data)
        packed = recv_blob(self.sock)
        out, i = [], 0
        while i < len(packed):
            (n,) = struct.unpack_from("<Q", packed, i)
            out.append(packed[i + 8:i + 8 + n])
            i += 8 + n
        return out

    def barrier(self):
        self.allgather(b"")


def host_steps(g, seed, steps=3):
    """The op on the host backend through g: steps of fresh inputs from
    seed (the same on every rank), every element checked against the
    reference, every rank's block the same. Returns the steps checked."""
    rng = random.Random(seed)
    hidden, latent, max_m = 16 * g.size, 8, 4
    shard = hidden // g.size

    def draw(n, scale=1.0):
        vals = array("H")
        for _ in range(n):
            v = tprun.bf16_from_float(rng.gauss(0.0, scale))
            if v & 0x7FFF == 0:  # never zero: no result may hinge on zeros
                v |= tprun.bf16_from_float(scale)
            vals.append(v)
        return vals

    op = g.up_projection(hidden, latent, max_m, device="host")
    if op.backend != "host":
        fail(f"the op runs on {op.backend!r}, not the host backend")
    weight = draw(hidden * latent, latent**-0.5)
    op.set_weight(weight[g.rank * shard * latent:(g.rank + 1) * shard * latent])
    for i in range(steps):
        m = rng.randint(1, max_m)
        lat, shared = draw(m * latent), draw(m * hidden)
        out = op(lat, shared, out=array("H", [0xFFFF]) * (m * hidden))  # NaN: what the op leaves unwritten fails
        wrong = reference.check_block(out, lat, weight, shared, m, hidden, latent)
        if wrong:
            fail(f"host step {i} (M {m}): {len(wrong)} wrong, first {wrong[0]}")
        for r, b in enumerate(g.all_gather(out.tobytes())):
            if b != out.tobytes():
                fail(f"host step {i}: rank {r}'s block differs from rank {g.rank}'s")
    op.close()
    return steps


def main():
    sockdir, seed = sys.argv[1], int(sys.argv[2])
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    main_thread = threading.get_ident()
    coll = SocketCollectives(os.path.join(sockdir, "collectives.sock"), rank, size)

    g = tprun.join_collectives(coll, rank=rank, size=size, device=0)
    if (g.rank, g.size, g.device) != (rank, size, 0):
        fail(f"group says rank {g.rank}, size {g.size}, device {g.device}")
    if coll.calls == 0:
        fail("joining made no call of the caller's all-gather")

    # The group's collectives, fresh bytes of every length class.
    checked = 0
    for i, n in enumerate((1, 7, 8, 300, 5000)):
        want = [random.Random(seed * 1000003 + i * 101 + r).randbytes(n) for r in range(size)]
        got = g.all_gather(want[rank])
        if got != want:
            fail(f"all_gather of {n} bytes, round {i}: {[len(x) for x in got]} bytes came back, not every rank's")
        checked += 1
        g.barrier()

    # The host backend shares memory descriptors: over the node's sockets
    # on one node; across nodes they cannot travel.
    across = bool(os.environ.get("TPRUN_FORCE_NODE"))
    if not across:
        host = f"host backend: {host_steps(g, seed)} steps checked"
    else:
        host = "host backend refused across nodes"
        try:
            op = g.up_projection(16 * size, 8, 2, device="host")
            fail(f"the host backend ran across nodes: {op.backend}")
            op.close()
        except tprun.BackendUnavailableError as e:
            if "descriptors cannot travel through the framework's collectives" not in str(e):
                fail(f"host backend refused, but the error does not name the route: {e}")
    # Every rank passed the same place: the group goes on.
    if g.all_gather(bytes([rank])) != [bytes([r]) for r in range(size)]:
        fail("all_gather after the host backend")

    if coll.threads != {main_thread}:
        fail(f"the callbacks ran on {len(coll.threads)} threads, not only the caller's")

    # A rank that is not its place in the caller's all-gather.
    try:
        bad = tprun.join_collectives(coll, rank=(rank + 1) % size, size=size, device=0)
        if size > 1:
            fail("a group with shifted ranks was made")
        bad.close()
    except tprun.InvalidArgumentError as e:
        if size == 1 or "says it is rank" not in str(e):
            fail(f"shifted ranks: {e}")

    # A callback that fails: the library's error, the Python exception as
    # its cause, and no further call of the caller's collectives.
    g2 = tprun.join_collectives(coll, rank=rank, size=size, device=0)
    cause = ConnectionResetError(f"rank {rank}: the framework's connection broke")
    coll.fail_next = cause
    try:
        g2.barrier()
        fail("a barrier whose callback raised succeeded")
    except tprun.PeerError as e:
        if e.__cause__ is not cause or "the framework's Barrier failed" not in str(e):
            fail(f"failed callback: {e!r}, cause {e.__cause__!r}")
    calls = coll.calls
    try:
        g2.all_gather(b"x")
        fail("the group ran a collective after its framework failed")
    except tprun.PeerError as e:
        if "unusable" not in str(e):
            fail(f"after the failure: {e}")
    if coll.calls != calls:
        fail("the caller's all-gather was called after the failure")
    g2.close()

    g.barrier()
    g.close()
    g.close()
    try:
        g.barrier()
        fail("barrier on a closed group")
    except tprun.ClosedError:
        pass

    if failures:
        print(f"rank {rank}: {len(failures)} failures", flush=True)
        sys.exit(1)
    print(f"rank {rank}: ok: group on the caller's collectives, {checked} all-gathers checked, {host}, "
          f"bad ranks refused, callback failure raised with its cause", flush=True)


if __name__ == "__main__":
    main()
