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

from .loader import DEFAULT_DOMAINS


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


def _key(op_type: str, domain: str) -> str:
    return op_type if domain in DEFAULT_DOMAINS else f"{domain}.{op_type}"


def converter(*op_types: str, check=None, domain: str = ""):
    """Register `fn` as the converter of each ONNX op type in op_types, of the default domain
    or of `domain` (e.g. ONNX Runtime's "com.microsoft" contrib ops).

    Example:
        >>> @converter("Identity")
        ... def _identity(ctx):
        ...     return ctx.input(0)                           # doctest: +SKIP
    """
    def register(fn):
        for op_type in op_types:
            key = _key(op_type, domain)
            if key in _CONVERTERS:
                raise ValueError(f"ONNX op {key!r} already has a converter")
            _CONVERTERS[key] = Converter(op_type, fn, check)
        return fn
    return register


def get_converter(op_type: str, domain: str = ""):
    """The Converter for an op type of `domain` (the default domain when empty), or None."""
    _load()
    return _CONVERTERS.get(_key(op_type, domain))


def supported_ops() -> list[str]:
    """Every ONNX op type that from_onnx converts, sorted; other domains' with their domain
    ("com.microsoft.QLinearAdd").

    Example:
        >>> "Conv" in supported_ops()
        True
    """
    _load()
    return sorted(_CONVERTERS)


def _load():
    from . import ops  # noqa: F401  (registers every converter)
