"""PyTorch side of the op, imported on the first tensor the package sees.

A step with tensors goes through the custom op torch.ops.tprun.up_projection
(latent, shared, out!, op_id, weight=None), so that torch.compile treats it
as one opaque call that writes out, and CUDA graph capture records what it
queues on the current stream. The checks that need only shapes, dtypes and
devices run before it (they trace); those that need addresses (alignment,
overlap) run inside it. weight is the data of a PackedWeight (op.pack), the
step's weight instead of the op's own.
"""

from typing import Optional

import torch

from . import _lib, _where  # tprun/__init__.py loads this module once it is whole


def _check_bf16(name, t):
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"{name}: want a torch.Tensor like latent, got {type(t).__name__}")
    if t.dtype != torch.bfloat16:
        raise ValueError(f"{name}: dtype {t.dtype}: want torch.bfloat16")
    if t.dim() != 2:
        raise ValueError(f"{name}: {t.dim()} dimensions (shape {tuple(t.shape)}): want 2")


def _check_device(name, t, op):
    """A tensor's device must be the op's CUDA device, or the CPU (the host
    step, which every backend runs)."""
    d = t.device
    if d.type == "cpu":
        return
    if d.type != "cuda":
        raise ValueError(f"{name}: on {d}: want the CPU or the op's CUDA device")
    if op.device is None:
        raise ValueError(f"{name}: on {d}, but the op runs {_where(op.device)}: pass CPU tensors")
    if d.index != op.device:
        raise ValueError(f"{name}: on {d}, but the op runs on {_where(op.device)}")


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


# The packed layout (kernel/skinny.h) is a permutation of the row-major
# weight padded to G*16 rows and C*32 columns (G = ceil(shard/16), C =
# ceil(latent/32)). Write row n = 16g + 8rh + rl and column k = 32c + 8kq +
# 4q + 2kp + kb (rh, q, kp, kb in 0..1; rl in 0..7; kq in 0..3): element
# (n, k) goes to (g*C + c)*512 + (q*32 + l)*8 + e with l = 4*(n%8) +
# (k%32)/8 = 4rl + kq and e = 2*(2*((k%4)/2) + (n%16)/8) + k%2 = 4kp + 2rh +
# kb, that is to
#
#     (g*C + c)*512 + q*256 + rl*32 + kq*8 + kp*4 + rh*2 + kb.
#
# So the padded [G*16, C*32] tensor viewed as [g, rh, rl, c, kq, q, kp, kb]
# (its row-major strides split the row and column indices exactly so), then
# permuted to [g, c, q, rl, kq, kp, rh, kb] and made contiguous, is the
# packed buffer. The zeros of the padding land where the layout wants them.
_PACK_VIEW = (2, 8, 4, 2, 2, 2)  # rh, rl | kq, q, kp, kb within a group and a chunk
_PACK_ORDER = (0, 3, 5, 2, 4, 6, 1, 7)  # g, c, q, rl, kq, kp, rh, kb


def pack_tensor(w, dst=None):
    """The packed layout of w, a bf16 [shard, latent] tensor, as a new
    contiguous 1-D tensor on w's device, or written into dst (a contiguous
    tensor of as many elements) and returned as its 1-D view; queued on the
    current stream when on CUDA: PyTorch ops only, no host round trip."""
    shard, latent = w.shape
    g, c = -(-shard // 16), -(-latent // 32)
    p = w.new_zeros((g * 16, c * 32))
    p[:shard, :latent] = w
    rh, rl, kq, q, kp, kb = _PACK_VIEW
    packed = p.view(g, rh, rl, c, kq, q, kp, kb).permute(*_PACK_ORDER)
    if dst is None:
        return packed.contiguous().view(-1)
    dst.view(packed.shape).copy_(packed)  # one permuting copy, no contiguous temporary
    return dst.view(-1)


def pack(op, w, out=None):
    """UpProjection.pack for a tensor: checks it (and out) and returns a
    PackedWeight."""
    from . import PackedWeight, _pack_host, packed_weight_len

    _check_bf16("weight", w)
    if tuple(w.shape) != (op.shard, op.latent):
        raise ValueError(f"weight: shape {tuple(w.shape)}: want (shard, latent) = ({op.shard}, {op.latent}), "
                         f"this rank's rows of the [{op.hidden}, {op.latent}] weight")
    _check_device("weight", w, op)
    w = w.detach()
    n = packed_weight_len(op.shard, op.latent)
    if out is not None:
        _check_pack_out(out, op, n)
    if w.device.type == "cuda":
        return PackedWeight(op, pack_tensor(w, out), packed=True)
    src = w.contiguous()
    if op.device is None:  # the host backend: its step takes the weight row-major
        return PackedWeight(op, src.clone() if src.data_ptr() == w.data_ptr() else src, packed=False)
    dst = torch.empty(n, dtype=torch.bfloat16)
    _pack_host(dst.data_ptr(), src.data_ptr(), op.shard, op.latent)
    if out is None:
        return PackedWeight(op, dst.to(torch.device("cuda", op.device)), packed=True)
    out.view(-1).copy_(dst)
    return PackedWeight(op, out.view(-1), packed=True)


def _check_pack_out(out, op, n):
    """out of UpProjection.pack: a contiguous bf16 tensor of n elements on
    the op's CUDA device, 16-byte aligned."""
    if not isinstance(out, torch.Tensor):
        raise ValueError(f"out: want a torch.Tensor, got {type(out).__name__}")
    if out.dtype != torch.bfloat16:
        raise ValueError(f"out: dtype {out.dtype}: want torch.bfloat16")
    if op.device is None:
        raise ValueError(f"out: the op runs {_where(op.device)}, which keeps its weights row-major: pack without out")
    if out.device.type != "cuda" or out.device.index != op.device:
        raise ValueError(f"out: on {out.device}, but the op runs on {_where(op.device)}")
    if out.numel() != n:
        raise ValueError(f"out: {out.numel()} elements: want packed_weight_len({op.shard}, {op.latent}) = {n}")
    if not out.is_contiguous():
        raise ValueError("out: not contiguous")
    if out.data_ptr() % 16:
        raise ValueError(f"out: address {out.data_ptr():#x} is not 16-byte aligned")


def call(op, latent, shared, out, weight=None):
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
    w = op._weight_data(weight, device_step=latent.device.type == "cuda")
    if w is not None and not isinstance(w, torch.Tensor):  # a buffer's PackedWeight, on the host backend
        w = torch.frombuffer(w, dtype=torch.int16).view(torch.bfloat16)
    if w is None:
        _up_projection(latent, shared, out, op._handle())
    else:
        _up_projection(latent, shared, out, op._handle(), w)
    return out


def run(op, latent, shared, out, weight=None):
    """The step itself, on real tensors: addresses, then the C call."""
    m = latent.shape[0]
    cuda = latent.device.type == "cuda"
    lp, sp, outp = latent.data_ptr(), shared.data_ptr(), out.data_ptr()
    # A single row's stride is whatever the tensor says; its width does.
    stride = shared.stride(0) if m > 1 else shared.shape[1]
    if shared.shape[1] != op.shard:  # the whole residual: this rank's columns
        sp += 2 * op.rank * op.shard
    operands = [("latent", lp, lp + 2 * m * op.latent), ("shared", sp, sp + 2 * ((m - 1) * stride + op.shard))]
    wp = None
    if weight is not None:
        wp = weight.data_ptr()
        operands.append(("weight", wp, wp + 2 * weight.numel()))
    if cuda:
        for name, p in (("latent", lp), ("shared", sp), ("out", outp), ("weight", wp)):
            if p is not None and p % 16:
                raise ValueError(f"{name}: address {p:#x} is not 16-byte aligned")
    end = outp + 2 * m * op.hidden
    for name, a, b in operands:
        if outp < b and a < end:
            raise ValueError(f"out: overlaps {name}")
    if cuda:
        stream = torch.cuda.current_stream(latent.device).cuda_stream
        op._step_device(m, lp, sp, stride, outp, stream, wp)
    else:
        op._step_host(m, lp, sp, stride, outp, wp)


def _impl(latent: torch.Tensor, shared: torch.Tensor, out: torch.Tensor, op: int,
          weight: Optional[torch.Tensor] = None) -> None:
    o = _lib.ops.get(op)
    if o is None:
        raise _lib.ClosedError(f"tprun: op {op} is closed", _lib.ECLOSED)
    run(o, latent, shared, out, weight)


if hasattr(torch, "library") and hasattr(torch.library, "custom_op"):
    _up_projection = torch.library.custom_op("tprun::up_projection", mutates_args=("out",))(_impl)

    @_up_projection.register_fake
    def _(latent, shared, out, op, weight=None):
        return None

else:  # an older PyTorch: no torch.compile support, the same eager call
    _up_projection = _impl
