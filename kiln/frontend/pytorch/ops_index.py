"""Converters of ATen ops that order or place values by data: topk, sort, kthvalue, median,
the scatter family, index_put, cumsum / cumprod, grid_sampler_2d (the catalog's topk,
scatter_elements, scatter_nd, cumsum / cumprod and vision.grid_sample)."""
from __future__ import annotations

import math

import numpy as np

from ...graph import Expr, Tuple, TupleGetItem, const
from .registry import Unsupported, converter


def _ndim(x):
    return x.checked_type.ndim


def _shape(x):
    return tuple(x.checked_type.shape)


def _axis(n, d, ndim):
    d = int(d)
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise Unsupported(f"dimension {d} out of range for rank {ndim}")
    return d % max(ndim, 1)


def topk(n, x, k, axis, largest):
    """(values, int64 indices) of the k largest (or smallest) entries of x along axis, sorted,
    ties to the lower index, NaN the largest value (as torch's sort and topk).

    Example:
        >>> values, indices = topk(n, x, 3, -1, True)   # doctest: +SKIP
    """
    if _ndim(x) == 0:
        # the one entry; k is 1 here (k = 0 gives empty outputs, folded by the importer)
        return x, const(np.zeros((), dtype=np.int64))
    out = n.call("topk", x, k=int(k), axis=axis, largest=bool(largest))
    return TupleGetItem(out, 0), TupleGetItem(out, 1)


@converter("aten.topk.default")
def _topk(n):
    x = n.input(0)
    axis = _axis(n, n.arg(2, "dim", -1), _ndim(x))
    # sorted=False leaves the order to the implementation: sorted is one such order
    return topk(n, x, n.arg(1, "k"), axis, n.arg(3, "largest", True))


@converter("aten.sort.default", "aten.sort.stable")
def _sort(n):
    x = n.input(0)
    if str(n.fx.target).endswith("stable"):
        dim, descending = n.kwargs.get("dim", -1), n.kwargs.get("descending", False)
    else:
        dim, descending = n.arg(1, "dim", -1), n.arg(2, "descending", False)
    axis = _axis(n, dim, _ndim(x))
    size = _shape(x)[axis] if _ndim(x) else 1
    # a full topk is a stable sort: ties keep their order, NaN sorts as the largest value
    return topk(n, x, size, axis, bool(descending))


def _kth_smallest(n, x, k, axis, keep):
    """(values, indices) of the k-th smallest entry (k from 1) along axis."""
    values, indices = topk(n, x, k, axis, False)
    if _ndim(x) == 0:
        return values, indices
    picked = []
    for v in (values, indices):
        v = n.call("strided_slice", v, begin=(k - 1,), end=(k,), strides=(1,), axes=(axis,))
        picked.append(v if keep else n.call("squeeze", v, axis=(axis,)))
    return tuple(picked)


@converter("aten.kthvalue.default")
def _kthvalue(n):
    x = n.input(0)
    axis = _axis(n, n.arg(2, "dim", -1), _ndim(x))
    return _kth_smallest(n, x, int(n.arg(1, "k")), axis, bool(n.arg(3, "keepdim", False)))


def _median(n, x, axis, keep):
    """torch's median along axis: the lower of the two middle values; NaN (and the index of
    the first NaN) where a NaN is present."""
    size = _shape(x)[axis] if _ndim(x) else 1
    values, indices = _kth_smallest(n, x, (size - 1) // 2 + 1, axis, keep)
    if not x.checked_type.dtype.startswith("float") or _ndim(x) == 0:
        return values, indices
    nan = n.call("not_equal", x, x)
    has_nan = n.call("max", n.cast(nan, "uint8"), axis=(axis,), keepdims=keep)
    has_nan = n.cast(has_nan, "bool")
    first_nan = n.call("argmax", n.cast(nan, "uint8"), axis=axis, keepdims=keep)
    return (n.call("where", has_nan, n.scalar(math.nan, x.checked_type.dtype), values),
            n.call("where", has_nan, first_nan, indices))


@converter("aten.median.dim")
def _median_dim(n):
    x = n.input(0)
    axis = _axis(n, n.arg(1, "dim", -1), _ndim(x))
    return _median(n, x, axis, bool(n.arg(2, "keepdim", False)))


@converter("aten.median.default")
def _median_all(n):
    x = n.input(0)
    flat = n.call("reshape", x, newshape=(-1,)) if _ndim(x) != 1 else x
    return _median(n, flat, 0, False)[0]


# --------------------------------------------------------------------------- scatters
# torch's scatter_reduce names -> the catalog's reduction, and the value that leaves an entry
# unchanged by it (written first where include_self=False)
_REDUCTIONS = {"sum": ("add", 0), "prod": ("mul", 1), "amax": ("max", -math.inf),
               "amin": ("min", math.inf)}


def _identity_value(value, dtype):
    if math.isinf(value) and not dtype.startswith("float"):
        info = np.iinfo(dtype) if dtype != "bool" else None
        if info is None:
            raise Unsupported("scatter_reduce of bools")
        return info.min if value < 0 else info.max
    return value


def _updates(n, src, index, dtype):
    """src (a tensor, maybe larger than index, or a number) as updates of index's shape."""
    ishape = _shape(index)
    if not isinstance(src, Expr):
        return const(np.full(ishape, src, dtype=dtype))
    src = n.cast(src, dtype)
    if _shape(src) != ishape:
        # torch reads only the leading index-shaped block of src
        src = n.call("strided_slice", src, begin=(0,) * len(ishape), end=ishape,
                     axes=tuple(range(len(ishape))))
    return src


def scatter(n, x, axis, index, src, reduction="none"):
    """torch's scatter along axis: x with src (a tensor or a number) written, or combined by
    reduction ("none", "add", "mul", "max", "min"), at index.

    Example:
        >>> scatter(n, x, 1, index, src, "add")    # torch.scatter_add   # doctest: +SKIP
    """
    if _ndim(x) == 0:
        flat = scatter(n, n.call("reshape", x, newshape=(1,)), 0,
                       n.call("reshape", index, newshape=(-1,)),
                       src if not isinstance(src, Expr) else
                       n.call("reshape", src, newshape=(-1,)), reduction)
        return n.call("reshape", flat, newshape=())
    if 0 in _shape(index):
        return x
    updates = _updates(n, src, index, x.checked_type.dtype)
    return n.call("scatter_elements", x, n.cast(index, "int64"), updates, axis=axis,
                  reduction=reduction)


@converter("aten.scatter.src", "aten.scatter.value")
def _scatter(n):
    x = n.input(0)
    return scatter(n, x, _axis(n, n.arg(1, "dim"), _ndim(x)), n.input(2, "index"),
                   n.arg(3, "src" if str(n.fx.target).endswith("src") else "value"))


@converter("aten.scatter.reduce", "aten.scatter.value_reduce")
def _scatter_legacy_reduce(n):
    x = n.input(0)
    reduce = n.kwargs.get("reduce", n.arg(4))
    reductions = {"add": "add", "multiply": "mul"}
    if reduce not in reductions:
        raise Unsupported(f"scatter reduce={reduce!r}")
    return scatter(n, x, _axis(n, n.arg(1, "dim"), _ndim(x)), n.input(2, "index"),
                   n.arg(3), reductions[reduce])


@converter("aten.scatter_add.default")
def _scatter_add(n):
    x = n.input(0)
    return scatter(n, x, _axis(n, n.arg(1, "dim"), _ndim(x)), n.input(2, "index"),
                   n.input(3, "src"), "add")


@converter("aten.scatter_reduce.two")
def _scatter_reduce(n):
    x = n.input(0)
    return scatter_reduce(n, x, _axis(n, n.arg(1, "dim"), _ndim(x)), n.input(2, "index"),
                          n.input(3, "src"), n.arg(4, "reduce"),
                          n.kwargs.get("include_self", n.arg(5, default=True)))


def scatter_reduce(n, x, axis, index, src, reduce, include_self):
    """torch's scatter_reduce: "sum", "prod", "amax", "amin" or "mean" of src's entries into
    x's at index along axis; include_self=False leaves x's own value out of the entries
    written to.

    Example:
        >>> scatter_reduce(n, x, 0, index, src, "amax", True)   # doctest: +SKIP
    """
    dtype = x.checked_type.dtype
    if reduce == "mean":
        return _scatter_mean(n, x, axis, index, src, include_self)
    if reduce not in _REDUCTIONS:
        raise Unsupported(f"scatter_reduce reduce={reduce!r}")
    reduction, identity = _REDUCTIONS[reduce]
    if not include_self:
        # the scattered-to entries start from the reduction's identity instead of x
        x = scatter(n, x, axis, index, _identity_value(identity, dtype))
    return scatter(n, x, axis, index, src, reduction)


@converter("aten.index_reduce.default")
def _index_reduce(n):
    # source's slices i along dim reduced into x's slices index[i]: a scatter_reduce whose
    # index is `index` spread over source's other dims
    x, index, src = n.input(0), n.input(2, "index"), n.input(3, "source")
    axis = _axis(n, n.arg(1, "dim"), _ndim(x))
    shape = [1] * _ndim(src)
    if _ndim(src):
        shape[axis] = _shape(index)[0] if _ndim(index) else 1
    index = n.call("reshape", index, newshape=tuple(shape))
    if _shape(index) != _shape(src):
        index = n.call("broadcast_to", index, shape=_shape(src))
    return scatter_reduce(n, x, axis, index, src, n.arg(4, "reduce"),
                          n.kwargs.get("include_self", n.arg(5, default=True)))


def _scatter_mean(n, x, axis, index, src, include_self):
    dtype = x.checked_type.dtype
    if not include_self:
        x = scatter(n, x, axis, index, 0)
    sums = scatter(n, x, axis, index, src, "add")
    start = np.full(_shape(x), 1 if include_self else 0, dtype=dtype)
    counts = scatter(n, const(start), axis, index, 1, "add")
    # entries nobody wrote to and that do not count themselves keep x (divided by 1)
    counts = n.call("maximum", counts, n.scalar(1, dtype))
    op_name = "divide" if dtype.startswith("float") else "floor_divide"
    return n.call(op_name, sums, counts)


@converter("aten.index_put.default")
def _index_put(n):
    x, values = n.input(0), n.input(2, "values")
    accumulate = bool(n.arg(3, "accumulate", False))
    given = [(d, i) for d, i in enumerate(n.arg(1, "indices")) if i is not None]
    if not given:
        raise Unsupported("index_put without index tensors")
    values = n.cast(values, x.checked_type.dtype)
    if any(i.checked_type.dtype == "bool" for _, i in given):
        return _masked_put(n, x, given, values, accumulate)
    return _index_put_ints(n, x, given, values, accumulate)


def _masked_put(n, x, given, values, accumulate):
    """x[mask] = v for one bool mask over x's leading dims and a v of one element: a where."""
    if len(given) != 1 or given[0][0] != 0 or accumulate:
        raise Unsupported("index_put with a bool mask among several indices, or accumulating")
    mask = given[0][1]
    if int(np.prod(_shape(values))) != 1:
        raise Unsupported("index_put of several values at a bool mask (data-dependent count)")
    trailing = _ndim(x) - _ndim(mask)
    if trailing:
        mask = n.call("reshape", mask, newshape=_shape(mask) + (1,) * trailing)
    value = n.call("reshape", values, newshape=())
    return n.call("where", mask, value, x)


def _index_put_ints(n, x, given, values, accumulate):
    """scatter_nd with the index tensors' dims moved to the front of x."""
    dims = [d for d, _ in given]
    shape = _shape(x)
    bshape = tuple(np.broadcast_shapes(*[_shape(i) for _, i in given]))
    rest = [d for d in range(len(shape)) if d not in dims]
    adjacent = dims == list(range(dims[0], dims[0] + len(dims)))
    # what x[indices] looks like (torch's values broadcast to it)
    if adjacent:
        target = shape[:dims[0]] + bshape + shape[dims[-1] + 1:]
        before = dims[0]
    else:
        target = bshape + tuple(shape[d] for d in rest)
        before = 0
    if _shape(values) != target:
        values = n.call("broadcast_to", values, shape=target)
    nb = len(bshape)
    if before:
        # (pre, b..., post) -> (b..., pre, post), the order of scatter_nd's updates
        values = n.call("transpose", values, axes=tuple(range(before, before + nb)) +
                        tuple(range(before)) + tuple(range(before + nb, len(target))))
    order = dims + rest
    moved = x if order == list(range(len(shape))) else n.call("transpose", x, axes=tuple(order))
    columns = []
    for d, idx in given:
        idx = n.cast(idx, "int64")
        # negative indices count from the end of their dim
        idx = n.call("where", n.call("less", idx, n.scalar(0, "int64")),
                     n.call("add", idx, n.scalar(shape[d], "int64")), idx)
        if _shape(idx) != bshape:
            idx = n.call("broadcast_to", idx, shape=bshape)
        columns.append(n.call("expand_dims", idx, axis=nb))
    index = columns[0] if len(columns) == 1 else n.call("concatenate", Tuple(columns), axis=nb)
    if 0 in bshape:
        return x
    y = n.call("scatter_nd", moved, index, values, reduction="add" if accumulate else "none")
    if order == list(range(len(shape))):
        return y
    return n.call("transpose", y, axes=tuple(int(i) for i in np.argsort(order)))


def _cumulative(op):
    def convert(n):
        # in the result's dtype (torch sums integers and bools as int64)
        x = n.cast(n.input(0), n.dtype)
        if _ndim(x) == 0:
            return x
        return n.call(op, x, axis=_axis(n, n.arg(1, "dim"), _ndim(x)))
    return convert


converter("aten.cumprod.default")(_cumulative("cumprod"))
converter("aten.cumsum.default")(_cumulative("cumsum"))


_GRID_MODES = {0: "linear", 1: "nearest", 2: "cubic"}
_GRID_PADDING = {0: "zeros", 1: "border", 2: "reflection"}


@converter("aten.grid_sampler_2d.default", "aten.grid_sampler_3d.default")
def _grid_sampler(n):
    mode, padding = int(n.arg(2, "interpolation_mode")), int(n.arg(3, "padding_mode"))
    if mode not in _GRID_MODES or padding not in _GRID_PADDING:
        raise Unsupported(f"grid sampler mode {mode}, padding mode {padding}")
    if (_GRID_MODES[mode], _GRID_PADDING[padding]) == ("cubic", "border"):
        # torch clamps each of the 16 taps to the border; the catalog op differs there
        raise Unsupported("bicubic grid sampling with border padding")
    return n.call("vision.grid_sample", n.input(0), n.input(1), mode=_GRID_MODES[mode],
                  padding_mode=_GRID_PADDING[padding],
                  align_corners=bool(n.arg(4, "align_corners")))


@converter("aten.put.default")
def _put(n):
    # x.flatten()[index] = source (added with accumulate), index counting from the end too
    x, index, src = n.input(0), n.input(1, "index"), n.input(2, "source")
    count = int(np.prod(_shape(x)))
    if 0 in _shape(index):
        return x
    index = n.call("reshape", n.cast(index, "int64"), newshape=(-1,))
    index = n.call("where", n.call("less", index, n.scalar(0, "int64")),
                   n.call("add", index, n.scalar(count, "int64")), index)
    flat = n.call("reshape", x, newshape=(count,))
    src = n.call("reshape", n.cast(src, x.checked_type.dtype), newshape=(-1,))
    y = n.call("scatter_elements", flat, index, src, axis=0,
               reduction="add" if n.arg(3, "accumulate", False) else "none")
    return n.call("reshape", y, newshape=_shape(x))
