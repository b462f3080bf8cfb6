"""Converters of ATen shape and data-movement ops: views, permutes, slicing, concatenation,
splitting, indexing, padding."""
from __future__ import annotations

import numpy as np

from ...graph import Expr, Tuple, TupleGetItem, const
from .registry import Unsupported, converter

# torch uses this for "to the end" in slices
_INT64_MAX = 2 ** 63 - 1


def _ndim(x):
    return x.checked_type.ndim


def _shape(x):
    return tuple(x.checked_type.shape)


def _axis(d, ndim):
    d = int(d)
    if not -max(ndim, 1) <= d < max(ndim, 1):
        raise Unsupported(f"dimension {d} out of range for rank {ndim}")
    return d % max(ndim, 1)


@converter("aten.view.default", "aten.reshape.default", "aten._unsafe_view.default",
           "aten.flatten.using_ints", "aten.unflatten.int", "aten.view_as.default",
           "aten.reshape_as.default", "aten.view_copy.default", "aten._reshape_copy.default")
def _reshape(n):
    x = n.input(0)
    if _shape(x) == n.shape:
        return x
    return n.call("reshape", x, newshape=n.shape)


@converter("aten.permute.default", "aten.permute_copy.default")
def _permute(n):
    x = n.input(0)
    axes = tuple(_axis(d, _ndim(x)) for d in n.arg(1, "dims"))
    if axes == tuple(range(_ndim(x))):
        return x
    return n.call("transpose", x, axes=axes)


@converter("aten.transpose.int", "aten.transpose_copy.int")
def _transpose(n):
    x = n.input(0)
    nd = _ndim(x)
    a, b = _axis(n.arg(1, "dim0"), nd), _axis(n.arg(2, "dim1"), nd)
    if a == b:
        return x
    axes = list(range(nd))
    axes[a], axes[b] = axes[b], axes[a]
    return n.call("transpose", x, axes=tuple(axes))


@converter("aten.t.default", "aten.numpy_T.default", "aten.t_copy.default")
def _t(n):
    x = n.input(0)
    if _ndim(x) < 2:
        return x
    return n.call("transpose", x, axes=tuple(reversed(range(_ndim(x)))))


@converter("aten.unsqueeze.default", "aten.unsqueeze_copy.default")
def _unsqueeze(n):
    x = n.input(0)
    return n.call("expand_dims", x, axis=_axis(n.arg(1, "dim"), _ndim(x) + 1))


@converter("aten.squeeze.default", "aten.squeeze.dim", "aten.squeeze.dims",
           "aten.squeeze_copy.default", "aten.squeeze_copy.dim", "aten.squeeze_copy.dims")
def _squeeze(n):
    x = n.input(0)
    shape = _shape(x)
    if not shape:
        return x
    dims = n.arg(1, "dim")
    if dims is None:
        dims = range(len(shape))
    elif isinstance(dims, int):
        dims = [dims]
    # torch leaves a dimension that is not 1 in place instead of failing.
    axes = tuple(sorted({_axis(d, len(shape)) for d in dims if shape[_axis(d, len(shape))] == 1}))
    if not axes:
        return x
    return n.call("squeeze", x, axis=axes)


@converter("aten.expand.default", "aten.expand_as.default", "aten.broadcast_to.default",
           "aten.expand_copy.default")
def _expand(n):
    x = n.input(0)
    if _shape(x) == n.shape:
        return x
    return n.call("broadcast_to", x, shape=n.shape)


@converter("aten.repeat.default")
def _repeat(n):
    x = n.input(0)
    reps = tuple(int(r) for r in n.arg(1, "repeats"))
    if all(r == 1 for r in reps) and len(reps) == _ndim(x):
        return x
    return n.call("tile", x, reps=reps)


def _tensors(n, values, dtype):
    out = []
    for v in values:
        if not isinstance(v, Expr):
            raise Unsupported("a list entry that is not a tensor")
        out.append(n.cast(v, dtype))
    return out


@converter("aten.cat.default", "aten.concat.default", "aten.concatenate.default")
def _cat(n):
    # torch allows legacy empty 1-d tensors in a cat; they contribute nothing.
    parts = [v for v in n.arg(0, "tensors")
             if not (isinstance(v, Expr) and _shape(v) == (0,) and len(n.shape) != 1)]
    parts = _tensors(n, parts, n.dtype)
    if len(parts) == 1:
        return parts[0]
    return n.call("concatenate", Tuple(parts), axis=_axis(n.arg(1, "dim", 0), len(n.shape)))


@converter("aten.stack.default")
def _stack(n):
    axis = _axis(n.arg(1, "dim", 0), len(n.shape))
    parts = [n.call("expand_dims", p, axis=axis)
             for p in _tensors(n, n.arg(0, "tensors"), n.dtype)]
    if len(parts) == 1:
        return parts[0]
    return n.call("concatenate", Tuple(parts), axis=axis)


def _split_at(n, x, sizes, axis):
    if len(sizes) == 1:
        return (x,)
    indices, acc = [], 0
    for s in sizes[:-1]:
        acc += s
        indices.append(acc)
    parts = n.call("split", x, indices_or_sections=tuple(indices), axis=axis)
    return tuple(TupleGetItem(parts, i) for i in range(len(sizes)))


@converter("aten.split.Tensor", "aten.split_with_sizes.default", "aten.chunk.default",
           "aten.tensor_split.sections", "aten.split.sizes", "aten.split_with_sizes_copy.default",
           "aten.split_copy.Tensor")
def _split(n):
    x = n.input(0)
    dim = n.arg(2, "dim", 0)
    axis = _axis(dim, _ndim(x))
    # The recorded outputs say how torch split; their sizes cover every overload.
    sizes = [int(v.shape[axis]) for v in n.val]
    return _split_at(n, x, sizes, axis)


@converter("aten.unbind.int", "aten.unbind_copy.int")
def _unbind(n):
    x = n.input(0)
    axis = _axis(n.arg(1, "dim", 0), _ndim(x))
    parts = _split_at(n, x, [1] * _shape(x)[axis], axis)
    return tuple(n.call("squeeze", p, axis=(axis,)) for p in parts)


def _slice(n, x, axis, start, end, step):
    size = _shape(x)[axis]
    if not all(isinstance(v, int) or v is None for v in (size, start, end)):
        return _symbolic_slice(n, x, axis, size, start, end, step)
    start = 0 if start is None else int(start)
    end = size if end is None or end >= _INT64_MAX else int(end)
    step = int(step)
    if step <= 0:
        raise Unsupported(f"slice step {step}")
    # Python-style clamping, as torch does.
    start = min(max(start + size if start < 0 else start, 0), size)
    end = min(max(end + size if end < 0 else end, 0), size)
    if start == 0 and end == size and step == 1:
        return x
    return n.call("strided_slice", x, begin=(start,), end=(end,), strides=(step,), axes=(axis,))


def _symbolic_slice(n, x, axis, size, start, end, step):
    # A bound or the axis is a dynamic size: torch's guards proved the slice in range (its
    # recorded length says so), so negative ints count from the end and nothing clamps.
    step = int(step)
    if step <= 0:
        raise Unsupported(f"slice step {step}")
    start = 0 if start is None else start
    end = size if end is None or isinstance(end, int) and end >= _INT64_MAX else end
    start = size + start if isinstance(start, int) and start < 0 else start
    end = size + end if isinstance(end, int) and end < 0 else end
    if isinstance(start, int) and start == 0 and end is size and step == 1:
        return x
    return n.call("strided_slice", x, begin=(start,), end=(end,), strides=(step,), axes=(axis,))


@converter("aten.slice.Tensor")
def _slice_tensor(n):
    x = n.input(0)
    return _slice(n, x, _axis(n.arg(1, "dim", 0), _ndim(x)), n.arg(2, "start"),
                  n.arg(3, "end"), n.arg(4, "step", 1))


@converter("aten.narrow.default", "aten.narrow_copy.default")
def _narrow(n):
    x = n.input(0)
    axis = _axis(n.arg(1, "dim"), _ndim(x))
    start = int(n.arg(2, "start"))
    start = start + _shape(x)[axis] if start < 0 else start
    return _slice(n, x, axis, start, start + int(n.arg(3, "length")), 1)


@converter("aten.select.int")
def _select(n):
    x = n.input(0)
    axis = _axis(n.arg(1, "dim"), _ndim(x))
    size = _shape(x)[axis]
    i = int(n.arg(2, "index"))
    i = i + size if i < 0 else i
    if not 0 <= i < size:
        raise Unsupported(f"select index {i} out of range for size {size}")
    part = n.call("strided_slice", x, begin=(i,), end=(i + 1,), strides=(1,), axes=(axis,))
    return n.call("squeeze", part, axis=(axis,))


@converter("aten.index_select.default")
def _index_select(n):
    x = n.input(0)
    if _ndim(x) == 0:
        # the one element, selected by index 0 (or -1)
        return x
    return n.call("take", x, n.input(2, "index"), axis=_axis(n.arg(1, "dim"), _ndim(x)))


@converter("aten.index.Tensor")
def _index(n):
    x = n.input(0)
    given = [(d, i) for d, i in enumerate(n.arg(1, "indices")) if i is not None]
    if not given:
        return x
    for _, idx in given:
        if not isinstance(idx, Expr) or idx.checked_type.dtype == "bool":
            raise Unsupported("boolean-mask indexing (data-dependent shape)")
    if len(given) == 1:
        axis, idx = given[0]
        return n.call("take", x, idx, axis=axis)
    return _index_several(n, x, given)


def _index_several(n, x, given):
    """x[..., i, j, ...] with several index tensors: their dims merged into one, indexed by
    the flat index i * size_j + j (broadcast). Adjacent index tensors leave the result's
    indexed dims in place, others put them first, as NumPy and torch do."""
    dims = [d for d, _ in given]
    if dims != list(range(dims[0], dims[0] + len(dims))):
        rest = [d for d in range(_ndim(x)) if d not in dims]
        x = n.call("transpose", x, axes=tuple(dims + rest))
        dims = list(range(len(dims)))
    shape = _shape(x)
    first, last = dims[0], dims[-1]
    flat, stride = None, 1
    for d, idx in reversed(list(zip(dims, [i for _, i in given]))):
        idx = n.cast(idx, "int64")
        size = n.scalar(shape[d], "int64")
        # each index wraps on its own dim (torch's negative indices), before merging
        idx = n.call("where", n.call("less", idx, n.scalar(0, "int64")),
                     n.call("add", idx, size), idx)
        term = idx if stride == 1 else n.call("multiply", idx, n.scalar(stride, "int64"))
        flat = term if flat is None else n.call("add", term, flat)
        stride *= shape[d]
    merged = n.call("reshape", x, newshape=shape[:first] + (stride,) + shape[last + 1:])
    return n.call("take", merged, flat, axis=first)


@converter("aten.gather.default")
def _gather(n):
    x = n.input(0)
    if _ndim(x) == 0:
        # every index (0 or -1) reads the one element
        return n.call("broadcast_to", x, shape=n.shape) if n.shape else x
    return n.call("gather", x, n.input(2, "index"), axis=_axis(n.arg(1, "dim"), _ndim(x)))


def _pad_width(x, pad):
    """torch's pad list (last dim first, (before, after) pairs) as per-axis pairs."""
    pad = [int(p) for p in pad]
    nd = _ndim(x)
    if len(pad) % 2 or len(pad) // 2 > nd:
        raise Unsupported(f"padding {pad} for a rank-{nd} tensor")
    width = [(0, 0)] * nd
    for k in range(len(pad) // 2):
        width[nd - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    return tuple(width)


def _crop(n, x, width):
    """x with the negative pads of width cut off (torch pads by a negative amount by cropping);
    the width left, all non-negative."""
    axes = [a for a, (lo, hi) in enumerate(width) if lo < 0 or hi < 0]
    if axes:
        begin = tuple(-min(width[a][0], 0) for a in axes)
        end = tuple(_shape(x)[a] + min(width[a][1], 0) for a in axes)
        if any(b >= e for b, e in zip(begin, end)):
            raise Unsupported("padding that crops a dimension away")
        x = n.call("strided_slice", x, begin=begin, end=end, strides=(1,) * len(axes),
                   axes=tuple(axes))
    return x, tuple((max(lo, 0), max(hi, 0)) for lo, hi in width)


def _circular(n, x, width):
    """x padded by wrapping around: the last `before` entries in front, the first `after`
    behind, axis by axis."""
    for axis, (lo, hi) in enumerate(width):
        size = _shape(x)[axis]
        if lo > size or hi > size:
            raise Unsupported("circular padding wider than the dimension")
        parts = []
        if lo:
            parts.append(_slice(n, x, axis, size - lo, size, 1))
        parts.append(x)
        if hi:
            parts.append(_slice(n, x, axis, 0, hi, 1))
        if len(parts) > 1:
            x = n.call("concatenate", Tuple(parts), axis=axis)
    return x


def padded(n, x, pad, mode="constant", value=0.0):
    """torch's padding of x: `pad` as torch lists it, mode "constant", "reflect", "replicate"
    or "circular"; negative pads crop.

    Example:
        >>> padded(n, x, [1, 2], "circular")   # last axis: [a b c] -> [c a b c a b]
        ... # doctest: +SKIP
    """
    width = _pad_width(x, pad)
    if any(lo < 0 or hi < 0 for lo, hi in width):
        if mode not in ("constant", "replicate"):
            raise Unsupported(f"negative padding in mode {mode!r}")
        x, width = _crop(n, x, width)
    if all(w == (0, 0) for w in width):
        return x
    if mode == "circular":
        return _circular(n, x, width)
    modes = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}
    if mode not in modes:
        raise Unsupported(f"pad mode {mode!r}")
    return n.call("nn.pad", x, pad_width=width, pad_value=0.0 if value is None else float(value),
                  pad_mode=modes[mode])


@converter("aten.constant_pad_nd.default")
def _constant_pad(n):
    return padded(n, n.input(0), n.arg(1, "pad"), "constant", n.arg(2, "value", 0.0))


def _mode_pad(mode):
    def convert(n):
        return padded(n, n.input(0), n.arg(1, "padding"), mode)
    return convert


for _nd in (1, 2, 3):
    converter(f"aten.reflection_pad{_nd}d.default")(_mode_pad("reflect"))
    converter(f"aten.replication_pad{_nd}d.default")(_mode_pad("replicate"))
converter("aten._pad_circular.default")(_mode_pad("circular"))


@converter("aten.pad.default")
def _pad(n):
    return padded(n, n.input(0), n.arg(1, "pad"), n.arg(2, "mode", "constant"), n.arg(3, "value"))


@converter("aten.flip.default")
def _flip(n):
    x = n.input(0)
    axes = sorted({_axis(d, _ndim(x)) for d in n.arg(1, "dims")})
    axes = [a for a in axes if _shape(x)[a] > 1]
    if not axes:
        return x
    sizes = [_shape(x)[a] for a in axes]
    # x[size - 1 :: -1] on each axis; an end of -(size + 1) is "before the first element"
    return n.call("strided_slice", x, begin=tuple(s - 1 for s in sizes),
                  end=tuple(-s - 1 for s in sizes), strides=(-1,) * len(axes),
                  axes=tuple(axes))


def _matrix_last(n, x, dim1, dim2):
    """x with dim1 and dim2 moved to the end (in that order)."""
    nd = _ndim(x)
    rest = [d for d in range(nd) if d not in (dim1, dim2)]
    axes = tuple(rest) + (dim1, dim2)
    return x if axes == tuple(range(nd)) else n.call("transpose", x, axes=axes)


@converter("aten.diagonal.default", "aten.diagonal_copy.default")
def _diagonal(n):
    x = n.input(0)
    nd = _ndim(x)
    offset = int(n.arg(1, "offset", 0))
    dim1, dim2 = _axis(n.arg(2, "dim1", 0), nd), _axis(n.arg(3, "dim2", 1), nd)
    if dim1 == dim2:
        raise Unsupported("diagonal of a dimension with itself")
    rows, cols = _shape(x)[dim1], _shape(x)[dim2]
    length = n.shape[-1]
    if length == 0:
        raise Unsupported("an empty diagonal")
    m = _matrix_last(n, x, dim1, dim2)
    flat = n.call("reshape", m, newshape=_shape(m)[:-2] + (rows * cols,))
    first = offset if offset >= 0 else -offset * cols
    index = np.arange(length, dtype=np.int64) * (cols + 1) + first
    return n.call("take", flat, const(index), axis=-1)


def _scatter_along(n, x, src, axis, positions):
    """x with its entries at `positions` (sorted indices along axis) replaced by src, whose
    size along axis is len(positions)."""
    size = _shape(x)[axis]
    where_from = np.zeros(size, dtype=np.int64)
    mask = np.zeros(size, dtype=bool)
    where_from[positions] = np.arange(len(positions))
    mask[positions] = True
    shape = [1] * _ndim(x)
    shape[axis] = size
    taken = n.call("take", n.cast(src, _dtype(x)), const(where_from), axis=axis)
    return n.call("where", const(mask.reshape(shape)), taken, x)


def _dtype(x):
    return x.checked_type.dtype


@converter("aten.slice_scatter.default")
def _slice_scatter(n):
    x, src = n.input(0), n.input(1)
    axis = _axis(n.arg(2, "dim", 0), _ndim(x))
    size = _shape(x)[axis]
    start, end, step = n.arg(3, "start"), n.arg(4, "end"), int(n.arg(5, "step", 1))
    start = 0 if start is None else int(start)
    end = size if end is None or end >= _INT64_MAX else int(end)
    positions = list(range(*slice(start, end, step).indices(size)))
    if not positions:
        return x
    return _scatter_along(n, x, src, axis, positions)


@converter("aten.select_scatter.default")
def _select_scatter(n):
    x, src = n.input(0), n.input(1)
    axis = _axis(n.arg(2, "dim"), _ndim(x))
    size = _shape(x)[axis]
    i = int(n.arg(3, "index"))
    i = i + size if i < 0 else i
    return _scatter_along(n, x, n.call("expand_dims", src, axis=axis), axis, [i])


@converter("aten.copy.default")
def _copy(n):
    # copy(self, src): src's values in self's shape and dtype
    x, src = n.input(0), n.input(1)
    src = n.cast(src, _dtype(x))
    return src if _shape(src) == _shape(x) else n.call("broadcast_to", src, shape=_shape(x))


@converter("aten.unfold.default", "aten.unfold_copy.default")
def _unfold(n):
    # windows of `size` every `step` along dim: (..., windows, ...) with the window last
    x = n.input(0)
    nd = _ndim(x)
    axis = _axis(n.arg(1, "dimension"), nd)
    size, step = int(n.arg(2, "size")), int(n.arg(3, "step"))
    if nd == 0:
        return n.call("reshape", x, newshape=n.shape)
    windows = n.shape[axis]
    if windows == 0 or size == 0:
        raise Unsupported("unfold to an empty tensor")
    index = np.arange(windows, dtype=np.int64)[:, None] * step + np.arange(size)
    y = n.call("take", x, const(index), axis=axis)
    # take puts (windows, size) at axis; the window axis goes last
    axes = [a for a in range(nd + 1) if a != axis + 1] + [axis + 1]
    return n.call("transpose", y, axes=tuple(axes))


@converter("aten.diagonal_scatter.default")
def _diagonal_scatter(n):
    x, src = n.input(0), n.input(1)
    nd = _ndim(x)
    offset = int(n.arg(2, "offset", 0))
    dim1, dim2 = _axis(n.arg(3, "dim1", 0), nd), _axis(n.arg(4, "dim2", 1), nd)
    rows, cols = _shape(x)[dim1], _shape(x)[dim2]
    length = _shape(src)[-1]
    if length == 0:
        return x
    m = _matrix_last(n, x, dim1, dim2)
    lead = _shape(m)[:-2]
    flat = n.call("reshape", m, newshape=lead + (rows * cols,))
    first = offset if offset >= 0 else -offset * cols
    positions = np.arange(length, dtype=np.int64) * (cols + 1) + first
    y = _scatter_along(n, flat, src, len(lead), positions)
    y = n.call("reshape", y, newshape=lead + (rows, cols))
    # back from (rest..., dim1, dim2) to x's order
    order = [d for d in range(nd) if d not in (dim1, dim2)] + [dim1, dim2]
    inverse = tuple(int(i) for i in np.argsort(order))
    return y if inverse == tuple(range(nd)) else n.call("transpose", y, axes=inverse)


def _own_storage(n, i):
    """Whether input i of node n is a tensor whose storage holds exactly its elements, in
    order: then the strides of as_strided address those elements (kiln's values are dense)."""
    arg = n.fx.args[i]
    meta = arg.meta.get("val") if hasattr(arg, "meta") else None
    if meta is None or not meta.is_contiguous() or meta.storage_offset() != 0:
        return False
    return meta.untyped_storage().nbytes() == meta.numel() * meta.element_size()


def _strided_index(size, stride, offset):
    """The flat storage index of every element of an as_strided view, in row-major order."""
    index = np.full(tuple(size), int(offset), dtype=np.int64)
    for axis, (extent, step) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[axis] = extent
        index = index + (np.arange(extent, dtype=np.int64) * int(step)).reshape(shape)
    return index


@converter("aten.as_strided.default", "aten.as_strided_copy.default")
def _as_strided(n):
    x = n.input(0)
    if not _own_storage(n, 0):
        raise Unsupported("as_strided of a view (its storage holds more than its elements)")
    size, stride = n.arg(1, "size"), n.arg(2, "stride")
    index = _strided_index(size, stride, n.arg(3, "storage_offset") or 0)
    count = int(np.prod(_shape(x)))
    if index.size and (index.min() < 0 or index.max() >= count):
        raise Unsupported("as_strided reading outside the tensor")
    flat = n.call("reshape", x, newshape=(count,))
    return n.call("take", flat, const(index), axis=0)


@converter("aten.as_strided_scatter.default")
def _as_strided_scatter(n):
    x, src = n.input(0), n.input(1)
    if not _own_storage(n, 0):
        raise Unsupported("as_strided_scatter of a view")
    index = _strided_index(n.arg(2, "size"), n.arg(3, "stride"),
                           n.arg(4, "storage_offset") or 0).reshape(-1)
    count = int(np.prod(_shape(x)))
    if index.size == 0:
        return x
    if index.min() < 0 or index.max() >= count or len(set(index.tolist())) != index.size:
        raise Unsupported("as_strided_scatter outside the tensor or onto overlapping elements")
    order = np.argsort(index)
    flat = n.call("reshape", x, newshape=(count,))
    values = n.call("take", n.call("reshape", src, newshape=(index.size,)),
                    const(order.astype(np.int64)), axis=0)
    y = _scatter_along(n, flat, values, 0, index[order])
    return n.call("reshape", y, newshape=_shape(x))


def _make_triangle(upper):
    def convert(n):
        x = n.input(0)
        if _ndim(x) < 2:
            raise Unsupported(f"tril / triu of rank {_ndim(x)}")
        return n.call("trilu", x, k=int(n.arg(1, "diagonal", 0)), upper=upper)
    return convert


converter("aten.tril.default")(_make_triangle(False))
converter("aten.triu.default")(_make_triangle(True))
