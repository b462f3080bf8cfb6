"""Converters of ATen reductions: sum, mean, prod, amax/amin, max/min with indices, argmax,
var/std."""
from __future__ import annotations

import math

import numpy as np

from ...graph import Expr, const
from .ops_elemwise import result_dtype
from .registry import Unsupported, converter


def _axes(n, x, dims):
    """torch's `dim` (None, int, or list; empty means all) as the catalog's axis."""
    if dims is None:
        return None
    if isinstance(dims, int):
        dims = [dims]
    dims = list(dims)
    if not dims:
        return None
    nd = max(x.checked_type.ndim, 1)
    return tuple(sorted({int(d) % nd for d in dims}))


def _reduce(op_name, dim_index=1, keep_index=2):
    def convert(n):
        # The output dtype (e.g. int64 for a sum of bools, or `dtype=`) is the dtype reduced in.
        x = n.cast(n.input(0), n.dtype)
        dims = n.arg(dim_index, "dim") if dim_index is not None else None
        keep = bool(n.arg(keep_index, "keepdim", False)) if keep_index is not None else False
        if x.checked_type.ndim == 0:
            return x
        return n.call(op_name, x, axis=_axes(n, x, dims), keepdims=keep)
    return convert


converter("aten.sum.dim_IntList")(_reduce("sum"))
converter("aten.sum.default")(_reduce("sum", None, None))
converter("aten.mean.dim")(_reduce("mean"))
converter("aten.mean.default")(_reduce("mean", None, None))
converter("aten.prod.dim_int")(_reduce("prod"))
converter("aten.prod.default")(_reduce("prod", None, None))
converter("aten.amax.default")(_reduce("max"))
converter("aten.amin.default")(_reduce("min"))
converter("aten.max.default")(_reduce("max", None, None))
converter("aten.min.default")(_reduce("min", None, None))


def _arg_reduce(n, op_name, x, dim, keep):
    if x.checked_type.ndim == 0:
        # the one element is at 0
        return const(np.zeros((), dtype=np.int64))
    if dim is None:
        flat = n.call("reshape", x, newshape=(-1,))
        y = arg_extreme(n, op_name, flat, 0, False)
        if keep:
            y = n.call("reshape", y, newshape=(1,) * x.checked_type.ndim)
        return y
    return arg_extreme(n, op_name, x, int(dim) % max(x.checked_type.ndim, 1), bool(keep))


def arg_extreme(n, op_name, x, axis, keep):
    """torch's argmax / argmin along axis: the first extreme, or the first NaN where there is
    one (torch takes NaN for both the maximum and the minimum; the catalog ops skip it).

    Example:
        >>> arg_extreme(n, "argmax", x, 1, False)   # [[nan, 0, 1]] -> [0]   # doctest: +SKIP
    """
    y = n.call(op_name, x, axis=axis, keepdims=keep)
    if not x.checked_type.dtype.startswith("float"):
        return y
    nan = n.cast(n.call("not_equal", x, x), "uint8")
    has_nan = n.cast(n.call("max", nan, axis=(axis,), keepdims=keep), "bool")
    return n.call("where", has_nan, n.call("argmax", nan, axis=axis, keepdims=keep), y)


@converter("aten.argmax.default")
def _argmax(n):
    return _arg_reduce(n, "argmax", n.input(0), n.arg(1, "dim"), n.arg(2, "keepdim", False))


@converter("aten.argmin.default")
def _argmin(n):
    return _arg_reduce(n, "argmin", n.input(0), n.arg(1, "dim"), n.arg(2, "keepdim", False))


def _with_indices(kind):
    def convert(n):
        x = n.input(0)
        dim, keep = int(n.arg(1, "dim")), bool(n.arg(2, "keepdim", False))
        if x.checked_type.ndim == 0:
            return x, const(np.zeros((), dtype=np.int64))
        axis = dim % max(x.checked_type.ndim, 1)
        return (n.call(kind, x, axis=(axis,), keepdims=keep),
                arg_extreme(n, f"arg{kind}", x, axis, keep))
    return convert


converter("aten.max.dim")(_with_indices("max"))
converter("aten.min.dim")(_with_indices("min"))


def _variance(n, x, dims, correction, keep):
    """(variance, mean) of x over dims; the mean keeps the reduced axes only if `keep`."""
    x = n.cast(x, n.dtype)
    dt = x.checked_type.dtype
    axes = _axes(n, x, dims)
    shape = x.checked_type.shape
    count = 1
    for a in (range(len(shape)) if axes is None else axes):
        count *= shape[a]
    if x.checked_type.ndim == 0:
        axes = None
    mean = n.call("mean", x, axis=axes, keepdims=True)
    centered = n.call("subtract", x, mean)
    ss = n.call("sum", n.call("multiply", centered, centered), axis=axes, keepdims=bool(keep))
    denom = count - correction
    if denom <= 0:
        raise Unsupported(f"variance with correction {correction} over {count} elements")
    if not keep:
        mean = n.call("mean", x, axis=axes, keepdims=False)
    return n.call("divide", ss, n.scalar(denom, dt)), mean


@converter("aten.var.correction", "aten.var.dim", "aten.var.default")
def _var(n):
    return _variance(n, n.input(0), *_var_args(n))[0]


@converter("aten.std.correction", "aten.std.dim", "aten.std.default")
def _std(n):
    return n.call("sqrt", _variance(n, n.input(0), *_var_args(n))[0])


@converter("aten.var_mean.correction", "aten.var_mean.dim", "aten.var_mean.default")
def _var_mean(n):
    return _variance(n, n.input(0), *_var_args(n))


@converter("aten.std_mean.correction", "aten.std_mean.dim", "aten.std_mean.default")
def _std_mean(n):
    var, mean = _variance(n, n.input(0), *_var_args(n))
    return n.call("sqrt", var), mean


def _var_args(n):
    """(dims, correction, keepdim) from the var/std overloads."""
    overload = str(n.fx.target).rsplit(".", 1)[-1]
    if overload == "default":
        return None, 1 if n.arg(1, "unbiased", True) else 0, False
    dims = n.arg(1, "dim")
    if overload == "dim":
        return dims, 1 if n.arg(2, "unbiased", True) else 0, n.arg(3, "keepdim", False)
    correction = n.kwargs.get("correction", n.arg(2))
    keep = n.kwargs.get("keepdim", n.arg(3, default=False))
    if correction is not None and not isinstance(correction, (int, float)):
        raise Unsupported("tensor correction")
    return dims, 1 if correction is None else correction, keep


def _make_any_all(kind):
    # any is a max of the truth values, all a min; uint8 because bool tensors do not reduce
    def convert(n):
        x = n.input(0)
        truth = n.cast(n.cast(x, "bool"), "uint8")
        dims = n.arg(1, "dim")
        keep = bool(n.arg(2, "keepdim", False))
        if x.checked_type.ndim == 0:
            return n.cast(x, "bool")
        y = n.call("max" if kind == "any" else "min", truth, axis=_axes(n, x, dims),
                   keepdims=keep)
        return n.cast(y, "bool")
    return convert


for _kind in ("any", "all"):
    converter(f"aten.{_kind}.default", f"aten.{_kind}.dim", f"aten.{_kind}.dims")(
        _make_any_all(_kind))


def vector_norm(n, x, order, dims, keep):
    """torch.linalg.vector_norm of x (already in the result dtype) over dims.

    Example:
        >>> vector_norm(n, x, 2, None, False)    # sqrt(sum(x * x))   # doctest: +SKIP
    """
    dt = x.checked_type.dtype
    order = float(order)
    scalar = x.checked_type.ndim == 0
    axes = None if scalar else _axes(n, x, dims)

    def reduce(op_name, v):
        return v if scalar else n.call(op_name, v, axis=axes, keepdims=keep)

    if order == 0:
        return reduce("sum", n.cast(n.call("not_equal", x, n.scalar(0, dt)), dt))
    a = n.call("abs", x)
    if order == math.inf:
        return reduce("max", a)
    if order == -math.inf:
        return reduce("min", a)
    if order == 1:
        return reduce("sum", a)
    if order == 2:
        return n.call("sqrt", reduce("sum", n.call("multiply", x, x)))
    powered = reduce("sum", n.call("power", a, n.scalar(order, dt)))
    return n.call("power", powered, n.scalar(1.0 / order, dt))


@converter("aten.linalg_vector_norm.default")
def _linalg_vector_norm(n):
    x = n.cast(n.input(0), n.dtype)
    if not n.dtype.startswith("float"):
        raise Unsupported(f"vector norm in {n.dtype}")
    return vector_norm(n, x, n.arg(1, "ord", 2), n.arg(2, "dim"), bool(n.arg(3, "keepdim", False)))


@converter("aten.dist.default")
def _dist(n):
    diff = n.call("subtract", n.cast(n.input(0), n.dtype), n.cast(n.input(1), n.dtype))
    return vector_norm(n, diff, n.arg(2, "p", 2), None, False)


def _check_nonempty(n, *xs):
    for x in xs:
        if 0 in tuple(x.checked_type.shape):
            raise Unsupported("distances of empty tensors")


@converter("aten._cdist_forward.default")
def _cdist(n):
    # (..., P, M) and (..., R, M): the p-norm of every row difference, (..., P, R)
    a, b = n.cast(n.input(0), n.dtype), n.cast(n.input(1), n.dtype)
    _check_nonempty(n, a, b)
    diff = n.call("subtract", n.call("expand_dims", a, axis=-2),
                  n.call("expand_dims", b, axis=-3))
    return vector_norm(n, diff, n.arg(2, "p"), [-1], False)


@converter("aten._pdist_forward.default")
def _pdist(n):
    # the p-norm of x[i] - x[j] for every pair of rows i < j, in row-major order
    x = n.cast(n.input(0), n.dtype)
    _check_nonempty(n, x)
    rows = x.checked_type.shape[0]
    first, second = np.triu_indices(rows, k=1)
    if first.size == 0:
        raise Unsupported("pdist of a single row")
    diff = n.call("subtract", n.call("take", x, const(first.astype(np.int64)), axis=0),
                  n.call("take", x, const(second.astype(np.int64)), axis=0))
    return vector_norm(n, diff, n.arg(1, "p", 2), [-1], False)


@converter("aten.isin.Tensor_Tensor", "aten.isin.Tensor_Scalar", "aten.isin.Scalar_Tensor")
def _isin(n):
    # whether each element equals any test element: a comparison with all of them at once
    x, test = n.arg(0), n.arg(1)
    dtype = result_dtype(x, test)
    x = n.operand(x, dtype)
    if isinstance(test, Expr) and int(np.prod(test.checked_type.shape)) == 0:
        found = const(np.zeros(n.shape, dtype=bool))
    elif isinstance(test, Expr):
        flat = n.call("reshape", n.cast(test, dtype), newshape=(-1,))
        equal = n.call("equal", n.call("expand_dims", x, axis=x.checked_type.ndim), flat)
        found = n.cast(n.call("max", n.cast(equal, "uint8"), axis=(-1,)), "bool")
    else:
        found = n.call("equal", x, n.operand(test, dtype))
    return n.call("logical_not", found) if n.kwargs.get("invert", False) else found
