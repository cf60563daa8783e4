"""ctypes binding of libtprun.so (include/tprun.h is the reference).

The library is found through TPRUN_LIB (a path to the file) or beside this
package (python/tprun/libtprun.so, where the documented build puts it).
"""

import builtins
import ctypes
import os
import threading
import weakref

ABI_VERSION = 1  # TPRUN_ABI_VERSION this binding was written against

OK = 0
EINVAL = -1
EABORTED = -2
ETIMEOUT = -3
EUNAVAILABLE = -4
EBUSY = -5
ECLOSED = -6
EINTERNAL = -7

DEVICE_GROUP = -1
DEVICE_HOST = -2

BUILD_COMMAND = "go build -buildmode=c-shared -o python/tprun/libtprun.so ./cmd/libtprun"


class TprunError(RuntimeError):
    """A failure reported by libtprun. status is the TPRUN_E* code,
    status_name its name, ranks the ranks the failure blames (ascending,
    possibly empty) and rank the first of them, or None."""

    def __init__(self, message, status=EINTERNAL, ranks=()):
        super().__init__(message)
        self.status = status
        self.ranks = tuple(ranks)
        self.rank = self.ranks[0] if self.ranks else None

    @property
    def status_name(self):
        # The library names its codes (tprun_status_name); an error can
        # exist only after the library loaded, but for a LibraryError.
        return lib().tprun_status_name(self.status).decode()


class InvalidArgumentError(TprunError, ValueError):
    """TPRUN_EINVAL: an argument the library refused (a shape every rank
    passed, a bad launch environment)."""


class PeerError(TprunError):
    """TPRUN_EABORTED: the job failed because of another rank (it died, left,
    aborted, or passed another argument), or an earlier failure broke the
    op. rank names the peer when one is to blame."""


class PeerTimeoutError(PeerError, builtins.TimeoutError):
    """TPRUN_ETIMEOUT: a peer's slice did not arrive within the op's
    deadline: the peer stalled. rank is the first rank that was missing,
    ranks all of them."""


class BackendUnavailableError(TprunError):
    """TPRUN_EUNAVAILABLE: the backend cannot run here (no GPU, or a device
    call on the host backend)."""


class BusyError(TprunError):
    """TPRUN_EBUSY: another call of the same op is running."""


class ClosedError(TprunError):
    """TPRUN_ECLOSED: the op or group was closed."""


class InternalError(TprunError):
    """TPRUN_EINTERNAL: anything else."""


class LibraryError(TprunError, OSError):
    """libtprun.so cannot be found or loaded, or is of another interface
    version."""

    status_name = "TPRUN_EINTERNAL"  # no library to ask


_CLASSES = {
    EINVAL: InvalidArgumentError,
    EABORTED: PeerError,
    ETIMEOUT: PeerTimeoutError,
    EUNAVAILABLE: BackendUnavailableError,
    EBUSY: BusyError,
    ECLOSED: ClosedError,
    EINTERNAL: InternalError,
}

_lock = threading.Lock()
_lib = None

# The open ops by handle, for the PyTorch custom op, which gets the handle
# as an int argument.
ops = weakref.WeakValueDictionary()

_c_int, _c_size, _c_double, _c_ptr, _c_char_p = ctypes.c_int, ctypes.c_size_t, ctypes.c_double, ctypes.c_void_p, ctypes.c_char_p
_P = ctypes.POINTER

# name: (result type, argument types). Handles and every data pointer are
# void* here: the library sees the same bits.
_PROTOTYPES = {
    "tprun_version": (_c_char_p, []),
    "tprun_abi_version": (_c_int, []),
    "tprun_last_error": (_c_char_p, []),
    "tprun_last_error_rank": (_c_int, []),
    "tprun_last_error_ranks": (_c_int, [_P(_c_int), _c_int]),
    "tprun_status_name": (_c_char_p, [_c_int]),
    "tprun_join": (_c_int, [_P(_c_ptr)]),
    "tprun_group_rank": (_c_int, [_c_ptr]),
    "tprun_group_size": (_c_int, [_c_ptr]),
    "tprun_group_local_rank": (_c_int, [_c_ptr]),
    "tprun_group_device": (_c_int, [_c_ptr]),
    "tprun_group_barrier": (_c_int, [_c_ptr]),
    "tprun_group_allgather": (_c_int, [_c_ptr, _c_ptr, _c_size, _c_ptr]),
    "tprun_group_abort": (_c_int, [_c_ptr, _c_char_p]),
    "tprun_group_close": (_c_int, [_c_ptr]),
    "tprun_op_create": (_c_int, [_c_ptr, _c_int, _c_int, _c_int, _c_int, _P(_c_ptr)]),
    "tprun_op_create_ex": (_c_int, [_c_ptr, _c_int, _c_int, _c_int, _c_int, _c_double, _c_char_p, _P(_c_ptr)]),
    "tprun_op_set_weight_host": (_c_int, [_c_ptr, _c_ptr, _c_size]),
    "tprun_op_set_weight_device": (_c_int, [_c_ptr, _c_ptr]),
    "tprun_op_step": (_c_int, [_c_ptr, _c_int, _c_ptr, _c_ptr, _c_size, _c_ptr, _c_ptr]),
    "tprun_op_step_host": (_c_int, [_c_ptr, _c_int, _c_ptr, _c_ptr, _c_size, _c_ptr]),
    "tprun_op_step_weight": (_c_int, [_c_ptr, _c_int, _c_ptr, _c_ptr, _c_ptr, _c_size, _c_ptr, _c_ptr]),
    "tprun_op_step_host_weight": (_c_int, [_c_ptr, _c_int, _c_ptr, _c_ptr, _c_ptr, _c_size, _c_ptr]),
    "tprun_packed_weight_len": (_c_int, [_c_int, _c_int, _P(_c_size)]),
    "tprun_mailbox_bytes": (_c_int, [_c_int, _c_int, _P(_c_size)]),
    "tprun_pack_weight": (_c_int, [_c_ptr, _c_ptr, _c_int, _c_int]),
    "tprun_op_synchronize": (_c_int, [_c_ptr, _c_ptr]),
    "tprun_op_check": (_c_int, [_c_ptr]),
    "tprun_op_backend": (_c_char_p, [_c_ptr]),
    "tprun_op_backend_reason": (_c_char_p, [_c_ptr]),
    "tprun_op_close": (_c_int, [_c_ptr]),
}


def library_path():
    """The path libtprun.so is loaded from: $TPRUN_LIB, else beside this
    package."""
    return os.environ.get("TPRUN_LIB") or os.path.join(os.path.dirname(os.path.abspath(__file__)), "libtprun.so")


def lib():
    """The loaded library, loaded on first use (one per process)."""
    global _lib
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib = _load()
    return _lib


def _load():
    path = library_path()
    where = "TPRUN_LIB=" + path if os.environ.get("TPRUN_LIB") else path
    if not os.path.exists(path) and os.environ.get("TPRUN_LIB"):
        raise LibraryError(f"libtprun.so not found at {where}: point TPRUN_LIB at a built libtprun.so, or unset it"
                           f" to load it from beside the package ({os.path.dirname(os.path.abspath(__file__))}), where"
                           " `pip install ./python` puts it")
    if not os.path.exists(path):
        raise LibraryError(f"libtprun.so not found at {where}; install the package from the tprun repository with"
                           f" `pip install ./python` (it builds the library with Go), or build it there with: {BUILD_COMMAND}"
                           " (or set TPRUN_LIB to its path)")
    try:
        l = ctypes.CDLL(path)
    except OSError as e:
        raise LibraryError(f"loading libtprun.so from {where}: {e}") from e
    for name, (res, args) in _PROTOTYPES.items():
        try:
            f = getattr(l, name)
        except AttributeError as e:
            raise LibraryError(f"{where} lacks {name}: a library of another version; rebuild it with: {BUILD_COMMAND}") from e
        f.restype, f.argtypes = res, args
    v = l.tprun_abi_version()
    if v != ABI_VERSION:
        raise LibraryError(f"{where} has C interface version {v}, this package needs {ABI_VERSION}; rebuild it with: {BUILD_COMMAND}")
    return l


def error(status):
    """The exception for a negative status just returned on this thread."""
    l = lib()
    msg = (l.tprun_last_error() or b"").decode("utf-8", "replace") or l.tprun_status_name(status).decode()
    n = l.tprun_last_error_ranks(None, 0)
    ranks = ()
    if n > 0:
        buf = (ctypes.c_int * n)()
        l.tprun_last_error_ranks(buf, n)
        ranks = tuple(buf)
    return _CLASSES.get(status, InternalError)(msg, status, ranks)


def check(status):
    """Raises the exception for status if it is negative; returns it
    otherwise."""
    if status < 0:
        raise error(status)
    return status
