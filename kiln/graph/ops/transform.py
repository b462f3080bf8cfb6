"""Shape and indexing operators: reshape, transpose, concatenate, split, slices, take/gather,
expand_dims/squeeze, pad, broadcast_to, tile. All are INJECTIVE (index remapping)."""
from __future__ import annotations

import math

from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ...tir.expr import IntImm, PrimExpr
from ..ty import TensorType, TupleType, same_shape
from ...arith.slices import symbolic_slice_length
from .define import INJECTIVE, TopiRef, as_list, injective
from .relations import (broadcast_shapes, int_tuple, integer_tensor, is_known, normalize_axis,
                        one_of, size_tuple, tensor)


def _static(x, what="input"):
    if not x.is_static():
        raise GraphTypeError(f"{what} needs a static shape, got {x.shape}")
    return x.shape


# ------------------------------------------------------------------------------ reshape
def _reshape_rel(types, attrs):
    x = tensor(types[0])
    if not x.is_static() or not all(isinstance(d, int) for d in as_tuple(attrs.newshape)):
        return _symbolic_reshape(x, attrs)
    in_shape = _static(x)
    shape = list(int_tuple(attrs.newshape, "newshape"))
    total = math.prod(in_shape)
    if shape.count(-1) > 1:
        raise GraphTypeError(f"newshape {tuple(shape)} has more than one -1")
    if any(d < -1 for d in shape):
        raise GraphTypeError(f"newshape {tuple(shape)} has a negative size other than -1")
    known = math.prod(d for d in shape if d != -1)
    if -1 in shape:
        if known == 0 or total % known:
            raise GraphTypeError(f"cannot reshape {in_shape} to {tuple(shape)}")
        shape[shape.index(-1)] = total // known
    if math.prod(shape) != total:
        raise GraphTypeError(f"cannot reshape {in_shape} ({total} elements) to {tuple(shape)}")
    return TensorType(shape, x.dtype)


def _symbolic_reshape(x, attrs):
    """reshape where sizes are symbolic: sizes are compared, and a -1 inferred, by the
    integer simplifier (seq * 64 elements reshape to (seq, 4, 16))."""
    from ...arith import Analyzer
    ana = Analyzer()
    shape = list(as_tuple(attrs.newshape))
    for d in shape:
        if isinstance(d, bool) or not (isinstance(d, int) and d >= -1 or isinstance(d, PrimExpr)):
            raise GraphTypeError(f"newshape {tuple(shape)} holds {d!r}, not a size or -1")
    if shape.count(-1) > 1:
        raise GraphTypeError(f"newshape {tuple(shape)} has more than one -1")
    total = math.prod(x.shape)
    if -1 in shape:
        known = math.prod(d for d in shape if not (isinstance(d, int) and d == -1))
        if not ana.can_prove_equal(total % known, 0):
            raise GraphTypeError(f"cannot reshape {x.shape} to {tuple(shape)}: the sizes do "
                                 f"not divide")
        shape[shape.index(-1)] = _size(ana.simplify(total // known))
    if not ana.can_prove_equal(total, math.prod(shape)):
        raise GraphTypeError(f"cannot reshape {x.shape} to {tuple(shape)}: the numbers of "
                             f"elements differ")
    return TensorType([_size(d) for d in shape], x.dtype)


def _size(d):
    return d.value if isinstance(d, IntImm) else d


def as_tuple(v) -> tuple:
    return v if isinstance(v, tuple) else (v,)


injective("reshape", _reshape_rel, "transform:reshape", attrs={"newshape": REQUIRED},
          kwargs=lambda a, t: {"newshape": tuple(t.shape)},
          doc="the same elements, row-major, in newshape (one -1 is inferred)")


def _transpose_rel(types, attrs):
    x = tensor(types[0])
    axes = attrs.axes if attrs.axes is not None else tuple(reversed(range(x.ndim)))
    axes = int_tuple(axes, "axes")
    norm = [normalize_axis(a, x.ndim, "axes entry") for a in axes]
    if sorted(norm) != list(range(x.ndim)):
        raise GraphTypeError(f"axes {axes} are not a permutation of {x.ndim} axes")
    return TensorType([x.shape[a] for a in norm], x.dtype)


injective("transpose", _transpose_rel, "transform:transpose", attrs={"axes": None},
          kwargs=lambda a, t: {"axes": a.axes},
          doc="permute the axes (reverse them when axes is None), as numpy.transpose")


def _expand_dims_rel(types, attrs):
    x = tensor(types[0])
    axis, num = attrs.axis, attrs.num_newaxis
    if not isinstance(num, int) or num < 0:
        raise GraphTypeError(f"num_newaxis must be a non-negative int, got {num!r}")
    if not isinstance(axis, int) or not -x.ndim - 1 <= axis <= x.ndim:
        raise GraphTypeError(f"axis {axis!r} is out of range [{-x.ndim - 1}, {x.ndim}] for a "
                             f"tensor of rank {x.ndim}")
    axis = axis % (x.ndim + 1)
    return TensorType(x.shape[:axis] + (1,) * num + x.shape[axis:], x.dtype)


injective("expand_dims", _expand_dims_rel, "transform:expand_dims",
          attrs={"axis": REQUIRED, "num_newaxis": 1},
          kwargs=lambda a, t: {"axis": a.axis, "num_newaxis": a.num_newaxis},
          doc="insert num_newaxis axes of size 1 at axis")


def _squeeze_axes(x, axis):
    if axis is None:
        return tuple(k for k, d in enumerate(x.shape) if is_known(d) and d == 1)
    axes = int_tuple(axis, "axis")
    norm = sorted({normalize_axis(a, x.ndim) for a in axes})
    for a in norm:
        if not (is_known(x.shape[a]) and x.shape[a] == 1):
            raise GraphTypeError(f"cannot squeeze axis {a} of size {x.shape[a]}")
    return tuple(norm)


def _squeeze_rel(types, attrs):
    x = tensor(types[0])
    axes = _squeeze_axes(x, attrs.axis)
    return TensorType([d for k, d in enumerate(x.shape) if k not in axes], x.dtype)


injective("squeeze", _squeeze_rel, "transform:squeeze", attrs={"axis": None},
          kwargs=lambda a, t: {"axis": None if a.axis is None else list(int_tuple(a.axis, "axis"))},
          doc="drop axes of size 1 (all of them when axis is None)")


# ------------------------------------------------------------------------------ join, split
def _concatenate_rel(types, attrs):
    tup = types[0]
    if not isinstance(tup, TupleType) or not tup.fields:
        raise GraphTypeError(f"concatenate takes a non-empty Tuple of tensors, got {tup!r}")
    fields = [tensor(f, f"field {k}") for k, f in enumerate(tup.fields)]
    first = fields[0]
    axis = normalize_axis(attrs.axis, first.ndim)
    total = 0
    for k, f in enumerate(fields):
        if f.dtype != first.dtype:
            raise GraphTypeError(f"field {k} has dtype {f.dtype}, field 0 has {first.dtype}")
        if f.ndim != first.ndim:
            raise GraphTypeError(f"field {k} has rank {f.ndim}, field 0 has {first.ndim}")
        for d, (a, b) in enumerate(zip(f.shape, first.shape)):
            if d != axis and not (a is b or a == b):
                raise GraphTypeError(f"field {k} has size {a} on axis {d}, field 0 has {b} "
                                     f"(only axis {axis} may differ)")
        total = total + f.shape[axis]
    shape = list(first.shape)
    shape[axis] = total
    return TensorType(shape, first.dtype)


_concatenate = TopiRef("transform:concatenate")


def _concatenate_compute(attrs, inputs, out_type):
    # The graph compiler passes the tuple's tensors flattened; accept a nested list too.
    tensors = list(inputs[0]) if len(inputs) == 1 and isinstance(inputs[0], (list, tuple)) \
        else list(inputs)
    return [_concatenate(tensors, axis=attrs.axis)]


register_op("concatenate", type_rel=_concatenate_rel, pattern=OpPattern.INJECTIVE, num_inputs=1,
            attrs={"axis": 0}, compute=_concatenate_compute, schedules=INJECTIVE,
            doc="join the tensors of a Tuple along axis")


def split_bounds(n: int, indices_or_sections) -> list:
    """The (start, stop) of each part of an axis of size n cut as numpy.split.

    Example:
        >>> split_bounds(6, 3), split_bounds(6, (2, 5))
        ([(0, 2), (2, 4), (4, 6)], [(0, 2), (2, 5), (5, 6)])
    """
    if isinstance(indices_or_sections, int):
        sections = indices_or_sections
        if sections <= 0 or n % sections:
            raise GraphTypeError(f"an axis of size {n} cannot be cut into {sections} equal "
                                 f"sections")
        step = n // sections
        return [(k * step, (k + 1) * step) for k in range(sections)]
    cuts = int_tuple(indices_or_sections, "indices_or_sections")
    if any(c < 0 or c > n for c in cuts) or any(b < a for a, b in zip(cuts, cuts[1:])):
        raise GraphTypeError(f"split indices {cuts} must be increasing and within [0, {n}]")
    bounds = (0,) + cuts + (n,)
    return list(zip(bounds, bounds[1:]))


def _split_rel(types, attrs):
    x = tensor(types[0])
    axis = normalize_axis(attrs.axis, x.ndim)
    n = x.shape[axis]
    if not is_known(n):
        raise GraphTypeError(f"split needs a static size on axis {axis}, got {n}")
    parts = []
    for lo, hi in split_bounds(n, attrs.indices_or_sections):
        shape = list(x.shape)
        shape[axis] = hi - lo
        parts.append(TensorType(shape, x.dtype))
    return TupleType(parts)


injective("split", _split_rel, "transform:split",
          attrs={"indices_or_sections": REQUIRED, "axis": 0},
          kwargs=lambda a, t: {"indices_or_sections": a.indices_or_sections, "axis": a.axis},
          doc="cut along axis as numpy.split (an int: equal sections; a tuple: the indices "
              "where parts start); returns a Tuple")


# ------------------------------------------------------------------------------ slicing
def _strided_slice_rel(types, attrs):
    x = tensor(types[0])
    if not all(isinstance(v, int) for v in as_tuple(attrs.begin) + as_tuple(attrs.end)):
        begin, end = size_tuple(attrs.begin, "begin"), size_tuple(attrs.end, "end")
    else:
        begin, end = int_tuple(attrs.begin, "begin"), int_tuple(attrs.end, "end")
    strides = (1,) * len(begin) if attrs.strides is None else int_tuple(attrs.strides, "strides")
    axes = tuple(range(len(begin))) if attrs.axes is None else int_tuple(attrs.axes, "axes")
    if not len(begin) == len(end) == len(strides) == len(axes):
        raise GraphTypeError(f"begin, end, strides and axes need the same length, got "
                             f"{len(begin)}, {len(end)}, {len(strides)}, {len(axes)}")
    shape = list(x.shape)
    seen = set()
    for b, e, s, a in zip(begin, end, strides, axes):
        a = normalize_axis(a, x.ndim, "axes entry")
        if a in seen:
            raise GraphTypeError(f"axis {a} is sliced twice")
        seen.add(a)
        if s == 0:
            raise GraphTypeError(f"the stride of axis {a} is 0")
        if not all(is_known(v) for v in (shape[a], b, e)):
            # Symbolic sizes: bounds already resolved (no negative index, none past the
            # axis: the frontend checked them), a positive stride, no clamping.
            if s < 0 or any(is_known(v) and v < 0 for v in (b, e)):
                raise GraphTypeError(f"slicing axis {a} of symbolic size {shape[a]} needs "
                                     f"resolved bounds and a positive stride, got "
                                     f"{b}:{e}:{s}")
            shape[a] = symbolic_slice_length(b, e, s)
            continue
        # Python's slice clamping is ONNX Slice's and PyTorch's.
        shape[a] = len(range(*slice(b, e, s).indices(shape[a])))
    return TensorType(shape, x.dtype)


injective("strided_slice", _strided_slice_rel, "transform:strided_slice",
          attrs={"begin": REQUIRED, "end": REQUIRED, "strides": None, "axes": None},
          kwargs=lambda a, t: {"begin": a.begin, "end": a.end, "strides": a.strides,
                               "axes": a.axes},
          doc="x[begin:end:strides] on axes (the leading ones when None); negative indices "
              "count from the end and bounds clamp, as Python slices")

TAKE_MODES = ("clip", "wrap", "fast")


def _take_rel(types, attrs):
    x = tensor(types[0], "data")
    idx = integer_tensor(types[1])
    one_of(attrs.mode, TAKE_MODES, "mode")
    if attrs.axis is None:
        return TensorType(idx.shape, x.dtype)
    axis = normalize_axis(attrs.axis, x.ndim)
    return TensorType(x.shape[:axis] + idx.shape + x.shape[axis + 1:], x.dtype)


injective("take", _take_rel, "transform:take", num_inputs=2,
          attrs={"axis": None, "mode": "clip"},
          kwargs=lambda a, t: {"axis": a.axis, "mode": a.mode},
          doc="entries of data along axis (of the flattened data when None) at indices; "
              "negative indices count from the end, out-of-range ones clip or wrap "
              "(embedding is take with axis=0)")


def _gather_rel(types, attrs):
    x = tensor(types[0], "data")
    idx = integer_tensor(types[1])
    if idx.ndim != x.ndim:
        raise GraphTypeError(f"indices have rank {idx.ndim}, data has rank {x.ndim}")
    axis = normalize_axis(attrs.axis, x.ndim)
    for k, (a, b) in enumerate(zip(x.shape, idx.shape)):
        if k != axis and is_known(a) and is_known(b) and b > a:
            raise GraphTypeError(f"indices size {b} on axis {k} exceeds the data's {a}")
    return TensorType(idx.shape, x.dtype)


_gather = TopiRef("transform:gather")
register_op("gather", type_rel=_gather_rel, pattern=OpPattern.INJECTIVE, num_inputs=2,
            attrs={"axis": 0},
            compute=lambda a, inputs, t: as_list(_gather(inputs[0], a.axis, inputs[1])),
            schedules=INJECTIVE,
            doc="out[i] = data[i with i[axis] replaced by indices[i]] (ONNX GatherElements, "
                "torch.gather)")


# ------------------------------------------------------------------------------ pad, tile
PAD_MODES = ("constant", "edge", "reflect")


def _pad_width(attrs, ndim):
    width = attrs.pad_width
    if not isinstance(width, tuple) or len(width) != ndim or \
            not all(isinstance(p, tuple) and len(p) == 2 for p in width):
        raise GraphTypeError(f"pad_width must hold one (before, after) pair per axis ({ndim}), "
                             f"got {width!r}")
    for p in width:
        int_tuple(p, "pad_width entry", 2, minimum=0)
    return width


def _pad_rel(types, attrs):
    x = tensor(types[0])
    width = _pad_width(attrs, x.ndim)
    mode = one_of(attrs.pad_mode, PAD_MODES, "pad_mode")
    if not isinstance(attrs.pad_value, (int, float)):
        raise GraphTypeError(f"pad_value must be a number, got {attrs.pad_value!r}")
    shape = []
    for k, (d, (b, a)) in enumerate(zip(x.shape, width)):
        if mode == "reflect" and (b or a) and is_known(d) and max(b, a) >= d:
            raise GraphTypeError(f"reflect padding {(b, a)} of axis {k} must be smaller than its "
                                 f"size {d}")
        if mode == "edge" and (b or a) and is_known(d) and d == 0:
            raise GraphTypeError(f"cannot edge-pad the empty axis {k}")
        shape.append(d + b + a)
    return TensorType(shape, x.dtype)


injective("nn.pad", _pad_rel, "transform:pad",
          attrs={"pad_width": REQUIRED, "pad_value": 0.0, "pad_mode": "constant"},
          kwargs=lambda a, t: {"pad_before": [p[0] for p in a.pad_width],
                               "pad_after": [p[1] for p in a.pad_width],
                               "pad_value": a.pad_value, "mode": a.pad_mode},
          doc="pad each axis by (before, after): with pad_value, by repeating the edge, or "
              "by reflection without repeating it")


def _broadcast_to_rel(types, attrs):
    x = tensor(types[0])
    shape = size_tuple(attrs.shape, "shape")
    try:
        ok = len(shape) >= x.ndim and same_shape(broadcast_shapes(x.shape, shape), shape)
    except GraphTypeError:
        ok = False
    if not ok:
        raise GraphTypeError(f"cannot broadcast {x.shape} to {shape}")
    return TensorType(shape, x.dtype)


register_op("broadcast_to", type_rel=_broadcast_to_rel, pattern=OpPattern.BROADCAST,
            num_inputs=1, attrs={"shape": REQUIRED},
            compute=lambda a, inputs, t: as_list(_broadcast_to(inputs[0], tuple(t.shape))),
            schedules=INJECTIVE, doc="x stretched to shape by NumPy broadcasting")
_broadcast_to = TopiRef("transform:broadcast_to")


def _tile_rel(types, attrs):
    x = tensor(types[0])
    reps = int_tuple(attrs.reps, "reps", minimum=0)
    ndim = max(x.ndim, len(reps))
    shape = (1,) * (ndim - x.ndim) + tuple(x.shape)
    reps = (1,) * (ndim - len(reps)) + reps
    return TensorType([d * r for d, r in zip(shape, reps)], x.dtype)


injective("tile", _tile_rel, "transform:tile", attrs={"reps": REQUIRED},
          kwargs=lambda a, t: {"reps": int_tuple(a.reps, "reps")},
          doc="repeat x reps[k] times along each axis, as numpy.tile")


# ------------------------------------------------------------------------------ arange
def _arange_rel(types, attrs):
    (length,) = size_tuple(attrs.length, "length")
    return TensorType((length,), attrs.dtype)


register_op("arange", type_rel=_arange_rel, pattern=OpPattern.INJECTIVE, num_inputs=0,
            attrs={"length": REQUIRED, "start": 0, "step": 1, "dtype": "int64"},
            compute=lambda a, inputs, t: as_list(_arange(t.shape[0], a.start, a.step,
                                                         t.dtype)),
            schedules=INJECTIVE, doc="start, start + step, ... (`length` values, which may be a "
                                     "symbolic size): the positions of a dynamic sequence")
_arange = TopiRef("transform:arange_of_length")


def _size_value_rel(types, attrs):
    size_tuple(attrs.value, "value")
    return TensorType((), attrs.dtype)


register_op("size_value", type_rel=_size_value_rel, pattern=OpPattern.INJECTIVE, num_inputs=0,
            attrs={"value": REQUIRED, "dtype": "int64"},
            compute=lambda a, inputs, t: as_list(_size_value(a.value, t.dtype)),
            schedules=INJECTIVE, doc="a 0-d tensor holding a size (a symbolic size's value at "
                                     "run time: the length of a KV cache's past)")
_size_value = TopiRef("transform:size_value")
