"""The simplifier: bottom-up rewriting, one rule per node type, memoized per analyzer context.

Integer scalar arithmetic goes through canonical sums (poly.py); division and remainder by
positive constants, min/max, comparisons and logic have their own rules (divmod.py, logic.py);
vectors built from Ramp/Broadcast are folded lane-wise (vector.py). Floats are only folded
when constant, never reassociated.
"""
from __future__ import annotations

from ..tir import dtype as dt
from ..tir import op as _op
from ..tir.expr import (EQ, GE, GT, LE, LT, NE, Add, And, Broadcast, BufferLoad, Call, Cast, Div,
                        FloatImm, FloorDiv, FloorMod, IntImm, Let, Max, Min, Mod, Mul, Not, Or,
                        PrimExpr, ProducerLoad, Ramp, Reduce, Select, SizeVar, StringImm, Sub,
                        Var)
from ..tir.functor import substitute, uses_var
from . import divmod as _dm
from . import logic as _logic
from . import vector as _vec
from .const_bound import expr_bound
from .order import order_key
from .poly import (Poly, add as poly_add, is_index_type, is_signed_index, poly_cost, poly_of,
                   sub as poly_sub,
                   to_expr)


class Rewriter:
    """Simplifies expressions for one Analyzer (see Analyzer.simplify)."""

    def __init__(self, analyzer):
        self.ana = analyzer
        self._table: dict = {}

    def simplify(self, e: PrimExpr) -> PrimExpr:
        memo = self.ana._ctx.memo
        result = memo.get(e)
        if result is not None:
            return result
        method = self._table.get(type(e))
        if method is None:
            method = self._resolve(type(e))
        result = method(e)
        facts = self.ana._ctx.facts
        if facts and result.dtype == "bool" and not isinstance(result, IntImm):
            if result in facts:
                result = IntImm("bool", 1)
            elif isinstance(result, Not) and result.a in facts:
                result = IntImm("bool", 0)
        memo[e] = result
        memo.setdefault(result, result)
        return result

    __call__ = simplify

    def _resolve(self, cls):
        for klass in cls.__mro__:
            rule = _RULES.get(klass)
            if rule is not None:
                break
        else:
            rule = _generic
        method = rule.__get__(self)
        self._table[cls] = method
        return method

    # ------------------------------------------------------------------ helpers for rules
    def bound(self, e) -> tuple:
        return expr_bound(self.ana, e)

    def poly_bound(self, p: Poly) -> tuple:
        from .const_bound import poly_bound
        return poly_bound(self.ana, p)

    def prove_le0(self, p: Poly) -> bool:
        return self.ana._prove_le0(p)

    def normalize(self, p: Poly) -> Poly:
        """Fold floordiv/floormod pairs in a sum: c*(x//c) + x%c -> x, c*(x//c) - x -> -(x%c),
        and the like, whenever the rewrite makes the sum smaller, alone or with one more fold
        after it: (x//a % b)*a + x%a -> x % (a*b) goes through a larger sum."""
        if len(p.terms) < 2:
            return p
        while True:
            new = self._fuse_divmod_once(p, lookahead=True)
            if new is None:
                return p
            p = new

    def _fuse_divmod_once(self, p: Poly, lookahead: bool = False):
        cost = None
        larger = []
        for mono, coef in p.terms.items():
            if len(mono) != 1:
                continue
            atom = mono[0]
            cls = type(atom)
            if cls is not FloorDiv and cls is not FloorMod:
                continue
            if not isinstance(atom.b, IntImm) or atom.b.value <= 0:
                continue
            c = atom.b.value
            x = poly_of(atom.a)
            if not _related(p, mono, atom.a, x):
                continue
            if cls is FloorDiv:
                if coef % c:
                    continue
                m = coef // c
                other = poly_of(_dm.floormod(self, x, c))
                new = poly_add(poly_add(_without(p, mono), x, m), other, -m)
            else:
                other = poly_of(_dm.floordiv(self, x, c))
                new = poly_add(poly_add(_without(p, mono), x, coef), other, -coef * c)
            if cost is None:
                cost = poly_cost(p)
            if poly_cost(new) < cost:
                return new
            larger.append(new)
        # The look-ahead costs a scan per candidate: only for the few division terms of an
        # index expression (a sum of dozens took seconds).
        for new in larger if lookahead and len(larger) <= LOOKAHEAD_MAX_TERMS else ():
            after = self._fuse_divmod_once(new)
            if after is not None and poly_cost(after) < cost:
                return after
        return None

    def build(self, p: Poly) -> PrimExpr:
        return to_expr(self.normalize(p))


def _without(p: Poly, mono) -> Poly:
    terms = dict(p.terms)
    del terms[mono]
    return Poly(terms, p.const, p.dtype)


def _related(p: Poly, own_mono, numerator, x: Poly) -> bool:
    """Cheap filter: does the sum hold a term of x, or another division of the same numerator
    or by the same divisor (the partner of a pair may have been simplified differently)?"""
    for mono in x.terms:
        if mono in p.terms:
            return True
    divisor = own_mono[0].b
    for mono in p.terms:
        if mono is not own_mono and len(mono) == 1 and isinstance(mono[0], (FloorDiv, FloorMod)) \
                and (mono[0].a is numerator or mono[0].b is divisor):
            return True
    return False


# ---------------------------------------------------------------------------- rules
def _leaf(self, e):
    return e


def _arith(self, e):
    a, b = self.simplify(e.a), self.simplify(e.b)
    cls = type(e)
    if is_index_type(a.dtype) and a.dtype == b.dtype:
        pa, pb = poly_of(a), poly_of(b)
        if cls is Add:
            p = poly_add(pa, pb)
        elif cls is Sub:
            p = poly_sub(pa, pb)
        else:
            from .poly import mul
            p = mul(pa, pb)
            if p is None:
                x, y = sorted((a, b), key=order_key)
                return Mul(x, y)
        return self.build(p)
    if dt.lanes_of(a.dtype) > 1:
        return _vec.arith(self, cls, a, b)
    return _fold(cls, a, b)


_FOLD = {Add: _op.add, Sub: _op.sub, Mul: _op.mul, Div: _op.div, Min: _op.min_, Max: _op.max_}
LOOKAHEAD_MAX_TERMS = 6     # division terms of a sum from which normalize looks no fold ahead


def _fold(cls, a, b):
    """Rebuild a float/bool binary op, folding it when both operands are constants."""
    if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)):
        fn = _FOLD.get(cls)
        if fn is not None:
            return fn(a, b)
    return cls(a, b)


def _division(self, e):
    a, b = self.simplify(e.a), self.simplify(e.b)
    cls = type(e)
    if is_signed_index(a.dtype):
        return _dm.div_rule(self, cls, a, b)
    if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)) and b.value != 0:
        return _dm.fold(cls, a, b)
    if is_index_type(a.dtype) and isinstance(b, IntImm) and b.value > 0 \
            and self.bound(a)[1] < b.value:
        # Unsigned: only the bound of the (possibly wrapped) value is trusted.
        return IntImm(a.dtype, 0) if cls is FloorDiv or cls is Div else a
    if dt.lanes_of(a.dtype) > 1 and (cls is FloorDiv or cls is FloorMod) \
            and is_signed_index(dt.element_of(a.dtype)):
        return _vec.divmod_rule(self, cls, a, b)
    return cls(a, b)


def _minmax_rule(self, e):
    a, b = self.simplify(e.a), self.simplify(e.b)
    if is_signed_index(a.dtype):
        return _dm.minmax(self, type(e), a, b)
    if a is b and not dt.is_float(a.dtype):
        return a
    if isinstance(a, Broadcast) and isinstance(b, Broadcast):
        return Broadcast(self.simplify(type(e)(a.value, b.value)), a.lanes)
    return _fold(type(e), a, b)


def _select(self, e):
    cond = self.simplify(e.condition)
    if isinstance(cond, IntImm):
        return self.simplify(e.true_value if cond.value else e.false_value)
    t, f = self.simplify(e.true_value), self.simplify(e.false_value)
    if t is f:
        return t
    if isinstance(cond, Not):
        return Select(cond.a, f, t)
    return Select(cond, t, f)


def _call(self, e):
    if e.op == "likely":
        inner = self.simplify(e.args[0])
        if isinstance(inner, IntImm):
            return inner
        return Call(e.dtype, "likely", (inner,))
    if e.op == "if_then_else":
        cond = self.simplify(e.args[0])
        if isinstance(cond, IntImm):
            return self.simplify(e.args[1] if cond.value else e.args[2])
        with self.ana.constraint(cond):
            t = self.simplify(e.args[1])
        with self.ana.constraint(_op.logical_not(cond)):
            f = self.simplify(e.args[2])
        if t is f:
            return t
        return Call(e.dtype, "if_then_else", (cond, t, f))
    args = tuple(self.simplify(a) for a in e.args)
    if len(args) == 1 and isinstance(args[0], FloatImm) and e.op in _op.FLOAT_UNARY:
        folded = getattr(_op, e.op, None)
        if folded is not None:
            result = folded(args[0])
            if isinstance(result, FloatImm):
                return result
    if all(x is y for x, y in zip(args, e.args)):
        return e
    return Call(e.dtype, e.op, args)


def _cast(self, e):
    value = self.simplify(e.value)
    result = _op.cast(value, e.dtype)
    if isinstance(result, Cast) and isinstance(value, Cast):
        inner = value.value
        # narrow(wide(x)) with x already narrow is x itself.
        if inner.dtype == e.dtype and dt.is_integral(e.dtype) and dt.is_integral(value.dtype) \
                and dt.bits_of(value.dtype) >= dt.bits_of(e.dtype):
            return inner
    return result


def _ramp(self, e):
    return _vec.make_ramp(self.simplify(e.base), self.simplify(e.stride), e.lanes)


def _broadcast(self, e):
    return Broadcast(self.simplify(e.value), e.lanes)


def _let(self, e):
    value = self.simplify(e.value)
    if isinstance(value, (IntImm, FloatImm, Var, StringImm)):
        return self.simplify(substitute(e.body, {e.var: value}))
    with self.ana.scope():
        if is_index_type(value.dtype):
            self.ana.bind(e.var, value)
        body = self.simplify(e.body)
    if not uses_var(body, {e.var}):
        return body
    return Let(e.var, value, body)


def _buffer_load(self, e):
    index = self.simplify(e.index)
    return e if index is e.index else BufferLoad(e.buffer, index)


def _producer_load(self, e):
    indices = tuple(self.simplify(i) for i in e.indices)
    return ProducerLoad(e.producer, indices)


def _reduce(self, e):
    from ..tir.expr import Range
    with self.ana.scope():
        for iv in e.axis:
            if isinstance(iv.dom, Range) and is_index_type(iv.var.dtype):
                self.ana.bind(iv.var, iv.dom)
        source = tuple(self.simplify(s) for s in e.source)
        condition = self.simplify(e.condition)
        init = tuple(self.simplify(i) for i in e.init)
    return Reduce(e.combiner, source, e.axis, condition, e.value_index, init)


def _generic(self, e):
    values = []
    changed = False
    for name in e._fields:
        value = getattr(e, name)
        if isinstance(value, PrimExpr):
            new = self.simplify(value)
        elif isinstance(value, tuple) and value and all(isinstance(v, PrimExpr) for v in value):
            new = tuple(self.simplify(v) for v in value)
            if all(x is y for x, y in zip(new, value)):
                new = value
        else:
            new = value
        changed |= new is not value
        values.append(new)
    return type(e)(*values) if changed else e


_RULES = {
    IntImm: _leaf, FloatImm: _leaf, StringImm: _leaf, Var: _leaf, SizeVar: _leaf,
    Add: _arith, Sub: _arith, Mul: _arith,
    FloorDiv: _division, FloorMod: _division, Div: _division, Mod: _division,
    Min: _minmax_rule, Max: _minmax_rule,
    LT: _logic.compare, LE: _logic.compare, GT: _logic.compare, GE: _logic.compare,
    EQ: _logic.compare, NE: _logic.compare,
    And: _logic.and_or, Or: _logic.and_or, Not: _logic.not_,
    Select: _select, Call: _call, Cast: _cast, Ramp: _ramp, Broadcast: _broadcast, Let: _let,
    BufferLoad: _buffer_load, ProducerLoad: _producer_load, Reduce: _reduce,
}

__all__ = ["Rewriter"]
