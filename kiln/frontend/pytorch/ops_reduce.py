"""Converters of ATen reductions: sum, mean, prod, amax/amin, max/min with indices, argmax,
var/std."""
from __future__ import annotations

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
    if dim is None:
        flat = n.call("reshape", x, newshape=(-1,))
        y = n.call(op_name, flat, axis=0, keepdims=False)
        if keep:
            y = n.call("reshape", y, newshape=(1,) * x.checked_type.ndim)
        return y
    return n.call(op_name, x, axis=int(dim) % max(x.checked_type.ndim, 1), keepdims=bool(keep))


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
        axis = dim % max(x.checked_type.ndim, 1)
        return (n.call(kind, x, axis=(axis,), keepdims=keep),
                n.call(f"arg{kind}", x, axis=axis, keepdims=keep))
    return convert


converter("aten.max.dim")(_with_indices("max"))
converter("aten.min.dim")(_with_indices("min"))


def _variance(n, x, dims, correction, keep):
    x = n.cast(x, n.dtype)
    dt = x.checked_type.dtype
    axes = _axes(n, x, dims)
    shape = x.checked_type.shape
    count = 1
    for a in (range(len(shape)) if axes is None else axes):
        count *= shape[a]
    mean = n.call("mean", x, axis=axes, keepdims=True)
    centered = n.call("subtract", x, mean)
    ss = n.call("sum", n.call("multiply", centered, centered), axis=axes, keepdims=bool(keep))
    denom = count - correction
    if denom <= 0:
        raise Unsupported(f"variance with correction {correction} over {count} elements")
    return n.call("divide", ss, n.scalar(denom, dt))


@converter("aten.var.correction", "aten.var.dim", "aten.var.default")
def _var(n):
    return _variance(n, n.input(0), *_var_args(n))


@converter("aten.std.correction", "aten.std.dim", "aten.std.default")
def _std(n):
    return n.call("sqrt", _variance(n, n.input(0), *_var_args(n)))


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
