"""Converters of ATen shape and data-movement ops: views, permutes, slicing, concatenation,
splitting, indexing, padding."""
from __future__ import annotations

from ...graph import Expr, Tuple, TupleGetItem
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
           "aten.reshape_as.default")
def _reshape(n):
    x = n.input(0)
    if _shape(x) == n.shape:
        return x
    return n.call("reshape", x, newshape=n.shape)


@converter("aten.permute.default")
def _permute(n):
    x = n.input(0)
    axes = tuple(_axis(d, _ndim(x)) for d in n.arg(1, "dims"))
    if axes == tuple(range(_ndim(x))):
        return x
    return n.call("transpose", x, axes=axes)


@converter("aten.transpose.int")
def _transpose(n):
    x = n.input(0)
    nd = _ndim(x)
    a, b = _axis(n.arg(1, "dim0"), nd), _axis(n.arg(2, "dim1"), nd)
    if a == b:
        return x
    axes = list(range(nd))
    axes[a], axes[b] = axes[b], axes[a]
    return n.call("transpose", x, axes=tuple(axes))


@converter("aten.t.default", "aten.numpy_T.default")
def _t(n):
    x = n.input(0)
    if _ndim(x) < 2:
        return x
    return n.call("transpose", x, axes=tuple(reversed(range(_ndim(x)))))


@converter("aten.unsqueeze.default")
def _unsqueeze(n):
    x = n.input(0)
    return n.call("expand_dims", x, axis=_axis(n.arg(1, "dim"), _ndim(x) + 1))


@converter("aten.squeeze.default", "aten.squeeze.dim", "aten.squeeze.dims")
def _squeeze(n):
    x = n.input(0)
    shape = _shape(x)
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


@converter("aten.expand.default", "aten.expand_as.default", "aten.broadcast_to.default")
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
           "aten.tensor_split.sections", "aten.split.sizes")
def _split(n):
    x = n.input(0)
    dim = n.arg(2, "dim", 0)
    axis = _axis(dim, _ndim(x))
    # The recorded outputs say how torch split; their sizes cover every overload.
    sizes = [int(v.shape[axis]) for v in n.val]
    return _split_at(n, x, sizes, axis)


@converter("aten.unbind.int")
def _unbind(n):
    x = n.input(0)
    axis = _axis(n.arg(1, "dim", 0), _ndim(x))
    parts = _split_at(n, x, [1] * _shape(x)[axis], axis)
    return tuple(n.call("squeeze", p, axis=(axis,)) for p in parts)


def _slice(n, x, axis, start, end, step):
    size = _shape(x)[axis]
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


@converter("aten.slice.Tensor")
def _slice_tensor(n):
    x = n.input(0)
    return _slice(n, x, _axis(n.arg(1, "dim", 0), _ndim(x)), n.arg(2, "start"),
                  n.arg(3, "end"), n.arg(4, "step", 1))


@converter("aten.narrow.default")
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
    return n.call("take", x, n.input(2, "index"), axis=_axis(n.arg(1, "dim"), _ndim(x)))


@converter("aten.index.Tensor")
def _index(n):
    x = n.input(0)
    indices = list(n.arg(1, "indices"))
    given = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(given) != 1:
        raise Unsupported("advanced indexing with several index tensors")
    axis, idx = given[0]
    if not isinstance(idx, Expr) or idx.checked_type.dtype == "bool":
        raise Unsupported("boolean-mask indexing (data-dependent shape)")
    return n.call("take", x, idx, axis=axis)


@converter("aten.gather.default")
def _gather(n):
    x = n.input(0)
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
    if any(a < 0 or b < 0 for a, b in width):
        raise Unsupported("negative padding (cropping)")
    return tuple(width)


@converter("aten.constant_pad_nd.default")
def _constant_pad(n):
    x = n.input(0)
    width = _pad_width(x, n.arg(1, "pad"))
    if all(w == (0, 0) for w in width):
        return x
    return n.call("nn.pad", x, pad_width=width, pad_value=float(n.arg(2, "value", 0.0)))


def _mode_pad(mode):
    def convert(n):
        x = n.input(0)
        return n.call("nn.pad", x, pad_width=_pad_width(x, n.arg(1, "padding")), pad_mode=mode)
    return convert


for _nd in (1, 2, 3):
    converter(f"aten.reflection_pad{_nd}d.default")(_mode_pad("reflect"))
    converter(f"aten.replication_pad{_nd}d.default")(_mode_pad("edge"))


@converter("aten.pad.default")
def _pad(n):
    x = n.input(0)
    mode = n.arg(2, "mode", "constant")
    modes = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}
    if mode not in modes:
        raise Unsupported(f"pad mode {mode!r}")
    value = n.arg(3, "value")
    return n.call("nn.pad", x, pad_width=_pad_width(x, n.arg(1, "pad")),
                  pad_value=0.0 if value is None else float(value), pad_mode=modes[mode])
