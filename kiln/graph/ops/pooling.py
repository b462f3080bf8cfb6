"""Pooling over the H and W axes of NCHW data: windowed, global and adaptive, max and avg.

Every pool has a `layout` attribute: "NCHW" (default) or the blocked "NCHW{b}c" of the
convolutions (kiln/graph/ops/conv_layout.py), data [N, C/b, H, W, b] pooled over H and W to a
result in the same layout; ConvertConvLayout sets it to keep blocked tensors blocked.

Example:
    >>> y = call("nn.max_pool2d", xb, pool_size=(3, 3), layout="NCHW16c")  # doctest: +SKIP
"""
from __future__ import annotations

from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType
from .define import cpu, topi_compute
from .relations import is_known, padding4, pair, tensor


def pool_out(size, kernel, stride, pad_lo, pad_hi, dilation, ceil_mode):
    """Output length of a pooling window along one axis, as PyTorch computes it: in ceil mode
    a last window that would start in the trailing padding is dropped.

    Example:
        >>> pool_out(112, 3, 2, 1, 1, 1, False), pool_out(6, 3, 2, 0, 0, 1, True)
        (56, 3)
    """
    span = size + pad_lo + pad_hi - dilation * (kernel - 1) - 1
    if not is_known(span):
        return span // stride + 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_lo:
        out -= 1
    return out


def _nchw(t, layout="NCHW"):
    """The data type, checked against `layout` ("NCHW" or "NCHW{b}c")."""
    from ...topi.nn.conv2d_nchwc import parse_channel_layout
    from ...topi.utils import TopiError
    t = tensor(t, "data")
    try:
        block = parse_channel_layout(layout)
    except TopiError:
        raise GraphTypeError(f"layout must be 'NCHW' or 'NCHW<b>c', got {layout!r}") from None
    if not block and t.ndim != 4:
        raise GraphTypeError(f"data must be 4-d (NCHW), got rank {t.ndim}")
    if block and (t.ndim != 5 or t.shape[4] != block):
        raise GraphTypeError(f"data must be 5-d {layout} (last axis {block}), got shape "
                             f"{t.shape}")
    return t


def _pool_rel(types, attrs):
    data = _nchw(types[0], attrs.layout)
    kh, kw = pair(attrs.pool_size, "pool_size", minimum=1)
    sh, sw = pair(attrs.strides, "strides", minimum=1)
    dh, dw = pair(attrs.dilation, "dilation", minimum=1)
    pt, pl, pb, pr = padding4(attrs.padding)
    if not isinstance(attrs.ceil_mode, bool):
        raise GraphTypeError(f"ceil_mode must be a bool, got {attrs.ceil_mode!r}")
    n, c, h, w = data.shape[:4]
    oh = pool_out(h, kh, sh, pt, pb, dh, attrs.ceil_mode)
    ow = pool_out(w, kw, sw, pl, pr, dw, attrs.ceil_mode)
    if any(is_known(d) and d <= 0 for d in (oh, ow)):
        raise GraphTypeError(f"the output would be empty ({oh}x{ow}): pool_size {(kh, kw)} "
                             f"does not fit the padded {h}x{w} input")
    return TensorType((n, c, oh, ow) + data.shape[4:], data.dtype)


def _pool_kwargs(kind):
    def kwargs(a, t):
        out = {"kernel": a.pool_size, "strides": a.strides, "padding": padding4(a.padding),
               "dilation": a.dilation, "pool_type": kind, "ceil_mode": a.ceil_mode,
               "layout": a.layout}
        if kind == "avg":
            out["count_include_pad"] = a.count_include_pad
        return out
    return kwargs


_POOL_ATTRS = {"pool_size": REQUIRED, "strides": (1, 1), "padding": (0, 0, 0, 0),
               "dilation": (1, 1), "ceil_mode": False, "layout": "NCHW"}
register_op("nn.max_pool2d", type_rel=_pool_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=1, attrs=dict(_POOL_ATTRS),
            compute=topi_compute("nn.pooling:pool2d", _pool_kwargs("max")),
            schedules=cpu("x86.pooling:schedule_pool"),
            doc="max over pool_size windows of NCHW data (padding never wins)")
register_op("nn.avg_pool2d", type_rel=_pool_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=1, attrs={**_POOL_ATTRS, "count_include_pad": False},
            compute=topi_compute("nn.pooling:pool2d", _pool_kwargs("avg")),
            schedules=cpu("x86.pooling:schedule_pool"),
            doc="mean over pool_size windows of NCHW data; count_include_pad counts padding "
                "in the divisor")


def _global_rel(types, attrs):
    data = _nchw(types[0], attrs.layout)
    return TensorType(data.shape[:2] + (1, 1) + data.shape[4:], data.dtype)


for _kind in ("max", "avg"):
    register_op(f"nn.global_{_kind}_pool2d", type_rel=_global_rel,
                pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=1,
                attrs={"layout": "NCHW"},
                compute=topi_compute("nn.pooling:global_pool2d",
                                     lambda a, t, k=_kind: {"pool_type": k,
                                                            "layout": a.layout}),
                schedules=cpu("x86.pooling:schedule_global_pool"),
                doc=f"{_kind} over all of H and W of NCHW data; output (N, C, 1, 1)")


def _adaptive_size(attrs, h, w):
    size = attrs.output_size
    if isinstance(size, int) or size is None:
        size = (size, size)
    if not isinstance(size, tuple) or len(size) not in (1, 2):
        raise GraphTypeError(f"output_size must be an int or a pair, got {size!r}")
    if len(size) == 1:
        size = size * 2
    out = tuple(full if s is None else s for s, full in zip(size, (h, w)))
    for s in out:
        if not is_known(s) or isinstance(s, bool) or s < 1:
            raise GraphTypeError(f"output_size entries must be positive ints (or None for the "
                                 f"input's size), got {attrs.output_size!r}")
    return out


def _adaptive_rel(types, attrs):
    data = _nchw(types[0], attrs.layout)
    oh, ow = _adaptive_size(attrs, data.shape[2], data.shape[3])
    return TensorType(data.shape[:2] + (oh, ow) + data.shape[4:], data.dtype)


for _kind in ("max", "avg"):
    register_op(f"nn.adaptive_{_kind}_pool2d", type_rel=_adaptive_rel,
                pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=1,
                attrs={"output_size": REQUIRED, "layout": "NCHW"},
                compute=topi_compute("nn.pooling:adaptive_pool2d",
                                     lambda a, t, k=_kind: {"output_size": tuple(t.shape[2:4]),
                                                            "pool_type": k,
                                                            "layout": a.layout}),
                schedules=cpu("x86.pooling:schedule_adaptive_pool"),
                doc=f"{_kind} over PyTorch's adaptive windows to output_size (h, w)")
