"""The table of ONNX op converters, filled by `@converter("OpType")` in kiln/frontend/onnx/ops.

A converter is `fn(ctx) -> value | list of values` (one per node output); `ctx` is a
NodeContext. An optional `check(attrs, opset) -> reason | None` rejects variants that kiln
cannot import (Resize mode=cubic ...) before conversion, so they are reported together with
unknown op types in one UnsupportedOpsError.

Example:
    >>> @converter("Relu")
    ... def _relu(ctx):
    ...     return ctx.op("nn.relu", ctx.expr(0))          # doctest: +SKIP
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


class Unsupported(Exception):
    """Raised by a converter for a variant of an op kiln cannot import; `reason` is shown next
    to the op type (e.g. "Conv(3-d)")."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Converter:
    op_type: str
    fn: Callable
    check: Callable | None = None


_CONVERTERS: dict[str, Converter] = {}


def converter(*op_types: str, check=None):
    """Register `fn` as the converter of each ONNX op type in op_types.

    Example:
        >>> @converter("Identity")
        ... def _identity(ctx):
        ...     return ctx.input(0)                           # doctest: +SKIP
    """
    def register(fn):
        for op_type in op_types:
            if op_type in _CONVERTERS:
                raise ValueError(f"ONNX op {op_type!r} already has a converter")
            _CONVERTERS[op_type] = Converter(op_type, fn, check)
        return fn
    return register


def get_converter(op_type: str):
    """The Converter for an op type of the default domain, or None."""
    _load()
    return _CONVERTERS.get(op_type)


def supported_ops() -> list[str]:
    """Every ONNX op type (default domain) that from_onnx converts, sorted.

    Example:
        >>> "Conv" in supported_ops()
        True
    """
    _load()
    return sorted(_CONVERTERS)


def _load():
    from . import ops  # noqa: F401  (registers every converter)
