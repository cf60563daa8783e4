"""tprun: the fused tensor-parallel up-projection inside a Python rank.

    import tprun

    g = tprun.join()                      # this rank of the job (tprun, torchrun, srun, mpirun)
    op = g.up_projection(hidden, latent, max_m, weight)   # weight: this rank's [hidden/size, latent] bf16 rows
    out = op(latent, shared)              # [M, hidden]: every rank's slice, on every rank
    op.close(); g.close()

A model's layers of one shape share one op, each layer holding its weight
as op.pack(its weight) and naming it with every step:

    op = g.up_projection(hidden, latent, max_m, device=g.device)   # no weight: name the device
    layers = [op.pack(w) for w in weights]   # tprun.PackedWeight, one per layer
    out = op(latent, shared, weight=layers[i])

With PyTorch, weight, latent, shared and out are bf16 tensors: CUDA tensors
run on the current stream (also inside torch.cuda.graph capture and
torch.compile, where the op is the custom op torch.ops.tprun.up_projection);
CPU tensors run the host backend. Without PyTorch they are buffers of bf16
bit patterns (array('H'), memoryview, bytes, bytearray): see to_bf16 and
from_bf16. Every rank makes the same calls in the same order.

Run the rank program under a launcher: `tprun --tp N -- python3 rank.py`
or `torchrun --nproc-per-node N rank.py` (one node). A process that already
has a torch.distributed group may join through it instead:
tprun.join_torch() (on one node the memory handles travel over node-local
sockets, as under join(); across nodes the GPU mailbox shares CUDA fabric
handles). README.md beside this file covers shapes, errors, the Go runtime
inside the process and signals.
"""

import atexit
import builtins
import ctypes
import os
import sys
import weakref
from array import array

from . import _lib
from ._bf16 import bf16_from_float, bf16_to_float, f32_round, from_bf16, to_bf16
from ._lib import (
    BackendUnavailableError,
    BusyError,
    ClosedError,
    InternalError,
    InvalidArgumentError,
    LibraryError,
    PeerError,
    PeerTimeoutError,
    TprunError,
)

# The errors are defined in _lib, beside the status codes, but belong to the
# package: tracebacks and reprs name them tprun.PeerError, not
# tprun._lib.PeerError.
for _cls in (TprunError, InvalidArgumentError, PeerError, PeerTimeoutError, BackendUnavailableError, BusyError,
             ClosedError, InternalError, LibraryError):
    _cls.__module__ = __name__
del _cls

__all__ = [
    "join",
    "join_torch",
    "join_collectives",
    "Group",
    "UpProjection",
    "PackedWeight",
    "mailbox_bytes",
    "packed_weight_len",
    "version",
    "library_path",
    "TprunError",
    "InvalidArgumentError",
    "PeerError",
    "PeerTimeoutError",
    "BackendUnavailableError",
    "BusyError",
    "ClosedError",
    "InternalError",
    "LibraryError",
    "bf16_from_float",
    "bf16_to_float",
    "f32_round",
    "to_bf16",
    "from_bf16",
]

library_path = _lib.library_path


def version():
    """The library's version line (libtprun.so's tprun_version)."""
    return _lib.lib().tprun_version().decode()


# Groups still open when the interpreter exits are closed then (_close_at_exit):
# a rank that ends without close() leaves the job as one that calls it does,
# instead of dropping its connection, which the launcher would report as a
# rank lost. Only by the process that joined: a child forked from a rank
# holds a copy of the group but is not the rank, and closing it there would
# tell the job that the rank left while it still runs.
_open_groups = weakref.WeakSet()


# An interpreter that ends on an unhandled exception aborts its open groups
# at exit instead of closing them: a clean leave would let the peers wait
# out their steps' deadline for a slice that never comes, while an abort
# fails their waiting steps at once with a PeerError naming this rank and
# the exception. The interpreter records that exception (sys.last_exc,
# sys.last_value) before it calls sys.excepthook and runs the exit
# handlers, whatever hook an engine has installed, so nothing here replaces
# the hook. An interactive interpreter (a prompt, python -i, IPython)
# records the exceptions raised at its prompt too, which do not end it:
# there a group is closed at exit, as it is for sys.exit().
def _unhandled_exception():
    """The exception the interpreter is ending on, or None."""
    if hasattr(sys, "ps1") or sys.flags.interactive or sys.flags.inspect or getattr(builtins, "__IPYTHON__", False):
        return None
    e = getattr(sys, "last_exc", None) or getattr(sys, "last_value", None)
    return e if isinstance(e, BaseException) else None


def _exception_reason(kind, value):
    """What an abort says of an exception: its class and message, short."""
    msg = str(value)
    if len(msg) > 200:
        msg = msg[:200] + "..."
    return f"{kind.__name__}: {msg}" if msg else kind.__name__


def _ends_cleanly(kind, value):
    """Whether an exception leaving a with block is a clean end: none, a
    SystemExit of status 0, or a GeneratorExit (a generator that holds the
    block closed by its consumer)."""
    if kind is None or issubclass(kind, GeneratorExit):
        return True
    return issubclass(kind, SystemExit) and value is not None and value.code in (None, 0)


@atexit.register
def _close_at_exit():
    unhandled = _unhandled_exception()
    for g in list(_open_groups):
        if g._pid != os.getpid():
            continue
        if unhandled is not None and g._h is not None:
            try:
                g.abort(f"exited on an unhandled {_exception_reason(type(unhandled), unhandled)}")
            except TprunError:
                pass  # the job has failed already, or its hub is gone; close below
        try:
            g.close()
        except TprunError as e:
            print(f"tprun: closing rank {g.rank}'s group at exit: {e}", file=sys.stderr)


def join():
    """Joins the job the environment describes and returns this rank's
    Group once every rank has joined (a collective)."""
    l = _lib.lib()
    h = ctypes.c_void_p()
    _lib.check(l.tprun_join(ctypes.byref(h)))
    return Group(h.value)


class Group:
    """This rank's view of the job: rank, size, local_rank, device (the CUDA
    device it should use), a few collectives, and the ops made from it.
    Closing it (close(), or leaving a with block) closes its ops; a with
    block left by an exception aborts the job first, naming it."""

    def __init__(self, handle):
        self._h = handle
        l = _lib.lib()
        self.rank = _lib.check(l.tprun_group_rank(handle))
        self.size = _lib.check(l.tprun_group_size(handle))
        self.local_rank = _lib.check(l.tprun_group_local_rank(handle))
        self.device = _lib.check(l.tprun_group_device(handle))
        self._pid = os.getpid()
        _open_groups.add(self)

    def __repr__(self):
        return f"<tprun.Group rank {self.rank} of {self.size}, device {self.device}>"

    def _handle(self):
        if self._h is None:
            raise ClosedError("tprun: the group is closed", _lib.ECLOSED)
        return self._h

    def barrier(self):
        """Returns when every rank has called it."""
        _lib.check(_lib.lib().tprun_group_barrier(self._handle()))

    def all_gather(self, data):
        """Every rank contributes data (bytes, the same length on every
        rank); returns the list of every rank's, index = rank."""
        data = bytes(data)
        n = len(data)
        out = ctypes.create_string_buffer(max(n * self.size, 1))
        src = ctypes.create_string_buffer(data, max(n, 1))
        _lib.check(_lib.lib().tprun_group_allgather(self._handle(), src, n, out))
        raw = out.raw
        return [raw[r * n:(r + 1) * n] for r in range(self.size)]

    def abort(self, reason=""):
        """Fails the job on every rank, naming this rank and reason."""
        _lib.check(_lib.lib().tprun_group_abort(self._handle(), str(reason).encode() or None))

    def up_projection(self, hidden, latent, max_m, weight=None, *, device=None, backend=None, deadline=None):
        """Creates the fused up-projection (a collective: every rank passes
        the same hidden, latent and max_m) and gives it weight, this rank's
        [hidden/size, latent] rows of the up-projection weight, if given.

        device picks where it runs: None follows weight (a CUDA tensor: its
        device; a CPU tensor, a buffer or no weight: the host backend),
        "host", or a CUDA ordinal (int or torch.device). On a CUDA device
        the ranks choose the mailbox backend together: backend None or
        "auto" lets them (the host one where some rank has no GPU);
        "unicast", "multicast" or "host" asks for one. deadline is how long
        a step waits for the peers' slices, in seconds (None: 10 s)."""
        for name, v in (("hidden", hidden), ("latent", latent), ("max_m", max_m)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise ValueError(f"{name}: want an int, got {type(v).__name__}")
        implied = device is None
        if implied:
            device = _weight_device(weight)
        dev = _device_code(device)
        if deadline is not None and not (isinstance(deadline, (int, float)) and deadline > 0):
            raise ValueError(f"deadline: want a positive number of seconds or None, got {deadline!r}")
        if backend is not None and not isinstance(backend, str):
            raise ValueError(f"backend: want None, 'auto', 'unicast', 'multicast' or 'host', got {backend!r}")
        if backend == "host":
            dev = _lib.DEVICE_HOST
        l = _lib.lib()
        h = ctypes.c_void_p()
        _lib.check(l.tprun_op_create_ex(self._handle(), hidden, latent, max_m, dev, float(deadline or 0),
                                        (backend or "").encode(), ctypes.byref(h)))
        op = UpProjection(self, h.value, hidden, latent, max_m, dev)
        if implied and dev == _lib.DEVICE_HOST and backend in (None, "", "auto"):
            op.backend_reason = ("no device given and the weight is in host memory (a CPU tensor or a buffer)"
                                 if weight is not None else "no device and no weight given: host memory")
        if weight is not None:
            try:
                op.set_weight(weight)
            except BaseException:
                op.close()
                raise
        return op

    def close(self):
        """Closes the group's ops and leaves the job (after this rank's last
        collective). Closing twice does nothing."""
        h, self._h = self._h, None
        if h is not None:
            _lib.check(_lib.lib().tprun_group_close(h))

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        # Left by an exception: abort, so that the peers' waiting steps
        # fail at once naming it, instead of at their deadline.
        if not _ends_cleanly(kind, value) and self._h is not None:
            try:
                self.abort(f"left its with block on {_exception_reason(kind, value)}")
            except TprunError:
                pass  # the job has failed already; close below
        self.close()
        return False


def _is_tensor(x):
    return type(x).__module__.startswith("torch") and hasattr(x, "data_ptr")


# The PyTorch side (tprun._torch), loaded once torch is in use: an op made
# while torch is imported loads it, as does the first tensor argument. A
# step then finds it here without an import, which torch.compile traces.
_T = None


def _load_torch():
    global _T
    if _T is None:
        from . import _torch

        _T = _torch
    return _T


def _weight_device(weight):
    if _is_tensor(weight) and weight.device.type == "cuda":
        return weight.device.index if weight.device.index is not None else _torch_lib().current_device()
    return "host"


def _device_code(device):
    if device == "host":
        return _lib.DEVICE_HOST
    if _is_torch_device(device):
        if device.type == "cpu":
            return _lib.DEVICE_HOST
        if device.type == "cuda":
            return device.index if device.index is not None else _torch_lib().current_device()
    if isinstance(device, int) and not isinstance(device, bool) and device >= 0:
        return device
    raise ValueError(f"device: want None, 'host', a CUDA ordinal or a torch.device, got {device!r}")


def _is_torch_device(x):
    return type(x).__module__.startswith("torch") and type(x).__name__ == "device"


def _torch_lib():
    return _load_torch().torch


class UpProjection:
    """The fused up-projection of this rank. Call it with latent [M,
    latent] and shared (this rank's [M, shard] slice of the residual, or the
    whole [M, hidden] residual, whose columns rank*shard.. are taken) to get
    the whole [M, hidden] block. Attributes: hidden, latent, max_m, shard,
    rank, size, backend ("host", "unicast" or "multicast"), backend_reason,
    device (a CUDA ordinal, or None on the host backend)."""

    def __init__(self, group, handle, hidden, latent, max_m, dev):
        self._group, self._h = group, handle
        self.hidden, self.latent, self.max_m = hidden, latent, max_m
        self.rank, self.size = group.rank, group.size
        self.shard = hidden // group.size
        l = _lib.lib()
        b = l.tprun_op_backend(handle)
        if b is None:
            raise _lib.error(_lib.EINTERNAL)
        self.backend = b.decode()
        self.backend_reason = (l.tprun_op_backend_reason(handle) or b"").decode()
        self.device = None if self.backend == "host" else (group.device if dev == _lib.DEVICE_GROUP else dev)
        _lib.ops[handle] = self
        if "torch" in sys.modules:
            _load_torch()

    def __repr__(self):
        where = "host" if self.device is None else f"cuda:{self.device}"
        return (f"<tprun.UpProjection hidden {self.hidden} latent {self.latent} max_m {self.max_m}, "
                f"rank {self.rank} of {self.size}, {self.backend} on {where}>")

    def _handle(self):
        if self._h is None:
            raise ClosedError("tprun: the op is closed", _lib.ECLOSED)
        return self._h

    def set_weight(self, weight):
        """Gives the op this rank's weight, [shard, latent] bf16 row-major: a
        CUDA tensor (on the op's device), a CPU tensor, or a buffer of
        shard*latent bf16 bit patterns. The op keeps its own copy."""
        n = self.shard * self.latent
        l = _lib.lib()
        if _is_tensor(weight):
            ptr, host = _load_torch().weight_pointer(self, weight)
            if host:
                _lib.check(l.tprun_op_set_weight_host(self._handle(), ptr, n))
            else:
                _lib.check(l.tprun_op_set_weight_device(self._handle(), ptr))
            return
        buf = _host_buffer("weight", weight, n, writable=False)
        _lib.check(l.tprun_op_set_weight_host(self._handle(), buf.ptr, n))

    def pack(self, weight, out=None):
        """Returns weight, this rank's [shard, latent] bf16 rows of one
        layer's weight, as a tprun.PackedWeight to pass with this op's steps
        (op(latent, shared, weight=w)), or any op's of the same shape and
        device. Not a collective. The PackedWeight holds its own copy:

        - a CUDA tensor on the op's device: packed there with PyTorch ops
          (the kernels' layout, a pure permutation), queued on the current
          stream; the new tensor is PyTorch's memory, freed with the
          PackedWeight;
        - a CPU tensor for an op on a CUDA device: packed on the host by the
          library (tprun_pack_weight), then copied to the op's device;
        - a CPU tensor or a buffer of bf16 bit patterns for an op on the host
          backend: kept row-major, the layout its host step takes.

        out, for an op on a CUDA device: a contiguous bf16 tensor on that
        device of packed_weight_len(shard, latent) elements to pack into
        instead of new memory (say, a slice of one allocation that holds
        every layer's weights); the PackedWeight then holds a view of it."""
        self._handle()
        if _is_tensor(weight):
            return _load_torch().pack(self, weight, out)
        if out is not None:
            raise ValueError(f"out: {type(weight).__name__} weights are packed by the host backend, which keeps them "
                             "row-major: pack without out")
        if self.device is not None:
            raise ValueError(f"weight: got {type(weight).__name__}: an op on cuda:{self.device} packs a CUDA or CPU tensor")
        n = self.shard * self.latent
        buf = _host_buffer("weight", weight, n, writable=False)
        data = array("H")
        data.frombytes(ctypes.string_at(buf.ptr, 2 * n))
        return PackedWeight(self, data, packed=False)

    def __call__(self, latent, shared, out=None, weight=None):
        """One step: returns out (allocated when None) holding the whole
        [M, hidden] block. Tensors: on the op's CUDA device the step is
        queued on the current stream and returns at once; on the CPU it runs
        the host step. Buffers: M is len(latent) / latent; shared holds M*shard
        or M*hidden elements; out, if given, M*hidden; returns out or a new
        array('H'). weight, a PackedWeight from pack(), is this step's weight
        instead of the op's own; it must stay alive until the step has run
        (on a CUDA stream, or for every replay of a graph that holds it)."""
        t = _T
        if t is not None and isinstance(latent, t.torch.Tensor):
            return t.call(self, latent, shared, out, weight)
        if _is_tensor(latent):
            return _load_torch().call(self, latent, shared, out, weight)
        return self._call_buffers(latent, shared, out, weight)

    step = __call__

    def _weight_data(self, weight, device_step):
        """Checks weight, a PackedWeight or None, for a step of this op (on
        the device or the host) and returns what holds its data, or None."""
        if weight is None:
            return None
        if not isinstance(weight, PackedWeight):
            raise ValueError(f"weight: got {type(weight).__name__}: want a tprun.PackedWeight; call op.pack(weight) once "
                             "per layer and pass what it returns with every step")
        if weight.data is None:
            raise ValueError("weight: the PackedWeight is closed")
        if (weight.hidden, weight.latent, weight.shard) != (self.hidden, self.latent, self.shard):
            raise ValueError(f"weight: packed for hidden {weight.hidden}, latent {weight.latent} (shard {weight.shard}); "
                             f"this op is hidden {self.hidden}, latent {self.latent} (shard {self.shard})")
        if weight.device != self.device:
            raise ValueError(f"weight: packed for {_where(weight.device)}, this op runs on {_where(self.device)}")
        if weight.packed and not device_step:
            raise ValueError(f"weight: packed on {_where(weight.device)} for device steps; this step's tensors are on "
                             "the CPU (the host step takes a weight only on the host backend)")
        return weight.data

    def _call_buffers(self, latent, shared, out, weight=None):
        lat = _host_buffer("latent", latent, None, writable=False, empty_ok=True)  # M = 0 is named below
        m, rem = divmod(lat.count, self.latent)
        if rem or not 1 <= m <= self.max_m:
            raise ValueError(f"latent: {lat.count} elements: want M*latent = M*{self.latent} with M in 1..{self.max_m}")
        sh = _host_buffer("shared", shared, None, writable=False)
        sptr, stride = self._shared_layout("shared", sh.count, m, sh.ptr, 2)
        if out is None:
            out = array("H", bytes(2 * m * self.hidden))
        o = _host_buffer("out", out, m * self.hidden, writable=True)
        w = self._weight_data(weight, device_step=False)
        wptr = None
        if w is not None:
            wptr = w.data_ptr() if _is_tensor(w) else w.buffer_info()[0]
        self._step_host(m, lat.ptr, sptr, stride, o.ptr, wptr)
        return out

    def _shared_layout(self, name, count, m, ptr, itemsize):
        """The pointer and row stride of this rank's slice of a packed
        shared buffer of count elements."""
        if count == m * self.shard:
            return ptr, self.shard
        if count == m * self.hidden:
            return ptr + itemsize * self.rank * self.shard, self.hidden
        raise ValueError(f"{name}: {count} elements: want M*shard = {m}*{self.shard} (this rank's slice) "
                         f"or M*hidden = {m}*{self.hidden} (the whole residual)")

    def _step_host(self, m, latent, shared, stride, out, weight=None):
        l = _lib.lib()
        if weight is None:
            _lib.check(l.tprun_op_step_host(self._handle(), m, latent, shared, stride, out))
        else:
            _lib.check(l.tprun_op_step_host_weight(self._handle(), m, latent, weight, shared, stride, out))

    def _step_device(self, m, latent, shared, stride, out, stream, weight=None):
        l = _lib.lib()
        if weight is None:
            _lib.check(l.tprun_op_step(self._handle(), m, latent, shared, stride, out, stream))
        else:
            _lib.check(l.tprun_op_step_weight(self._handle(), m, latent, weight, shared, stride, out, stream))

    def synchronize(self, stream=None):
        """Waits for the steps queued on stream (default: the current CUDA
        stream of the op's device) and raises the first failure among them."""
        if stream is None:
            stream = 0 if self.device is None else _torch_lib().cuda.current_stream(self.device).cuda_stream
        _lib.check(_lib.lib().tprun_op_synchronize(self._handle(), getattr(stream, "cuda_stream", stream)))

    def check(self):
        """Raises, without waiting, a failure of steps queued earlier that
        has become known (e.g. after CUDA graph replays)."""
        _lib.check(_lib.lib().tprun_op_check(self._handle()))

    def close(self):
        """Releases the op. Closing twice, or after the group, does
        nothing."""
        h, self._h = self._h, None
        if h is not None:
            _lib.ops.pop(h, None)
        if h is not None and self._group._h is not None:
            _lib.check(_lib.lib().tprun_op_close(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _where(device):
    return "the host backend" if device is None else f"cuda:{device}"


class PackedWeight:
    """One layer's weight for this rank, made by UpProjection.pack(), to
    pass with the steps of any op of the same shape and device:
    op(latent, shared, weight=w). Attributes: hidden, latent, shard (the
    op's shape), device (the CUDA ordinal it lives on, or None: host
    memory), packed (True: the kernels' packed layout, on the device, of
    packed_weight_len(shard, latent) elements; False: row-major [shard,
    latent] in host memory, for the host backend), data (the tensor or
    array('H') that holds it; None once closed). close() drops data."""

    def __init__(self, op, data, packed):
        self.hidden, self.latent, self.shard = op.hidden, op.latent, op.shard
        self.device, self.packed, self.data = op.device, packed, data

    def __repr__(self):
        layout = "packed" if self.packed else "row-major"
        state = ", closed" if self.data is None else ""
        return (f"<tprun.PackedWeight shard {self.shard} latent {self.latent} (hidden {self.hidden}), {layout} on "
                f"{_where(self.device)}{state}>")

    def close(self):
        """Drops the data (its memory is freed once nothing else holds it):
        a step given this PackedWeight afterwards raises ValueError."""
        self.data = None


def packed_weight_len(shard, latent):
    """The number of bf16 elements of a [shard, latent] weight in the
    kernels' packed layout (tprun_packed_weight_len)."""
    n = ctypes.c_size_t()
    _lib.check(_lib.lib().tprun_packed_weight_len(shard, latent, ctypes.byref(n)))
    return n.value


def mailbox_bytes(hidden, max_m):
    """The bytes of one rank's mailbox for an op of hidden and max_m
    (tprun_mailbox_bytes): every rank holds one per op. Needs no group."""
    n = ctypes.c_size_t()
    _lib.check(_lib.lib().tprun_mailbox_bytes(hidden, max_m, ctypes.byref(n)))
    return n.value


def _pack_host(dst, src, shard, latent):
    """The library's host packing (tprun_pack_weight) from address src,
    row-major [shard, latent], into address dst (packed_weight_len
    elements)."""
    _lib.check(_lib.lib().tprun_pack_weight(dst, src, shard, latent))


class _HostBuffer:
    """A C view of a Python buffer: ptr (an address) and count (uint16
    elements). A read-only buffer is a copy; a writable one is used in
    place. The view holds the buffer until it is dropped."""

    def __init__(self, ptr, count, keep):
        self.ptr, self.count, self._keep = ptr, count, keep


def _host_buffer(name, obj, count, writable, empty_ok=False):
    """Checks obj as a host buffer of bf16 bit patterns (format 'H', or raw
    bytes of even length), C-contiguous, 2-byte aligned, of count elements
    when count is not None."""
    try:
        mv = memoryview(obj)
    except TypeError:
        raise ValueError(f"{name}: want a bf16 tensor or a buffer of bf16 bit patterns (array('H'), memoryview, bytes), "
                         f"got {type(obj).__name__} (tprun.to_bf16(floats) makes one from floats)") from None
    if not mv.c_contiguous:
        raise ValueError(f"{name}: the buffer is not contiguous")
    if mv.format in ("H", "=H", "<H") and mv.itemsize == 2:
        pass
    elif mv.format in ("B", "b", "c") and mv.itemsize == 1:
        if mv.nbytes % 2:
            raise ValueError(f"{name}: {mv.nbytes} bytes: want an even number (2 bytes per bf16)")
    else:
        raise ValueError(f"{name}: buffer format {mv.format!r}: want 'H' (uint16 bf16 bit patterns) or bytes")
    n = mv.nbytes // 2
    if count is not None and n != count:
        raise ValueError(f"{name}: {n} elements: want {count}")
    if n == 0 and not empty_ok:
        raise ValueError(f"{name}: empty buffer")
    if mv.readonly:
        if writable:
            raise ValueError(f"{name}: the buffer is read-only")
        c = (ctypes.c_char * mv.nbytes).from_buffer_copy(mv)
        return _HostBuffer(ctypes.addressof(c), n, c)
    c = (ctypes.c_char * mv.nbytes).from_buffer(mv.cast("B") if mv.format != "B" else mv)
    ptr = ctypes.addressof(c)
    if ptr % 2:
        raise ValueError(f"{name}: address {ptr:#x} is not 2-byte aligned")
    return _HostBuffer(ptr, n, (c, mv))


# Joining through the caller's own process group; imported last, as it
# extends Group.
from ._external import join_collectives, join_torch  # noqa: E402
