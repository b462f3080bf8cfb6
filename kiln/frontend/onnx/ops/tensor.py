"""Shape and data-movement ONNX ops: Reshape, Transpose, Concat, Split, Slice, Gather, Pad ...,
and the shape sources (Shape, Size, ConstantOfShape, Range, Constant) that fold to numpy."""
from __future__ import annotations

import math

import numpy as np

from ....arith import simplify
from ....tir import op as top
from ....graph.ty import same_shape
from ....tir.expr import PrimExpr
from ..context import dtype_of, is_static, shape_of, split_outputs
from ..registry import converter


def _axis(ctx, axis: int, ndim: int, what="axis") -> int:
    if not -ndim <= axis < max(ndim, 1):
        ctx.error(f"{what} {axis} is out of range for rank {ndim}")
    return axis % max(ndim, 1)


def reshape_to(ctx, x, shape):
    """x reshaped to a static shape (no-op when it already has it).

    Example:
        >>> reshape_to(ctx, np.zeros((2, 3)), (6,)).shape      # doctest: +SKIP
        (6,)
    """
    shape = tuple(d if isinstance(d, PrimExpr) else int(d) for d in shape)
    if same_shape(shape_of(x), shape):
        return x
    return ctx.op("reshape", x, newshape=shape)


# -- shape sources ---------------------------------------------------------------------------

@converter("Shape")
def _shape(ctx):
    dims = ctx.shape(0)
    # Symbolic sizes (dim_ranges) stay symbolic: an object array of ints and size expressions,
    # which the shape arithmetic after it folds like numbers.
    shape = np.asarray(dims, dtype=np.int64 if all(isinstance(d, int) for d in dims) else object)
    start, end = ctx.attr("start", 0), ctx.attr("end", None)
    return shape[start:end].copy()


@converter("Size")
def _size(ctx):
    return np.asarray(math.prod(ctx.shape(0)), dtype=np.int64)


@converter("ConstantOfShape")
def _constant_of_shape(ctx):
    shape = ctx.static_ints(0, "shape")
    value = ctx.attr("value", np.zeros(1, np.float32))
    return np.full(shape, np.asarray(value).reshape(-1)[0], dtype=np.asarray(value).dtype)


@converter("Range")
def _range(ctx):
    start, limit, delta = (np.asarray(ctx.static(i, w)).reshape(())
                           for i, w in enumerate(("start", "limit", "delta")))
    if limit.dtype == object:           # up to a symbolic size: computed, not folded
        start, delta, limit = int(start), int(delta), limit[()]
        if delta <= 0 or start < 0:
            ctx.error(f"a range up to the symbolic size {limit} needs start >= 0 and a "
                      f"positive delta, got start {start}, delta {delta}")
        length = top.max_((limit - start + delta - 1) // delta, 0)
        return ctx.op("arange", length=simplify(length), start=start, step=delta,
                      dtype=ctx.dtype(0))
    return np.arange(start, limit, delta, dtype=start.dtype)


_CONSTANT_ATTRS = {"value_float": np.float32, "value_floats": np.float32,
                   "value_int": np.int64, "value_ints": np.int64}


@converter("Constant")
def _constant(ctx):
    if "value" in ctx.attrs:
        return np.asarray(ctx.attrs["value"])
    for name, dtype in _CONSTANT_ATTRS.items():
        if name in ctx.attrs:
            return np.asarray(ctx.attrs[name], dtype=dtype)
    ctx.unsupported(f"attribute {sorted(ctx.attrs)}")


# -- reshapes --------------------------------------------------------------------------------

def resolve_reshape(ctx, in_shape, target, allow_zero=False) -> tuple:
    """ONNX Reshape's target shape with 0 (copy the input dimension) and -1 resolved.

    Example:
        >>> resolve_reshape(ctx, (2, 3, 4), (0, -1))          # doctest: +SKIP
        (2, 12)
    """
    out = []
    for k, d in enumerate(target):
        if isinstance(d, int) and d == 0 and not allow_zero:
            if k >= len(in_shape):
                ctx.error(f"shape {tuple(target)} copies dimension {k} (0) of a rank "
                          f"{len(in_shape)} input")
            d = in_shape[k]
        out.append(d if isinstance(d, PrimExpr) else int(d))
    if not all(isinstance(d, int) for d in tuple(out) + tuple(in_shape)):
        return tuple(out)       # symbolic sizes: the graph's reshape resolves -1 and checks
    total = math.prod(in_shape)
    if out.count(-1) > 1:
        ctx.error(f"shape {tuple(target)} has more than one -1")
    if -1 in out:
        known = math.prod(d for d in out if d != -1)
        if known == 0 or total % known:
            ctx.error(f"cannot reshape {tuple(in_shape)} to {tuple(target)}")
        out[out.index(-1)] = total // known
    if math.prod(out) != total:
        ctx.error(f"cannot reshape {tuple(in_shape)} ({total} elements) to {tuple(target)}")
    return tuple(out)


@converter("Reshape")
def _reshape(ctx):
    target = ctx.static_ints(1, "shape") if ctx.opset >= 5 else list(ctx.attr("shape"))
    shape = resolve_reshape(ctx, ctx.shape(0), target, bool(ctx.attr("allowzero", 0)))
    return reshape_to(ctx, ctx.input(0), shape)


@converter("Flatten")
def _flatten(ctx):
    shape = ctx.shape(0)
    axis = ctx.attr("axis", 1)
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        ctx.error(f"axis {ctx.attr('axis', 1)} is out of range for rank {len(shape)}")
    return reshape_to(ctx, ctx.input(0), (math.prod(shape[:axis]), math.prod(shape[axis:])))


def _unsqueezed_shape(ctx, shape, axes):
    rank = len(shape) + len(axes)
    axes = sorted(_axis(ctx, a, rank, "axes entry") for a in axes)
    if len(set(axes)) != len(axes):
        ctx.error(f"axes {axes} repeat an axis")
    out, it = [], iter(shape)
    for k in range(rank):
        out.append(1 if k in axes else next(it))
    return tuple(out), axes


@converter("Unsqueeze")
def _unsqueeze(ctx):
    axes = ctx.static_ints(1, "axes") if ctx.opset >= 13 else list(ctx.attr("axes"))
    shape, axes = _unsqueezed_shape(ctx, ctx.shape(0), axes)
    x = ctx.input(0)
    if axes == list(range(axes[0], axes[0] + len(axes))):
        return ctx.op("expand_dims", x, axis=axes[0], num_newaxis=len(axes))
    return ctx.op("reshape", x, newshape=shape)


@converter("Squeeze")
def _squeeze(ctx):
    shape = ctx.shape(0)
    if ctx.opset >= 13:
        axes = ctx.static_ints(1, "axes") if ctx.has_input(1) else None
    else:
        axes = ctx.attr("axes", None)
    if axes is None:
        axes = [k for k, d in enumerate(shape) if d == 1]
    axes = sorted({_axis(ctx, a, len(shape), "axes entry") for a in axes})
    for a in axes:
        if shape[a] != 1:
            ctx.error(f"cannot squeeze axis {a} of size {shape[a]}")
    if not axes:
        return ctx.input(0)
    return ctx.op("squeeze", ctx.input(0), axis=tuple(axes))


@converter("Transpose")
def _transpose(ctx):
    ndim = ctx.ndim(0)
    perm = ctx.attr("perm", None)
    perm = list(reversed(range(ndim))) if perm is None else [int(p) for p in perm]
    if perm == list(range(ndim)):
        return ctx.input(0)
    return ctx.op("transpose", ctx.input(0), axes=tuple(perm))


@converter("Expand")
def _expand(ctx):
    shape = ctx.shape(0)
    target = ctx.static_ints(1, "shape")
    rank = max(len(shape), len(target))
    a = (1,) * (rank - len(shape)) + tuple(shape)
    b = (1,) * (rank - len(target)) + tuple(target)
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            ctx.error(f"shape {tuple(shape)} does not expand to {tuple(target)}")
        out.append(y if x == 1 else x)
    if tuple(out) == tuple(shape):
        return ctx.input(0)
    return ctx.op("broadcast_to", ctx.input(0), shape=tuple(out))


@converter("Tile")
def _tile(ctx):
    reps = ctx.static_ints(1, "repeats")
    if len(reps) != ctx.ndim(0):
        ctx.error(f"repeats {reps} does not have one entry per axis of a rank {ctx.ndim(0)} "
                  f"input")
    if all(r == 1 for r in reps):
        return ctx.input(0)
    return ctx.op("tile", ctx.input(0), reps=tuple(reps))


@converter("DepthToSpace", "SpaceToDepth")
def _depth_space(ctx):
    n, c, h, w = ctx.shape(0)
    b = int(ctx.attr("blocksize"))
    x = ctx.input(0)
    crd = ctx.attr("mode", "DCR") == "CRD"
    if ctx.op_type == "SpaceToDepth":
        x = reshape_to(ctx, x, (n, c, h // b, b, w // b, b))
        x = ctx.op("transpose", x, axes=(0, 1, 3, 5, 2, 4) if crd else (0, 3, 5, 1, 2, 4))
        return reshape_to(ctx, x, (n, c * b * b, h // b, w // b))
    if not crd:
        x = reshape_to(ctx, x, (n, b, b, c // (b * b), h, w))
        x = ctx.op("transpose", x, axes=(0, 3, 4, 1, 5, 2))
    else:
        x = reshape_to(ctx, x, (n, c // (b * b), b, b, h, w))
        x = ctx.op("transpose", x, axes=(0, 1, 4, 2, 5, 3))
    return reshape_to(ctx, x, (n, c // (b * b), h * b, w * b))


# -- joining and cutting ---------------------------------------------------------------------

@converter("Concat")
def _concat(ctx):
    parts = [ctx.input(i) for i in range(ctx.num_inputs) if ctx.has_input(i)]
    ndim = len(shape_of(parts[0]))
    axis = _axis(ctx, int(ctx.attr("axis")), ndim)
    # Empty tensors (shape arithmetic often concatenates them) contribute nothing.
    kept = [p for p in parts if shape_of(p)[axis] != 0] or parts[:1]
    if len(kept) == 1:
        return kept[0]
    dtypes = {dtype_of(p) for p in kept}
    if len(dtypes) > 1:
        ctx.error(f"inputs have different element types {sorted(dtypes)}")
    return ctx.op("concatenate", kept, axis=axis)


def split_sizes(ctx, dim: int, count: int):
    """Sizes of a Split's outputs along a dimension of `dim` (input, attribute, num_outputs
    or equal parts, by opset).

    Example:
        >>> split_sizes(ctx, 7, 3)     # opset 18, num_outputs=3   # doctest: +SKIP
        [3, 3, 1]
    """
    if ctx.opset >= 13 and ctx.has_input(1):
        return ctx.static_ints(1, "split")
    if ctx.opset < 13 and "split" in ctx.attrs:
        return [int(s) for s in ctx.attrs["split"]]
    if ctx.opset >= 18 and "num_outputs" in ctx.attrs:
        count = int(ctx.attrs["num_outputs"])
        size = -(-dim // count)
        return [min(size, dim - k * size) for k in range(count)]
    if dim % count:
        ctx.error(f"cannot split a dimension of {dim} into {count} equal outputs")
    return [dim // count] * count


@converter("Split")
def _split(ctx):
    shape = ctx.shape(0)
    axis = _axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    sizes = split_sizes(ctx, shape[axis], ctx.num_outputs)
    if sum(sizes) != shape[axis] or any(s < 0 for s in sizes):
        ctx.error(f"split sizes {sizes} do not add up to dimension {axis} of {tuple(shape)}")
    if len(sizes) == 1:
        return [ctx.input(0)]
    indices = tuple(int(v) for v in np.cumsum(sizes)[:-1])
    out = ctx.op("split", ctx.input(0), indices_or_sections=indices, axis=axis)
    return split_outputs(out, len(sizes))


def slice_bounds(dim: int, start: int, end: int, step: int):
    """(begin, end) of a Python/ONNX slice, normalized so the catalog's strided_slice reads
    them the same way (an end before index 0 when walking backwards is -dim - 1).

    Example:
        >>> slice_bounds(5, -1, -100, -1)
        (4, -6)
    """
    lo, hi, _ = slice(start, end, step).indices(dim)
    if step < 0 and hi < 0:
        hi = -dim - 1
    return lo, hi


@converter("Slice")
def _slice(ctx):
    shape = ctx.shape(0)
    if ctx.opset >= 10:
        starts, ends = ctx.static_ints(1, "starts"), ctx.static_ints(2, "ends")
        axes = ctx.static_ints(3, "axes") if ctx.has_input(3) else list(range(len(starts)))
        steps = ctx.static_ints(4, "steps") if ctx.has_input(4) else [1] * len(starts)
    else:
        starts, ends = list(ctx.attr("starts")), list(ctx.attr("ends"))
        axes = list(ctx.attr("axes", range(len(starts))))
        steps = [1] * len(starts)
    if not len(starts) == len(ends) == len(axes) == len(steps):
        ctx.error("starts, ends, axes and steps differ in length")
    begin, end, strides, out_axes = [], [], [], []
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = _axis(ctx, a, len(shape), "axes entry")
        if st == 0:
            ctx.error(f"step of axis {a} is 0")
        lo, hi = slice_bounds(shape[a], s, e, st)
        if (lo, hi, st) == (0, shape[a], 1):
            continue
        begin.append(lo)
        end.append(hi)
        strides.append(st)
        out_axes.append(a)
    if not out_axes:
        return ctx.input(0)
    return ctx.op("strided_slice", ctx.input(0), begin=tuple(begin), end=tuple(end),
                  strides=tuple(strides), axes=tuple(out_axes))


# -- indexing --------------------------------------------------------------------------------

def _known_indices(ctx, i, dim):
    idx = np.asarray(ctx.static(i, "indices")).astype(np.int64)
    if idx.size and (idx.min() < -dim or idx.max() >= dim):
        ctx.error(f"indices out of range [{-dim}, {dim}) of the gathered axis")
    return np.where(idx < 0, idx + dim, idx)


@converter("Gather")
def _gather(ctx):
    shape = ctx.shape(0)
    axis = _axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    if ctx.is_known(1):
        idx = _known_indices(ctx, 1, shape[axis])
        if is_static(ctx.input(0)):
            return np.take(ctx.input(0), idx, axis=axis)
        return ctx.op("take", ctx.input(0), idx, axis=axis, mode="clip")
    # Indices known only at run time (token ids): ONNX allows negative ones, so wrap.
    return ctx.op("take", ctx.input(0), ctx.input(1), axis=axis, mode="wrap")


@converter("GatherElements")
def _gather_elements(ctx):
    shape = ctx.shape(0)
    axis = _axis(ctx, int(ctx.attr("axis", 0)), len(shape))
    if ctx.is_known(1):
        idx = _known_indices(ctx, 1, shape[axis])
    else:
        idx = ctx.input(1)
        dim = ctx.scalar(shape[axis], idx)
        idx = ctx.op("where", ctx.op("less", idx, ctx.scalar(0, idx)),
                     ctx.op("add", idx, dim), idx)
    return ctx.op("gather", ctx.input(0), idx, axis=axis)


# -- padding ---------------------------------------------------------------------------------

def _pad_check(attrs, opset):
    mode = attrs.get("mode", "constant")
    return None if mode in ("constant", "reflect", "edge") else f"mode={mode}"


@converter("Pad", check=_pad_check)
def _pad(ctx):
    shape = ctx.shape(0)
    ndim = len(shape)
    if ctx.opset >= 11:
        pads = ctx.static_ints(1, "pads")
        value = 0.0
        if ctx.has_input(2):
            value = float(np.asarray(ctx.static(2, "constant_value")).reshape(()))
        axes = ctx.static_ints(3, "axes") if ctx.has_input(3) else list(range(ndim))
    else:
        pads = [int(p) for p in ctx.attr("pads")]
        value = float(ctx.attr("value", 0.0))
        axes = list(range(ndim))
    axes = [_axis(ctx, a, ndim, "axes entry") for a in axes]
    if len(pads) != 2 * len(axes):
        ctx.error(f"pads {pads} must have two entries per padded axis ({len(axes)} axes)")
    before, after = [0] * ndim, [0] * ndim
    for k, a in enumerate(axes):
        before[a], after[a] = pads[k], pads[k + len(axes)]
    x = ctx.input(0)
    grow = [(max(b, 0), max(e, 0)) for b, e in zip(before, after)]
    if any(b or e for b, e in grow):
        x = ctx.op("nn.pad", x, pad_width=tuple(grow), pad_value=value,
                   pad_mode=ctx.attr("mode", "constant"))
    if any(b < 0 or e < 0 for b, e in zip(before, after)):
        # Negative pads crop.
        padded = shape_of(x)
        crop = [(k, -min(b, 0), padded[k] + min(e, 0)) for k, (b, e) in
                enumerate(zip(before, after)) if b < 0 or e < 0]
        x = ctx.op("strided_slice", x, begin=tuple(c[1] for c in crop),
                   end=tuple(c[2] for c in crop), strides=(1,) * len(crop),
                   axes=tuple(c[0] for c in crop))
    return x


@converter("CenterCropPad")
def _center_crop_pad(ctx):
    shape = ctx.shape(0)
    target = ctx.static_ints(1, "shape")
    axes = [_axis(ctx, int(a), len(shape), "axes entry")
            for a in ctx.attr("axes", range(len(shape)))]
    if len(target) != len(axes) or len(set(axes)) != len(axes):
        ctx.error(f"shape {target} needs one size per axis of {axes} (distinct axes)")
    crop, grow = [], [(0, 0)] * len(shape)
    for a, size in zip(axes, target):
        if size < 0:
            ctx.error(f"shape {target} has a negative size")
        if size == 0:
            ctx.unsupported("an empty output")
        if size < shape[a]:
            # The window starts half of the surplus in, rounded down.
            start = (shape[a] - size) // 2
            crop.append((a, start, start + size))
        elif size > shape[a]:
            # The extra pixel of an odd padding goes to the end.
            before = (size - shape[a]) // 2
            grow[a] = (before, size - shape[a] - before)
    x = ctx.input(0)
    if crop:
        x = ctx.op("strided_slice", x, begin=tuple(c[1] for c in crop),
                   end=tuple(c[2] for c in crop), strides=(1,) * len(crop),
                   axes=tuple(c[0] for c in crop))
    if any(b or e for b, e in grow):
        x = ctx.op("nn.pad", x, pad_width=tuple(grow), pad_value=0.0, pad_mode="constant")
    return x
