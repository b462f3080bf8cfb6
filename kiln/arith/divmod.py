"""Rules for integer division, remainder, min and max (called by the Rewriter).

Division and remainder by a positive constant c work on the canonical sum x of the numerator:
  - terms whose coefficient c divides leave the division:  (q*c + r) // c == q + r // c
  - a bound of the numerator inside one block [k*c, k*c + c) decides it
  - a common factor g of c:  (g*y + r) // c == (y + k) // (c/g)  when r lies in [k*g, k*g + g)
  - nested: (x // a) // b == x // (a*b);  (x % (k*c)) % c == x % c
Truncating Div/Mod become the floor versions when the numerator is provably non-negative.
"""
from __future__ import annotations

from math import gcd

from ..tir import op as _op
from ..tir.expr import Div, FloorDiv, FloorMod, IntImm, Max, Min, Mod, PrimExpr
from .bound import INF
from .order import order_key
from .poly import Poly, add as poly_add, poly_of, scale, sub as poly_sub, to_expr


def _imm(value: int, dtype: str) -> IntImm:
    return IntImm(dtype, _op._wrap_int(value, dtype))


def _one_block(lo, hi, c: int) -> bool:
    return lo != -INF and hi != INF and lo // c == hi // c


def _candidates(x: Poly, c: int) -> list[int]:
    """Common factors g (1 < g < c) of c and some coefficient, largest first."""
    found = {gcd(abs(coef), c) for coef in x.terms.values()}
    return sorted((g for g in found if 1 < g < c), reverse=True)


def _split_by(x: Poly, g: int) -> tuple[Poly, Poly]:
    """x == g*multiple + rest, where multiple holds the terms whose coefficient g divides."""
    multiple, rest = {}, {}
    for mono, coef in x.terms.items():
        if coef % g == 0:
            multiple[mono] = coef // g
        else:
            rest[mono] = coef
    return Poly(multiple, 0, x.dtype), Poly(rest, x.const, x.dtype)


def floordiv(rw, x: Poly, c: int) -> PrimExpr:
    """Simplified floordiv(x, c) for a canonical sum x and a constant c > 0."""
    dtype = x.dtype
    if not x.terms:
        return _imm(x.const // c, dtype)
    lo, hi = rw.poly_bound(x)
    if _one_block(lo, hi, c):
        return _imm(lo // c, dtype)
    quotient, rest = {}, {}
    for mono, coef in x.terms.items():
        if coef % c == 0:
            quotient[mono] = coef // c
        else:
            rest[mono] = coef
    q_const, r_const = divmod(x.const, c)
    if quotient or q_const:
        inner = floordiv(rw, Poly(rest, r_const, dtype), c)
        return rw.build(poly_add(Poly(quotient, q_const, dtype), poly_of(inner)))
    for g in _candidates(x, c):
        multiple, remainder = _split_by(x, g)
        lo, hi = rw.poly_bound(remainder)
        if _one_block(lo, hi, g):
            return floordiv(rw, poly_add(multiple, Poly({}, lo // g, dtype)), c // g)
    if len(x.terms) == 1 and x.const == 0:
        (mono, coef), = x.terms.items()
        inner = mono[0]
        if coef == 1 and len(mono) == 1 and isinstance(inner, FloorDiv) \
                and isinstance(inner.b, IntImm) and inner.b.value > 0:
            return floordiv(rw, poly_of(inner.a), inner.b.value * c)
    return FloorDiv(to_expr(x), IntImm(dtype, c))


def floormod(rw, x: Poly, c: int) -> PrimExpr:
    """Simplified floormod(x, c) for a canonical sum x and a constant c > 0."""
    dtype = x.dtype
    if not x.terms:
        return _imm(x.const % c, dtype)
    lo, hi = rw.poly_bound(x)
    if _one_block(lo, hi, c):
        return rw.build(poly_add(x, Poly({}, -(lo // c) * c, dtype)))
    reduced = Poly({}, x.const % c, dtype)
    changed = reduced.const != x.const
    for mono, coef in x.terms.items():
        inner = mono[0]
        if len(mono) == 1 and isinstance(inner, FloorMod) and isinstance(inner.b, IntImm) \
                and inner.b.value > 0 and inner.b.value % c == 0:
            reduced = poly_add(reduced, poly_of(inner.a), coef)    # x % (k*c) == x (mod c)
            changed = True
            continue
        k = coef % c
        if k != coef:
            changed = True
        if k:
            reduced = poly_add(reduced, Poly({mono: k}, 0, dtype))
    if changed:
        return floormod(rw, rw.normalize(reduced), c)
    for g in _candidates(x, c):
        multiple, remainder = _split_by(x, g)
        lo, hi = rw.poly_bound(remainder)
        if _one_block(lo, hi, g):
            k = lo // g
            inner = floormod(rw, poly_add(multiple, Poly({}, k, dtype)), c // g)
            return rw.build(poly_add(scale(poly_of(inner), g),
                                     poly_add(remainder, Poly({}, -k * g, dtype))))
    return FloorMod(to_expr(x), IntImm(dtype, c))


_FOLD = {FloorDiv: _op.floordiv, FloorMod: _op.floormod, Div: _op.div, Mod: _op.truncmod}


def fold(cls, a, b):
    """Constant division or remainder (b non-zero), as the IR defines it for the dtype."""
    return _FOLD[cls](a, b)
_AS_FLOOR = {Div: FloorDiv, Mod: FloorMod, FloorDiv: FloorDiv, FloorMod: FloorMod}


def div_rule(rw, cls, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """cls is FloorDiv, FloorMod, Div or Mod; a and b are simplified integer scalars."""
    dtype = a.dtype
    if isinstance(b, IntImm):
        c = b.value
        if c == 0:
            return cls(a, b)
        if isinstance(a, IntImm):
            return _FOLD[cls](a, b)
        if cls is Div or cls is Mod:
            if c > 0 and rw.bound(a)[0] >= 0:
                cls = _AS_FLOOR[cls]
            elif c == 1:
                return a if cls is Div else _imm(0, dtype)
            else:
                return cls(a, b)
        if cls is FloorDiv and c > 0 and isinstance(a, (Min, Max)):
            # Floor division by c > 0 is monotone, so it distributes over min and max: the
            # tile of a clamped index (min(4*t + 3, 13) // 4 == min(t, 3)) folds to its bound.
            return rw.simplify(type(a)(FloorDiv(a.a, b), FloorDiv(a.b, b)))
        pa = poly_of(a)
        if cls is FloorDiv:
            return floordiv(rw, pa, c) if c > 0 else floordiv(rw, scale(pa, -1), -c)
        if c > 0:
            return floormod(rw, pa, c)
        return rw.build(scale(poly_of(floormod(rw, scale(pa, -1), -c)), -1))
    return _symbolic_div(rw, cls, a, b)


def _symbolic_div(rw, cls, a, b):
    """(q*b + r) // b == q + r // b for a positive divisor b that is a single atom."""
    pb = poly_of(b)
    if pb.const or len(pb.terms) != 1:
        return cls(a, b)
    (bmono, bcoef), = pb.terms.items()
    if bcoef != 1 or len(bmono) != 1 or rw.bound(b)[0] < 1:
        return cls(a, b)
    if (cls is Div or cls is Mod) and rw.bound(a)[0] < 0:
        return cls(a, b)
    atom = bmono[0]
    pa = poly_of(a)
    quotient, rest = {}, {}
    for mono, coef in pa.terms.items():
        if atom in mono:
            k = mono.index(atom)
            quotient[mono[:k] + mono[k + 1:]] = coef
        else:
            rest[mono] = coef
    if not quotient:
        return cls(a, b)
    dtype = a.dtype
    q = Poly({m: c for m, c in quotient.items() if m}, quotient.get((), 0), dtype)
    r = Poly(rest, pa.const, dtype)
    r_in_range = rw.prove_le0(scale(r, -1)) and \
        rw.prove_le0(poly_add(poly_sub(r, pb), Poly({}, 1, dtype)))
    is_div = cls is Div or cls is FloorDiv
    if r_in_range:
        return rw.build(q) if is_div else rw.build(r)
    if cls is Div or cls is Mod:
        return cls(a, b)
    if is_div:
        return rw.build(poly_add(q, poly_of(FloorDiv(rw.build(r), b))))
    return FloorMod(rw.build(r), b)


# --------------------------------------------------------------------------- min / max
def minmax(rw, cls, a: PrimExpr, b: PrimExpr) -> PrimExpr:
    """Simplified Min/Max of simplified integer scalars."""
    dtype = a.dtype
    operands: list = []

    def collect(x):
        if type(x) is cls:
            collect(x.a)
            collect(x.b)
        elif not any(x is y for y in operands):
            operands.append(x)

    collect(a)
    collect(b)
    consts = [x.value for x in operands if isinstance(x, IntImm)]
    keep = [x for x in operands if not isinstance(x, IntImm)]
    if consts:
        keep.append(_imm(min(consts) if cls is Min else max(consts), dtype))
    keep = _drop_dominated(rw, cls, keep)
    if len(keep) == 1:
        return keep[0]
    if len(keep) == 2:
        factored = _factor_common(rw, cls, keep[0], keep[1])
        if factored is not None:
            return factored
    keep.sort(key=lambda x: (isinstance(x, IntImm), order_key(x)))
    result = keep[0]
    for x in keep[1:]:
        result = cls(result, x)
    return result


def _drop_dominated(rw, cls, keep: list) -> list:
    other = Max if cls is Min else Min
    i = 0
    while i < len(keep):
        y = keep[i]
        redundant = False
        for x in keep:
            if x is y:
                continue
            if type(y) is other and _has_operand(y, other, x):
                redundant = True      # min(x, max(x, z)) == x
                break
            diff = poly_sub(poly_of(x), poly_of(y)) if cls is Min else \
                poly_sub(poly_of(y), poly_of(x))
            if rw.prove_le0(rw.normalize(diff)):
                redundant = True
                break
        if redundant:
            keep.pop(i)
        else:
            i += 1
    return keep


def _has_operand(node, cls, x) -> bool:
    if type(node) is cls:
        return _has_operand(node.a, cls, x) or _has_operand(node.b, cls, x)
    return node is x


def _factor_common(rw, cls, x, y):
    """min(a + t, b + t) == min(a, b) + t for the terms t the two sides share."""
    px, py = poly_of(x), poly_of(y)
    common = {m: c for m, c in px.terms.items() if py.terms.get(m) == c}
    const = px.const if px.const == py.const else 0
    if not common and not const:
        return None
    shared = Poly(common, const, px.dtype)
    inner = minmax(rw, cls, to_expr(poly_sub(px, shared)), to_expr(poly_sub(py, shared)))
    return rw.build(poly_add(shared, poly_of(inner)))
