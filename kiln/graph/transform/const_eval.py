"""NumPy evaluation of the simple operators FoldConstant meets most (weight arithmetic after
batch-norm folding, reshapes, transposes, slices, concatenations of weights, rows of embedding
tables at constant positions).

Compiling a kernel to fold a constant costs ~20 ms; numpy costs microseconds. Only operators
whose numpy result is exactly what kiln computes are listed (no integer division, no rounding
modes, no transcendental functions whose last bit depends on the math library); anything else
returns None and is evaluated by kiln.graph.evaluate.
"""
from __future__ import annotations

import numpy as np

from ..expr import Call
from ..op import Op
from ..ty import TensorType, TupleType
from ...tir import dtype as dt

_NUMERIC = ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
            "float32", "float64")
_FLOAT = ("float32", "float64")


def _dtype_of(ty):
    return ty.dtype if isinstance(ty, TensorType) else None


def _reshape(attrs, x, out):
    return x.reshape(out.shape)


def _transpose(attrs, x, out):
    return np.transpose(x, attrs.axes)


def _concatenate(attrs, xs, out):
    return np.concatenate(xs, axis=attrs.axis)


def _split(attrs, x, out):
    axis = attrs.axis % x.ndim
    bounds = np.cumsum([f.shape[axis] for f in out.fields])[:-1]
    return tuple(np.split(x, bounds, axis=axis))


def _strided_slice(attrs, x, out):
    # Python slices clamp their bounds as kiln's strided_slice does.
    begin, end = attrs.begin, attrs.end
    strides = (1,) * len(begin) if attrs.strides is None else attrs.strides
    axes = range(len(begin)) if attrs.axes is None else attrs.axes
    index = [slice(None)] * x.ndim
    for b, e, s, a in zip(begin, end, strides, axes):
        index[int(a) % x.ndim] = slice(int(b), int(e), int(s))
    return x[tuple(index)]


def _take(attrs, x, indices, out):
    # int8/int16 indices overflow where kiln adds the axis size, uint64 ones as int64 here.
    if dt.normalize(indices.dtype) not in ("int32", "int64"):
        return None
    if attrs.axis is None:
        x, axis = x.reshape(-1), 0
    else:
        axis = attrs.axis % x.ndim
    n = x.shape[axis]
    if n == 0:
        return None
    idx = indices.astype(np.int64)
    if attrs.mode == "wrap":
        idx = np.mod(idx, n)
    else:
        idx = np.where(idx < 0, idx + n, idx)
        if attrs.mode == "clip":
            idx = np.clip(idx, 0, n - 1)
        elif ((idx < 0) | (idx >= n)).any():
            return None          # "fast" mode reads out of bounds: nothing to match
    return np.take(x, idx, axis=axis)


def _cast(attrs, x, out):
    src, dst = dt.normalize(x.dtype), out.dtype
    # float → int and anything → bool depend on conversion rules numpy may not share
    if dst not in _NUMERIC or src not in _NUMERIC or (src in _FLOAT and dst not in _FLOAT):
        return None
    return x.astype(dt.to_numpy(dst))


def _bias_add(attrs, x, b, out):
    axis = attrs.axis % x.ndim
    return x + b.reshape((-1,) + (1,) * (x.ndim - 1 - axis))


def _broadcast_to(attrs, x, out):
    return np.broadcast_to(x, out.shape)


def _unary(fn):
    return lambda attrs, x, out: fn(x)


def _binary(fn):
    return lambda attrs, a, b, out: fn(a, b)


def _dense_weight_pack(attrs, w, out):
    from ...topi.nn.dense import pack_weight_numpy
    return pack_weight_numpy(w, nr=attrs.pack_width, transposed=attrs.transposed)


# op → (evaluator, input dtypes it is exact for; None: any)
_TABLE = {
    "nn.dense_weight_pack": (_dense_weight_pack, None),     # data movement only: exact
    "reshape": (_reshape, None), "squeeze": (_reshape, None), "expand_dims": (_reshape, None),
    "transpose": (_transpose, None), "concatenate": (_concatenate, None),
    "split": (_split, None), "cast": (_cast, None), "broadcast_to": (_broadcast_to, None),
    "strided_slice": (_strided_slice, None), "take": (_take, None),
    "copy": (_unary(np.copy), None),
    "stop_gradient": (_unary(np.copy), None),
    "nn.bias_add": (_bias_add, _NUMERIC),
    "negative": (_unary(np.negative), _NUMERIC),
    "abs": (_unary(np.abs), _NUMERIC),
    "nn.relu": (_unary(lambda x: np.maximum(x, x.dtype.type(0))), _NUMERIC),
    "sqrt": (_unary(np.sqrt), _FLOAT),
    "rsqrt": (_unary(lambda x: x.dtype.type(1) / np.sqrt(x)), _FLOAT),
    "floor": (_unary(np.floor), _FLOAT), "ceil": (_unary(np.ceil), _FLOAT),
    "add": (_binary(np.add), _NUMERIC), "subtract": (_binary(np.subtract), _NUMERIC),
    "multiply": (_binary(np.multiply), _NUMERIC), "divide": (_binary(np.divide), _FLOAT),
    "maximum": (_binary(np.maximum), _NUMERIC), "minimum": (_binary(np.minimum), _NUMERIC),
    "equal": (_binary(np.equal), None), "not_equal": (_binary(np.not_equal), None),
    "less": (_binary(np.less), _NUMERIC), "less_equal": (_binary(np.less_equal), _NUMERIC),
    "greater": (_binary(np.greater), _NUMERIC),
    "greater_equal": (_binary(np.greater_equal), _NUMERIC),
    "logical_and": (_binary(np.logical_and), ("bool",)),
    "logical_or": (_binary(np.logical_or), ("bool",)),
    "logical_not": (_unary(np.logical_not), ("bool",)),
}


def numpy_evaluable(call: Call) -> bool:
    """Whether numpy_eval handles this call's operator and input dtypes."""
    if not isinstance(call.op, Op) or call.op.name not in _TABLE:
        return False
    allowed = _TABLE[call.op.name][1]
    if allowed is None:
        return True
    for a in call.args:
        ty = a.checked_type
        types = ty.fields if isinstance(ty, TupleType) else (ty,)
        if any(_dtype_of(t) not in allowed for t in types):
            return False
    return True


def numpy_eval(call: Call, values: list):
    """Evaluate call on numpy inputs (arrays, or tuples of arrays for tuple inputs); returns an
    array (a tuple for tuple outputs) of exactly call's type, or None when numpy is not exact.

    Example:
        >>> numpy_eval(call("add", const(1.0), const(2.0)), [np.float32(1), np.float32(2)])  # doctest: +SKIP
        array(3., dtype=float32)
    """
    if not numpy_evaluable(call):
        return None
    fn = _TABLE[call.op.name][0]
    with np.errstate(all="ignore"):
        result = fn(call.attrs, *values, call.checked_type)
    if result is None:
        return None
    return _conform(result, call.checked_type)


def _conform(value, ty):
    if isinstance(ty, TupleType):
        if not isinstance(value, tuple) or len(value) != len(ty.fields):
            return None
        parts = [_conform(v, t) for v, t in zip(value, ty.fields)]
        return None if any(p is None for p in parts) else tuple(parts)
    # np.require, not ascontiguousarray, which makes 0-d arrays 1-d (they never matched)
    arr = np.require(np.asarray(value), requirements="C")
    if arr.shape != tuple(ty.shape):
        return None
    want = dt.to_numpy(ty.dtype)
    if arr.dtype != want:
        if arr.dtype.kind != np.dtype(want).kind:
            return None          # a silent int/float/bool change means the table is wrong here
        arr = arr.astype(want)
    return arr
