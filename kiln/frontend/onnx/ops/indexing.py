"""Indexing ONNX ops: TopK, OneHot, Compress, GatherND, the Scatter family, ReverseSequence,
NonZero, Unique and MaxUnpool.

Compress, NonZero and Unique have an output shape that depends on an input's values (the
condition; the whole input): that input must be known when importing (ctx.static), and only
the shape is derived from it here, while kiln computes the values.
"""
from __future__ import annotations

import math

import numpy as np

from ....graph.ops.indexing import SCATTER_REDUCTIONS
from ..context import split_outputs
from ..registry import converter
from .tensor import _axis, reshape_to


@converter("TopK")
def _topk(ctx):
    shape = ctx.shape(0)
    if not shape:
        ctx.error("input 0 must have rank 1 or more, got a scalar")
    axis = _axis(ctx, int(ctx.attr("axis", -1)), len(shape))
    if ctx.opset >= 10:
        k = ctx.static_ints(1, "k")
        if len(k) != 1:
            ctx.error(f"input 1 (k) must hold one value, got {k}")
        (k,) = k
    else:
        k = int(ctx.attr("k"))
    if not 0 <= k <= shape[axis]:
        ctx.error(f"k = {k} is out of range [0, {shape[axis]}] for axis {axis} of shape "
                  f"{tuple(shape)}")
    if k == 0:
        ctx.unsupported("k=0 (empty outputs)")
    # sorted=0 leaves the order open: the sorted order is one of the allowed ones.
    out = ctx.op("topk", ctx.input(0), k=k, axis=axis, largest=bool(ctx.attr("largest", 1)))
    return split_outputs(out, 2)


def _scalar_of(ctx, values, k):
    """values[k] as a 0-d value (folded when values is known)."""
    return ctx.op("take", values, np.asarray(k, dtype=np.int64), axis=0)


@converter("OneHot")
def _one_hot(ctx):
    shape = ctx.shape(0)
    depth = np.asarray(ctx.static(1, "depth")).reshape(-1)
    if depth.size != 1 or not depth[0] >= 1 or depth[0] != math.floor(depth[0]):
        ctx.error(f"input 1 (depth) must be one positive integer, got {depth.tolist()}")
    depth = int(depth[0])
    if ctx.shape(2) not in ((2,), (1, 2)):
        ctx.error(f"input 2 (values) must hold [off_value, on_value], got shape {ctx.shape(2)}")
    axis = _axis(ctx, int(ctx.attr("axis", -1)), len(shape) + 1)
    idx = ctx.input(0)
    dtype = ctx.dtype(0)
    # Compare in the indices' own type, as the spec does: a float index that is not a whole
    # number matches no position.
    if not dtype.startswith("uint"):
        idx = ctx.op("where", ctx.op("less", idx, ctx.scalar(0, idx)),
                     ctx.op("add", idx, ctx.scalar(depth, idx)), idx)
    positions = np.arange(depth).astype(dtype).reshape((depth,) + (1,) * (len(shape) - axis))
    hot = ctx.op("equal", ctx.op("expand_dims", idx, axis=axis), positions)
    values = reshape_to(ctx, ctx.input(2), (2,))
    return ctx.op("where", hot, _scalar_of(ctx, values, 1), _scalar_of(ctx, values, 0))


@converter("Compress")
def _compress(ctx):
    shape = ctx.shape(0)
    condition = np.asarray(ctx.static(1, "condition, which sets the output's shape"))
    condition = condition.astype(bool).reshape(-1)
    x = ctx.input(0)
    if ctx.attr("axis", None) is None:
        x, axis = reshape_to(ctx, x, (math.prod(shape),)), 0
        n = math.prod(shape)
    else:
        axis = _axis(ctx, int(ctx.attr("axis")), len(shape))
        n = shape[axis]
    if condition[n:].any():
        ctx.error(f"condition selects index {int(np.flatnonzero(condition)[-1])}, beyond the "
                  f"{n} entries it selects from")
    picked = np.flatnonzero(condition[:n])
    if picked.size == 0:
        ctx.unsupported("a condition that selects nothing (an empty output)")
    if picked.size == n:
        return x
    return ctx.op("take", x, picked.astype(np.int64), axis=axis)


@converter("GatherND")
def _gather_nd(ctx):
    return ctx.op("gather_nd", ctx.input(0), ctx.input(1),
                  batch_dims=int(ctx.attr("batch_dims", 0)))


def _reduction(ctx) -> str:
    reduction = ctx.attr("reduction", "none")
    if reduction not in SCATTER_REDUCTIONS:
        ctx.error(f"reduction {reduction!r} is not one of {', '.join(SCATTER_REDUCTIONS)}")
    return reduction


@converter("ScatterElements", "Scatter")
def _scatter_elements(ctx):
    axis = _axis(ctx, int(ctx.attr("axis", 0)), ctx.ndim(0))
    return ctx.op("scatter_elements", ctx.input(0), ctx.input(1), ctx.input(2), axis=axis,
                  reduction=_reduction(ctx))


@converter("ScatterND")
def _scatter_nd(ctx):
    return ctx.op("scatter_nd", ctx.input(0), ctx.input(1), ctx.input(2),
                  reduction=_reduction(ctx))


@converter("ReverseSequence")
def _reverse_sequence(ctx):
    if ctx.ndim(0) < 2:
        ctx.error(f"input 0 must have rank 2 or more, got {ctx.ndim(0)}")
    return ctx.op("reverse_sequence", ctx.input(0), ctx.input(1),
                  batch_axis=int(ctx.attr("batch_axis", 1)),
                  time_axis=int(ctx.attr("time_axis", 0)))


def _value_shaped_input(ctx, what):
    """Input 0 as known at import (its values decide the output shape): checked for the
    cases kiln cannot compile (a scalar, an empty tensor, NaN entries)."""
    value = np.asarray(ctx.static(0, what))
    if value.ndim == 0 or value.size == 0:
        ctx.unsupported("a scalar or empty input")
    if value.dtype.kind == "f" and np.isnan(value).any():
        ctx.unsupported("NaN entries")
    return value


@converter("NonZero")
def _nonzero(ctx):
    value = _value_shaped_input(ctx, "the tensor whose nonzero count is the output's shape")
    count = int(np.count_nonzero(value))
    if count == 0:
        ctx.unsupported("an input without nonzero entries (an empty output)")
    return ctx.op("nonzero", ctx.input(0), count=count)


@converter("Unique")
def _unique(ctx):
    value = _value_shaped_input(ctx, "X, whose distinct entries set the outputs' shape")
    axis = ctx.attr("axis", None)
    if axis is None:
        count = np.unique(value).size
    else:
        axis = _axis(ctx, int(axis), value.ndim)
        count = np.unique(value, axis=axis).shape[axis]
    out = ctx.op("unique", ctx.input(0), count=int(count), axis=axis,
                 sorted=bool(ctx.attr("sorted", 1)))
    return split_outputs(out, 4)


def _pooled_size(ctx, shape):
    """The unpooled H, W that MaxPool with this node's kernel, strides and pads inverts."""
    kernel = [int(k) for k in ctx.attr("kernel_shape")]
    strides = [int(s) for s in ctx.attr("strides", [1, 1])]
    pads = [int(p) for p in ctx.attr("pads", [0, 0, 0, 0])]
    if len(kernel) != 2 or len(strides) != 2 or len(pads) != 4:
        ctx.error(f"kernel_shape {kernel}, strides {strides} or pads {pads} do not match 2 "
                  f"spatial axes")
    sizes = tuple((shape[2 + i] - 1) * strides[i] - pads[i] - pads[i + 2] + kernel[i]
                  for i in range(2))
    if min(sizes) < 1:
        ctx.error(f"kernel_shape {kernel}, strides {strides} and pads {pads} give an empty "
                  f"output {sizes}")
    return sizes


@converter("MaxUnpool")
def _max_unpool(ctx):
    shape = ctx.shape(0)
    if len(shape) != 4:
        ctx.unsupported(f"{len(shape) - 2}-d")
    pooled = _pooled_size(ctx, shape)
    out = pooled
    if ctx.has_input(2):
        full = ctx.static_ints(2, "output_shape")
        if len(full) != 4 or tuple(full[:2]) != tuple(shape[:2]) or \
                full[2] < pooled[0] or full[3] < pooled[1]:
            ctx.error(f"output_shape {full} must keep N, C {tuple(shape[:2])} and hold the "
                      f"unpooled size {pooled}")
        out = tuple(full[2:])
    return ctx.op("nn.max_unpool2d", ctx.input(0), ctx.input(1), pooled_size=pooled,
                  output_size=out)
