"""Constant bounds of expressions under an Analyzer's variable bounds (one rule per node type)."""
from __future__ import annotations

from ..tir import dtype as dt
from ..tir.expr import (Add, And, Broadcast, BufferLoad, Call, Cast, CmpOp, Div, FloatImm,
                        FloorDiv, FloorMod, IntImm, Let, Max, Min, Mod, Mul, Not, Or, Ramp,
                        Select, SizeVar, Sub, Var)
from . import bound as B
from .poly import Poly, is_index_type, poly_of, sub as poly_sub
from .size_bounds import size_bounds


def expr_bound(ana, e) -> tuple:
    """(lo, hi) of an expression, memoized in the analyzer's current context."""
    memo = ana._ctx.bound_memo
    result = memo.get(e)
    if result is None:
        rule = _RULES.get(type(e))
        if rule is None:
            rule = _rule_for(type(e))
        result = rule(ana, e)
        limits = _finite_limits(e.dtype)
        if limits is not None and (result[0] < limits[0] or result[1] > limits[1]):
            result = limits     # the value wrapped around: all the type can hold
        memo[e] = result
    return result


_LIMITS: dict = {}


def _finite_limits(dtype):
    limits = _LIMITS.get(dtype, 0)
    if limits == 0:
        limits = None
        if not dt.is_handle(dtype) and not dt.is_float(dtype):
            b = B.dtype_bound(dtype)
            if b != B.EVERYTHING:
                limits = b
        _LIMITS[dtype] = limits
    return limits


def _rule_for(cls):
    for klass in cls.__mro__:
        if klass in _RULES:
            _RULES[cls] = _RULES[klass]
            return _RULES[klass]
    _RULES[cls] = _default
    return _default


def _default(ana, e):
    return B.dtype_bound(e.dtype) if not dt.is_handle(e.dtype) else B.EVERYTHING


def _int_imm(ana, e):
    return (e.value, e.value)


def _float_imm(ana, e):
    return B.EVERYTHING


def _var(ana, v):
    known = ana._ctx.bounds.get(v)
    if known is not None:
        return known
    if isinstance(v, SizeVar):
        declared = size_bounds(v)
        if declared is not None:
            return (declared[0], B.INF if declared[1] is None else declared[1])
        return (0, B.INF)
    return _default(ana, v)


def _sum(ana, e):
    if is_index_type(e.dtype):
        return poly_bound(ana, poly_of(e))
    a, b = expr_bound(ana, e.a), expr_bound(ana, e.b)
    if isinstance(e, Add):
        return B.add(a, b)
    if isinstance(e, Sub):
        return B.add(a, B.neg(b))
    return B.mul(a, b)


def _binary(fn):
    def rule(ana, e):
        return fn(expr_bound(ana, e.a), expr_bound(ana, e.b))
    return rule


def _div(ana, e):
    if dt.is_float(e.dtype):
        return B.EVERYTHING
    return B.truncdiv(expr_bound(ana, e.a), expr_bound(ana, e.b))


def _mod(ana, e):
    return B.truncmod(expr_bound(ana, e.a), expr_bound(ana, e.b))


def _min(ana, e):
    a, b = expr_bound(ana, e.a), expr_bound(ana, e.b)
    return (min(a[0], b[0]), min(a[1], b[1]))


def _max(ana, e):
    a, b = expr_bound(ana, e.a), expr_bound(ana, e.b)
    return (max(a[0], b[0]), max(a[1], b[1]))


def _bool(ana, e):
    return (0, 1)


def _select(ana, e):
    return B.union(expr_bound(ana, e.true_value), expr_bound(ana, e.false_value))


def _call(ana, e):
    if e.op == "if_then_else":
        return B.union(expr_bound(ana, e.args[1]), expr_bound(ana, e.args[2]))
    if e.op == "likely":
        return (0, 1)
    return _default(ana, e)


def _cast(ana, e):
    src = e.value.dtype
    if dt.is_float(e.dtype) or dt.is_handle(e.dtype):
        return B.EVERYTHING
    target = B.dtype_bound(e.dtype)
    if dt.is_float(src) or dt.is_handle(src):
        return target
    a = expr_bound(ana, e.value)
    if target[0] <= a[0] and a[1] <= target[1]:
        return a
    return target


def _ramp(ana, e):
    base = expr_bound(ana, e.base)
    stride = expr_bound(ana, e.stride)
    return B.add(base, B.mul(stride, (0, e.lanes - 1)))


def _broadcast(ana, e):
    return expr_bound(ana, e.value)


def _let(ana, e):
    with ana.scope():
        ana._ctx.bounds[e.var] = expr_bound(ana, e.value)
        return expr_bound(ana, e.body)


def _load(ana, e):
    return _default(ana, e)


_RULES = {
    IntImm: _int_imm, FloatImm: _float_imm, Var: _var, SizeVar: _var,
    Add: _sum, Sub: _sum, Mul: _sum,
    FloorDiv: _binary(B.floordiv), FloorMod: _binary(B.floormod), Div: _div, Mod: _mod,
    Min: _min, Max: _max, CmpOp: _bool, And: _bool, Or: _bool, Not: _bool,
    Select: _select, Call: _call, Cast: _cast, Ramp: _ramp, Broadcast: _broadcast, Let: _let,
    BufferLoad: _load,
}


# ------------------------------------------------------------------------------ sums
def _term_bound(ana, mono, coef):
    acc = (coef, coef)
    for atom in mono:
        acc = B.mul(acc, expr_bound(ana, atom))
    return acc


def poly_bound(ana, p: Poly) -> tuple:
    """Bounds of a canonical sum: the sum of its terms' bounds, except that pairs
    k*floordiv(X + d, c) - k*floordiv(X, c) are bounded together (their difference is tight)."""
    lo = hi = p.const
    paired = _paired_divisions(p) if len(p.terms) > 1 else None
    for mono, coef in p.terms.items():
        if paired and mono in paired:
            continue
        t = _term_bound(ana, mono, coef)
        lo += t[0]
        hi += t[1]
        if lo == -B.INF and hi == B.INF:
            return B.EVERYTHING
    if paired:
        for (q_lo, q_hi) in paired.values():
            if q_lo is None:
                continue
            lo += q_lo
            hi += q_hi
    return (lo, hi)


def _paired_divisions(p: Poly):
    """Monomials covered by a floordiv pair, mapped to the pair's bound (given on one member)."""
    divs = [(mono[0], coef) for mono, coef in p.terms.items()
            if len(mono) == 1 and isinstance(mono[0], FloorDiv) and isinstance(mono[0].b, IntImm)
            and mono[0].b.value > 0]
    if len(divs) < 2:
        return None
    out = {}
    used = set()
    for d1, k1 in divs:
        if d1 in used or k1 <= 0:
            continue
        for d2, k2 in divs:
            if d2 in used or k2 != -k1 or d2.b is not d1.b or d2 is d1:
                continue
            diff = poly_sub(poly_of(d1.a), poly_of(d2.a))
            if diff.terms:
                continue
            c, delta = d1.b.value, diff.const
            q = delta // c
            span = (q, q) if delta % c == 0 else (q, q + 1)
            used.add(d1)
            used.add(d2)
            out[(d1,)] = (k1 * span[0], k1 * span[1])
            out[(d2,)] = (None, None)
            break
    return out or None
