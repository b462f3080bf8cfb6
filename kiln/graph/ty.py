"""Types of graph expressions: TensorType(shape, dtype) and TupleType(fields)."""
from __future__ import annotations

from ..tir import dtype as dt
from ..tir.expr import IntImm, PrimExpr, Var


class Type:
    __slots__ = ()


class TensorType(Type):
    """A tensor's static type; dimensions are ints or symbolic kiln.tir Vars.

    Example:
        >>> TensorType((1, 3, 224, 224), "float32")
        Tensor[(1, 3, 224, 224), float32]
    """

    __slots__ = ("shape", "dtype", "_hash")

    def __init__(self, shape, dtype="float32"):
        dims = []
        for d in shape:
            if isinstance(d, IntImm):
                d = d.value
            if not isinstance(d, (int, Var, PrimExpr)):
                d = int(d)
            dims.append(d)
        object.__setattr__(self, "shape", tuple(dims))
        object.__setattr__(self, "dtype", dt.normalize(dtype))
        object.__setattr__(self, "_hash", hash((self.shape, self.dtype)))

    def __setattr__(self, k, v):
        raise AttributeError("types are immutable")

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def is_static(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def __eq__(self, other):
        return isinstance(other, TensorType) and self.dtype == other.dtype and \
            same_shape(self.shape, other.shape)

    def __hash__(self):
        return self._hash

    def __repr__(self):
        dims = ", ".join(str(d) if isinstance(d, int) else str(d) for d in self.shape)
        if len(self.shape) == 1:
            dims += ","
        return f"Tensor[({dims}), {self.dtype}]"


def same_shape(a, b) -> bool:
    """Shapes of equal ints, and of the same symbolic sizes (sizes are interned: == on them
    would build an expression).

    Example:
        >>> same_shape((1, 3), (1, 3))
        True
    """
    return len(a) == len(b) and all(x is y or isinstance(x, int) and isinstance(y, int) and
                                    x == y for x, y in zip(a, b))


class TupleType(Type):
    __slots__ = ("fields", "_hash")

    def __init__(self, fields):
        object.__setattr__(self, "fields", tuple(fields))
        object.__setattr__(self, "_hash", hash(self.fields))

    def __setattr__(self, k, v):
        raise AttributeError("types are immutable")

    def __eq__(self, other):
        return isinstance(other, TupleType) and self.fields == other.fields

    def __hash__(self):
        return self._hash

    def __repr__(self):
        return f"({', '.join(repr(f) for f in self.fields)})"


class FuncType(Type):
    __slots__ = ("arg_types", "ret_type")

    def __init__(self, arg_types, ret_type):
        object.__setattr__(self, "arg_types", tuple(arg_types))
        object.__setattr__(self, "ret_type", ret_type)

    def __setattr__(self, k, v):
        raise AttributeError("types are immutable")

    def __eq__(self, other):
        return isinstance(other, FuncType) and self.arg_types == other.arg_types and \
            self.ret_type == other.ret_type

    def __hash__(self):
        return hash((self.arg_types, self.ret_type))

    def __repr__(self):
        return f"fn({', '.join(map(repr, self.arg_types))}) -> {self.ret_type!r}"
