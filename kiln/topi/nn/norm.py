"""Normalizations: layer_norm, group_norm, instance_norm (statistics computed here, two-pass:
mean, then the mean of squared deviations) and batch_norm for inference (running statistics).

layer_norm / group_norm / instance_norm outputs carry the tag "layer_norm" (a row-wise anchor
for kiln.topi.x86.schedule_layer_norm) with attrs {"axis": first normalized axis} and, for the
grouped forms, {"groups": G}. batch_norm is a broadcast expression (tag "broadcast") that
fuses like any injective op.

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((8, 64), name="x")
    >>> g = te.placeholder((64,), name="g"); b = te.placeholder((64,), name="b")
    >>> y = topi.nn.layer_norm(x, g, b, axis=-1, eps=1e-5)
"""
from __future__ import annotations

from ... import te
from ...tir import dtype as dt
from .. import tags
from ..elemwise import check_tensor
from ..transform import normalize_axis
from ..utils import TopiError, get_const_tuple, prod


def _check_float(x, name):
    check_tensor(x, name)
    if not dt.is_float(x.dtype):
        raise TopiError(f"{name} needs a floating-point tensor, got {x.name} of dtype {x.dtype}")


def _check_param(p, shape, x, name, what):
    if p is None:
        return
    check_tensor(p, name, what)
    if get_const_tuple(p.shape) != tuple(shape):
        raise TopiError(f"{name}: {what} has shape {get_const_tuple(p.shape)}, expected {tuple(shape)}")
    if p.dtype != x.dtype:
        raise TopiError(f"{name}: {what} dtype {p.dtype} differs from the input dtype {x.dtype}")


def _norm_axes(x, axis, name):
    """An int is ONNX's axis (normalize axis..last); a list must name the trailing axes."""
    if isinstance(axis, int):
        start = normalize_axis(axis, x.ndim, name)
        return tuple(range(start, x.ndim))
    axes = tuple(sorted(normalize_axis(a, x.ndim, name) for a in axis))
    if not axes or axes != tuple(range(x.ndim - len(axes), x.ndim)):
        raise TopiError(f"{name}: axes {tuple(axis)} must be the trailing axes of the "
                        f"{x.ndim}-D input")
    return axes


def _stats(x, lead_shape, reduce_shape, index, name, reduce_axes):
    """Mean and mean squared deviation over `reduce_shape` for each position of `lead_shape`;
    index(lead, red) maps the two to an index of x. Returns (mean, var) as functions of the
    leading indices (two reduction stages, scaled by 1/count where they are read)."""
    inv = 1.0 / prod(reduce_shape)
    # Which input axes are reduced (contiguous trailing ones here): the x86 schedule reads it.
    attrs = {"reduce_axes": tuple(reduce_axes), "input_ndim": x.ndim}

    def axes():
        return [te.reduce_axis((0, d), name=f"k{j}") for j, d in enumerate(reduce_shape)]

    def fsum(*lead):
        ks = axes()
        return te.sum(x(*index(lead, [k.var for k in ks])), axis=ks)

    total = te.compute(lead_shape, fsum, name=f"{name}_sum", tag=tags.COMM_REDUCE, attrs=attrs)

    def fvar(*lead):
        ks = axes()
        d = x(*index(lead, [k.var for k in ks])) - total(*lead) * inv
        return te.sum(d * d, axis=ks)

    sq = te.compute(lead_shape, fvar, name=f"{name}_var", tag=tags.COMM_REDUCE, attrs=attrs)
    return (lambda *lead: total(*lead) * inv), (lambda *lead: sq(*lead) * inv)


def layer_norm(x, gamma=None, beta=None, axis=-1, eps: float = 1e-5):
    """(x - mean) / sqrt(var + eps) * gamma + beta, statistics over the normalized axes: an int
    `axis` normalizes axis..last (ONNX LayerNormalization), a list names the trailing axes
    (torch's normalized_shape). gamma / beta have the normalized shape, or are None.

    Example:
        >>> y = layer_norm(te.placeholder((4, 16), name="x"), None, None, axis=-1)
    """
    _check_float(x, "layer_norm")
    axes = _norm_axes(x, axis, "layer_norm")
    shape = get_const_tuple(x.shape)
    norm_shape = shape[axes[0]:]
    _check_param(gamma, norm_shape, x, "layer_norm", "gamma")
    _check_param(beta, norm_shape, x, "layer_norm", "beta")
    lead = axes[0]
    mean, var = _stats(x, shape[:lead], norm_shape, lambda l, r: tuple(l) + tuple(r), "layer_norm",
                       axes)

    def fcompute(*i):
        lo, hi = i[:lead], i[lead:]
        y = (x(*i) - mean(*lo)) * te.rsqrt(var(*lo) + eps)
        if gamma is not None:
            y = y * gamma(*hi)
        if beta is not None:
            y = y + beta(*hi)
        return y

    return te.compute(x.shape, fcompute, name="layer_norm", tag=tags.LAYER_NORM,
                      attrs={"axis": lead})


def group_norm(x, num_groups: int, gamma=None, beta=None, eps: float = 1e-5):
    """torch.nn.functional.group_norm on (N, C, *spatial): statistics per sample and group of
    C / num_groups channels; gamma / beta are per channel (C,), or None.

    Example:
        >>> y = group_norm(te.placeholder((2, 6, 4, 4), name="x"), 3)
    """
    _check_float(x, "group_norm")
    if x.ndim < 2:
        raise TopiError(f"group_norm: input {x.name} needs (N, C, ...) dimensions, got {x.ndim}")
    shape = get_const_tuple(x.shape)
    channels = shape[1]
    if not isinstance(num_groups, int) or num_groups <= 0 or channels % num_groups:
        raise TopiError(f"group_norm: {channels} channels cannot be split into {num_groups} groups")
    _check_param(gamma, (channels,), x, "group_norm", "gamma")
    _check_param(beta, (channels,), x, "group_norm", "beta")
    cg = channels // num_groups
    spatial = shape[2:]

    def index(lead, red):
        n, g = lead
        return (n, g * cg + red[0], *red[1:])

    mean, var = _stats(x, (shape[0], num_groups), (cg, *spatial), index, "group_norm",
                       range(1, x.ndim))

    def fcompute(*i):
        n, c = i[0], i[1]
        g = c // cg if cg != 1 else c
        y = (x(*i) - mean(n, g)) * te.rsqrt(var(n, g) + eps)
        if gamma is not None:
            y = y * gamma[c]
        if beta is not None:
            y = y + beta[c]
        return y

    return te.compute(x.shape, fcompute, name="group_norm", tag=tags.LAYER_NORM,
                      attrs={"axis": 1, "groups": num_groups})


def instance_norm(x, gamma=None, beta=None, eps: float = 1e-5):
    """torch.nn.functional.instance_norm without running statistics: group_norm with one
    channel per group.

    Example:
        >>> y = instance_norm(te.placeholder((2, 3, 5, 5), name="x"))
    """
    _check_float(x, "instance_norm")
    if x.ndim < 3:
        raise TopiError(f"instance_norm: input {x.name} needs (N, C, spatial...) dimensions")
    return group_norm(x, get_const_tuple(x.shape)[1], gamma, beta, eps)


def batch_norm(x, gamma, beta, moving_mean, moving_var, axis: int = 1, eps: float = 1e-5):
    """Inference batch normalization: (x - mean[c]) / sqrt(var[c] + eps) * gamma[c] + beta[c],
    c the index along `axis`; gamma / beta may be None (scale 1, shift 0).

    Example:
        >>> c = [te.placeholder((3,), name=n) for n in "gbmv"]
        >>> y = batch_norm(te.placeholder((2, 3, 4, 4), name="x"), *c)
    """
    _check_float(x, "batch_norm")
    axis = normalize_axis(axis, x.ndim, "batch_norm")
    channels = get_const_tuple(x.shape)[axis]
    for p, what in ((gamma, "gamma"), (beta, "beta"), (moving_mean, "moving_mean"),
                    (moving_var, "moving_var")):
        _check_param(p, (channels,), x, "batch_norm", what)
    if moving_mean is None or moving_var is None:
        raise TopiError("batch_norm: moving_mean and moving_var are required for inference")

    def fcompute(*i):
        c = i[axis]
        scale = te.rsqrt(moving_var[c] + eps)
        if gamma is not None:
            scale = scale * gamma[c]
        y = (x(*i) - moving_mean[c]) * scale
        return y + beta[c] if beta is not None else y

    return te.compute(x.shape, fcompute, name="batch_norm", tag=tags.BROADCAST)
