"""Reductions: sum, mean, max, min, prod over axes, and argmax / argmin (int64 indices)."""
from __future__ import annotations

from ..expr import GraphTypeError
from ..ty import TensorType
from .define import reduction
from .relations import normalize_axes, tensor


def reduced_shape(shape, axes, keepdims: bool) -> tuple:
    """The shape left after reducing `axes` (sorted, normalized) of `shape`.

    Example:
        >>> reduced_shape((2, 3, 4), (1,), False), reduced_shape((2, 3, 4), (1,), True)
        ((2, 4), (2, 1, 4))
    """
    if keepdims:
        return tuple(1 if k in axes else d for k, d in enumerate(shape))
    return tuple(d for k, d in enumerate(shape) if k not in axes)


def _check_keepdims(attrs):
    if not isinstance(attrs.keepdims, bool):
        raise GraphTypeError(f"keepdims must be a bool, got {attrs.keepdims!r}")


def _reduce_rel(types, attrs):
    x = tensor(types[0])
    _check_keepdims(attrs)
    axes = normalize_axes(attrs.axis, x.ndim)
    return TensorType(reduced_shape(x.shape, axes, attrs.keepdims), x.dtype)


def _arg_reduce_rel(types, attrs):
    x = tensor(types[0])
    if x.dtype == "bool":
        raise GraphTypeError("argmax / argmin of a bool tensor: cast it to an integer type first")
    _check_keepdims(attrs)
    if attrs.axis is not None and not isinstance(attrs.axis, int):
        raise GraphTypeError(f"axis must be an int or None, got {attrs.axis!r}")
    if not isinstance(attrs.select_last_index, bool):
        raise GraphTypeError(f"select_last_index must be a bool, got {attrs.select_last_index!r}")
    axes = normalize_axes(attrs.axis, x.ndim)
    return TensorType(reduced_shape(x.shape, axes, attrs.keepdims), "int64")


_REDUCE_ATTRS = {"axis": None, "keepdims": False}
for _name, _doc in (("sum", "sum"), ("mean", "arithmetic mean"), ("max", "maximum"),
                    ("min", "minimum"), ("prod", "product")):
    reduction(_name, _reduce_rel, f"reduction:{_name}", attrs=dict(_REDUCE_ATTRS),
              kwargs=lambda a, t: {"axis": a.axis, "keepdims": a.keepdims},
              doc=f"{_doc} over axis (None: every axis; an int or a tuple), keepdims keeps "
                  f"them as size 1")

for _name in ("argmax", "argmin"):
    reduction(_name, _arg_reduce_rel, f"reduction:{_name}",
              attrs={"axis": None, "keepdims": False, "select_last_index": False},
              kwargs=lambda a, t: {"axis": a.axis, "keepdims": a.keepdims,
                                   "select_last_index": a.select_last_index},
              doc=f"int64 index of the {_name[3:]} along axis (None: of the flattened tensor); "
                  f"the first occurrence unless select_last_index")
