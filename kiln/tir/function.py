"""PrimFunc: one lowered operator, the unit the code generators compile."""
from __future__ import annotations

from .node import Node


class PrimFunc(Node):
    """A function over buffers and scalars.

    `params` are Buffers (passed as data pointers) and Vars (passed as scalars), in the order
    the user gave them; `shape_vars` are symbolic sizes bound at call time from the buffers'
    shapes. `attrs` is a tuple of (key, value) pairs.
    """

    __slots__ = ("name", "params", "body", "shape_vars", "attrs")
    _fields = ("name", "params", "body", "shape_vars", "attrs")

    def __new__(cls, name, params, body, shape_vars=(), attrs=()):
        args = (name, tuple(params), body, tuple(shape_vars), tuple(attrs))
        return cls._intern((cls, *args), args)

    def with_body(self, body) -> "PrimFunc":
        return self.replace(body=body)

    def attr(self, key, default=None):
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def script(self) -> str:
        from .printer import to_text
        return to_text(self)
