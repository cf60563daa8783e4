"""PyTorch side of the op, imported on the first tensor the package sees.

A step with tensors goes through the custom op torch.ops.tprun.up_projection
(latent, shared, out!, op_id), so that torch.compile treats it as one opaque
call that writes out, and CUDA graph capture records what it queues on the
current stream. The checks that need only shapes, dtypes and devices run
before it (they trace); those that need addresses (alignment, overlap) run
inside it.
"""

import torch

from . import _lib


def _check_bf16(name, t):
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: want a torch.Tensor like latent, got {type(t).__name__}")
    if t.dtype != torch.bfloat16:
        raise ValueError(f"{name}: dtype {t.dtype}: want torch.bfloat16")
    if t.dim() != 2:
        raise ValueError(f"{name}: {t.dim()} dimensions (shape {tuple(t.shape)}): want 2")


def _where(op):
    return "the host backend" if op.device is None else f"cuda:{op.device}"


def _check_device(name, t, op):
    """A tensor's device must be the op's CUDA device, or the CPU (the host
    step, which every backend runs)."""
    d = t.device
    if d.type == "cpu":
        return
    if d.type != "cuda":
        raise ValueError(f"{name}: on {d}: want the CPU or the op's CUDA device")
    if op.device is None:
        raise ValueError(f"{name}: on {d}, but the op runs {_where(op)}: pass CPU tensors")
    if d.index != op.device:
        raise ValueError(f"{name}: on {d}, but the op runs on {_where(op)}")


def weight_pointer(op, w):
    """Checks a weight tensor and returns (address, on_host)."""
    _check_bf16("weight", w)
    if tuple(w.shape) != (op.shard, op.latent):
        raise ValueError(f"weight: shape {tuple(w.shape)}: want (shard, latent) = ({op.shard}, {op.latent}), "
                         f"this rank's rows of the [{op.hidden}, {op.latent}] weight")
    if not w.is_contiguous():
        raise ValueError("weight: not contiguous")
    _check_device("weight", w, op)
    if w.device.type == "cpu":
        return w.data_ptr(), True
    if w.data_ptr() % 16:
        raise ValueError(f"weight: address {w.data_ptr():#x} is not 16-byte aligned")
    # The op copies on its own stream: what wrote w must have finished.
    torch.cuda.current_stream(w.device).synchronize()
    return w.data_ptr(), False


def call(op, latent, shared, out):
    """Checks a step's tensors, allocates out if needed, and runs the step
    through the custom op."""
    _check_bf16("latent", latent)
    m = latent.shape[0]
    if latent.shape[1] != op.latent:
        raise ValueError(f"latent: shape {tuple(latent.shape)}: want (M, {op.latent})")
    if not 1 <= m <= op.max_m:
        raise ValueError(f"latent: M = {m} rows: want 1..{op.max_m} (max_m)")
    if not latent.is_contiguous():
        raise ValueError("latent: not contiguous")
    _check_device("latent", latent, op)
    _check_bf16("shared", shared)
    if shared.device != latent.device:
        raise ValueError(f"shared: on {shared.device}, latent on {latent.device}: want one device")
    if shared.shape[0] != m or shared.shape[1] not in (op.shard, op.hidden):
        raise ValueError(f"shared: shape {tuple(shared.shape)}: want (M, shard) = ({m}, {op.shard}), this rank's slice, "
                         f"or (M, hidden) = ({m}, {op.hidden}), the whole residual")
    if shared.stride(1) != 1 or (m > 1 and shared.stride(0) < shared.shape[1]):
        raise ValueError(f"shared: strides {shared.stride()}: want contiguous rows (stride (S, 1), S >= {shared.shape[1]})")
    if latent.device.type == "cuda" and m > 1 and shared.stride(0) % 8:
        raise ValueError(f"shared: row stride {shared.stride(0)}: want a multiple of 8 (16-byte aligned rows)")
    if out is None:
        out = torch.empty((m, op.hidden), dtype=torch.bfloat16, device=latent.device)
    else:
        _check_bf16("out", out)
        if tuple(out.shape) != (m, op.hidden):
            raise ValueError(f"out: shape {tuple(out.shape)}: want (M, hidden) = ({m}, {op.hidden})")
        if not out.is_contiguous():
            raise ValueError("out: not contiguous")
        if out.device != latent.device:
            raise ValueError(f"out: on {out.device}, latent on {latent.device}: want one device")
    _up_projection(latent, shared, out, op._handle())
    return out


def run(op, latent, shared, out):
    """The step itself, on real tensors: addresses, then the C call."""
    m = latent.shape[0]
    cuda = latent.device.type == "cuda"
    lp, sp, outp = latent.data_ptr(), shared.data_ptr(), out.data_ptr()
    # A single row's stride is whatever the tensor says; its width does.
    stride = shared.stride(0) if m > 1 else shared.shape[1]
    if shared.shape[1] != op.shard:  # the whole residual: this rank's columns
        sp += 2 * op.rank * op.shard
    if cuda:
        for name, p in (("latent", lp), ("shared", sp), ("out", outp)):
            if p % 16:
                raise ValueError(f"{name}: address {p:#x} is not 16-byte aligned")
    end = outp + 2 * m * op.hidden
    for name, a, b in (("latent", lp, lp + 2 * m * op.latent), ("shared", sp, sp + 2 * ((m - 1) * stride + op.shard))):
        if outp < b and a < end:
            raise ValueError(f"out: overlaps {name}")
    if cuda:
        stream = torch.cuda.current_stream(latent.device).cuda_stream
        op._step_device(m, lp, sp, stride, outp, stream)
    else:
        op._step_host(m, lp, sp, stride, outp)


def _impl(latent: torch.Tensor, shared: torch.Tensor, out: torch.Tensor, op: int) -> None:
    o = _lib.ops.get(op)
    if o is None:
        raise _lib.ClosedError(f"tprun: op {op} is closed", _lib.ECLOSED)
    run(o, latent, shared, out)


if hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
    _up_projection = torch.library.custom_op("tprun::up_projection", mutates_args=("out",))(_impl)

    @_up_projection.register_fake
    def _(latent, shared, out, op):
        return None

else:  # an older PyTorch: no torch.compile support, the same eager call
    _up_projection = _impl
