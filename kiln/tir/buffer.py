"""Buffers: a named, typed region of memory with a (possibly symbolic) shape."""
from __future__ import annotations

from . import dtype as dt
from .expr import PrimExpr, Var
from .node import Node
from .op import convert


class Buffer(Node):
    """A buffer; every construction is a distinct buffer.

    `scope` is "global" for function arguments and heap memory, "local" / "shared" for
    temporaries (recorded for GPU back-ends; on the CPU both live on the stack or heap).

    Example:
        >>> b = Buffer.make("A", "float32", (16, 16))
        >>> b.shape
        (16, 16)
    """

    __slots__ = ("name", "dtype", "shape", "data", "scope", "align")
    _fields = ("name", "dtype", "shape", "data", "scope", "align")

    def __new__(cls, name, dtype, shape, data, scope="global", align=64):
        return cls._fresh((name, dtype, shape, data, scope, align))

    @staticmethod
    def make(name: str, dtype: str, shape, scope: str = "global") -> "Buffer":
        dtype = dt.normalize(dtype)
        shape = tuple(convert(s) for s in shape)
        return Buffer(name, dtype, shape, Var(name, "handle"), scope)

    def replace(self, **changes):
        values = {f: getattr(self, f) for f in self._fields}
        values.update(changes)
        return Buffer(*(values[f] for f in self._fields))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def strides(self) -> tuple[PrimExpr, ...]:
        """Row-major strides (elements)."""
        strides, acc = [], convert(1)
        for extent in reversed(self.shape):
            strides.append(acc)
            acc = acc * extent
        return tuple(reversed(strides))

    def num_elements(self) -> PrimExpr:
        total = convert(1)
        for extent in self.shape:
            total = total * extent
        return total

    def offset_of(self, indices) -> PrimExpr:
        """Flat element offset of a multi-dimensional index."""
        if len(indices) != len(self.shape):
            raise IndexError(f"buffer {self.name} has {len(self.shape)} dimensions, "
                             f"indexed with {len(indices)}")
        offset = convert(0)
        for index, stride in zip(indices, self.strides()):
            offset = offset + convert(index) * stride
        return offset
