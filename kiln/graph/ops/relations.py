"""Shared type relations (shape inference) used by many operators."""
from __future__ import annotations

from ..expr import GraphTypeError
from ..ty import TensorType, TupleType


def tensor(t, what="input") -> TensorType:
    if not isinstance(t, TensorType):
        raise GraphTypeError(f"{what} must be a tensor, got {t!r}")
    return t


def same_dtype(types):
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        raise GraphTypeError(f"inputs have different dtypes {sorted(dtypes)}")
    return types[0].dtype


def identity(types, attrs):
    """The output has the type of the (only) input."""
    return tensor(types[0])


def broadcast_shapes(a, b):
    """NumPy broadcasting of two static-or-symbolic shapes."""
    out = []
    for k in range(max(len(a), len(b))):
        x = a[len(a) - 1 - k] if k < len(a) else 1
        y = b[len(b) - 1 - k] if k < len(b) else 1
        if isinstance(x, int) and x == 1:
            out.append(y)
        elif isinstance(y, int) and y == 1:
            out.append(x)
        elif x is y or x == y:
            out.append(x)
        else:
            raise GraphTypeError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast")
    return tuple(reversed(out))


def broadcast(types, attrs):
    a, b = tensor(types[0]), tensor(types[1])
    return TensorType(broadcast_shapes(a.shape, b.shape), same_dtype([a, b]))


def broadcast_bool(types, attrs):
    return TensorType(broadcast(types, attrs).shape, "bool")


def normalize_axis(axis: int, ndim: int) -> int:
    if not -ndim <= axis < max(ndim, 1):
        raise GraphTypeError(f"axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % max(ndim, 1)


def tuple_of(types):
    return TupleType(types)
