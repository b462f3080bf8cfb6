"""What a converter sees of one ONNX node: its inputs, attributes and a way to emit catalog ops.

A value is either a numpy array (known at import time: Constant nodes, shape arithmetic,
integer and scalar initializers) or a graph expression. `ctx.op(...)` evaluates a catalog op in
numpy when all of its inputs are known, so shape subgraphs fold while importing; otherwise it
builds the graph call (turning known inputs into constants).

Example:
    >>> y = ctx.op("add", ctx.expr(0), ctx.scalar(1.0, ctx.input(0)))   # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np
from onnx import helper, numpy_helper

from ...graph import Expr, TensorType, Tuple, TupleGetItem, call, const
from ...tir.expr import PrimExpr
from ..common import FrontendError, StaticValueError
from .fold import can_fold, fold
from .registry import Unsupported


class NodeError(FrontendError):
    """A FrontendError whose message already names the ONNX node at fault."""


class NodeStaticValueError(StaticValueError, NodeError):
    """A StaticValueError raised inside a converter (its message names the node)."""


def is_static(value) -> bool:
    """A value known at import time (a numpy array): is_static(np.ones(2)) -> True."""
    return isinstance(value, np.ndarray)


def to_expr(value) -> Expr:
    """A graph expression for a value: to_expr(np.ones(2)) is a Constant; expressions pass."""
    if isinstance(value, np.ndarray):
        return const(value)
    return value


def shape_of(value) -> tuple:
    """Shape of a value: ints, and size variables for the dynamic dimensions kept symbolic
    (from_onnx's dim_ranges); FrontendError for a tuple.

    Example:
        >>> shape_of(np.zeros((2, 3)))
        (2, 3)
    """
    if isinstance(value, np.ndarray):
        return value.shape
    ty = value.checked_type
    if not isinstance(ty, TensorType):
        raise FrontendError(f"expected a tensor, got a value of type {ty!r}")
    return ty.shape


def dtype_of(value) -> str:
    """The kiln dtype string of a value: dtype_of(np.zeros(2, "int64")) -> 'int64'."""
    if isinstance(value, np.ndarray):
        # An object array is shape data holding symbolic sizes (Shape of a dynamic tensor).
        return "int64" if value.dtype == object else value.dtype.name
    return value.checked_type.dtype


def emit(name: str, *args, span=None, **attrs):
    """A catalog call, folded in numpy when every input is known.

    Example:
        >>> emit("add", np.array([1]), np.array([2]))
        array([3])
    """
    if name == "concatenate":
        parts = list(args[0])
        if all(is_static(p) for p in parts):
            return fold(name, [parts], attrs)
        return call(name, Tuple([to_expr(p) for p in parts]), span=span, **attrs)
    if can_fold(name) and all(is_static(a) for a in args):
        if name == "cast" and any(a.dtype == object for a in args) and \
                attrs.get("dtype", "").startswith(("int", "uint")):
            return args[0]        # symbolic sizes cast to an integer type: still sizes
        return fold(name, list(args), attrs)
    return call(name, *(to_expr(a) for a in args), span=span, **attrs)


def split_outputs(value, count: int) -> list:
    """The fields of a split: a numpy list stays a list; a graph Tuple becomes TupleGetItems.

    Example:
        >>> parts = split_outputs(call("split", x, indices_or_sections=2), 2)  # doctest: +SKIP
    """
    if isinstance(value, list):
        return value
    return [TupleGetItem(value, k) for k in range(count)]


def decode_attribute(attr):
    """Python value of an AttributeProto (strings decoded, tensors as numpy arrays).

    Example:
        >>> decode_attribute(helper.make_attribute("mode", "linear"))
        'linear'
    """
    value = helper.get_attribute_value(attr)
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, list) and value and isinstance(value[0], bytes):
        return [v.decode("utf-8") for v in value]
    if attr.type == attr.TENSOR:
        return numpy_helper.to_array(value)
    if isinstance(value, list):
        return list(value)
    return value


_MISSING = object()


class NodeContext:
    """Inputs, attributes and emission helpers for converting one ONNX node."""

    def __init__(self, node, name: str, inputs: list, opset: int, params: dict,
                 used_outputs: list, subgraph=None):
        self.node = node
        self.name = name
        self.op_type = node.op_type
        self.opset = opset
        self.inputs = inputs
        self.attrs = {a.name: decode_attribute(a) for a in node.attribute}
        self._params = params          # weight Var -> its initializer array
        self.used_outputs = used_outputs
        self._subgraph = subgraph      # the importer's import_subgraph(graph, inputs, where)

    # -- inputs -----------------------------------------------------------------------------
    @property
    def num_inputs(self) -> int:
        return len(self.inputs)

    def has_input(self, i: int) -> bool:
        return i < len(self.inputs) and self.inputs[i] is not None

    def input(self, i: int):
        """The raw value of input i (numpy array or expression); error if absent."""
        if not self.has_input(i):
            self.error(f"input {i} is required")
        return self.inputs[i]

    def expr(self, i: int) -> Expr:
        return to_expr(self.input(i))

    def static(self, i: int, what: str):
        """Input i as a numpy array; FrontendError if it is only known at run time."""
        v = self.input(i)
        if not is_static(v) and v in self._params:
            return self._params[v]
        if not is_static(v):
            value = self.node.input[i]
            raise NodeStaticValueError(
                f"ONNX node {self.name!r} ({self.op_type}): input {i} ({what}, value "
                f"{value!r}) must be known when importing (a constant, an initializer or "
                f"computed from static shapes), but it depends on run-time data",
                value=value, node=self.name)
        return v

    def static_ints(self, i: int, what: str) -> list:
        """Input i's values as ints; symbolic sizes (shape data of a dynamic tensor) stay
        kiln.tir expressions."""
        return [v if isinstance(v, PrimExpr) else int(v)
                for v in np.asarray(self.static(i, what)).reshape(-1)]

    def is_static(self, i: int) -> bool:
        return self.has_input(i) and is_static(self.inputs[i])

    def is_known(self, i: int) -> bool:
        """Input i's value is known at import (a numpy value or an initializer)."""
        return self.has_input(i) and (is_static(self.inputs[i]) or self.inputs[i] in self._params)

    def is_weight(self, i: int) -> bool:
        """Input i is a constant or an initializer (a parameter bound at compile time)."""
        v = self.input(i)
        return is_static(v) or v in self._params

    def shape(self, i: int) -> tuple:
        try:
            return shape_of(self.input(i))
        except FrontendError as err:
            self.error(f"input {i}: {err}")

    def ndim(self, i: int) -> int:
        return len(self.shape(i))

    def dtype(self, i: int) -> str:
        return dtype_of(self.input(i))

    # -- attributes and outputs -------------------------------------------------------------
    def attr(self, name: str, default=_MISSING):
        if name in self.attrs:
            return self.attrs[name]
        if default is _MISSING:
            self.error(f"attribute {name!r} is required")
        return default

    @property
    def num_outputs(self) -> int:
        return len(self.node.output)

    def output_used(self, k: int) -> bool:
        return k < len(self.used_outputs) and self.used_outputs[k]

    # -- building ---------------------------------------------------------------------------
    def op(self, name: str, *args, **attrs):
        """A catalog op on values, folded when all are known; the span is this node's name."""
        return emit(name, *args, span=self.name, **attrs)

    @staticmethod
    def scalar(value, like):
        """A 0-d known array of `like`'s dtype (a literal for arithmetic with `like`)."""
        return np.asarray(value, dtype=dtype_of(like))

    def subgraph(self, attr_name: str, inputs: list) -> list:
        """The outputs of graph attribute `attr_name` (If's branches, Loop's body ...) imported
        with its inputs bound to `inputs`; this node's outer-scope values are visible.

        Example:
            >>> (y,) = ctx.subgraph("then_branch", [])                  # doctest: +SKIP
        """
        graph = self.attr(attr_name)
        if self._subgraph is None:
            self.unsupported(f"subgraph {attr_name!r} outside a graph import")
        return self._subgraph(graph, list(inputs),
                              f"ONNX node {self.name!r} ({self.op_type}), subgraph {attr_name!r}")

    def unsupported(self, reason: str):
        raise Unsupported(reason)

    def error(self, message: str):
        raise NodeError(f"ONNX node {self.name!r} ({self.op_type}): {message}")
