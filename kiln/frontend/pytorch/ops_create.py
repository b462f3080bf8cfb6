"""Converters of ATen tensor-creation ops, folded to constants at import (shapes are static)."""
from __future__ import annotations

import numpy as np

from ...graph import Expr, const
from ...tir.expr import PrimExpr
from .registry import Unsupported, converter


def _np_dtype(n):
    return np.dtype(n.dtype if n.dtype != "bool" else np.bool_)


@converter("aten.arange.default", "aten.arange.start", "aten.arange.start_step")
def _arange(n):
    # The recorded output fixes length and dtype; recompute the values in that dtype's
    # precision so float64 ranges stay exact.
    values = [a for a in n.args if isinstance(a, (int, float, PrimExpr))]
    start, end, step = 0, None, 1
    if len(values) == 1:
        end = values[0]
    elif len(values) == 2:
        start, end = values
    elif len(values) >= 3:
        start, end, step = values[:3]
    else:
        raise Unsupported("arange with tensor bounds")
    length = n.shape[0]
    if not isinstance(length, int):         # a dynamic length: computed, not a constant
        if not all(isinstance(v, int) for v in (start, step)):
            raise Unsupported("arange of a dynamic length with float bounds")
        return n.call("arange", length=length, start=start, step=step, dtype=n.dtype)
    data = (np.asarray(start, dtype=np.float64) + np.arange(length, dtype=np.float64) * step)
    return const(data.astype(_np_dtype(n)))


def _full(n, value):
    if not isinstance(value, (bool, int, float)):
        raise Unsupported("fill value that is a tensor")
    return const(np.full(n.shape, value, dtype=_np_dtype(n)))


@converter("aten.full.default", "aten.new_full.default")
def _aten_full(n):
    return _full(n, n.arg(1 if "new_" not in str(n.fx.target) else 2, "fill_value"))


@converter("aten.full_like.default")
def _full_like(n):
    return _full(n, n.arg(1, "fill_value"))


@converter("aten.zeros.default", "aten.zeros_like.default", "aten.new_zeros.default",
           "aten.empty.memory_format", "aten.empty_like.default", "aten.new_empty.default",
           "aten.empty_strided.default", "aten.new_empty_strided.default",
           "aten.empty_permuted.default")
def _zeros(n):
    # empty tensors are always overwritten before use in a well-formed model; zeros are a
    # deterministic stand-in.
    return _full(n, 0)


@converter("aten.ones.default", "aten.ones_like.default", "aten.new_ones.default")
def _ones(n):
    return _full(n, 1)


@converter("aten.scalar_tensor.default")
def _scalar_tensor(n):
    return _full(n, n.arg(0, "s"))


@converter("aten.fill.Scalar", "aten.fill.Tensor")
def _fill(n):
    # every element of the input replaced by the value, in the input's shape and dtype
    value = n.arg(1, "value")
    if isinstance(value, Expr):
        return n.call("broadcast_to", n.cast(value, n.dtype), shape=n.shape)
    return _full(n, value)
