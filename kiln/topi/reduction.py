"""Reductions over axes: sum, mean, max, min, prod, argmax, argmin (numpy / torch semantics).

`axis` is an int, a list of ints or None (all axes); `keepdims` keeps reduced axes with size 1.
The reducing compute is tagged "comm_reduce" and records `reduce_axes` (input axes) and
`input_ndim` in its attrs, which the x86 schedule reads to pick a loop order. mean is a sum
followed by an elementwise division (a fused epilogue).

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((4, 5, 6), name="x")
    >>> s = topi.reduction.sum(x, axis=(0, 2), keepdims=True)     # (1, 5, 1)
    >>> a = topi.reduction.argmax(x, axis=1)                      # (4, 6) int64
"""
from __future__ import annotations

from .. import te
from ..tir import dtype as dt
from . import tags
from .elemwise import check_tensor
from .transform import normalize_axis, ravel_index
from .utils import TopiError, get_const_tuple, prod as _prod


def reduce_axes(x, axis, op_name: str) -> tuple:
    """The sorted, non-negative input axes that `axis` (int, list or None) names.

    Example:
        >>> reduce_axes(te.placeholder((2, 3, 4)), -1, "sum")  # doctest: +SKIP
        (2,)
    """
    if axis is None:
        return tuple(range(x.ndim))
    axes = [axis] if isinstance(axis, int) else list(axis)
    norm = [normalize_axis(a, x.ndim, op_name) for a in axes]
    if len(set(norm)) != len(norm):
        raise TopiError(f"{op_name}: axis {axis} names an axis twice")
    return tuple(sorted(norm))


def _layout(x, axes, keepdims):
    """Output shape, the reduce axes (in input order) and a map from output to input indices."""
    shape = get_const_tuple(x.shape)
    out_shape = tuple(1 if k in axes else d for k, d in enumerate(shape) if keepdims or k not in axes)
    rvars = [te.reduce_axis((0, shape[k]), name=f"k{k}") for k in axes]

    def in_index(i):
        src, pos, r = [], 0, iter(rvars)
        for k in range(x.ndim):
            if k in axes:
                src.append(next(r))
                pos += 1 if keepdims else 0
            else:
                src.append(i[pos])
                pos += 1
        return src

    return out_shape, rvars, in_index


def _attrs(x, axes):
    return {"reduce_axes": tuple(axes), "input_ndim": x.ndim}


def _reduce(x, axis, keepdims, reducer, name):
    check_tensor(x, name)
    axes = reduce_axes(x, axis, name)
    out_shape, rvars, in_index = _layout(x, axes, keepdims)
    if not rvars:
        return te.compute(out_shape, lambda *i: x(*i), name=name, tag=tags.ELEMWISE)
    return te.compute(out_shape, lambda *i: reducer(x(*in_index(i)), axis=rvars), name=name,
                      tag=tags.COMM_REDUCE, attrs=_attrs(x, axes))


def sum(x, axis=None, keepdims: bool = False):
    """Sum over axes (accumulated in the input dtype).

    Example:
        >>> y = sum(te.placeholder((4, 5), name="x"), axis=1)
    """
    return _reduce(x, axis, keepdims, te.sum, "sum")


def prod(x, axis=None, keepdims: bool = False):
    """Product over axes.

    Example:
        >>> y = prod(te.placeholder((4, 5), name="x"), axis=0)
    """
    return _reduce(x, axis, keepdims, te.prod, "prod")


def max(x, axis=None, keepdims: bool = False):
    """Maximum over axes.

    Example:
        >>> y = max(te.placeholder((4, 5), name="x"), axis=1, keepdims=True)
    """
    return _reduce(x, axis, keepdims, te.max, "max")


def min(x, axis=None, keepdims: bool = False):
    """Minimum over axes.

    Example:
        >>> y = min(te.placeholder((4, 5), name="x"))
    """
    return _reduce(x, axis, keepdims, te.min, "min")


def mean(x, axis=None, keepdims: bool = False):
    """Arithmetic mean over axes: a sum, then a division by the count (integers truncate).

    Example:
        >>> y = mean(te.placeholder((4, 5), name="x"), axis=-1)
    """
    check_tensor(x, "mean")
    axes = reduce_axes(x, axis, "mean")
    count = _prod(get_const_tuple(x.shape)[k] for k in axes)
    total = sum(x, axes, keepdims)
    if isinstance(count, int):
        if count == 1:
            return total
        if count == 0:
            raise TopiError(f"mean: the reduced axes {axes} of {x.name} are empty")
    divisor = te.cast(count, x.dtype)
    return te.compute(total.shape, lambda *i: total(*i) / divisor, name="mean", tag=tags.ELEMWISE)


def _arg_reducer(largest: bool, last: bool):
    """A tuple reducer over (index, value) that prefers the larger (or smaller) value and, on a
    tie, the smaller (or larger) index: a total order, so the result does not depend on the
    order in which a schedule combines partial results."""
    def fcombine(x, y):
        better = x[1] > y[1] if largest else x[1] < y[1]
        tie = (x[1] == y[1]) & ((x[0] > y[0]) if last else (x[0] < y[0]))
        take_x = better | tie
        return te.select(take_x, x[0], y[0]), te.select(take_x, x[1], y[1])

    def fidentity(index_dtype, value_dtype):
        # The identity's index loses every tie against a real index.
        index = te.const(-1, index_dtype) if last else te.max_value(index_dtype)
        value = te.min_value(value_dtype) if largest else te.max_value(value_dtype)
        return index, value

    return te.comm_reducer(fcombine, fidentity, name="argmax" if largest else "argmin")


def _arg(x, axis, keepdims, select_last_index, largest, name):
    check_tensor(x, name)
    if dt.is_bool(x.dtype):
        raise TopiError(f"{name}: bool input {x.name}; cast it to an integer type first")
    axes = reduce_axes(x, axis, name)
    if not axes:
        raise TopiError(f"{name}: needs at least one axis to reduce")
    out_shape, rvars, in_index = _layout(x, axes, keepdims)
    extents = [get_const_tuple(x.shape)[k] for k in axes]
    if 0 in extents:
        raise TopiError(f"{name}: the reduced axes {axes} of {x.name} are empty")
    reducer = _arg_reducer(largest, select_last_index)

    def fcompute(*i):
        index = te.cast(ravel_index([r.var for r in rvars], extents), "int64")
        return reducer((index, x(*in_index(i))), axis=rvars)

    index, _ = te.compute(out_shape, fcompute, name=name + ".pair", tag=tags.COMM_REDUCE,
                          attrs=_attrs(x, axes))
    # A stage of its own for the index: an output must be a whole operation (the lowering
    # binds every output of an op to an argument), and the value half is a temporary.
    return te.compute(out_shape, lambda *i: index(*i), name=name, tag=tags.ELEMWISE)


def argmax(x, axis=None, keepdims: bool = False, select_last_index: bool = False):
    """Index (int64) of the largest value along `axis` (of the flattened axes when None or a
    list); the first occurrence wins, or the last with select_last_index (ONNX).

    Example:
        >>> i = argmax(te.placeholder((4, 5), name="x"), axis=1)
    """
    return _arg(x, axis, keepdims, select_last_index, True, "argmax")


def argmin(x, axis=None, keepdims: bool = False, select_last_index: bool = False):
    """Index (int64) of the smallest value along `axis`; first occurrence unless
    select_last_index.

    Example:
        >>> i = argmin(te.placeholder((4, 5), name="x"), axis=0, keepdims=True)
    """
    return _arg(x, axis, keepdims, select_last_index, False, "argmin")
