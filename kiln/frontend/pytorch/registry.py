"""The table from ATen op to converter, and what a converter sees of one FX node.

A converter is `fn(n: Node) -> value`, registered for one or more ATen overloads with
`@converter("aten.relu.default", ...)`. The value is a graph expression, a Python scalar or list
(shapes, sizes), or a tuple of those for ops with several outputs (indexed by FX `getitem`).
A converter that meets a form of its op that kiln cannot express raises `Unsupported(reason)`;
the importer collects those with the unknown ops into one UnsupportedOpsError.

Example:
    >>> @converter("aten.relu.default")          # doctest: +SKIP
    ... def _relu(n):
    ...     return n.call("nn.relu", n.input(0))
"""
from __future__ import annotations

import numpy as np
import torch

from ...graph import Expr, call, const
from ...tir.expr import PrimExpr
from .symbols import torch_dim

__all__ = ["converter", "lookup", "Node", "Unsupported", "kiln_dtype", "CONVERTERS"]

CONVERTERS: dict = {}


class Unsupported(Exception):
    """A supported op used in a way kiln cannot express (reported with the unknown ops)."""


def converter(*targets):
    """Register a converter for ATen overloads given by name ("aten.add.Tensor").

    Example:
        >>> @converter("aten.neg.default")   # doctest: +SKIP
        ... def _neg(n): return n.call("negative", n.input(0))
    """
    def deco(fn):
        for t in targets:
            if t in CONVERTERS:
                raise ValueError(f"two converters for {t}")
            CONVERTERS[t] = fn
        return fn
    return deco


def lookup(target):
    """The converter for an FX call target, or None.

    Example:
        >>> lookup(torch.ops.aten.relu.default) is not None   # doctest: +SKIP
        True
    """
    return CONVERTERS.get(target_name(target))


def target_name(target) -> str:
    """'aten.add.Tensor' for an OpOverload; the Python name for other callables.

    Example:
        >>> target_name(torch.ops.aten.add.Tensor)
        'aten.add.Tensor'
    """
    if isinstance(target, torch._ops.OpOverload):
        return str(target)
    if isinstance(target, torch._ops.HigherOrderOperator):
        return f"torch.ops.higher_order.{target.name()}"
    return getattr(target, "__qualname__", None) or str(target)


_DTYPES = {torch.float32: "float32", torch.float64: "float64", torch.float16: "float16",
           torch.int64: "int64", torch.int32: "int32", torch.int16: "int16", torch.int8: "int8",
           torch.uint8: "uint8", torch.bool: "bool"}


def kiln_dtype(dtype) -> str:
    """The kiln dtype string of a torch dtype.

    Example:
        >>> kiln_dtype(torch.float64)
        'float64'
    """
    try:
        return _DTYPES[dtype]
    except KeyError:
        raise Unsupported(f"dtype {dtype}") from None


class Node:
    """One FX node as a converter sees it: converted arguments, output metadata, its span.

    `args`/`kwargs` hold converted values (graph expressions for tensors, Python values for
    the rest); `val` is the FakeTensor (or tuple/int) torch.export recorded for the output;
    `random` the RandomInputs of a training-mode import (None at inference, where nothing is
    random).
    """

    def __init__(self, fx_node, args, kwargs, span, random=None):
        self.fx = fx_node
        self.args = args
        self.kwargs = kwargs
        self.span = span
        self.val = fx_node.meta.get("val")
        self.random = random

    @property
    def name(self) -> str:
        return self.fx.name

    def arg(self, i, name=None, default=None):
        """Argument i (positional) or `name` (keyword), else default."""
        if i < len(self.args):
            return self.args[i]
        if name is not None and name in self.kwargs:
            return self.kwargs[name]
        return default

    def input(self, i, name=None) -> Expr:
        """Argument i, which must be a tensor (a graph expression)."""
        v = self.arg(i, name)
        if not isinstance(v, Expr):
            raise Unsupported(f"argument {name or i} is {type(v).__name__}, expected a tensor")
        return v

    # --- the output as torch.export recorded it -----------------------------------------
    def out_val(self, index=None):
        v = self.val if index is None else self.val[index]
        if not isinstance(v, torch.Tensor):
            raise Unsupported(f"no tensor metadata for output of {self.name}")
        return v

    @property
    def shape(self) -> tuple:
        """The static output shape (the first output for multi-output ops)."""
        v = self.val[0] if isinstance(self.val, (tuple, list)) else self.out_val()
        return static_shape(v.shape, self.name)

    @property
    def dtype(self) -> str:
        v = self.val[0] if isinstance(self.val, (tuple, list)) else self.out_val()
        return kiln_dtype(v.dtype)

    # --- building ----------------------------------------------------------------------------
    def call(self, op_name, *args, **attrs) -> Expr:
        """A call of a catalog op with this node's span."""
        return call(op_name, *args, span=self.span, **attrs)

    def scalar(self, value, dtype) -> Expr:
        """A 0-d constant of the given kiln dtype.

        Example:
            >>> n.scalar(1.0, "float64")   # doctest: +SKIP
        """
        return const(np.asarray(value, dtype=dtype))

    def cast(self, x: Expr, dtype: str) -> Expr:
        """x cast to dtype (x itself when it already has it)."""
        if x.checked_type.dtype == dtype:
            return x
        return self.call("cast", x, dtype=dtype)

    def operand(self, v, dtype) -> Expr:
        """A tensor or Python scalar as an expression of dtype (torch's type promotion result)."""
        if isinstance(v, Expr):
            return self.cast(v, dtype)
        if isinstance(v, (bool, int, float)):
            return self.scalar(v, dtype)
        if isinstance(v, PrimExpr):       # a dynamic size (positions after a KV cache's past)
            return self.call("size_value", value=v, dtype=dtype)
        raise Unsupported(f"operand of type {type(v).__name__}")


def static_shape(shape, where="") -> tuple:
    """A torch.Size as a tuple of ints, and in the import of a program exported with dynamic
    dimensions, of kiln size expressions for those (kiln.frontend.pytorch.symbols).

    Example:
        >>> static_shape(torch.Size([1, 3]))
        (1, 3)
    """
    return tuple(torch_dim(d, where) for d in shape)
