"""Rules for comparisons and boolean logic (called by the Rewriter).

A signed integer comparison is moved to one side as a canonical sum P and decided with bounds
(and symbolic proofs); undecided, it is written back as `positive terms < negative terms`
with the constant on the right, after dividing by the common factor of the coefficients.
Every ordering comparison becomes `<` (a <= b is a < b + 1 on integers), so equal conditions
meet as the identical node.
"""
from __future__ import annotations

from ..tir import dtype as dt
from ..tir import op as _op
from ..tir.expr import (EQ, GE, GT, LE, LT, NE, And, Broadcast, CmpOp, FloatImm, IntImm, Not, Or,
                        Ramp, Sub)
from .poly import Poly, add as poly_add, gcd_of_coefficients, is_index_type, poly_of, scale, \
    sub as poly_sub, to_expr

TRUE = IntImm("bool", 1)
FALSE = IntImm("bool", 0)


def _bool(value: bool) -> IntImm:
    return TRUE if value else FALSE


def _plus(p: Poly, k: int) -> Poly:
    return Poly(p.terms, p.const + k, p.dtype)


_FOLD = {LT: _op.less, LE: _op.less_equal, GT: _op.greater, GE: _op.greater_equal,
         EQ: _op.equal, NE: _op.not_equal}
_NEGATE = {LT: GE, LE: GT, GT: LE, GE: LT, EQ: NE, NE: EQ}


def compare(self, e):
    a, b = self.simplify(e.a), self.simplify(e.b)
    cls = type(e)
    if is_index_type(a.dtype) and a.dtype == b.dtype and not dt.is_uint(a.dtype):
        diff = poly_sub(poly_of(a), poly_of(b))
        if cls is LT:
            return lt_zero(self, diff)
        if cls is LE:
            return lt_zero(self, _plus(diff, -1))
        if cls is GT:
            return lt_zero(self, scale(diff, -1))
        if cls is GE:
            return lt_zero(self, _plus(scale(diff, -1), -1))
        result = eq_zero(self, diff)
        if cls is EQ:
            return result
        if isinstance(result, IntImm):
            return _bool(not result.value)
        return NE(result.a, result.b)
    if isinstance(a, (IntImm, FloatImm)) and isinstance(b, (IntImm, FloatImm)) \
            and dt.lanes_of(a.dtype) == 1:
        return _FOLD[cls](a, b)
    if a is b and not dt.is_float(a.dtype) and dt.lanes_of(a.dtype) == 1:
        return _bool(cls in (EQ, LE, GE))
    if isinstance(a, Broadcast) and isinstance(b, Broadcast):
        return Broadcast(self.simplify(cls(a.value, b.value)), a.lanes)
    if isinstance(a, (Ramp, Broadcast)) and isinstance(b, (Ramp, Broadcast)) \
            and is_index_type(dt.element_of(a.dtype)) and not dt.is_uint(a.dtype):
        decided = _vector_compare(self, cls, a, b)
        if decided is not None:
            return decided
    if is_index_type(a.dtype) and a.dtype == b.dtype:       # unsigned: decide with bounds only
        (alo, ahi), (blo, bhi) = self.bound(a), self.bound(b)
        decided = _decide_by_bounds(cls, alo, ahi, blo, bhi)
        if decided is not None:
            return _bool(decided)
    return cls(a, b)


def _vector_compare(self, cls, a, b):
    """A lane-wise comparison of ramps that every lane decides the same way: a broadcast
    constant. Ordering comparisons are monotone along a ramp, so the two end lanes decide."""
    diff = self.simplify(Sub(a, b))
    zero = IntImm(dt.element_of(a.dtype), 0)
    if isinstance(diff, Broadcast):
        return Broadcast(self.simplify(cls(diff.value, zero)), diff.lanes)
    if not isinstance(diff, Ramp) or cls in (EQ, NE):
        return None
    first = self.simplify(cls(diff.base, zero))
    last = self.simplify(cls(self.simplify(diff.base + diff.stride * (diff.lanes - 1)), zero))
    if isinstance(first, IntImm) and first is last:
        return Broadcast(first, diff.lanes)
    return None


def _decide_by_bounds(cls, alo, ahi, blo, bhi):
    if cls is LT:
        return True if ahi < blo else False if alo >= bhi else None
    if cls is LE:
        return True if ahi <= blo else False if alo > bhi else None
    if cls is GT:
        return True if alo > bhi else False if ahi <= blo else None
    if cls is GE:
        return True if alo >= bhi else False if ahi < blo else None
    if cls is EQ:
        return False if ahi < blo or alo > bhi else None
    return True if ahi < blo or alo > bhi else None


def _split_sides(p: Poly):
    """P as (lhs, rhs) with lhs - rhs == P: positive terms left, negative terms and the
    constant right (the constant stays left only when it would be alone on the right)."""
    pos = {m: c for m, c in p.terms.items() if c > 0}
    neg = {m: -c for m, c in p.terms.items() if c < 0}
    dtype = p.dtype
    if not pos:
        return to_expr(Poly({}, p.const, dtype)), to_expr(Poly(neg, 0, dtype))
    return to_expr(Poly(pos, 0, dtype)), to_expr(Poly(neg, -p.const, dtype))


def lt_zero(self, p: Poly):
    """Simplified `P < 0`."""
    p = self.normalize(p)
    if not p.terms:
        return _bool(p.const < 0)
    if self.prove_le0(_plus(p, 1)):
        return TRUE
    if self.prove_le0(scale(p, -1)):
        return FALSE
    g = gcd_of_coefficients(p)
    if g > 1:
        # g*Q + c < 0  <=>  Q <= floor((-1 - c) / g)
        p = Poly({m: c // g for m, c in p.terms.items()}, -((-1 - p.const) // g) - 1, p.dtype)
    lhs, rhs = _split_sides(p)
    return LT(lhs, rhs)


def eq_zero(self, p: Poly):
    """Simplified `P == 0`."""
    p = self.normalize(p)
    if not p.terms:
        return _bool(p.const == 0)
    lo, hi = self.poly_bound(p)
    if lo > 0 or hi < 0:
        return FALSE
    if lo == hi == 0:
        return TRUE
    g = gcd_of_coefficients(p)
    if p.const % g:
        return FALSE
    if g > 1:
        p = Poly({m: c // g for m, c in p.terms.items()}, p.const // g, p.dtype)
    from .poly import sorted_terms
    if sorted_terms(p)[0][1] < 0:
        p = scale(p, -1)
    if self.prove_le0(_plus(p, 1)) or self.prove_le0(_plus(scale(p, -1), 1)):
        return FALSE
    lhs, rhs = _split_sides(p)
    return EQ(lhs, rhs)


def _lt_poly(x):
    """P of a canonical `lhs < rhs` on signed integers (P < 0), else None."""
    if isinstance(x, LT) and is_index_type(x.a.dtype) and not dt.is_uint(x.a.dtype):
        return poly_sub(poly_of(x.a), poly_of(x.b))
    return None


def _complementary(x, y) -> bool:
    if isinstance(x, Not) and x.a is y or isinstance(y, Not) and y.a is x:
        return True
    if isinstance(x, (EQ, NE)) and isinstance(y, (EQ, NE)) and type(x) is not type(y):
        return x.a is y.a and x.b is y.b
    return False


def and_or(self, e):
    is_and = isinstance(e, And)
    cls = And if is_and else Or
    absorbing = FALSE if is_and else TRUE
    parts: list = []

    def collect(x):
        if type(x) is cls:
            collect(x.a)
            collect(x.b)
        elif not any(x is y for y in parts):
            parts.append(x)

    for operand in (e.a, e.b):
        x = self.simplify(operand)
        if isinstance(x, IntImm):
            if bool(x.value) != is_and:
                return absorbing
            continue
        collect(x)
    if not parts:
        return TRUE if is_and else FALSE
    for i, x in enumerate(parts):
        for y in parts[i + 1:]:
            if _complementary(x, y):
                return absorbing
    parts = _combine_ranges(parts, is_and)
    if parts is None:
        return absorbing
    result = parts[0]
    for x in parts[1:]:
        result = cls(result, x)
    return result


def _combine_ranges(parts: list, is_and: bool):
    """Pairs of `P1 < 0`, `P2 < 0` over the same terms: keep the stronger (and) / weaker (or)
    one; opposite ones may be contradictory (and) or cover everything (or): None."""
    polys = [_lt_poly(x) for x in parts]
    if sum(p is not None for p in polys) < 2:
        return parts
    dropped = set()
    for i, p1 in enumerate(polys):
        if p1 is None or i in dropped:
            continue
        for j in range(i + 1, len(polys)):
            p2 = polys[j]
            if p2 is None or j in dropped:
                continue
            d = poly_sub(p1, p2)
            if not d.terms:
                # P1 = P2 + d: with d >= 0, P1 < 0 implies P2 < 0.
                stronger_first = d.const >= 0
                dropped.add(j if stronger_first == is_and else i)
                if i in dropped:
                    break
                continue
            s = poly_add(p1, p2)
            if not s.terms:
                if is_and and s.const > -2:
                    return None     # P1 < 0 and P2 < 0 need P1 + P2 <= -2
                if not is_and and s.const < 0:
                    return None     # P1 >= 0 and P2 >= 0 would need P1 + P2 >= 0
    return [x for k, x in enumerate(parts) if k not in dropped]


def not_(self, e):
    a = self.simplify(e.a)
    if isinstance(a, IntImm):
        return _bool(not a.value)
    if isinstance(a, Not):
        return a.a
    p = _lt_poly(a)
    if p is not None:
        return lt_zero(self, _plus(scale(p, -1), -1))       # !(P < 0)  <=>  -P - 1 < 0
    if isinstance(a, (EQ, NE)):
        return _NEGATE[type(a)](a.a, a.b)
    if isinstance(a, CmpOp) and not dt.is_float(a.a.dtype):
        return self.simplify(_NEGATE[type(a)](a.a, a.b))
    if isinstance(a, (And, Or)) and isinstance(a.a, CmpOp) and isinstance(a.b, CmpOp) \
            and not dt.is_float(a.a.a.dtype) and not dt.is_float(a.b.a.dtype):
        other = Or if isinstance(a, And) else And
        return self.simplify(other(Not(a.a), Not(a.b)))
    return Not(a)
