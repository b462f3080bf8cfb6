"""Index-remapping operators: reshape, transpose, concatenate, split, slices, take/gather,
padding, broadcast_to, tile, ... Every compute is tagged "injective" and keeps the dtype.

Shapes are static Python ints (attributes such as axes and slice bounds too); indices are
checked here and errors name the operator and the attribute at fault.

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((2, 3, 4), name="x")
    >>> y = topi.transform.transpose(topi.transform.reshape(x, (6, -1)), (1, 0))   # (4, 6)
"""
from __future__ import annotations

import math

from .. import te
from ..arith.slices import symbolic_slice_length
from ..tir import dtype as dt
from . import tags
from .broadcast import broadcast_index, broadcast_shape
from .elemwise import check_tensor
from .utils import (TopiError, dim_equal, get_const_int, get_const_tuple, is_const_int,
                    is_const_value, prod)


def _static_shape(x, op_name):
    return tuple(get_const_int(d, f"{op_name}: dimension {k} of {x.name}")
                 for k, d in enumerate(x.shape))


def _sizes(x) -> tuple:
    """x's shape: ints where they are constants, else the symbolic sizes."""
    return tuple(get_const_int(d) if is_const_int(d) else d for d in x.shape)


def normalize_axis(axis, ndim: int, op_name: str, what: str = "axis") -> int:
    """axis in [-ndim, ndim) as a non-negative int; TopiError otherwise.

    Example:
        >>> normalize_axis(-1, 3, "softmax")
        2
    """
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise TopiError(f"{op_name}: {what} must be an int, got {axis!r}")
    if not -ndim <= axis < ndim:
        raise TopiError(f"{op_name}: {what} {axis} is out of range for a {ndim}-D tensor")
    return axis % ndim


def _compute(shape, fcompute, name):
    return te.compute(shape, fcompute, name=name, tag=tags.INJECTIVE)


def ravel_index(indices, shape):
    """Row-major flat offset of `indices` in `shape` (an expression).

    Example:
        >>> ravel_index((i, j), (4, 5))  # doctest: +SKIP
        i*5 + j
    """
    flat = te.const(0)
    for index, dim in zip(indices, shape):
        flat = flat * dim + index
    return flat


def unravel_index(flat, shape) -> tuple:
    """The row-major indices of a flat offset in `shape` (expressions).

    Example:
        >>> unravel_index(f, (4, 5))  # doctest: +SKIP
        (floordiv(f, 5), floormod(f, 5))
    """
    out = []
    for dim in reversed(shape):
        one = isinstance(dim, int) and dim == 1
        out.append(te.const(0) if one else te.floormod(flat, dim))
        flat = flat if one else te.floordiv(flat, dim)
    return tuple(reversed(out))


# ------------------------------------------------------------------------------ reshaping
def infer_reshape(in_shape, newshape, allow_zero: bool = False, op_name: str = "reshape") -> tuple:
    """Resolve -1 (the one inferred dimension) and, ONNX-style, 0 (copy the input's
    dimension at that position unless allow_zero) in a target shape.

    Example:
        >>> infer_reshape((2, 3, 4), (0, -1))
        (2, 12)
    """
    in_shape = tuple(in_shape)
    out, unknown = [], None
    for k, d in enumerate(newshape):
        d = get_const_int(d, f"{op_name}: dimension {k} of the new shape")
        if d == 0 and not allow_zero:
            if k >= len(in_shape):
                raise TopiError(f"{op_name}: 0 at position {k} copies an input dimension, but "
                                f"the input has only {len(in_shape)}")
            d = in_shape[k]
        elif d == -1:
            if unknown is not None:
                raise TopiError(f"{op_name}: more than one -1 in the new shape {tuple(newshape)}")
            unknown = k
        elif d < 0:
            raise TopiError(f"{op_name}: invalid dimension {d} in the new shape {tuple(newshape)}")
        out.append(d)
    total = prod(in_shape)
    if unknown is not None:
        known = prod(d for k, d in enumerate(out) if k != unknown)
        if known == 0 or total % known:
            raise TopiError(f"{op_name}: cannot reshape {in_shape} ({total} elements) into "
                            f"{tuple(newshape)}")
        out[unknown] = total // known
    if prod(out) != total:
        raise TopiError(f"{op_name}: cannot reshape {in_shape} ({total} elements) into "
                        f"{tuple(out)} ({prod(out)} elements)")
    return tuple(out)


def reshape(x, newshape):
    """The same elements, row-major, in a new shape; one dimension may be -1 (numpy).
    For ONNX's 0 (copy a dimension) resolve the shape with infer_reshape first.

    Example:
        >>> y = reshape(te.placeholder((2, 3, 4), name="x"), (6, -1))
    """
    check_tensor(x, "reshape")
    if isinstance(newshape, int):
        newshape = (newshape,)
    if not all(is_const_int(d) for d in tuple(x.shape) + tuple(newshape)):
        return _symbolic_reshape(x, tuple(newshape))
    in_shape = _static_shape(x, "reshape")
    if any(get_const_int(d, "reshape: new shape") == 0 for d in newshape) and prod(in_shape) != 0:
        raise TopiError(f"reshape: a 0 in the new shape {tuple(newshape)} is not a size here; "
                        "for ONNX's copy-dimension meaning use infer_reshape(..., allow_zero=False)")
    out_shape = infer_reshape(in_shape, newshape, allow_zero=True)
    if out_shape == in_shape:
        return _compute(out_shape, lambda *i: x(*i), "reshape")

    def fcompute(*i):
        return x(*unravel_index(ravel_index(i, out_shape), in_shape))

    return _compute(out_shape, fcompute, "reshape")


def _symbolic_reshape(x, out_shape):
    # Symbolic sizes (a dynamic sequence length): the graph's type relation resolved the new
    # shape, so it holds no -1 and its size equals the input's. Sizes of 1 aside, the leading
    # and trailing dimensions both shapes share map index to index; only those between go
    # through a flat offset, whose divisions by a symbolic size the simplifier cannot remove
    # (every element would pay for integer divisions).
    if any(is_const_int(d) and get_const_int(d) < 0 for d in out_shape):
        raise TopiError(f"reshape: new shape {out_shape} of a symbolic-sized tensor must "
                        f"be resolved (no -1)")
    in_shape = tuple(x.shape)
    in_keep = [k for k, d in enumerate(in_shape) if not is_const_value(d, 1)]
    out_keep = [k for k, d in enumerate(out_shape) if not is_const_value(d, 1)]
    a, b = [in_shape[k] for k in in_keep], [out_shape[k] for k in out_keep]
    p = 0
    while p < min(len(a), len(b)) and dim_equal(a[p], b[p]):
        p += 1
    q = 0
    while q < min(len(a), len(b)) - p and dim_equal(a[-1 - q], b[-1 - q]):
        q += 1

    def fcompute(*i):
        oi = [i[k] for k in out_keep]
        idx = [te.const(0)] * len(in_shape)
        for j in range(p):
            idx[in_keep[j]] = oi[j]
        for j in range(1, q + 1):
            idx[in_keep[-j]] = oi[-j]
        middle = unravel_index(ravel_index(oi[p:len(oi) - q], b[p:len(b) - q]),
                               a[p:len(a) - q])
        for j, v in enumerate(middle):
            idx[in_keep[p + j]] = v
        return x(*idx)

    return _compute(out_shape, fcompute, "reshape")


def transpose(x, axes=None):
    """Permute the dimensions (reverse them when axes is None), as numpy.transpose.

    Example:
        >>> y = transpose(te.placeholder((2, 3, 4), name="x"), (2, 0, 1))   # (4, 2, 3)
    """
    check_tensor(x, "transpose")
    ndim = x.ndim
    axes = tuple(range(ndim - 1, -1, -1)) if axes is None else tuple(axes)
    norm = tuple(normalize_axis(a, ndim, "transpose", "axes entry") for a in axes)
    if sorted(norm) != list(range(ndim)):
        raise TopiError(f"transpose: axes {axes} is not a permutation of {ndim} dimensions")
    shape = tuple(x.shape[a] for a in norm)

    def fcompute(*i):
        src = [None] * ndim
        for out_pos, a in enumerate(norm):
            src[a] = i[out_pos]
        return x(*src)

    return _compute(shape, fcompute, "transpose")


def expand_dims(x, axis: int, num_newaxis: int = 1):
    """Insert `num_newaxis` dimensions of size 1 at `axis` (in [-ndim-1, ndim]).

    Example:
        >>> y = expand_dims(te.placeholder((3, 4), name="x"), 1)   # (3, 1, 4)
    """
    check_tensor(x, "expand_dims")
    axis = normalize_axis(axis, x.ndim + 1, "expand_dims")
    if num_newaxis < 0:
        raise TopiError(f"expand_dims: num_newaxis must be >= 0, got {num_newaxis}")
    shape = tuple(x.shape[:axis]) + (1,) * num_newaxis + tuple(x.shape[axis:])
    return _compute(shape, lambda *i: x(*(i[:axis] + i[axis + num_newaxis:])), "expand_dims")


def squeeze(x, axis=None):
    """Drop dimensions of size 1: all of them, or those in `axis` (an int or a list).

    Example:
        >>> y = squeeze(te.placeholder((3, 1, 4), name="x"), 1)   # (3, 4)
    """
    check_tensor(x, "squeeze")
    shape = _static_shape(x, "squeeze")
    if axis is None:
        drop = {k for k, d in enumerate(shape) if d == 1}
    else:
        axes = [axis] if isinstance(axis, int) else list(axis)
        drop = {normalize_axis(a, x.ndim, "squeeze") for a in axes}
        for a in sorted(drop):
            if shape[a] != 1:
                raise TopiError(f"squeeze: dimension {a} of {x.name} has size {shape[a]}, not 1")
    keep = [k for k in range(x.ndim) if k not in drop]

    def fcompute(*i):
        src = [te.const(0)] * x.ndim
        for pos, k in enumerate(keep):
            src[k] = i[pos]
        return x(*src)

    return _compute(tuple(shape[k] for k in keep), fcompute, "squeeze")


def flatten(x, start_dim: int = 1, end_dim: int = -1):
    """Merge dimensions start_dim..end_dim into one, as torch.flatten (the default gives a
    batch of vectors, as ONNX Flatten with axis=1).

    Example:
        >>> y = flatten(te.placeholder((2, 3, 4), name="x"))   # (2, 12)
    """
    check_tensor(x, "flatten")
    shape = _static_shape(x, "flatten")
    if x.ndim == 0:
        return reshape(x, (1,))
    start = normalize_axis(start_dim, x.ndim, "flatten", "start_dim")
    end = normalize_axis(end_dim, x.ndim, "flatten", "end_dim")
    if start > end:
        raise TopiError(f"flatten: start_dim {start_dim} comes after end_dim {end_dim}")
    return reshape(x, shape[:start] + (prod(shape[start:end + 1]),) + shape[end + 1:])


# ------------------------------------------------------------------------------ joining, slicing
def concatenate(tensors, axis: int = 0):
    """Join tensors along an existing axis (the other dimensions must agree).

    Example:
        >>> a = te.placeholder((2, 3), name="a"); b = te.placeholder((2, 5), name="b")
        >>> c = concatenate([a, b], axis=1)   # (2, 8)
    """
    tensors = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    if not tensors:
        raise TopiError("concatenate: needs at least one tensor")
    for k, t in enumerate(tensors):
        check_tensor(t, "concatenate", f"tensor {k}")
    first = tensors[0]
    axis = normalize_axis(axis, first.ndim, "concatenate")
    shapes = [_sizes(t) for t in tensors]        # symbolic sizes too (a KV cache's lengths)
    for t, s in zip(tensors[1:], shapes[1:]):
        if t.dtype != first.dtype:
            raise TopiError(f"concatenate: {t.name} has dtype {t.dtype}, {first.name} has {first.dtype}")
        if len(s) != len(shapes[0]) or any(not dim_equal(a, b)
                                           for k, (a, b) in enumerate(zip(s, shapes[0]))
                                           if k != axis):
            raise TopiError(f"concatenate: shape {s} of {t.name} does not match {shapes[0]} of "
                            f"{first.name} outside axis {axis}")
    starts = [0]
    for s in shapes:
        starts.append(s[axis] if is_const_value(starts[-1], 0) else starts[-1] + s[axis])
    out_shape = shapes[0][:axis] + (starts[-1],) + shapes[0][axis + 1:]
    parts = [(t, lo, s[axis]) for t, lo, s in zip(tensors, starts, shapes)
             if not is_const_value(s[axis], 0)]
    if not parts:
        parts = [(tensors[0], 0, 0)]

    def fcompute(*i):
        def load(t, lo):
            return t(*(i[:axis] + (i[axis] - lo if not is_const_value(lo, 0) else i[axis],) +
                       i[axis + 1:]))
        value = load(*parts[-1][:2])
        for t, lo, size in reversed(parts[:-1]):
            end = size if is_const_value(lo, 0) else lo + size
            # if_then_else: only the taken branch loads, the others would be out of bounds.
            value = te.if_then_else(i[axis] < end, load(t, lo), value)
        return value

    return _compute(out_shape, fcompute, "concatenate")


def stack(tensors, axis: int = 0):
    """Join same-shaped tensors along a new axis.

    Example:
        >>> c = stack([te.placeholder((3,), name="a"), te.placeholder((3,), name="b")])  # (2, 3)
    """
    tensors = list(tensors) if isinstance(tensors, (list, tuple)) else [tensors]
    if not tensors:
        raise TopiError("stack: needs at least one tensor")
    axis = normalize_axis(axis, tensors[0].ndim + 1, "stack")
    return concatenate([expand_dims(t, axis) for t in tensors], axis)


def strided_slice(x, begin, end, strides=None, axes=None):
    """x[begin:end:stride] along `axes` (all leading axes when None). Negative indices count
    from the end; out-of-range bounds are clamped, and a negative stride walks backwards, as
    ONNX Slice and Python slices (end=-sys.maxsize with a negative stride reaches index 0).

    Example:
        >>> y = strided_slice(te.placeholder((10, 8), name="x"), [1, -1], [8, 0], [2, -3])
    """
    check_tensor(x, "strided_slice")
    shape = _sizes(x)         # a symbolic size is fine on an axis that is not sliced
    begin, end = list(begin), list(end)
    strides = [1] * len(begin) if strides is None else list(strides)
    axes = list(range(len(begin))) if axes is None else list(axes)
    if not len(begin) == len(end) == len(strides) == len(axes):
        raise TopiError(f"strided_slice: begin, end, strides and axes need the same length, got "
                        f"{len(begin)}, {len(end)}, {len(strides)}, {len(axes)}")
    starts, steps = [0] * x.ndim, [1] * x.ndim
    out_shape = list(shape)
    seen = set()
    for b, e, st, a in zip(begin, end, strides, axes):
        a = normalize_axis(a, x.ndim, "strided_slice", "axes entry")
        if a in seen:
            raise TopiError(f"strided_slice: axis {a} is given twice")
        seen.add(a)
        st = get_const_int(st, "strided_slice: stride")
        if st == 0:
            raise TopiError(f"strided_slice: stride of axis {a} is 0")
        if not all(is_const_int(v) for v in (b, e, shape[a])):
            # symbolic: bounds resolved and within the axis (see the graph op's relation)
            if st < 0:
                raise TopiError(f"strided_slice: a slice over symbolic sizes needs a positive "
                                f"stride, got {st}")
            starts[a], steps[a] = b, st
            out_shape[a] = symbolic_slice_length(b, e, st)
            continue
        # Python's slice clamping is ONNX Slice's: begin to [0, n] (or [0, n-1] going
        # backwards), end to [0, n] (or [-1, n-1]).
        lo, hi, _ = slice(get_const_int(b, "strided_slice: begin"),
                          get_const_int(e, "strided_slice: end"), st).indices(
            get_const_int(shape[a], f"strided_slice: sliced dimension {a} of {x.name}"))
        starts[a], steps[a] = lo, st
        out_shape[a] = len(range(lo, hi, st))

    def fcompute(*i):
        return x(*(i[k] if is_const_value(starts[k], 0) and steps[k] == 1
                   else starts[k] + i[k] * steps[k] for k in range(x.ndim)))

    return _compute(tuple(out_shape), fcompute, "strided_slice")


def split(x, indices_or_sections, axis: int = 0) -> list:
    """Cut x along `axis`, as numpy.split: an int is a number of equal sections, a list the
    indices where each part starts. Returns a list of tensors. (For ONNX/PyTorch part sizes
    use split_sizes.)

    Example:
        >>> a, b, c = split(te.placeholder((6, 4), name="x"), 3, axis=0)   # three (2, 4)
    """
    check_tensor(x, "split")
    axis = normalize_axis(axis, x.ndim, "split")
    n = get_const_int(x.shape[axis], f"split: dimension {axis} of {x.name}")   # (others may
    # be symbolic sizes)
    if isinstance(indices_or_sections, int):
        sections = indices_or_sections
        if sections <= 0 or n % sections:
            raise TopiError(f"split: axis {axis} of size {n} cannot be cut into {sections} "
                            "equal sections")
        bounds = [k * (n // sections) for k in range(sections)] + [n]
    else:
        cuts = [get_const_int(c, "split: index") for c in indices_or_sections]
        if any(b < a for a, b in zip(cuts, cuts[1:])):
            raise TopiError(f"split: indices {cuts} must be increasing")
        bounds = [0] + [min(max(c, 0), n) for c in cuts] + [n]
    outs = []
    for lo, hi in zip(bounds, bounds[1:]):
        hi = max(lo, hi)
        outs.append(_part(x, axis, lo, hi - lo))
    return outs


def split_sizes(x, sizes, axis: int = 0) -> list:
    """Cut x into consecutive parts of the given sizes (ONNX Split, torch.split with a list).

    Example:
        >>> a, b = split_sizes(te.placeholder((5, 4), name="x"), [2, 3])
    """
    check_tensor(x, "split_sizes")
    axis = normalize_axis(axis, x.ndim, "split_sizes")
    n = get_const_int(x.shape[axis], f"split_sizes: dimension {axis} of {x.name}")
    sizes = [get_const_int(s, "split_sizes: size") for s in sizes]
    if any(s < 0 for s in sizes) or sum(sizes) != n:
        raise TopiError(f"split_sizes: sizes {sizes} must be non-negative and add up to {n}")
    outs, lo = [], 0
    for size in sizes:
        outs.append(_part(x, axis, lo, size))
        lo += size
    return outs


def _part(x, axis, lo, size):
    shape = tuple(x.shape[:axis]) + (size,) + tuple(x.shape[axis + 1:])
    return _compute(shape, lambda *i: x(*(i[:axis] + (i[axis] + lo,) + i[axis + 1:])), "split")


# ------------------------------------------------------------------------------ indexing
TAKE_MODES = ("clip", "wrap", "fast")


def _check_indices(indices, op_name):
    check_tensor(indices, op_name, "indices")
    if not dt.is_integral(indices.dtype):
        raise TopiError(f"{op_name}: indices must have an integer dtype, got {indices.dtype}")


def _normalize_index(idx, n: int, mode: str):
    """A negative index counts from the end; then clip (memory-safe), wrap, or trust it."""
    if mode == "wrap":
        idx = te.floormod(idx, te.const(n, idx.dtype))
    else:
        if not dt.is_uint(idx.dtype):
            idx = te.select(idx < te.const(0, idx.dtype), idx + n, idx)
        if mode == "clip":
            idx = te.min(te.max(idx, te.const(0, idx.dtype)), te.const(n - 1, idx.dtype))
    return te.cast(idx, "int32") if idx.dtype != "int32" else idx


def take(x, indices, axis=None, mode: str = "clip"):
    """Pick entries of x along `axis` (of the flattened x when None) at `indices` (a tensor or a
    Python int). Negative indices count from the end; out-of-range ones are clamped in "clip"
    mode, taken modulo the size in "wrap" mode, and not checked in "fast" mode.

    Example:
        >>> w = te.placeholder((10, 4), name="w"); ids = te.placeholder((2, 3), "int64", name="ids")
        >>> y = take(w, ids, axis=0)   # (2, 3, 4)
    """
    check_tensor(x, "take")
    if mode not in TAKE_MODES:
        raise TopiError(f"take: mode must be one of {TAKE_MODES}, got {mode!r}")
    if axis is None:
        x = reshape(x, (-1,))
        axis = 0
    axis = normalize_axis(axis, x.ndim, "take")
    n = _static_shape(x, "take")[axis]
    if isinstance(indices, int) and not isinstance(indices, bool):
        if not -n <= indices < n:
            raise TopiError(f"take: index {indices} is out of range for axis {axis} of size {n}")
        k = indices % n
        shape = tuple(x.shape[:axis]) + tuple(x.shape[axis + 1:])
        return _compute(shape, lambda *i: x(*(i[:axis] + (k,) + i[axis:])), "take")
    _check_indices(indices, "take")
    if n == 0:
        raise TopiError(f"take: axis {axis} of {x.name} is empty")
    m = indices.ndim
    shape = tuple(x.shape[:axis]) + tuple(indices.shape) + tuple(x.shape[axis + 1:])

    def fcompute(*i):
        idx = _normalize_index(indices(*i[axis:axis + m]), n, mode)
        return x(*(i[:axis] + (idx,) + i[axis + m:]))

    return _compute(shape, fcompute, "take")


def embedding(weight, indices):
    """Rows of `weight` at `indices` (take along axis 0), as torch.nn.functional.embedding.

    Example:
        >>> y = embedding(te.placeholder((100, 16), name="w"), te.placeholder((4,), "int64", name="ids"))
    """
    return take(weight, indices, axis=0)


def gather(x, axis: int, indices):
    """out[i] = x[i with i[axis] replaced by indices[i]]: ONNX GatherElements / torch.gather.
    Negative indices count from the end; out-of-range ones are clamped.

    Example:
        >>> y = gather(te.placeholder((3, 4), name="x"), 1, te.placeholder((3, 2), "int64", name="i"))
    """
    check_tensor(x, "gather")
    _check_indices(indices, "gather")
    if indices.ndim != x.ndim:
        raise TopiError(f"gather: indices have {indices.ndim} dimensions, x has {x.ndim}")
    axis = normalize_axis(axis, x.ndim, "gather")
    xs, ids = _static_shape(x, "gather"), _static_shape(indices, "gather")
    for k, (a, b) in enumerate(zip(xs, ids)):
        if k != axis and b > a:
            raise TopiError(f"gather: dimension {k} of indices ({b}) exceeds that of x ({a})")
    n = xs[axis]

    def fcompute(*i):
        idx = _normalize_index(indices(*i), n, "clip")
        return x(*(i[:axis] + (idx,) + i[axis + 1:]))

    return _compute(indices.shape, fcompute, "gather")


def gather_nd(x, indices):
    """ONNX GatherND (batch_dims 0): the last axis of `indices` (size k) indexes the first k
    axes of x; out shape = indices.shape[:-1] + x.shape[k:]. Negative indices count from the end;
    out-of-range ones are clamped.

    Example:
        >>> y = gather_nd(te.placeholder((4, 5, 6), name="x"), te.placeholder((3, 2), "int64", name="i"))
    """
    check_tensor(x, "gather_nd")
    _check_indices(indices, "gather_nd")
    ids = _static_shape(indices, "gather_nd")
    xs = _static_shape(x, "gather_nd")
    if not ids or not 1 <= ids[-1] <= x.ndim:
        raise TopiError(f"gather_nd: the last dimension of indices {ids} must be between 1 and "
                        f"{x.ndim} (the rank of x)")
    k, m = ids[-1], len(ids) - 1
    shape = ids[:-1] + xs[k:]

    def fcompute(*i):
        lead = tuple(_normalize_index(indices(*(i[:m] + (j,))), xs[j], "clip") for j in range(k))
        return x(*(lead + i[m:]))

    return _compute(shape, fcompute, "gather_nd")


# ------------------------------------------------------------------------------ padding, tiling
PAD_MODES = ("constant", "reflect", "edge")


def pad(x, pad_before, pad_after=None, pad_value=0.0, mode: str = "constant"):
    """Pad every axis: `pad_before[k]` elements before and `pad_after[k]` after (lists as long
    as the rank; pad_after defaults to pad_before). "constant" fills with pad_value, "reflect"
    mirrors without repeating the edge (numpy "reflect", torch "reflect"), "edge" repeats it
    (torch "replicate").

    Example:
        >>> y = pad(te.placeholder((1, 3, 5, 5), name="x"), (0, 0, 1, 1), (0, 0, 2, 2))
    """
    check_tensor(x, "pad")
    if mode not in PAD_MODES:
        raise TopiError(f"pad: mode must be one of {PAD_MODES}, got {mode!r}")
    shape = _static_shape(x, "pad")
    before = [get_const_int(p, "pad: pad_before entry") for p in pad_before]
    after = before if pad_after is None else [get_const_int(p, "pad: pad_after entry") for p in pad_after]
    if len(before) != x.ndim or len(after) != x.ndim:
        raise TopiError(f"pad: pad_before and pad_after need {x.ndim} entries (one per axis), "
                        f"got {len(before)} and {len(after)}")
    if any(p < 0 for p in before + after):
        raise TopiError(f"pad: negative padding {before}, {after}; use strided_slice to crop")
    for k, (n, b, a) in enumerate(zip(shape, before, after)):
        if mode == "reflect" and (b >= n or a >= n) and (b or a):
            raise TopiError(f"pad: reflect padding ({b}, {a}) of axis {k} must be smaller than "
                            f"its size {n}")
        if mode == "edge" and n == 0 and (b or a):
            raise TopiError(f"pad: cannot edge-pad the empty axis {k}")
    out_shape = tuple(n + b + a for n, b, a in zip(shape, before, after))
    if not dt.is_float(x.dtype) and isinstance(pad_value, float) and not pad_value.is_integer():
        raise TopiError(f"pad: pad_value {pad_value} does not fit the {x.dtype} dtype of {x.name}")
    value = te.const(pad_value if dt.is_float(x.dtype) else int(pad_value), x.dtype)

    def fcompute(*i):
        src, inside = [], []
        for k, (n, b, a) in enumerate(zip(shape, before, after)):
            j = i[k] - b if b else i[k]
            if not (b or a):
                src.append(j)
            elif mode == "constant":
                src.append(j)
                if b:
                    inside.append(i[k] >= b)
                if a:
                    inside.append(i[k] < b + n)
            elif mode == "edge":
                src.append(te.min(te.max(j, 0), n - 1))
            else:
                j = te.select(j < 0, -j, j)
                src.append(te.select(j >= n, 2 * (n - 1) - j, j))
        if inside:
            return te.if_then_else(te.all(*inside), x(*src), value)
        return x(*src)

    return _compute(out_shape, fcompute, "pad")


def broadcast_to(x, shape):
    """x stretched to `shape` by NumPy broadcasting rules.

    Example:
        >>> y = broadcast_to(te.placeholder((3, 1), name="x"), (2, 3, 4))
    """
    check_tensor(x, "broadcast_to")
    shape = tuple(get_const_int(d) if is_const_int(d) else d for d in shape)   # (or sizes)
    got = broadcast_shape(x.shape, shape, op_name="broadcast_to") if len(shape) >= x.ndim \
        else ()
    if len(shape) < x.ndim or len(got) != len(shape) or \
            not all(dim_equal(a, b) for a, b in zip(got, shape)):
        raise TopiError(f"broadcast_to: cannot broadcast {get_const_tuple(x.shape)} to {shape}")
    return te.compute(shape, lambda *i: x(*broadcast_index(x, shape, i)), name="broadcast_to",
                      tag=tags.BROADCAST)


def tile(x, reps):
    """Repeat x `reps[k]` times along each axis, as numpy.tile (a shorter reps repeats the
    trailing axes; a longer one adds leading axes).

    Example:
        >>> y = tile(te.placeholder((2, 3), name="x"), (2, 1, 2))   # (2, 2, 6)
    """
    check_tensor(x, "tile")
    reps = [get_const_int(r, "tile: reps entry") for r in ([reps] if isinstance(reps, int) else reps)]
    if any(r < 0 for r in reps):
        raise TopiError(f"tile: negative repetition in {reps}")
    shape = list(_static_shape(x, "tile"))
    ndim = max(len(shape), len(reps))
    shape = [1] * (ndim - len(shape)) + shape
    reps = [1] * (ndim - len(reps)) + reps
    offset = ndim - x.ndim
    out_shape = tuple(n * r for n, r in zip(shape, reps))

    def fcompute(*i):
        return x(*(te.floormod(i[k], shape[k]) if reps[k] != 1 else i[k]
                   for k in range(offset, ndim)))

    return _compute(out_shape, fcompute, "tile")


def arange(start, stop=None, step=1, dtype: str = "float32"):
    """[start, start + step, ...) up to stop, as numpy.arange with Python-number bounds.

    Example:
        >>> r = arange(0, 10, 3, dtype="int32")   # [0, 3, 6, 9]
    """
    if stop is None:
        start, stop = 0, start
    if step == 0:
        raise TopiError("arange: step must not be 0")
    return arange_of_length(max(0, math.ceil((stop - start) / step)), start, step, dtype)


def size_value(value, dtype: str = "int64"):
    """A 0-d tensor holding `value`, an int or a symbolic size.

    Example:
        >>> t = size_value(te.var("past"), "int64")
    """
    return te.compute((), lambda: te.cast(value, dt.normalize(dtype)), name="size_value",
                      tag=tags.INJECTIVE)


def arange_of_length(length, start=0, step=1, dtype: str = "int64"):
    """The `length` values start, start + step, ... in `dtype`; `length` may be a symbolic
    size (the positions of a sequence of dynamic length).

    Example:
        >>> r = arange_of_length(te.var("n"), dtype="int32")
    """
    dtype = dt.normalize(dtype)
    if dt.is_float(dtype):
        return te.compute((length,), lambda i: te.const(start, dtype) + te.cast(i, dtype) * step,
                          name="arange", tag=tags.INJECTIVE)
    if any(isinstance(v, float) and not v.is_integer() for v in (start, step)):
        raise TopiError(f"arange: fractional start/step with integer dtype {dtype}")
    return te.compute((length,), lambda i: te.cast(i, dtype) * int(step) + int(start),
                      name="arange", tag=tags.INJECTIVE)
