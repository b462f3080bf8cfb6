"""NumPy meanings of the catalog's cheap operators, for folding at import time.

Shape arithmetic in ONNX graphs (Shape -> Gather -> Concat -> Reshape) runs on values known while
importing. When every input of a catalog call is such a value, the importer evaluates it here
instead of adding it to the graph, so reshapes end up with static shapes. Only operators that
shape computations use are listed; anything else stays in the graph (FoldConstant may fold it).
Semantics follow the catalog (integer divide truncates toward zero, as ONNX and C).

Example:
    >>> import numpy as np
    >>> fold("concatenate", [[np.array([1]), np.array([-1])]], {"axis": 0})
    array([ 1, -1])
"""
from __future__ import annotations

import math

import numpy as np


def _int_divide(a, b):
    # Truncation toward zero, without going through floating point (int64 shapes stay exact).
    q = np.floor_divide(a, b)
    fix = (np.remainder(a, b) != 0) & ((a < 0) != (b < 0))
    return q + fix.astype(q.dtype)


def _divide(a, b, **_):
    if a.dtype == object or b.dtype == object:
        # shape data with symbolic sizes: sizes are not negative, so floor division is the
        # truncating one
        return np.asarray(np.floor_divide(a, b), dtype=object)
    if np.issubdtype(a.dtype, np.integer):
        return _int_divide(a, b)
    return np.divide(a, b).astype(a.dtype)


def _same(fn):
    """An elementwise numpy function whose result keeps the first input's dtype."""
    return lambda *xs, **_: np.asarray(fn(*xs)).astype(xs[0].dtype)


def _bool(fn):
    def folded(*xs, **_):
        if any(x.dtype == object for x in xs):
            _known_sizes(xs)
        return np.asarray(fn(*xs), dtype=bool)
    return folded


class SymbolicSizeError(ValueError):
    """A comparison of symbolic sizes whose result is not known at import."""


def _known_sizes(arrays):
    # a comparison of a symbolic size with anything but itself depends on its value at run
    # time (== on kiln sizes compares objects, which would fold a wrong constant)
    flat = [np.asarray(a, dtype=object).reshape(-1) for a in np.broadcast_arrays(*arrays)]
    for column in zip(*flat):
        symbolic = [v for v in column if not isinstance(v, (int, np.integer, float))]
        if symbolic and not all(v is symbolic[0] for v in column):
            raise SymbolicSizeError(f"comparing sizes {list(column)} needs their values, "
                                    f"known only at run time")


def _reshape(x, newshape, **_):
    return x.reshape(newshape)


def _axis_tuple(axis, ndim):
    if axis is None:
        return None
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    return tuple(a % ndim for a in axes) if ndim else ()


def _reducer(fn):
    def run(x, axis=None, keepdims=False, **_):
        return np.asarray(fn(x, axis=_axis_tuple(axis, x.ndim), keepdims=keepdims)).astype(
            x.dtype)
    return run


def _arg(fn):
    def run(x, axis=0, keepdims=False, select_last_index=False, **_):
        axis = axis % x.ndim
        if select_last_index:
            flipped = np.flip(x, axis)
            out = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            out = fn(x, axis=axis)
        out = np.asarray(out, dtype=np.int64)
        return np.expand_dims(out, axis) if keepdims else out
    return run


def _strided_slice(x, begin, end, strides=None, axes=None, **_):
    strides = strides or (1,) * len(begin)
    axes = range(len(begin)) if axes is None else axes
    index = [slice(None)] * x.ndim
    for b, e, s, a in zip(begin, end, strides, axes):
        index[a % x.ndim] = slice(b, e, s)
    return x[tuple(index)]


def _take(x, indices, axis=None, mode="clip", **_):
    if axis is None:
        x, axis = x.reshape(-1), 0
    n = x.shape[axis]
    idx = np.where(indices < 0, indices + n, indices)
    idx = np.mod(idx, n) if mode == "wrap" else np.clip(idx, 0, n - 1)
    return np.take(x, idx, axis=axis)


def _split(x, indices_or_sections, axis=0, **_):
    if isinstance(indices_or_sections, int):
        return np.split(x, indices_or_sections, axis=axis)
    return np.split(x, list(indices_or_sections), axis=axis)


def _erf(x, **_):
    return np.vectorize(math.erf, otypes=[x.dtype])(x) if x.size else x.copy()


_FOLDERS = {
    "add": _same(np.add), "subtract": _same(np.subtract), "multiply": _same(np.multiply),
    "divide": _divide, "maximum": _same(np.maximum), "minimum": _same(np.minimum),
    "floor_divide": _same(np.floor_divide), "floor_mod": _same(np.mod), "fmod": _same(np.fmod),
    "power": _same(np.power),
    "equal": _bool(np.equal), "not_equal": _bool(np.not_equal), "less": _bool(np.less),
    "less_equal": _bool(np.less_equal), "greater": _bool(np.greater),
    "greater_equal": _bool(np.greater_equal), "logical_and": _bool(np.logical_and),
    "logical_or": _bool(np.logical_or), "logical_not": _bool(np.logical_not),
    "negative": _same(np.negative), "abs": _same(np.abs), "floor": _same(np.floor),
    "ceil": _same(np.ceil), "round": _same(np.round), "sqrt": _same(np.sqrt),
    "exp": _same(np.exp), "log": _same(np.log), "erf": _erf, "copy": _same(np.copy),
    "nn.relu": _same(lambda x: np.maximum(x, 0)),
    "where": lambda c, x, y, **_: np.where(c, x, y),
    "cast": lambda x, dtype, **_: x.astype(dtype),
    "clip": lambda x, a_min, a_max, **_: np.clip(x, a_min, a_max).astype(x.dtype),
    "reshape": _reshape,
    "transpose": lambda x, axes=None, **_: np.transpose(x, axes),
    "expand_dims": lambda x, axis, num_newaxis=1, **_: x.reshape(
        x.shape[:axis % (x.ndim + 1)] + (1,) * num_newaxis + x.shape[axis % (x.ndim + 1):]),
    "squeeze": lambda x, axis=None, **_: np.squeeze(x, axis=axis),
    "broadcast_to": lambda x, shape, **_: np.broadcast_to(x, shape).copy(),
    "tile": lambda x, reps, **_: np.tile(x, reps),
    "strided_slice": _strided_slice,
    "take": _take,
    "gather": lambda x, indices, axis, **_: np.take_along_axis(x, indices, axis),
    "split": _split,
    "sum": _reducer(np.sum), "mean": _reducer(np.mean), "max": _reducer(np.max),
    "min": _reducer(np.min), "prod": _reducer(np.prod),
    "argmax": _arg(np.argmax), "argmin": _arg(np.argmin),
}


def can_fold(op_name: str) -> bool:
    """Whether `op_name` has an import-time NumPy meaning: can_fold("add") -> True."""
    return op_name in _FOLDERS


def fold(op_name: str, args: list, attrs: dict):
    """Evaluate catalog op `op_name` on numpy inputs (concatenate takes one list of arrays).

    Example:
        >>> fold("reshape", [np.arange(6)], {"newshape": (2, 3)}).shape
        (2, 3)
    """
    if op_name == "concatenate":
        return np.concatenate(list(args[0]), axis=attrs.get("axis", 0))
    with np.errstate(all="ignore"):
        out = _FOLDERS[op_name](*args, **attrs)
    # numpy gives scalars (np.int64) for 0-d results; values stay arrays.
    return [np.asarray(o) for o in out] if isinstance(out, list) else np.asarray(out)
