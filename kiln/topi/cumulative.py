"""Cumulative sums and products along an axis (numpy.cumsum / cumprod, ONNX CumSum / CumProd),
inclusive or exclusive, forward or reversed.

kiln's te has no scan, so every output element is a reduction. Summing, for element j, the
j + 1 elements before it costs n^2 / 2 operations on an axis of length n. Here the axis is cut
into blocks of about sqrt(n) elements instead, in three stages:
    block_total[b]  = the reduction of block b;
    block_offset[b] = the reduction of block_total[c] for c < b;
    out[j]          = block_offset[j // B] reduced with the elements of j's block up to j,
about 2 n sqrt(n) operations (an axis of 10,000: 2e6 instead of 5e7). Axes of up to
`ONE_BLOCK` elements are one block (the last stage alone).

Integer sums and products wrap as a sequential loop's would (wrapping arithmetic is
associative); float results differ from a sequential loop by rounding only.

Example:
    >>> from kiln import te
    >>> x = te.placeholder((4, 100), name="x")
    >>> y = cumsum(x, axis=1, exclusive=True)
    >>> s = schedule_cumulative([y])
"""
from __future__ import annotations

import math

from .. import te
from .utils import TopiError, as_tensor_list, get_const_tuple, is_const_int, prod

ONE_BLOCK = 32
# Below this many innermost iterations a thread-pool launch costs more than the loop.
_PARALLEL_MIN_WORK = 8192


def cumsum(x, axis: int, exclusive: bool = False, reverse: bool = False):
    """Running sum along `axis`: out[j] = x[0] + ... + x[j] (x[j] left out when exclusive;
    summed from the end of the axis when reverse).

    Example:
        >>> y = cumsum(te.placeholder((3, 5), name="x"), axis=1, reverse=True)
    """
    return _scan(x, axis, exclusive, reverse, te.sum, "cumsum")


def cumprod(x, axis: int, exclusive: bool = False, reverse: bool = False):
    """Running product along `axis`: out[j] = x[0] * ... * x[j] (x[j] left out when exclusive;
    multiplied from the end of the axis when reverse).

    Example:
        >>> y = cumprod(te.placeholder((3, 5), name="x"), axis=0, exclusive=True)
    """
    return _scan(x, axis, exclusive, reverse, te.prod, "cumprod")


def _check(x, axis, name):
    if not isinstance(x, te.Tensor):
        raise TopiError(f"{name}: input must be a te.Tensor, got {type(x).__name__} {x!r}")
    if isinstance(axis, bool) or not isinstance(axis, int) or not -x.ndim <= axis < x.ndim:
        raise TopiError(f"{name}: axis {axis!r} is out of range for a tensor of rank {x.ndim}")
    axis %= x.ndim
    n = get_const_tuple(x.shape)[axis]
    if not is_const_int(n):
        raise TopiError(f"{name}: the length of axis {axis} must be static, got {n}")
    return axis, n


def _scan(x, axis, exclusive, reverse, reducer, name):
    axis, n = _check(x, axis, name)
    block = n if n <= ONE_BLOCK else math.isqrt(n - 1) + 1     # ceil(sqrt(n))
    blocks = -(-n // block) if n else 0

    def read(index, position):
        # x at `index` with the axis coordinate at scan position `position` (counted from
        # the end of the axis when reversed); clamped so that a masked-off read stays inside.
        source = list(index)
        position = te.min(position, n - 1)
        source[axis] = n - 1 - position if reverse else position
        return x[tuple(source)]

    def with_axis(index, value):
        index = list(index)
        index[axis] = value
        return tuple(index)

    offsets = None
    if blocks > 1:
        block_shape = with_axis(x.shape, blocks)
        t = te.reduce_axis((0, block), name="t")
        totals = te.compute(
            block_shape, lambda *i: reducer(read(i, i[axis] * block + t), axis=t,
                                            where=i[axis] * block + t < n),
            name=f"{name}_block_total")
        c = te.reduce_axis((0, blocks), name="c")
        offsets = te.compute(
            block_shape, lambda *i: reducer(totals[with_axis(i, c)], axis=c, where=c < i[axis]),
            name=f"{name}_block_offset")

    u = te.reduce_axis((0, block), name="u")

    def element(*i):
        position = n - 1 - i[axis] if reverse else i[axis]
        start = 0 if offsets is None else te.floordiv(position, block) * block
        last = start + u
        upto = last < position if exclusive else last <= position
        init = None if offsets is None else offsets[with_axis(i, te.floordiv(position, block))]
        return reducer(read(i, last), axis=u, where=upto, init=init)

    return te.compute(x.shape, element, name=name, tag=name)


def schedule_cumulative(outs):
    """The schedule of a cumsum / cumprod kernel: each stage's elements (independent
    reductions) run in parallel when there is enough work.

    Example:
        >>> s = schedule_cumulative([cumsum(te.placeholder((64, 300), name="x"), axis=1)])
    """
    outs = as_tensor_list(outs)
    s = te.create_schedule([o.op for o in outs])
    for stage in s.stages:
        if not isinstance(stage.op, te.ComputeOp) or not stage.op.axis:
            continue
        extents = [iv.dom.extent for iv in (*stage.op.axis, *stage.op.reduce_axis)]
        work = prod(get_const_tuple(extents))
        fused = stage.fuse(*stage.op.axis)
        if is_const_int(work) and int(work) >= _PARALLEL_MIN_WORK:
            stage.parallel(fused)
    return s
