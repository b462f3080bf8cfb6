"""Scalar and vector expressions of the loop IR (also the leaves of tensor expressions).

Expressions overload Python operators: `i * 4 + j`, `x < n`, `a & b`. `==` and `!=` build EQ / NE
nodes whose truth value is structural identity, so expressions still work as dict keys.
"""
from __future__ import annotations

import struct

from . import dtype as dt
from .node import Node


class SymbolicBoolError(TypeError):
    """A symbolic expression used as a Python bool (an `if` or `==` on a symbolic size): code
    that needs a known value met a symbolic one."""


class PrimExpr(Node):
    """Base of all expressions; every expression has a `dtype`."""

    __slots__ = ()

    # -- operator overloading (construction helpers live in op.py) --------------------------
    def __add__(self, other):
        return _op.add(self, other)

    def __radd__(self, other):
        return _op.add(other, self)

    def __sub__(self, other):
        return _op.sub(self, other)

    def __rsub__(self, other):
        return _op.sub(other, self)

    def __mul__(self, other):
        return _op.mul(self, other)

    def __rmul__(self, other):
        return _op.mul(other, self)

    def __truediv__(self, other):
        return _op.div(self, other)

    def __rtruediv__(self, other):
        return _op.div(other, self)

    def __floordiv__(self, other):
        return _op.floordiv(self, other)

    def __rfloordiv__(self, other):
        return _op.floordiv(other, self)

    def __mod__(self, other):
        return _op.floormod(self, other)

    def __rmod__(self, other):
        return _op.floormod(other, self)

    def __neg__(self):
        return _op.neg(self)

    def __lt__(self, other):
        return _op.less(self, other)

    def __le__(self, other):
        return _op.less_equal(self, other)

    def __gt__(self, other):
        return _op.greater(self, other)

    def __ge__(self, other):
        return _op.greater_equal(self, other)

    def __eq__(self, other):
        return _op.equal_node(self, other)

    def __ne__(self, other):
        return _op.not_equal_node(self, other)

    def __and__(self, other):
        return _op.logical_and(self, other)

    def __rand__(self, other):
        return _op.logical_and(other, self)

    def __or__(self, other):
        return _op.logical_or(self, other)

    def __ror__(self, other):
        return _op.logical_or(other, self)

    def __invert__(self):
        return _op.logical_not(self)

    def __bool__(self):
        raise SymbolicBoolError(f"cannot use the symbolic expression `{self}` as a Python "
                                f"bool; use te.if_then_else, te.select, te.all or te.any "
                                f"instead")

    __hash__ = Node.__hash__

    def astype(self, dtype: str) -> "PrimExpr":
        return _op.cast(self, dtype)


# ------------------------------------------------------------------------------ constants
class IntImm(PrimExpr):
    __slots__ = ("dtype", "value")
    _fields = ("dtype", "value")

    def __new__(cls, dtype: str, value: int):
        value = int(value)
        if dt.is_bool(dtype):
            value = 1 if value else 0
        return cls._intern((cls, dtype, value), (dtype, value))

    def __bool__(self):
        return bool(self.value)

    def __int__(self):
        return self.value

    def __index__(self):
        return self.value


class FloatImm(PrimExpr):
    __slots__ = ("dtype", "value")
    _fields = ("dtype", "value")

    def __new__(cls, dtype: str, value: float):
        value = float(value)
        # Key on the bits so that 0.0 and -0.0 stay distinct and NaN interns.
        return cls._intern((cls, dtype, struct.pack("<d", value)), (dtype, value))

    def __float__(self):
        return self.value


class StringImm(PrimExpr):
    __slots__ = ("value",)
    _fields = ("value",)
    dtype = "handle"


# ------------------------------------------------------------------------------ variables
class Var(PrimExpr):
    """A variable; every construction is a new, distinct variable (names need not be unique)."""

    __slots__ = ("name", "dtype")
    _fields = ("name", "dtype")

    def __new__(cls, name: str = "v", dtype: str = "int32"):
        return cls._fresh((name, dt.normalize(dtype)))

    def replace(self, **changes):
        raise TypeError("variables are unique; make a new Var instead of replacing fields")

    def copy_with_suffix(self, suffix: str) -> "Var":
        return type(self)(self.name + suffix, self.dtype)


class SizeVar(Var):
    """A variable known to be non-negative (a symbolic size)."""

    __slots__ = ()


# ------------------------------------------------------------------------------ operators
class Cast(PrimExpr):
    __slots__ = ("dtype", "value")
    _fields = ("dtype", "value")


class BinaryOp(PrimExpr):
    __slots__ = ("a", "b")
    _fields = ("a", "b")
    symbol = "?"

    @property
    def dtype(self):
        return self.a.dtype


class Add(BinaryOp):
    __slots__ = ()
    symbol = "+"


class Sub(BinaryOp):
    __slots__ = ()
    symbol = "-"


class Mul(BinaryOp):
    __slots__ = ()
    symbol = "*"


class Div(BinaryOp):
    """Float division, or truncated division for integers."""
    __slots__ = ()
    symbol = "/"


class Mod(BinaryOp):
    """Truncated remainder (C's %)."""
    __slots__ = ()
    symbol = "%"


class FloorDiv(BinaryOp):
    __slots__ = ()
    symbol = "floordiv"


class FloorMod(BinaryOp):
    __slots__ = ()
    symbol = "floormod"


class Min(BinaryOp):
    __slots__ = ()
    symbol = "min"


class Max(BinaryOp):
    __slots__ = ()
    symbol = "max"


class CmpOp(BinaryOp):
    __slots__ = ()

    @property
    def dtype(self):
        return dt.with_lanes("bool", dt.lanes_of(self.a.dtype))


class EQ(CmpOp):
    __slots__ = ()
    symbol = "=="

    def __bool__(self):
        return self.a is self.b


class NE(CmpOp):
    __slots__ = ()
    symbol = "!="

    def __bool__(self):
        return self.a is not self.b


class LT(CmpOp):
    __slots__ = ()
    symbol = "<"


class LE(CmpOp):
    __slots__ = ()
    symbol = "<="


class GT(CmpOp):
    __slots__ = ()
    symbol = ">"


class GE(CmpOp):
    __slots__ = ()
    symbol = ">="


class And(BinaryOp):
    __slots__ = ()
    symbol = "&&"


class Or(BinaryOp):
    __slots__ = ()
    symbol = "||"


class Not(PrimExpr):
    __slots__ = ("a",)
    _fields = ("a",)

    @property
    def dtype(self):
        return self.a.dtype


class Select(PrimExpr):
    """Both branches are evaluated; see the `if_then_else` call for a guarded choice."""

    __slots__ = ("condition", "true_value", "false_value")
    _fields = ("condition", "true_value", "false_value")

    @property
    def dtype(self):
        return self.true_value.dtype


class Call(PrimExpr):
    """An intrinsic call by name: exp, if_then_else, likely, reinterpret, fma, ..."""

    __slots__ = ("dtype", "op", "args")
    _fields = ("dtype", "op", "args")


class Ramp(PrimExpr):
    """The vector (base, base + stride, ..., base + (lanes-1) * stride)."""

    __slots__ = ("base", "stride", "lanes")
    _fields = ("base", "stride", "lanes")

    @property
    def dtype(self):
        return dt.with_lanes(self.base.dtype, self.lanes)


class Broadcast(PrimExpr):
    __slots__ = ("value", "lanes")
    _fields = ("value", "lanes")

    @property
    def dtype(self):
        return dt.with_lanes(self.value.dtype, self.lanes)


class Let(PrimExpr):
    __slots__ = ("var", "value", "body")
    _fields = ("var", "value", "body")

    @property
    def dtype(self):
        return self.body.dtype


class ProducerLoad(PrimExpr):
    """`T[i, j]` on a tensor-expression tensor, before lowering to buffers."""

    __slots__ = ("producer", "indices")
    _fields = ("producer", "indices")

    @property
    def dtype(self):
        return self.producer.dtype


class BufferLoad(PrimExpr):
    """A load from a flat buffer; a Ramp index loads a vector."""

    __slots__ = ("buffer", "index")
    _fields = ("buffer", "index")

    @property
    def dtype(self):
        return dt.with_lanes(self.buffer.dtype, dt.lanes_of(self.index.dtype))


class Range(Node):
    """The half-open interval [min, min + extent)."""

    __slots__ = ("min", "extent")
    _fields = ("min", "extent")

    @staticmethod
    def from_min_extent(min_value, extent) -> "Range":
        return Range(_op.convert(min_value), _op.convert(extent))


class IterVar(Node):
    """A loop variable with its domain; iter_type is 'data_par', 'reduce', 'thread' or 'opaque'."""

    __slots__ = ("dom", "var", "iter_type", "thread_tag")
    _fields = ("dom", "var", "iter_type", "thread_tag")

    def __new__(cls, dom, var, iter_type="data_par", thread_tag=""):
        return cls._intern((cls, dom, var, iter_type, thread_tag), (dom, var, iter_type, thread_tag))

    # An IterVar used in arithmetic stands for its variable, as in TVM.
    def _v(self):
        return self.var

    def __add__(self, o): return self.var + o
    def __radd__(self, o): return o + self.var
    def __sub__(self, o): return self.var - o
    def __rsub__(self, o): return o - self.var
    def __mul__(self, o): return self.var * o
    def __rmul__(self, o): return o * self.var
    def __floordiv__(self, o): return self.var // o
    def __mod__(self, o): return self.var % o
    def __lt__(self, o): return self.var < o
    def __le__(self, o): return self.var <= o
    def __gt__(self, o): return self.var > o
    def __ge__(self, o): return self.var >= o
    def __neg__(self): return -self.var
    __hash__ = Node.__hash__

    @property
    def dtype(self):
        return self.var.dtype


class CommReducer(Node):
    """A commutative reducer: result(lhs, rhs) with identity elements (tuples for tuple reductions)."""

    __slots__ = ("lhs", "rhs", "result", "identity")
    _fields = ("lhs", "rhs", "result", "identity")

    def __call__(self, expr, axis, where=None, init=None):
        return _op.reduce(self, expr, axis, where, init)


class Reduce(PrimExpr):
    __slots__ = ("combiner", "source", "axis", "condition", "value_index", "init")
    _fields = ("combiner", "source", "axis", "condition", "value_index", "init")

    @property
    def dtype(self):
        return self.source[self.value_index].dtype


from . import op as _op  # noqa: E402  (op.py builds the nodes defined above)
