"""Joining through the caller's own process group (tprun_group_from_collectives).

A rank process that already belongs to a framework's process group lends
tprun that group's all-gather and barrier instead of tprun's rendezvous:
join_torch for torch.distributed, join_collectives for any object with
allgather(bytes) -> list of bytes and barrier().
"""

import ctypes
import os
import threading

from . import Group, _lib  # tprun/__init__.py imports this module after Group is defined

_ALLGATHER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p)
_BARRIER = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class _Collectives(ctypes.Structure):
    _fields_ = [("allgather", _ALLGATHER), ("barrier", _BARRIER)]


_fn = None
_fn_lock = threading.Lock()


def _from_collectives():
    """tprun_group_from_collectives, typed; a library built before it
    existed is named with the command that rebuilds it."""
    global _fn
    if _fn is None:
        with _fn_lock:
            if _fn is None:
                l = _lib.lib()
                try:
                    f = l.tprun_group_from_collectives
                except AttributeError as e:
                    raise _lib.LibraryError(
                        f"{_lib.library_path()} lacks tprun_group_from_collectives: a library of another version; "
                        f"rebuild it with: {_lib.BUILD_COMMAND}") from e
                f.restype = ctypes.c_int
                f.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.POINTER(_Collectives),
                              ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p)]
                _fn = f
    return _fn


class _Callbacks:
    """The C callbacks over a Python collectives object, and what they keep
    alive. A failure inside a callback (an exception, a wrong answer) is
    kept and returned as -1; the call that ran it raises it as the cause of
    the library's error."""

    def __init__(self, coll, size):
        self.coll, self.size = coll, size
        self.error = None
        self.allgather = _ALLGATHER(self._allgather)
        self.barrier = _BARRIER(self._barrier)
        self.struct = _Collectives(self.allgather, self.barrier)

    def _allgather(self, _user, src, n, dst):
        try:
            data = ctypes.string_at(src, n)
            got = list(self.coll.allgather(data))
            if len(got) != self.size:
                raise ValueError(f"allgather returned {len(got)} entries for a group of {self.size} ranks")
            for r, b in enumerate(got):
                b = bytes(b)
                if len(b) != n:
                    raise ValueError(f"allgather returned {len(b)} bytes for rank {r}, this rank passed {n}: "
                                     "every rank passes the same length")
                ctypes.memmove(dst + r * n, b, n)
            return 0
        except BaseException as e:  # nothing may unwind into the library
            self.error = e
            return -1

    def _barrier(self, _user):
        try:
            self.coll.barrier()
            return 0
        except BaseException as e:
            self.error = e
            return -1

    def take_error(self):
        e, self.error = self.error, None
        return e


def join_collectives(collectives, *, rank, size, local_rank=None, device=None):
    """Makes this rank's Group on the caller's own collectives instead of
    tprun's rendezvous: collectives has allgather(data: bytes) -> a list of
    every rank's bytes (index = rank; every rank passes the same length) and
    barrier(), both collectives over the same ranks numbered as rank and
    size say. local_rank (default: $LOCAL_RANK, else rank) is this rank's
    index on its node, device (default: local_rank) the CUDA device its ops
    use. A collective: every rank calls it.

    The callbacks run on the thread that makes the tprun call needing them,
    during that call. Memory handles cannot travel through the callbacks:
    when every rank runs on this node, the group passes them as descriptors
    over node-local Unix sockets of its own (the callbacks carry only a
    random key and the word that every rank listens), so the GPU mailbox
    shares POSIX handles and the host backend runs, as with join(). Across
    nodes they travel as bytes: the GPU mailbox uses CUDA fabric handles
    (an IMEX channel on every node), and the host backend cannot run
    (BackendUnavailableError)."""
    for name, v in (("rank", rank), ("size", size)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise ValueError(f"{name}: want an int, got {type(v).__name__}")
    if local_rank is None:
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
    if device is None:
        device = local_rank
    for name in ("allgather", "barrier"):
        if not callable(getattr(collectives, name, None)):
            raise ValueError(f"collectives: {type(collectives).__name__} has no {name}() method")
    cb = _Callbacks(collectives, size)
    h = ctypes.c_void_p()
    st = _from_collectives()(rank, size, local_rank, device, ctypes.byref(cb.struct), None, ctypes.byref(h))
    _raise_for(st, cb)
    return ExternalGroup(h.value, cb)


def _raise_for(status, cb):
    if status < 0:
        err = _lib.error(status)
        raise err from cb.take_error()


class ExternalGroup(Group):
    """A Group whose collectives go through the caller's framework
    (join_torch, join_collectives). An exception raised inside a callback
    is the cause (__cause__) of the error the call raises."""

    def __init__(self, handle, callbacks):
        self._callbacks = callbacks  # the C callbacks live as long as the group
        super().__init__(handle)

    def __repr__(self):
        return f"<tprun.Group rank {self.rank} of {self.size}, device {self.device}, through the caller's collectives>"

    def _chained(self, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except _lib.TprunError as e:
            cause = self._callbacks.take_error()
            if cause is not None:
                raise e from cause
            raise

    def barrier(self):
        return self._chained(super().barrier)

    def all_gather(self, data):
        return self._chained(super().all_gather, data)

    def up_projection(self, *args, **kwargs):
        return self._chained(super().up_projection, *args, **kwargs)


class TorchCollectives:
    """torch.distributed's all-gather and barrier on group (None: the
    default group), as join_collectives takes them. The bytes travel as
    uint8 tensors on the device the group's backend uses (CUDA for NCCL,
    the CPU otherwise)."""

    def __init__(self, group=None):
        import torch
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise ValueError("torch.distributed has no process group: call torch.distributed.init_process_group first, "
                             "or use tprun.join()")
        self.torch, self.dist, self.group = torch, dist, group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        backend = str(dist.get_backend(group)).lower()
        if "nccl" in backend:
            self.device = torch.device("cuda", torch.cuda.current_device())
        else:
            self.device = torch.device("cpu")

    def allgather(self, data):
        t = self.torch
        src = t.frombuffer(bytearray(data), dtype=t.uint8).to(self.device) if data else t.empty(0, dtype=t.uint8, device=self.device)
        outs = [t.empty(len(data), dtype=t.uint8, device=self.device) for _ in range(self.size)]
        self.dist.all_gather(outs, src, group=self.group)
        out = []
        for o in outs:
            c = o.cpu().contiguous()
            out.append(ctypes.string_at(c.data_ptr(), c.numel()) if c.numel() else b"")
        return out

    def barrier(self):
        self.dist.barrier(group=self.group)


def join_torch(group=None, *, local_rank=None, device=None):
    """Makes this rank's Group on torch.distributed's process group (group,
    or the default one) instead of tprun's rendezvous: the group's
    collectives (handle exchange, shape agreement, barriers) go through
    torch.distributed's all_gather and barrier. rank and size are the
    group's; local_rank defaults to $LOCAL_RANK (else the rank), device to
    the current CUDA device where CUDA is available (else local_rank).

    See join_collectives for what this route can and cannot do: on one
    node, memory handles as descriptors over node-local sockets and the
    host backend; across nodes, GPU mailboxes through CUDA fabric handles
    only (an IMEX channel on every node), no host backend."""
    coll = TorchCollectives(group)
    if device is None:
        torch = coll.torch
        device = torch.cuda.current_device() if torch.cuda.is_available() else None
    return join_collectives(coll, rank=coll.rank, size=coll.size, local_rank=local_rank, device=device)
