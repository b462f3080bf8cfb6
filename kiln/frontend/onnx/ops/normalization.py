"""Normalization ONNX ops beyond nn.py's: RMSNormalization, GroupNormalization,
MeanVarianceNormalization, LRN and LpPool, and the small activations that go with them
(Hardmax, Shrink, Swish, SwiGLU).

All are compositions of catalog ops: statistics are `mean` reductions (two passes: the mean,
then the mean of squared deviations), windows are `nn.avg_pool2d`.
"""
from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ....graph.ops.pooling import pool_out
from ...common import FrontendError
from ..context import dtype_of, shape_of
from ..dtypes import kiln_dtype
from ..registry import converter
from .nn import _auto_pads, _spatial_attrs
from .tensor import reshape_to


# -- shared helpers --------------------------------------------------------------------------

def stash_type(ctx) -> str:
    """The kiln dtype of the `stash_type` attribute (float32 by default): the type ONNX gives
    a normalization's statistics.

    Example:
        >>> stash_type(ctx)                                        # doctest: +SKIP
        'float32'
    """
    stash = ctx.attr("stash_type", 1)
    try:
        dtype = kiln_dtype(stash, "stash_type")
    except FrontendError:
        ctx.unsupported(f"stash_type={stash}")
    if not dtype.startswith("float"):
        ctx.error(f"stash_type must be a floating-point type, got {dtype}")
    return dtype


def stash_dtype(ctx, dtype: str) -> str:
    """The dtype a normalization of `dtype` data computes its statistics in: the stash type,
    or the data's own dtype when that is wider, since stash_type exists to keep float16
    statistics from losing precision.

    Example:
        >>> stash_dtype(ctx, "float16"), stash_dtype(ctx, "float64")     # doctest: +SKIP
        ('float32', 'float64')
    """
    wide = stash_type(ctx)
    return wide if np.dtype(wide).itemsize > np.dtype(dtype).itemsize else dtype


def as_dtype(ctx, value, dtype: str):
    """value cast to dtype (no-op when it has it): as_dtype(ctx, x, "float32")."""
    return value if dtype_of(value) == dtype else ctx.op("cast", value, dtype=dtype)


def moments(ctx, x, axes: tuple):
    """(mean, x - mean, variance) of x over `axes`, kept as size-1 axes (two-pass variance,
    never negative).

    Example:
        >>> mean, centered, var = moments(ctx, x, (2, 3))       # doctest: +SKIP
    """
    mean = ctx.op("mean", x, axis=axes, keepdims=True)
    centered = ctx.op("subtract", x, mean)
    var = ctx.op("mean", ctx.op("multiply", centered, centered), axis=axes, keepdims=True)
    return mean, centered, var


def _trailing_axes(ctx, ndim: int) -> tuple:
    """The normalized axes [axis, ..., ndim - 1] of an `axis` attribute (default -1)."""
    axis = int(ctx.attr("axis", -1))
    if not -ndim <= axis < ndim:
        ctx.error(f"axis {axis} is out of range for an input of rank {ndim}")
    return tuple(range(axis % ndim, ndim))


# -- normalizations --------------------------------------------------------------------------

@converter("RMSNormalization")
def _rms_norm(ctx):
    x = ctx.input(0)
    dtype = ctx.dtype(0)
    axes = _trailing_axes(ctx, ctx.ndim(0))
    eps = float(ctx.attr("epsilon", 1e-5))
    xs = as_dtype(ctx, x, stash_dtype(ctx, dtype))
    square_mean = ctx.op("mean", ctx.op("multiply", xs, xs), axis=axes, keepdims=True)
    inv_rms = ctx.op("rsqrt", ctx.op("add", square_mean, ctx.scalar(eps, xs)))
    normalized = as_dtype(ctx, ctx.op("multiply", xs, inv_rms), dtype)
    return ctx.op("multiply", normalized, as_dtype(ctx, ctx.input(1), dtype))


@converter("GroupNormalization")
def _group_norm(ctx):
    x = ctx.input(0)
    shape, dtype = ctx.shape(0), ctx.dtype(0)
    groups = int(ctx.attr("num_groups"))
    if len(shape) < 2:
        ctx.error(f"input must have shape (N, C, ...), got {shape}")
    n, c = shape[:2]
    if groups <= 0 or c % groups:
        ctx.error(f"num_groups {groups} does not divide the {c} channels")
    # Opset 18 scales each group, opset 21 each channel.
    per = groups if ctx.opset < 21 else c
    for i, what in ((1, "scale"), (2, "bias")):
        if tuple(ctx.shape(i)) != (per,):
            ctx.error(f"{what} (input {i}) has shape {tuple(ctx.shape(i))}, expected ({per},)")
    eps = float(ctx.attr("epsilon", 1e-5))
    grouped = reshape_to(ctx, x, (n, groups, math.prod(shape[1:]) // groups))
    xs = as_dtype(ctx, grouped, stash_dtype(ctx, dtype))
    _, centered, var = moments(ctx, xs, (2,))
    inv_std = ctx.op("rsqrt", ctx.op("add", var, ctx.scalar(eps, xs)))
    normalized = as_dtype(ctx, ctx.op("multiply", centered, inv_std), dtype)
    normalized = reshape_to(ctx, normalized, (n, per, math.prod(shape) // max(n * per, 1)))
    scale = reshape_to(ctx, as_dtype(ctx, ctx.input(1), dtype), (per, 1))
    bias = reshape_to(ctx, as_dtype(ctx, ctx.input(2), dtype), (per, 1))
    return reshape_to(ctx, ctx.op("add", ctx.op("multiply", normalized, scale), bias), shape)


@converter("MeanVarianceNormalization")
def _mean_variance_norm(ctx):
    x, ndim = ctx.input(0), ctx.ndim(0)
    axes = [int(a) for a in ctx.attr("axes", [0, 2, 3])]
    if any(not -ndim <= a < ndim for a in axes):
        ctx.error(f"axes {axes} are out of range for an input of rank {ndim}")
    _, centered, var = moments(ctx, x, tuple(sorted({a % ndim for a in axes})))
    # (X - E[X]) / (sqrt(Var) + 1e-9), as the op's function body writes it.
    std = ctx.op("add", ctx.op("sqrt", var), ctx.scalar(1e-9, x))
    return ctx.op("divide", centered, std)


@converter("LRN")
def _lrn(ctx):
    x, shape = ctx.input(0), ctx.shape(0)
    size = int(ctx.attr("size"))
    if size < 1:
        ctx.error(f"size must be positive, got {size}")
    if len(shape) < 2:
        ctx.error(f"input must have shape (N, C, ...), got {shape}")
    alpha = float(ctx.attr("alpha", 1e-4))
    beta = float(ctx.attr("beta", 0.75))
    bias = float(ctx.attr("bias", 1.0))
    # alpha / size * (sum of squares over the channel window) = alpha * (their mean): an
    # average pool over channels with the padding counted, channels as the pooled H axis.
    rest = math.prod(shape[2:])
    squares = reshape_to(ctx, ctx.op("multiply", x, x), (shape[0], 1, shape[1], rest))
    lo = (size - 1) // 2
    window_mean = ctx.op("nn.avg_pool2d", squares, pool_size=(size, 1), strides=(1, 1),
                         padding=(lo, 0, size - 1 - lo, 0), count_include_pad=True)
    window_mean = reshape_to(ctx, window_mean, shape)
    base = ctx.op("add", ctx.scalar(bias, x), ctx.op("multiply", window_mean,
                                                      ctx.scalar(alpha, x)))
    return ctx.op("divide", x, ctx.op("power", base, ctx.scalar(beta, x)))


# -- LpPool ----------------------------------------------------------------------------------

class _Window(NamedTuple):
    """One spatial axis of a pooling window."""
    kernel: int
    stride: int
    dilation: int
    lo: int                 # padding before
    hi: int                 # padding after
    out: int                # output length

    def tap_counts(self, size: int) -> np.ndarray:
        """How many taps of each output window fall inside the padded input (fewer than
        `kernel` only where ceil_mode lets the last window run past the padding)."""
        extent = size + self.lo + self.hi
        return np.array([sum(1 for r in range(self.kernel)
                             if o * self.stride + r * self.dilation < extent)
                         for o in range(self.out)])


def _lp_windows(ctx, shape) -> list:
    """The _Window of each spatial axis of an LpPool node on an input of `shape`."""
    nspatial = len(shape) - 2
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    if nspatial < 1 or len(kernel) != nspatial:
        ctx.error(f"kernel_shape {kernel} does not match the {nspatial} spatial axes of an "
                  f"input of shape {shape}")
    strides, dilations, pads = _spatial_attrs(ctx, nspatial)
    pads = _auto_pads(ctx, shape[2:], kernel, strides, dilations, pads)
    ceil = bool(ctx.attr("ceil_mode", 0))
    windows = []
    for k in range(nspatial):
        kern, stride, dil = kernel[k], int(strides[k]), int(dilations[k])
        lo, hi = int(pads[k]), int(pads[nspatial + k])
        out = pool_out(shape[2 + k], kern, stride, lo, hi, dil, ceil)
        if out <= 0:
            ctx.error(f"kernel_shape {kernel} does not fit the padded input {shape}")
        windows.append(_Window(kern, stride, dil, lo, hi, out))
    return windows


def _window_mean(ctx, x, axes, windows):
    """x averaged (padding counted) over the windows of `axes` (the last two spatial axes,
    or one axis) with one nn.avg_pool2d: the axes before them become its channels."""
    shape = list(shape_of(x))
    first, last = axes[0], axes[-1]
    view = (1, math.prod(shape[:first]), shape[first],
            shape[last] if len(axes) == 2 else math.prod(shape[first + 1:]))
    # A single axis pools with a window of 1 along the view's last axis.
    windows2 = list(windows) + [_Window(1, 1, 1, 0, 0, view[3])] * (2 - len(windows))
    y = ctx.op("nn.avg_pool2d", reshape_to(ctx, x, view),
               pool_size=tuple(w.kernel for w in windows2),
               strides=tuple(w.stride for w in windows2),
               dilation=tuple(w.dilation for w in windows2),
               padding=(windows2[0].lo, windows2[1].lo, windows2[0].hi, windows2[1].hi),
               ceil_mode=bool(ctx.attr("ceil_mode", 0)), count_include_pad=True)
    for a, w in zip(axes, windows):
        shape[a] = w.out
    return reshape_to(ctx, y, shape)


@converter("LpPool")
def _lp_pool(ctx):
    x, shape = ctx.input(0), ctx.shape(0)
    p = int(ctx.attr("p", 2))
    if p < 1:
        ctx.error(f"p must be a positive integer, got {p}")
    windows = _lp_windows(ctx, shape)
    if p == 1:
        powered = ctx.op("abs", x)
    elif p == 2:
        powered = ctx.op("multiply", x, x)
    else:
        powered = ctx.op("power", ctx.op("abs", x), ctx.scalar(p, x))
    # Averaging is separable: the last two spatial axes in one 2-d pool, each earlier one alone.
    nspatial = len(windows)
    groups = [list(range(max(nspatial - 2, 0), nspatial))] + \
        [[a] for a in reversed(range(nspatial - 2))]
    mean = powered
    for axes in groups:
        mean = _window_mean(ctx, mean, [2 + a for a in axes], [windows[a] for a in axes])
    # The window sum: the average times the taps it averaged (the padding's zeros included).
    counts = np.ones((), dtype=np.int64)
    for size, w in zip(shape[2:], windows):
        counts = np.multiply.outer(counts, w.tap_counts(size))
    counts = counts.astype(dtype_of(x))
    total = ctx.op("multiply", mean, counts if np.ptp(counts) else ctx.scalar(counts.flat[0], x))
    if p == 1:
        return total
    if p == 2:
        return ctx.op("sqrt", total)
    return ctx.op("power", total, ctx.scalar(1.0 / p, x))


# -- activations -----------------------------------------------------------------------------

@converter("Hardmax")
def _hardmax(ctx):
    x, shape = ctx.input(0), ctx.shape(0)
    ndim = len(shape)
    axis = int(ctx.attr("axis", -1 if ctx.opset >= 13 else 1))
    if not -ndim <= axis < ndim:
        ctx.error(f"axis {axis} is out of range for an input of rank {ndim}")
    axis %= ndim
    if ctx.opset < 13:
        # Before opset 13 the input is seen as 2-d: [dims before axis] x [dims from axis].
        flat = reshape_to(ctx, x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
        return reshape_to(ctx, _one_hot_max(ctx, flat, 1), shape)
    return _one_hot_max(ctx, x, axis)


def _one_hot_max(ctx, x, axis: int):
    """1 at the first maximum of x along axis, 0 elsewhere (x's dtype)."""
    shape = shape_of(x)
    first = ctx.op("argmax", x, axis=axis, keepdims=True)
    positions = np.arange(shape[axis], dtype=np.int64).reshape(
        [shape[axis] if k == axis else 1 for k in range(len(shape))])
    return ctx.op("cast", ctx.op("equal", positions, first), dtype=dtype_of(x))


@converter("Shrink")
def _shrink(ctx):
    x, dtype = ctx.input(0), ctx.dtype(0)
    lambd = float(ctx.attr("lambd", 0.5))
    bias = float(ctx.attr("bias", 0.0))
    if dtype.startswith("float"):
        below, above = ctx.scalar(-lambd, x), ctx.scalar(lambd, x)
    elif dtype.startswith("int"):
        if bias != int(bias):
            ctx.unsupported(f"a fractional bias {bias} on {dtype} input")
        # For integers x < -lambd is x < ceil(-lambd), and x > lambd is x > floor(lambd).
        info = np.iinfo(dtype)
        below = ctx.scalar(np.clip(math.ceil(-lambd), info.min, info.max), x)
        above = ctx.scalar(np.clip(math.floor(lambd), info.min, info.max), x)
    else:
        ctx.unsupported(f"{dtype} input")
    shift = ctx.scalar(bias, x)
    upper = ctx.op("where", ctx.op("greater", x, above), ctx.op("subtract", x, shift),
                   ctx.scalar(0, x))
    return ctx.op("where", ctx.op("less", x, below), ctx.op("add", x, shift), upper)


def swish(ctx, x, alpha: float):
    """x * sigmoid(alpha * x), the Swish activation.

    Example:
        >>> y = swish(ctx, ctx.input(0), 1.0)                     # doctest: +SKIP
    """
    if alpha == 1.0:
        return ctx.op("nn.silu", x)
    return ctx.op("multiply", x, ctx.op("sigmoid", ctx.op("multiply", x, ctx.scalar(alpha, x))))


@converter("Swish")
def _swish(ctx):
    return swish(ctx, ctx.input(0), float(ctx.attr("alpha", 1.0)))


@converter("SwiGLU")
def _swiglu(ctx):
    gate, value = ctx.input(0), ctx.input(1)
    if tuple(ctx.shape(0)) != tuple(ctx.shape(1)) or ctx.dtype(0) != ctx.dtype(1):
        ctx.error(f"A {ctx.dtype(0)}{tuple(ctx.shape(0))} and B {ctx.dtype(1)}"
                  f"{tuple(ctx.shape(1))} must have one shape and dtype (no broadcasting)")
    return ctx.op("multiply", swish(ctx, gate, float(ctx.attr("alpha", 1.0))), value)
