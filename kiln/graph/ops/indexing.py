"""Indexing operators whose reads or writes depend on data: topk, gather_nd, reverse_sequence,
the scatter family, nn.max_unpool2d, and the value-shaped nonzero and unique.

gather_nd and reverse_sequence are INJECTIVE (one read per output element). The others are
chains of sort / search / reduction stages (kiln/topi/indexing.py): OPAQUE, each its own
kernel, scheduled by x86.utils.schedule_stages_at_root. nonzero and unique have an output shape
that depends on the input's values; their `count` attribute carries it, so they compile only
when the importer knows the input.
"""
from __future__ import annotations

import math

from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType, TupleType
from .define import cpu, injective, topi_compute
from .relations import int_tuple, integer_tensor, is_known, normalize_axis, one_of, tensor

INDEX_DTYPES = ("int32", "int64")
SCATTER_REDUCTIONS = ("none", "add", "mul", "max", "min")
_SCHEDULE = cpu("x86.utils:schedule_stages_at_root")


def _static(t, what="input") -> tuple:
    t = tensor(t, what)
    if not t.is_static():
        raise GraphTypeError(f"{what} needs a static shape, got {t.shape}")
    return t.shape


def _opaque(name, rel, topi_path, *, num_inputs, attrs, kwargs, doc):
    register_op(name, type_rel=rel, pattern=OpPattern.OPAQUE, num_inputs=num_inputs,
                attrs=attrs, compute=topi_compute(topi_path, kwargs), schedules=_SCHEDULE,
                doc=doc)


# ------------------------------------------------------------------------------ topk
def _topk_rel(types, attrs):
    shape = _static(types[0], "data")
    if not shape:
        raise GraphTypeError("data must have rank 1 or more, got a scalar")
    axis = normalize_axis(attrs.axis, len(shape))
    k = attrs.k
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= shape[axis]:
        raise GraphTypeError(f"k must be an int in [1, {shape[axis]}] (the length of axis "
                             f"{axis}), got {k!r}")
    one_of(attrs.index_dtype, INDEX_DTYPES, "index_dtype")
    out = shape[:axis] + (k,) + shape[axis + 1:]
    return TupleType([TensorType(out, types[0].dtype), TensorType(out, attrs.index_dtype)])


_opaque("topk", _topk_rel, "indexing:topk", num_inputs=1,
        attrs={"k": REQUIRED, "axis": -1, "largest": True, "index_dtype": "int64"},
        kwargs=lambda a, t: {"k": a.k, "axis": a.axis, "largest": bool(a.largest),
                             "index_dtype": a.index_dtype},
        doc="(values, indices) of the k largest (largest=False: smallest) entries along axis, "
            "sorted, ties to the lower index; NaN counts as the largest value")


# ------------------------------------------------------------------------------ gathers
def _gather_nd_rel(types, attrs):
    data = tensor(types[0], "data")
    ds, ish = _static(data, "data"), _static(integer_tensor(types[1]), "indices")
    b = attrs.batch_dims
    if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < min(len(ds), len(ish)):
        raise GraphTypeError(f"batch_dims must be an int in [0, {min(len(ds), len(ish))}) "
                             f"(below both ranks), got {b!r}")
    if ds[:b] != ish[:b]:
        raise GraphTypeError(f"the batch dimensions of data {ds[:b]} and indices {ish[:b]} "
                             f"differ")
    k = ish[-1]
    if not 1 <= k <= len(ds) - b:
        raise GraphTypeError(f"the last dimension of indices ({k}) must be between 1 and "
                             f"{len(ds) - b} (data's rank minus batch_dims)")
    return TensorType(ish[:-1] + ds[b + k:], data.dtype)


injective("gather_nd", _gather_nd_rel, "indexing:gather_nd", num_inputs=2,
          attrs={"batch_dims": 0}, kwargs=lambda a, t: {"batch_dims": a.batch_dims},
          doc="slices of data at the index tuples along indices' last axis, after batch_dims "
              "shared leading axes (ONNX GatherND); negative indices count from the end")


def _reverse_sequence_rel(types, attrs):
    x = tensor(types[0], "data")
    lengths = integer_tensor(types[1], "seq_lengths")
    batch = normalize_axis(attrs.batch_axis, x.ndim, "batch_axis")
    time = normalize_axis(attrs.time_axis, x.ndim, "time_axis")
    if batch == time:
        raise GraphTypeError(f"batch_axis and time_axis are both {batch}")
    if lengths.ndim != 1 or (is_known(lengths.shape[0]) and is_known(x.shape[batch])
                             and lengths.shape[0] != x.shape[batch]):
        raise GraphTypeError(f"seq_lengths must have shape ({x.shape[batch]},) (the batch "
                             f"axis), got {lengths.shape}")
    return x


injective("reverse_sequence", _reverse_sequence_rel, "indexing:reverse_sequence",
          num_inputs=2, attrs={"batch_axis": 1, "time_axis": 0},
          kwargs=lambda a, t: {"batch_axis": a.batch_axis, "time_axis": a.time_axis},
          doc="reverse the first seq_lengths[b] steps along time_axis of each batch b")


# ------------------------------------------------------------------------------ scatters
def _scatter_common(types, attrs):
    data = tensor(types[0], "data")
    integer_tensor(types[1])
    updates = tensor(types[2], "updates")
    one_of(attrs.reduction, SCATTER_REDUCTIONS, "reduction")
    if updates.dtype != data.dtype:
        raise GraphTypeError(f"updates ({updates.dtype}) and data ({data.dtype}) differ in "
                             f"dtype")
    return data


def _scatter_elements_rel(types, attrs):
    data = _scatter_common(types, attrs)
    ds, ish, us = _static(data, "data"), _static(types[1], "indices"), _static(types[2],
                                                                               "updates")
    axis = normalize_axis(attrs.axis, len(ds))
    if ish != us or len(us) != len(ds):
        raise GraphTypeError(f"indices {ish} and updates {us} must have one shape, of data's "
                             f"rank {len(ds)}")
    if any(u > d for k, (u, d) in enumerate(zip(us, ds)) if k != axis):
        raise GraphTypeError(f"updates {us} exceed data {ds} on an axis other than {axis}")
    return data


_opaque("scatter_elements", _scatter_elements_rel, "indexing:scatter_elements", num_inputs=3,
        attrs={"axis": 0, "reduction": "none"},
        kwargs=lambda a, t: {"axis": a.axis, "reduction": a.reduction},
        doc="data with updates written along axis at indices (ONNX ScatterElements); "
            "reduction add / mul / max / min combines instead; repeated indices: the last wins")


def _index_add_rel(types, attrs):
    data = tensor(types[0], "data")
    integer_tensor(types[1])
    updates = tensor(types[2], "updates")
    ds, ish, us = _static(data, "data"), _static(types[1], "indices"), _static(updates,
                                                                               "updates")
    axis = normalize_axis(attrs.axis, len(ds))
    if len(ish) != 1 or len(us) != len(ds) or us[axis] != ish[0] or any(
            u != d for k, (u, d) in enumerate(zip(us, ds)) if k != axis):
        raise GraphTypeError(f"updates {us} must be data's shape {ds} with axis {axis} of "
                             f"the length of indices {ish} (one-dimensional)")
    if updates.dtype != data.dtype:
        raise GraphTypeError(f"updates ({updates.dtype}) and data ({data.dtype}) differ in "
                             f"dtype")
    return data


register_op("index_add", type_rel=_index_add_rel, pattern=OpPattern.OPAQUE, num_inputs=3,
            attrs={"axis": 0}, compute=topi_compute("indexing:index_add",
                                                    lambda a, t: {"axis": a.axis}),
            schedules=cpu("x86.utils:schedule_index_add"),
            doc="data with each slice of updates along axis added to the slice at its index "
                "(torch.index_add); repeated indices add up")


def _scatter_nd_rel(types, attrs):
    data = _scatter_common(types, attrs)
    ds, ish, us = _static(data, "data"), _static(types[1], "indices"), _static(types[2],
                                                                               "updates")
    if not ish or not 1 <= ish[-1] <= len(ds):
        raise GraphTypeError(f"the last dimension of indices {ish} must be between 1 and "
                             f"{len(ds)} (data's rank)")
    want = ish[:-1] + ds[ish[-1]:]
    if us != want:
        raise GraphTypeError(f"updates must have shape {want} (indices.shape[:-1] + "
                             f"data.shape[{ish[-1]}:]), got {us}")
    return data


_opaque("scatter_nd", _scatter_nd_rel, "indexing:scatter_nd", num_inputs=3,
        attrs={"reduction": "none"}, kwargs=lambda a, t: {"reduction": a.reduction},
        doc="data with the slices at indices' index tuples replaced by updates (ONNX "
            "ScatterND); reduction add / mul / max / min combines instead")


def _max_unpool_rel(types, attrs):
    x = tensor(types[0], "data")
    xs, ish = _static(x, "data"), _static(integer_tensor(types[1]), "indices")
    if len(xs) != 4 or ish != xs:
        raise GraphTypeError(f"data must be 4-d (NCHW) and indices of its shape, got {xs} "
                             f"and {ish}")
    pooled = int_tuple(attrs.pooled_size, "pooled_size", 2, minimum=1)
    out = int_tuple(attrs.output_size, "output_size", 2, minimum=1) \
        if attrs.output_size is not None else pooled
    if out[0] < pooled[0] or out[1] < pooled[1]:
        raise GraphTypeError(f"output_size {out} is smaller than pooled_size {pooled}")
    return TensorType(xs[:2] + out, x.dtype)


_opaque("nn.max_unpool2d", _max_unpool_rel, "indexing:max_unpool2d", num_inputs=2,
        attrs={"pooled_size": REQUIRED, "output_size": None},
        kwargs=lambda a, t: {"pooled_shape": tuple(t.shape[:2]) + tuple(a.pooled_size),
                             "out_shape": tuple(t.shape)},
        doc="out[p] = data[i] where indices[i] == p (p row-major over N, C and pooled_size), "
            "zero elsewhere, in the top-left of output_size (ONNX MaxUnpool)")


# ------------------------------------------------------------------------------ value-shaped
def _count(attrs, limit, what):
    c = attrs.count
    if isinstance(c, bool) or not isinstance(c, int) or not 1 <= c <= limit:
        raise GraphTypeError(f"count must be an int in [1, {limit}] ({what}), got {c!r}")
    return c


def _nonzero_rel(types, attrs):
    shape = _static(types[0], "data")
    if not shape:
        raise GraphTypeError("data must have rank 1 or more, got a scalar")
    count = _count(attrs, math.prod(shape), "the number of nonzero entries")
    return TensorType((len(shape), count), one_of(attrs.index_dtype, INDEX_DTYPES,
                                                  "index_dtype"))


_opaque("nonzero", _nonzero_rel, "indexing:nonzero", num_inputs=1,
        attrs={"count": REQUIRED, "index_dtype": "int64"},
        kwargs=lambda a, t: {"count": a.count, "index_dtype": a.index_dtype},
        doc="(rank, count) coordinates of the nonzero entries, row-major (ONNX NonZero); "
            "count, the number of nonzero entries, must be known when compiling")


def _unique_rel(types, attrs):
    x = tensor(types[0], "data")
    shape = _static(x, "data")
    index = one_of(attrs.index_dtype, INDEX_DTYPES, "index_dtype")
    if attrs.axis is None:
        n = math.prod(shape)
        out = (_count(attrs, n, "the number of distinct entries"),)
    else:
        if not shape:
            raise GraphTypeError("an axis needs data of rank 1 or more, got a scalar")
        axis = normalize_axis(attrs.axis, len(shape))
        n = shape[axis]
        out = shape[:axis] + (_count(attrs, n, "the number of distinct slices"),) + \
            shape[axis + 1:]
    count = attrs.count
    return TupleType([TensorType(out, x.dtype), TensorType((count,), index),
                      TensorType((n,), index), TensorType((count,), index)])


_opaque("unique", _unique_rel, "indexing:unique", num_inputs=1,
        attrs={"count": REQUIRED, "axis": None, "sorted": True, "index_dtype": "int64"},
        kwargs=lambda a, t: {"count": a.count, "axis": a.axis, "sorted": bool(a.sorted),
                             "index_dtype": a.index_dtype},
        doc="(unique, first_indices, inverse_indices, counts) of the distinct entries (slices "
            "along axis) of data, ascending or (sorted=False) by first occurrence (ONNX "
            "Unique); count, the number of distinct ones, must be known when compiling")
