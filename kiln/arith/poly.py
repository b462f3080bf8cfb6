"""Canonical sums: an integer expression as  sum(coefficient * monomial) + constant.

A monomial is a sorted tuple of *atoms*: variables or opaque subterms (floordiv, min, loads...).
`poly_of` reads any Add/Sub/Mul tree into this form (collecting like terms), and `to_expr`
writes one back in a fixed order, so two equal sums always become the identical node.
Coefficients are Python ints; arithmetic is on mathematical integers (no overflow), and the
constants are wrapped to the dtype only when an expression is built.
"""
from __future__ import annotations

from ..tir import dtype as dt
from ..tir.expr import Add, FloorDiv, FloorMod, IntImm, Mul, PrimExpr, Sub
from ..tir.op import _wrap_int
from .order import order_key

# Distributing a product of two sums is refused beyond this many terms (the product stays opaque).
MAX_PRODUCT_TERMS = 64


class Poly:
    """sum(terms[m] * m) + const over monomials m (tuples of atoms), all of one integer dtype.

    Example:
        >>> from kiln.tir import Var
        >>> i = Var("i")
        >>> to_expr(poly_of(i * 4 + 2 + i))
        i*5 + 2
    """

    __slots__ = ("terms", "const", "dtype")

    def __init__(self, terms: dict, const: int, dtype: str):
        self.terms = terms
        self.const = const
        self.dtype = dtype

    def is_const(self) -> bool:
        return not self.terms

    def key(self) -> tuple:
        return (frozenset(self.terms.items()), self.const, self.dtype)

    def __repr__(self):
        return f"Poly({to_expr(self)})"


def is_index_type(dtype: str) -> bool:
    """Scalar integer dtypes, the ones canonical sums are made of."""
    base, lanes = dt.parse(dtype)
    return lanes == 1 and (base.startswith("int") or base.startswith("uint"))


def is_signed_index(dtype: str) -> bool:
    """Signed integer scalars: the types whose arithmetic kiln assumes never wraps around, so
    that bounds may decide comparisons, min/max and divisions (unsigned values do wrap)."""
    base, lanes = dt.parse(dtype)
    return lanes == 1 and base.startswith("int")


def const_poly(value: int, dtype: str) -> Poly:
    return Poly({}, value, dtype)


def atom_poly(atom: PrimExpr, coef: int = 1) -> Poly:
    return Poly({(atom,): coef}, 0, atom.dtype)


def add(p: Poly, q: Poly, k: int = 1) -> Poly:
    """p + k*q."""
    terms = dict(p.terms)
    for mono, coef in q.terms.items():
        value = terms.get(mono, 0) + k * coef
        if value:
            terms[mono] = value
        else:
            terms.pop(mono, None)
    return Poly(terms, p.const + k * q.const, p.dtype)


def sub(p: Poly, q: Poly) -> Poly:
    return add(p, q, -1)


def scale(p: Poly, k: int) -> Poly:
    if k == 0:
        return Poly({}, 0, p.dtype)
    return Poly({m: c * k for m, c in p.terms.items()}, p.const * k, p.dtype)


def _mono_mul(m1: tuple, m2: tuple) -> tuple:
    return tuple(sorted(m1 + m2, key=order_key))


def mul(p: Poly, q: Poly) -> Poly | None:
    """p*q, distributed; None when the product would be too large (keep it opaque)."""
    if not p.terms:
        return scale(q, p.const)
    if not q.terms:
        return scale(p, q.const)
    if (len(p.terms) + 1) * (len(q.terms) + 1) > MAX_PRODUCT_TERMS:
        return None
    out = Poly({}, p.const * q.const, p.dtype)
    terms = out.terms
    for m1, c1 in p.terms.items():
        if q.const:
            terms[m1] = terms.get(m1, 0) + c1 * q.const
    for m2, c2 in q.terms.items():
        if p.const:
            terms[m2] = terms.get(m2, 0) + c2 * p.const
    for m1, c1 in p.terms.items():
        for m2, c2 in q.terms.items():
            m = _mono_mul(m1, m2)
            terms[m] = terms.get(m, 0) + c1 * c2
    out.terms = {m: c for m, c in terms.items() if c}
    return out


_POLY_CACHE: dict = {}
_CACHE_LIMIT = 50_000


def poly_of(expr: PrimExpr) -> Poly:
    """Read an integer scalar expression as a canonical sum (Add/Sub/Mul are opened up).

    The result is shared: treat it as read-only.
    """
    if isinstance(expr, IntImm):
        return Poly({}, expr.value, expr.dtype)
    cls = type(expr)
    if cls is not Add and cls is not Sub and cls is not Mul:
        return Poly({(expr,): 1}, 0, expr.dtype)
    cached = _POLY_CACHE.get(expr)
    if cached is not None:
        return cached
    a, b = poly_of(expr.a), poly_of(expr.b)
    if cls is Add:
        result = add(a, b)
    elif cls is Sub:
        result = sub(a, b)
    else:
        result = mul(a, b)
        if result is None:
            return Poly({(expr,): 1}, 0, expr.dtype)   # not cached: it holds expr itself
    if len(_POLY_CACHE) > _CACHE_LIMIT:
        _POLY_CACHE.clear()
    _POLY_CACHE[expr] = result
    return result


def _mono_key(item):
    mono, coef = item
    return (-coef, -len(mono), tuple(order_key(a) for a in mono))


def sorted_terms(p: Poly) -> list:
    """Terms in canonical order: larger coefficients first, then higher degree, then by atoms."""
    return sorted(p.terms.items(), key=_mono_key)


def _imm(value: int, dtype: str) -> IntImm:
    return IntImm(dtype, _wrap_int(value, dtype))


def mono_expr(mono: tuple) -> PrimExpr:
    expr = mono[0]
    for atom in mono[1:]:
        expr = Mul(expr, atom)
    return expr


def to_expr(p: Poly) -> PrimExpr:
    """Write a canonical sum back as an expression: `i*4 + j - k*2 + 3`.

    Example:
        >>> from kiln.tir import Var
        >>> i, j = Var("i"), Var("j")
        >>> to_expr(poly_of(j - 1 + i * 4))
        i*4 + j - 1
    """
    dtype = p.dtype
    items = sorted_terms(p)
    if not items:
        return _imm(p.const, dtype)
    expr = None
    for mono, coef in items:
        m = mono_expr(mono)
        if expr is None:
            if coef > 0:
                expr = m if coef == 1 else Mul(m, _imm(coef, dtype))
            elif p.const > 0:
                # Every term is negative: lead with the constant, `5 - x` rather than `x*-1 + 5`.
                base = _imm(p.const, dtype)
                expr = Sub(base, m if coef == -1 else Mul(m, _imm(-coef, dtype)))
                p = Poly(p.terms, 0, dtype)
            elif dt.is_uint(dtype):
                expr = Sub(_imm(0, dtype), m if coef == -1 else Mul(m, _imm(-coef, dtype)))
            else:
                expr = Mul(m, _imm(coef, dtype))
            continue
        if coef > 0:
            expr = Add(expr, m if coef == 1 else Mul(m, _imm(coef, dtype)))
        else:
            expr = Sub(expr, m if coef == -1 else Mul(m, _imm(-coef, dtype)))
    if p.const > 0:
        expr = Add(expr, _imm(p.const, dtype))
    elif p.const < 0:
        expr = Sub(expr, _imm(-p.const, dtype))
    return expr


_COST_CACHE: dict = {}


def atom_cost(atom: PrimExpr) -> int:
    """Size of an atom for deciding whether a rewrite made a sum simpler."""
    if isinstance(atom, (FloorDiv, FloorMod)):
        cost = _COST_CACHE.get(atom)
        if cost is None:
            cost = 1 + poly_cost(poly_of(atom.a)) if is_index_type(atom.a.dtype) else 2
            if len(_COST_CACHE) > _CACHE_LIMIT:
                _COST_CACHE.clear()
            _COST_CACHE[atom] = cost
        return cost
    return 1


def poly_cost(p: Poly) -> int:
    return sum(sum(atom_cost(a) for a in mono) for mono in p.terms)


def gcd_of_coefficients(p: Poly) -> int:
    from math import gcd
    g = 0
    for coef in p.terms.values():
        g = gcd(g, coef)
    return abs(g)
