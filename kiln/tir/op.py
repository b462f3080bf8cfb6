"""Building expressions: conversion of Python values, dtype matching, constant folding, intrinsics.

A Python number takes the dtype of the other operand (`x + 1` with x float16 stays float16);
two expressions of different types are promoted (int to float, narrow to wide).
"""
from __future__ import annotations

import math

from . import dtype as dt
from .expr import (EQ, GE, GT, LE, LT, NE, Add, And, Broadcast, BufferLoad, Call, Cast,
                   CommReducer, Div, FloatImm, FloorDiv, FloorMod, IntImm, IterVar, Max, Min, Mod,
                   Mul, Not, Or, PrimExpr, Select, StringImm, Sub, Var)


class IRError(TypeError):
    """An expression that cannot be built: mismatched types, a non-expression operand."""


def const(value, dtype: str | None = None) -> PrimExpr:
    """A constant; the dtype defaults to int32 for ints, float32 for floats, bool for bools.

    Example:
        >>> const(3)
        3
    """
    if dtype is None:
        if isinstance(value, bool):
            dtype = "bool"
        elif isinstance(value, int):
            dtype = "int32" if -2**31 <= value < 2**31 else "int64"
        else:
            dtype = "float32"
    dtype = dt.normalize(dtype)
    base, lanes = dt.parse(dtype)
    if lanes > 1:
        return Broadcast(const(value, base), lanes)
    if dt.is_float(dtype):
        return FloatImm(dtype, value)
    if isinstance(value, float) and not value.is_integer():
        raise IRError(f"cannot make a {dtype} constant from {value}")
    return IntImm(dtype, value)


def convert(value, dtype: str | None = None) -> PrimExpr:
    """Turn a Python number, bool or IterVar into an expression; expressions pass through."""
    if isinstance(value, PrimExpr):
        return value
    if isinstance(value, IterVar):
        return value.var
    if isinstance(value, (bool, int, float)):
        return const(value, dtype)
    try:
        import numpy as np
        if isinstance(value, np.generic):
            return const(value.item(), dtype or value.dtype.name)
    except ImportError:  # pragma: no cover
        pass
    if isinstance(value, str):
        return StringImm(value)
    raise IRError(f"cannot use {value!r} (a {type(value).__name__}) in an expression")


def _rank(dtype: str) -> tuple:
    base = dt.element_of(dtype)
    return (dt.is_float(base), dt.bits_of(base), not dt.is_uint(base))


def match_types(a, b) -> tuple[PrimExpr, PrimExpr]:
    """Bring two operands to one dtype, Python numbers adopting the other side's type."""
    a_py = not isinstance(a, (PrimExpr, IterVar))
    b_py = not isinstance(b, (PrimExpr, IterVar))
    if a_py and not b_py:
        b = convert(b)
        a = _py_const_like(a, b.dtype)
        return a, b
    if b_py and not a_py:
        a = convert(a)
        return a, _py_const_like(b, a.dtype)
    a, b = convert(a), convert(b)
    if a.dtype == b.dtype:
        return a, b
    la, lb = dt.lanes_of(a.dtype), dt.lanes_of(b.dtype)
    if la != lb:
        if la == 1:
            a = Broadcast(a, lb)
        elif lb == 1:
            b = Broadcast(b, la)
        else:
            raise IRError(f"vector lanes differ: {a.dtype} and {b.dtype}")
        if a.dtype == b.dtype:
            return a, b
    target = a.dtype if _rank(a.dtype) >= _rank(b.dtype) else b.dtype
    return cast(a, target), cast(b, target)


def _py_const_like(value, dtype: str) -> PrimExpr:
    base, lanes = dt.parse(dtype)
    if isinstance(value, float) and not dt.is_float(base) and not value.is_integer():
        # 1.5 + int expression: promote to float32 as TVM does.
        return const(value, "float32" if lanes == 1 else f"float32x{lanes}")
    if dt.is_bool(base) and not isinstance(value, bool):
        base = "int32"
    if isinstance(value, int) and not isinstance(value, bool) and dt.is_integral(base) \
            and not dt.is_bool(base) and _wrap_int(value, base) != value:
        # A silent wrap would turn e.g. `i + (1 << 34)` into `i + 0`.
        raise IRError(f"the literal {value} does not fit the {base} operand it is combined "
                      f"with; cast that operand to a wider type first")
    return const(value, dt.with_lanes(base, lanes))


def cast(value, dtype: str) -> PrimExpr:
    value = convert(value)
    dtype = dt.normalize(dtype)
    if dt.lanes_of(dtype) == 1 and dt.lanes_of(value.dtype) > 1:
        dtype = dt.with_lanes(dtype, dt.lanes_of(value.dtype))
    if value.dtype == dtype:
        return value
    if isinstance(value, IntImm) and not dt.is_float(dtype) and dt.lanes_of(dtype) == 1:
        return IntImm(dtype, _wrap_int(value.value, dtype))
    if isinstance(value, (IntImm, FloatImm)) and dt.is_float(dtype) and dt.lanes_of(dtype) == 1:
        return FloatImm(dtype, float(value.value))
    if isinstance(value, FloatImm) and dt.is_integral(dtype):
        return IntImm(dtype, _wrap_int(int(value.value), dtype))
    if isinstance(value, Broadcast):
        return Broadcast(cast(value.value, dt.element_of(dtype)), value.lanes)
    return Cast(dtype, value)


def _wrap_int(value: int, dtype: str) -> int:
    if dt.is_bool(dtype):
        return 1 if value else 0
    bits = dt.bits_of(dtype)
    value &= (1 << bits) - 1
    if dt.is_int(dtype) and value >= 1 << (bits - 1):
        value -= 1 << bits
    return value


def _is_const(x, value=None) -> bool:
    return isinstance(x, (IntImm, FloatImm)) and (value is None or x.value == value)


def _fold(cls, a, b, fn):
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        result = fn(a.value, b.value)
        if result is not None:
            return IntImm(a.dtype, _wrap_int(result, a.dtype))
    if isinstance(a, FloatImm) and isinstance(b, FloatImm):
        result = fn(a.value, b.value)
        if result is not None:
            return FloatImm(a.dtype, result)
    return None


def _trunc_div(x, y):
    if y == 0:
        return None
    q = abs(x) // abs(y)
    return q if (x >= 0) == (y >= 0) else -q


def add(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    folded = _fold(Add, a, b, lambda x, y: x + y)
    if folded is not None:
        return folded
    if isinstance(a, IntImm) and a.value == 0:
        return b
    if isinstance(b, IntImm) and b.value == 0:
        return a
    return Add(a, b)


def sub(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    folded = _fold(Sub, a, b, lambda x, y: x - y)
    if folded is not None:
        return folded
    if isinstance(b, IntImm) and b.value == 0:
        return a
    return Sub(a, b)


def mul(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    folded = _fold(Mul, a, b, lambda x, y: x * y)
    if folded is not None:
        return folded
    if isinstance(a, IntImm):
        if a.value == 1:
            return b
        if a.value == 0:
            return a
    if isinstance(b, IntImm):
        if b.value == 1:
            return a
        if b.value == 0:
            return b
    return Mul(a, b)


def neg(a) -> PrimExpr:
    a = convert(a)
    if isinstance(a, IntImm):
        return IntImm(a.dtype, _wrap_int(-a.value, a.dtype))
    if isinstance(a, FloatImm):
        return FloatImm(a.dtype, -a.value)
    return sub(const(0, a.dtype), a)


def div(a, b) -> PrimExpr:
    """True division for floats; truncated division for integers (as C and TVM's Div)."""
    a, b = match_types(a, b)
    if dt.is_float(a.dtype):
        folded = _fold(Div, a, b, lambda x, y: x / y if y != 0 else None)
    else:
        folded = _fold(Div, a, b, _trunc_div)
        if isinstance(b, IntImm) and b.value == 1:
            return a
    return folded if folded is not None else Div(a, b)


def truncdiv(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    _require_int("truncdiv", a)
    return div(a, b)


def truncmod(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    _require_int("truncmod", a)
    folded = _fold(Mod, a, b, lambda x, y: None if y == 0 else x - _trunc_div(x, y) * y)
    return folded if folded is not None else Mod(a, b)


def floordiv(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    if dt.is_float(a.dtype):
        return floor(div(a, b))
    folded = _fold(FloorDiv, a, b, lambda x, y: None if y == 0 else x // y)
    if folded is not None:
        return folded
    if isinstance(b, IntImm) and b.value == 1:
        return a
    return FloorDiv(a, b)


def floormod(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    if dt.is_float(a.dtype):
        return _float_floormod(a, b)
    folded = _fold(FloorMod, a, b, lambda x, y: None if y == 0 else x % y)
    if folded is not None:
        return folded
    if isinstance(b, IntImm) and b.value == 1:
        return IntImm(a.dtype, 0)
    return FloorMod(a, b)


def _float_floormod(a, b) -> PrimExpr:
    """numpy's float remainder: fmod (exact, unlike a - floor(a / b) * b, which also gives NaN
    for a finite a and an infinite b) moved to b's sign; a zero result takes b's sign."""
    r = fmod(a, b)
    zero = const(0, a.dtype)
    opposite = not_equal(less(r, zero), less(b, zero))
    moved = select(logical_and(not_equal(r, zero), opposite), add(r, b), r)
    return select(equal(moved, zero), select(less(b, zero), const(-0.0, a.dtype), zero), moved)


def _require_int(name, a):
    if not dt.is_integral(a.dtype):
        raise IRError(f"{name} needs integer operands, got {a.dtype}")


def min_(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    folded = _fold(Min, a, b, min)
    return folded if folded is not None else (a if a is b else Min(a, b))


def max_(a, b) -> PrimExpr:
    a, b = match_types(a, b)
    folded = _fold(Max, a, b, max)
    return folded if folded is not None else (a if a is b else Max(a, b))


def _compare(cls, fn):
    def build(a, b):
        a, b = match_types(a, b)
        if _is_const(a) and _is_const(b) and dt.lanes_of(a.dtype) == 1:
            return IntImm("bool", fn(a.value, b.value))
        return cls(a, b)
    build.__name__ = cls.__name__.lower()
    return build


less = _compare(LT, lambda x, y: x < y)
less_equal = _compare(LE, lambda x, y: x <= y)
greater = _compare(GT, lambda x, y: x > y)
greater_equal = _compare(GE, lambda x, y: x >= y)
equal = _compare(EQ, lambda x, y: x == y)
not_equal = _compare(NE, lambda x, y: x != y)


def equal_node(a, b):
    """`a == b` in Python: an EQ node whose bool() is structural identity (keeps dicts working)."""
    if not isinstance(b, (PrimExpr, IterVar, int, float, bool)):
        return NotImplemented
    return EQ(*match_types(a, b))


def not_equal_node(a, b):
    if not isinstance(b, (PrimExpr, IterVar, int, float, bool)):
        return NotImplemented
    return NE(*match_types(a, b))


def _as_bool(x) -> PrimExpr:
    x = convert(x)
    if not dt.is_bool(x.dtype):
        raise IRError(f"expected a boolean condition, got `{x}` of type {x.dtype}")
    return x


def logical_and(a, b) -> PrimExpr:
    a, b = _as_bool(a), _as_bool(b)
    if isinstance(a, IntImm):
        return b if a.value else a
    if isinstance(b, IntImm):
        return a if b.value else b
    return And(a, b)


def logical_or(a, b) -> PrimExpr:
    a, b = _as_bool(a), _as_bool(b)
    if isinstance(a, IntImm):
        return a if a.value else b
    if isinstance(b, IntImm):
        return b if b.value else a
    return Or(a, b)


def logical_not(a) -> PrimExpr:
    a = _as_bool(a)
    if isinstance(a, IntImm):
        return IntImm("bool", not a.value)
    return Not(a)


def all_(*conds) -> PrimExpr:
    """Conjunction of conditions: te.all(i >= 1, i < n)."""
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = tuple(conds[0])
    if not conds:
        raise IRError("te.all needs at least one condition")
    result = _as_bool(conds[0])
    for c in conds[1:]:
        result = logical_and(result, c)
    return result


def any_(*conds) -> PrimExpr:
    if len(conds) == 1 and isinstance(conds[0], (list, tuple)):
        conds = tuple(conds[0])
    if not conds:
        raise IRError("te.any needs at least one condition")
    result = _as_bool(conds[0])
    for c in conds[1:]:
        result = logical_or(result, c)
    return result


def select(cond, t, f) -> PrimExpr:
    """Evaluate both t and f, then choose; use if_then_else when one branch may be unsafe."""
    cond = _as_bool(cond)
    t, f = match_types(t, f)
    if isinstance(cond, IntImm):
        return t if cond.value else f
    return Select(cond, t, f)


def if_then_else(cond, t, f) -> PrimExpr:
    """A guarded choice: only the taken branch is evaluated (safe for padding loads)."""
    cond = _as_bool(cond)
    t, f = match_types(t, f)
    if isinstance(cond, IntImm):
        return t if cond.value else f
    return Call(t.dtype, "if_then_else", (cond, t, f))


def likely(cond) -> PrimExpr:
    cond = _as_bool(cond)
    if isinstance(cond, IntImm):
        return cond
    return Call(cond.dtype, "likely", (cond,))


def reinterpret(value, dtype: str) -> PrimExpr:
    value = convert(value)
    return Call(dt.with_lanes(dtype, dt.lanes_of(value.dtype)), "reinterpret", (value,))


def bitcast(value, dtype: str) -> PrimExpr:
    """The bits of the whole of `value` read as `dtype`, whose lane count may differ (four
    uint8 lanes as one int32); the sizes must agree.

    Example:
        >>> from kiln.tir import Var
        >>> bitcast(Var("q", "uint8x4"), "int32").dtype
        'int32'
    """
    value, dtype = convert(value), dt.normalize(dtype)
    if dt.bits_of(dtype) * dt.lanes_of(dtype) != dt.bits_of(value.dtype) * dt.lanes_of(value.dtype):
        raise IRError(f"bitcast of `{value}` ({value.dtype}) to {dtype} changes the size")
    return Call(dtype, "bitcast", (value,))


def prefetch(buffer, index):
    """A statement that asks the caches for the line holding buffer[index] (nothing is loaded
    into a register; an address past the data is harmless). The BufferLoad argument names
    the address only.

    Example:
        >>> from kiln.tir import Buffer
        >>> print(prefetch(Buffer.make("W", "float32", (64,)), const(16)))
        prefetch(W[16])
    """
    from .stmt import Evaluate
    return Evaluate(Call("int32", "prefetch", (BufferLoad(buffer, convert(index)),)))


def call_intrin(dtype: str, name: str, *args) -> PrimExpr:
    return Call(dt.normalize(dtype), name, tuple(convert(a) for a in args))


def call_llvm_intrin(dtype: str, name: str, *args) -> PrimExpr:
    """A call of the LLVM intrinsic `name` (its full, overloaded name), for the llvm back-end
    only: how a tensor intrinsic reaches an instruction that kiln's vector IR does not spell.
    The intrinsic is taken to be pure (no memory access, no side effect).

    Example:
        >>> from kiln.tir import Var
        >>> a, b = Var("a", "int16x16"), Var("b", "int16x16")
        >>> print(call_llvm_intrin("int32x8", "llvm.x86.avx2.pmadd.wd", a, b))
        llvm_intrin('llvm.x86.avx2.pmadd.wd', a, b)
    """
    from .expr import StringImm
    return Call(dt.normalize(dtype), "llvm_intrin", (StringImm(name),) + tuple(convert(a) for a in args))


# ----------------------------------------------------------------------------------- math
FLOAT_UNARY = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "floor", "ceil",
               "round", "trunc", "sin", "cos", "exp2", "log2", "log1p", "expm1")
# Trigonometric and hyperbolic functions (libm calls in the back-ends).
TRIG_UNARY = ("tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")
FLOAT_UNARY += TRIG_UNARY

_PY_UNARY = {"exp": math.exp, "log": math.log, "sqrt": math.sqrt, "floor": math.floor,
             "ceil": math.ceil, "tanh": math.tanh, "erf": math.erf, "trunc": math.trunc,
             "sin": math.sin, "cos": math.cos, **{n: getattr(math, n) for n in TRIG_UNARY}}


def _float_unary(name):
    def build(x):
        x = convert(x)
        if not dt.is_float(x.dtype):
            if name in ("floor", "ceil", "round", "trunc"):
                return x
            raise IRError(f"{name} needs a floating-point operand, got `{x}` of type {x.dtype}")
        if isinstance(x, FloatImm) and name in _PY_UNARY:
            try:
                return FloatImm(x.dtype, _PY_UNARY[name](x.value))
            except (ValueError, OverflowError):
                pass
        return Call(x.dtype, name, (x,))
    build.__name__ = name
    build.__doc__ = f"Elementwise {name} of a floating-point expression, e.g. te.{name}(A[i])."
    return build


exp = _float_unary("exp")
log = _float_unary("log")
sqrt = _float_unary("sqrt")
rsqrt = _float_unary("rsqrt")
tanh = _float_unary("tanh")
sigmoid = _float_unary("sigmoid")
erf = _float_unary("erf")
floor = _float_unary("floor")
ceil = _float_unary("ceil")
round_ = _float_unary("round")
trunc = _float_unary("trunc")
sin = _float_unary("sin")
cos = _float_unary("cos")
log2 = _float_unary("log2")
exp2 = _float_unary("exp2")
tan = _float_unary("tan")
asin = _float_unary("asin")
acos = _float_unary("acos")
atan = _float_unary("atan")
sinh = _float_unary("sinh")
cosh = _float_unary("cosh")
asinh = _float_unary("asinh")
acosh = _float_unary("acosh")
atanh = _float_unary("atanh")


def abs_(x) -> PrimExpr:
    x = convert(x)
    if dt.is_uint(x.dtype) or dt.is_bool(x.dtype):
        return x
    if isinstance(x, (IntImm, FloatImm)):
        return type(x)(x.dtype, abs(x.value))
    if dt.is_float(x.dtype):
        return Call(x.dtype, "fabs", (x,))
    return select(x >= 0, x, neg(x))


def pow_(x, y) -> PrimExpr:
    x, y = match_types(x, y)
    if not dt.is_float(x.dtype):
        raise IRError(f"pow needs floating-point operands, got {x.dtype}")
    return Call(x.dtype, "pow", (x, y))


def fmod(x, y) -> PrimExpr:
    x, y = match_types(x, y)
    if not dt.is_float(x.dtype):
        return truncmod(x, y)
    return Call(x.dtype, "fmod", (x, y))


def min_value(dtype: str) -> PrimExpr:
    dtype = dt.normalize(dtype)
    if dt.is_float(dtype):
        return FloatImm(dtype, -math.inf)
    if dt.is_bool(dtype):
        return IntImm(dtype, 0)
    bits = dt.bits_of(dtype)
    return IntImm(dtype, 0 if dt.is_uint(dtype) else -(1 << (bits - 1)))


def max_value(dtype: str) -> PrimExpr:
    dtype = dt.normalize(dtype)
    if dt.is_float(dtype):
        return FloatImm(dtype, math.inf)
    if dt.is_bool(dtype):
        return IntImm(dtype, 1)
    bits = dt.bits_of(dtype)
    return IntImm(dtype, (1 << bits) - 1 if dt.is_uint(dtype) else (1 << (bits - 1)) - 1)


# ----------------------------------------------------------------------------- reductions
def reduce(combiner: CommReducer, expr, axis, where=None, init=None) -> PrimExpr:
    """Apply a commutative reducer over reduce axes; a tuple `expr` makes a tuple reduction."""
    from .expr import Reduce  # noqa: F811
    axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
    for a in axes:
        if not isinstance(a, IterVar) or a.iter_type != "reduce":
            raise IRError(f"reduction axis must be made by te.reduce_axis, got {a!r}")
    cond = IntImm("bool", 1) if where is None else _as_bool(where)
    sources = tuple(expr) if isinstance(expr, (list, tuple)) else (expr,)
    sources = tuple(convert(s) for s in sources)
    if len(sources) != len(combiner.lhs):
        raise IRError(f"reducer takes {len(combiner.lhs)} values, got {len(sources)}")
    sources = tuple(cast(s, l.dtype) if not isinstance(s, PrimExpr) or s.dtype != l.dtype else s
                    for s, l in zip(sources, combiner.lhs))
    inits = () if init is None else tuple(
        cast(convert(v), s.dtype) for v, s in zip(init if isinstance(init, (list, tuple)) else (init,), sources))
    return [Reduce(combiner, sources, axes, cond, i, inits) for i in range(len(sources))] \
        if len(sources) > 1 else Reduce(combiner, sources, axes, cond, 0, inits)


def comm_reducer(fcombine, fidentity, name="reduce"):
    """Make a reducer from a combine function and an identity function of dtype(s).

    Example (argmax as a tuple reduction):
        >>> def combine(x, y):
        ...     return select(x[1] >= y[1], x[0], y[0]), select(x[1] >= y[1], x[1], y[1])
        >>> argmax = comm_reducer(combine, lambda t0, t1: (const(-1, t0), min_value(t1)))
    """

    def reducer(expr, axis, where=None, init=None):
        sources = tuple(expr) if isinstance(expr, (list, tuple)) else (expr,)
        sources = tuple(convert(s) for s in sources)
        dtypes = [s.dtype for s in sources]
        lhs = tuple(Var(f"x{k}" if len(dtypes) > 1 else "x", d) for k, d in enumerate(dtypes))
        rhs = tuple(Var(f"y{k}" if len(dtypes) > 1 else "y", d) for k, d in enumerate(dtypes))
        if len(dtypes) == 1:
            result, identity = fcombine(lhs[0], rhs[0]), fidentity(dtypes[0])
        else:
            result, identity = fcombine(lhs, rhs), fidentity(*dtypes)
        result = tuple(result) if isinstance(result, (list, tuple)) else (result,)
        identity = tuple(identity) if isinstance(identity, (list, tuple)) else (identity,)
        result = tuple(cast(r, d) for r, d in zip(result, dtypes))
        identity = tuple(cast(convert(v, d), d) for v, d in zip(identity, dtypes))
        comb = CommReducer(lhs, rhs, result, identity)
        return reduce(comb, sources if len(sources) > 1 else sources[0], axis, where, init)

    reducer.__name__ = name
    return reducer


sum_ = comm_reducer(lambda x, y: add(x, y), lambda t: const(0, t), name="sum")
prod = comm_reducer(lambda x, y: mul(x, y), lambda t: const(1, t), name="prod")
_min_reducer = comm_reducer(lambda x, y: min_(x, y), max_value, name="min")
_max_reducer = comm_reducer(lambda x, y: max_(x, y), min_value, name="max")


def _reducer_or_binary(reducer, binary):
    def fn(a, b=None, axis=None, where=None, init=None, **kw):
        if "axis" in kw:
            axis = kw.pop("axis")
        if axis is None and isinstance(b, (IterVar, list, tuple)) and \
                (isinstance(b, IterVar) or (b and isinstance(b[0], IterVar))):
            axis, b = b, None
        if axis is not None:
            return reducer(a, axis, where, init)
        if b is None:
            raise IRError(f"te.{reducer.__name__} needs either a second value or axis=")
        return binary(a, b)
    fn.__name__ = reducer.__name__
    return fn


max_ = max_  # binary max, for internal use
min_ = min_
te_max = _reducer_or_binary(_max_reducer, max_)
te_min = _reducer_or_binary(_min_reducer, min_)
