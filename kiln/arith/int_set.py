"""Symbolic integer intervals, and the range of an expression when its variables range over sets.

IntervalSet(min, max) is the closed interval [min, max] whose ends are expressions; an end of
None is unbounded on that side. `eval_set` is exact for affine expressions (each variable's end
is picked by the sign of its coefficient) and sound, if coarser, for everything else.
"""
from __future__ import annotations

from ..tir import dtype as dt
from ..tir import op as _op
from ..tir.expr import (Add, Broadcast, BufferLoad, Call, Cast, Div, FloorDiv, FloorMod, IntImm,
                        Let, Max, Min, Mod, Mul, PrimExpr, Ramp, Range, Select, Sub, Var)
from ..tir.node import Node
from ..tir.op import IRError, convert
from .bound import INF
from .poly import Poly, add as poly_add, is_index_type, poly_of, to_expr


class IntervalSet:
    """The closed interval [min_value, max_value]; None ends are unbounded.

    Example:
        >>> from kiln.tir import Var
        >>> n = Var("n")
        >>> IntervalSet(0, n - 1)
        IntervalSet[0, n - 1]
    """

    __slots__ = ("min_value", "max_value")

    def __init__(self, min_value, max_value):
        self.min_value = _end(min_value)
        self.max_value = _end(max_value)

    # TVM-style short names.
    @property
    def min(self):
        return self.min_value

    @property
    def max(self):
        return self.max_value

    @staticmethod
    def everything() -> "IntervalSet":
        """The whole integer line."""
        return IntervalSet(None, None)

    @staticmethod
    def single_point(e) -> "IntervalSet":
        """[e, e]."""
        e = convert(e)
        return IntervalSet(e, e)

    @staticmethod
    def from_range(rng: Range, analyzer=None) -> "IntervalSet":
        """[min, min + extent - 1] of a Range.

        Example:
            >>> from kiln.tir import Range, Var, const
            >>> n = Var("n")
            >>> IntervalSet.from_range(Range(const(0), n))
            IntervalSet[0, n - 1]
        """
        if not isinstance(rng, Range):
            raise IRError(f"IntervalSet.from_range needs a Range, got {rng!r}")
        ana = analyzer or _analyzer()
        return IntervalSet(rng.min, ana.simplify(rng.min + rng.extent - 1))

    def is_everything(self) -> bool:
        return self.min_value is None and self.max_value is None

    def is_single_point(self) -> bool:
        return self.min_value is not None and self.min_value is self.max_value

    def is_bounded(self) -> bool:
        return self.min_value is not None and self.max_value is not None

    def to_range(self, analyzer=None) -> Range:
        """The Range [min, max + 1): extent max - min + 1, simplified.

        Example:
            >>> from kiln.tir import Var
            >>> i = Var("i")
            >>> IntervalSet(i * 4, i * 4 + 3).to_range().extent
            4
        """
        if not self.is_bounded():
            raise IRError(f"cannot make a Range of the unbounded set {self!r}")
        ana = analyzer or _analyzer()
        lo = ana.simplify(self.min_value)
        return Range(lo, ana.simplify(self.max_value - lo + 1))

    def __eq__(self, other):
        return isinstance(other, IntervalSet) and self.min_value is other.min_value \
            and self.max_value is other.max_value

    def __hash__(self):
        return hash((id(self.min_value), id(self.max_value)))

    def __repr__(self):
        lo = "-inf" if self.min_value is None else str(self.min_value)
        hi = "+inf" if self.max_value is None else str(self.max_value)
        return f"IntervalSet[{lo}, {hi}]"


def _end(x):
    if x is None or (isinstance(x, float) and x in (INF, -INF)):
        return None
    return convert(x)


def _analyzer():
    from .analyzer import Analyzer
    return Analyzer()


def _as_set(s, var) -> IntervalSet:
    if isinstance(s, IntervalSet):
        return s
    if isinstance(s, Range):
        return IntervalSet(s.min, s.min + s.extent - 1)
    if isinstance(s, PrimExpr):
        return IntervalSet.single_point(s)
    if isinstance(s, (tuple, list)) and len(s) == 2:
        return IntervalSet(s[0], s[1])
    raise IRError(f"the domain of {getattr(var, 'name', var)} must be an IntervalSet, a Range, "
                  f"an expression or a (lo, hi) pair; got {s!r}")


# ------------------------------------------------------------------------- set algebra
def _add(x, y):
    return None if x is None or y is None else x + y


def _sub(x, y):
    return None if x is None or y is None else x - y


def union(sets, analyzer=None) -> IntervalSet:
    """The smallest interval holding every set.

    Example:
        >>> union([IntervalSet(0, 3), IntervalSet(2, 9)])
        IntervalSet[0, 9]
    """
    sets = list(sets)
    if not sets:
        raise IRError("union needs at least one set")
    ana = analyzer or _analyzer()
    lo, hi = sets[0].min_value, sets[0].max_value
    for s in sets[1:]:
        lo = None if lo is None or s.min_value is None else _op.min_(lo, s.min_value)
        hi = None if hi is None or s.max_value is None else _op.max_(hi, s.max_value)
    return _simplified(ana, lo, hi)


def intersect(a: IntervalSet, b: IntervalSet, analyzer=None) -> IntervalSet:
    """The intersection of two intervals (may be empty: min > max).

    Example:
        >>> intersect(IntervalSet(0, 5), IntervalSet(3, 9))
        IntervalSet[3, 5]
    """
    ana = analyzer or _analyzer()
    lo = a.min_value if b.min_value is None else b.min_value if a.min_value is None \
        else _op.max_(a.min_value, b.min_value)
    hi = a.max_value if b.max_value is None else b.max_value if a.max_value is None \
        else _op.min_(a.max_value, b.max_value)
    return _simplified(ana, lo, hi)


def _simplified(ana, lo, hi) -> IntervalSet:
    return IntervalSet(None if lo is None else ana.simplify(lo),
                       None if hi is None else ana.simplify(hi))


# ------------------------------------------------------------------------- eval_set
def eval_set(expr, dom_map: dict, analyzer=None) -> IntervalSet:
    """The range of expr when each variable in dom_map ranges over its set.

    Variables not in dom_map stay symbolic. Exact for affine expressions; min/max, floordiv /
    floormod by constants, select and if_then_else (union of branches) are handled; anything
    else gets constant bounds, or `everything`.

    Example:
        >>> from kiln.tir import Var
        >>> i, j, n = Var("i"), Var("j"), Var("n")
        >>> eval_set(i * 4 - j + n, {i: IntervalSet(0, 7), j: IntervalSet(0, 3)})
        IntervalSet[n - 3, n + 28]
    """
    ana = analyzer or _analyzer()
    expr = convert(expr)
    dom = {}
    for v, s in dom_map.items():
        if not isinstance(v, Var):
            raise IRError(f"eval_set: dom_map keys must be Vars, got {v!r}")
        dom[v] = _as_set(s, v)
    if not dom:
        e = ana.simplify(expr)
        return IntervalSet(e, e)
    with ana.scope():
        for v, s in dom.items():
            if is_index_type(v.dtype):
                ana.bind(v, s)
        lo, hi = _Evaluator(ana, dom).eval(ana.simplify(expr))
        return _simplified(ana, lo, hi)


class _Evaluator:
    def __init__(self, ana, dom):
        self.ana = ana
        self.dom = {v: (s.min_value, s.max_value) for v, s in dom.items()}
        self.memo: dict = {}
        self.uses_memo: dict = {}

    def uses(self, e) -> bool:
        """Does e mention a variable of the domain?"""
        if isinstance(e, Var):
            return e in self.dom
        hit = self.uses_memo.get(e)
        if hit is None:
            hit = False
            for name in e._fields:
                value = getattr(e, name)
                if isinstance(value, PrimExpr):
                    hit = self.uses(value)
                elif isinstance(value, tuple):
                    hit = any(self.uses(v) for v in value if isinstance(v, PrimExpr))
                if hit:
                    break
            self.uses_memo[e] = hit
        return hit

    def eval(self, e) -> tuple:
        if not isinstance(e, Node) or not self.uses(e):
            return (e, e)
        result = self.memo.get(e)
        if result is None:
            result = self._eval(e)
            self.memo[e] = result
        return result

    def _eval(self, e) -> tuple:
        if isinstance(e, Var):
            return self.dom[e]
        cls = type(e)
        if cls in (Add, Sub, Mul):
            if is_index_type(e.dtype):
                return self._sum(poly_of(e))
            a, b = self.eval(e.a), self.eval(e.b)
            if cls is Add:
                return (_add(a[0], b[0]), _add(a[1], b[1]))
            if cls is Sub:
                return (_sub(a[0], b[1]), _sub(a[1], b[0]))
            return self._mul(a, b)
        if cls in (FloorDiv, Div):
            return self._div(e)
        if cls in (FloorMod, Mod):
            return self._mod(e)
        if cls is Min or cls is Max:
            return self._minmax(cls, self.eval(e.a), self.eval(e.b))
        if cls is Select:
            return self._union(self.eval(e.true_value), self.eval(e.false_value))
        if cls is Call and e.op == "if_then_else":
            return self._union(self.eval(e.args[1]), self.eval(e.args[2]))
        if cls is Cast and dt.is_integral(e.dtype) and dt.is_integral(e.value.dtype) \
                and dt.bits_of(e.dtype) >= dt.bits_of(e.value.dtype):
            lo, hi = self.eval(e.value)
            return (None if lo is None else _op.cast(lo, e.dtype),
                    None if hi is None else _op.cast(hi, e.dtype))
        if cls is Let:
            self.dom[e.var] = self.eval(e.value)
            self.uses_memo.clear()
            return self.eval(e.body)
        if cls is Broadcast:
            return self.eval(e.value)
        if cls is Ramp and isinstance(e.stride, IntImm):
            lo, hi = self.eval(e.base)
            span = e.stride.value * (e.lanes - 1)
            return (lo, _add(hi, span)) if span >= 0 else (_add(lo, span), hi)
        return self._fallback(e)

    def _fallback(self, e) -> tuple:
        """Constant bounds of e over the domain (the analyzer has the domain bound)."""
        if isinstance(e, BufferLoad) or not (is_index_type(e.dtype) or e.dtype == "bool"):
            return (None, None)
        lo, hi = self.ana._rw.bound(e)
        return (None if lo == -INF else IntImm(e.dtype, lo),
                None if hi == INF else IntImm(e.dtype, hi))

    def _sum(self, p: Poly) -> tuple:
        """Affine parts exactly (ends chosen by the sign of each coefficient), the rest by
        interval arithmetic."""
        base = {m: c for m, c in p.terms.items() if not any(self.uses(a) for a in m)}
        lo = hi = Poly(base, p.const, p.dtype)
        linear: dict = {}
        others = []
        for mono, coef in p.terms.items():
            if mono in base:
                continue
            users = [a for a in mono if self.uses(a)]
            if len(users) == 1 and isinstance(users[0], Var):
                v = users[0]
                k = mono.index(v)
                rest = mono[:k] + mono[k + 1:]
                term = Poly({rest: coef}, 0, p.dtype) if rest else Poly({}, coef, p.dtype)
                linear[v] = poly_add(linear[v], term) if v in linear else term
            else:
                others.append((mono, coef))
        for v, coef_poly in linear.items():
            vlo, vhi = self.dom[v]
            if not coef_poly.terms:
                c = coef_poly.const
                if c == 0:
                    continue
                first, second = (vlo, vhi) if c > 0 else (vhi, vlo)
                lo = None if lo is None or first is None else poly_add(lo, poly_of(first), c)
                hi = None if hi is None or second is None else poly_add(hi, poly_of(second), c)
                continue
            coef_expr = to_expr(coef_poly)
            clo, chi = self.ana._rw.bound(coef_expr)
            if clo >= 0:
                first, second = vlo, vhi
            elif chi <= 0:
                first, second = vhi, vlo
            else:
                first = second = None
                if vlo is not None and vhi is not None:
                    a, b = coef_expr * vlo, coef_expr * vhi
                    lo = None if lo is None else poly_add(lo, poly_of(_op.min_(a, b)))
                    hi = None if hi is None else poly_add(hi, poly_of(_op.max_(a, b)))
                    continue
                lo = hi = None
                continue
            lo = None if lo is None or first is None else poly_add(lo, poly_of(coef_expr * first))
            hi = None if hi is None or second is None else poly_add(hi, poly_of(coef_expr * second))
        lo_e = None if lo is None else to_expr(lo)
        hi_e = None if hi is None else to_expr(hi)
        for mono, coef in others:
            acc = (IntImm(p.dtype, coef), IntImm(p.dtype, coef))
            for atom in mono:
                acc = self._mul(acc, self.eval(atom))
            lo_e, hi_e = _add(lo_e, acc[0]), _add(hi_e, acc[1])
        return (lo_e, hi_e)

    def _sign(self, e) -> int:
        lo, hi = self.ana._rw.bound(e)
        return 1 if lo >= 0 else -1 if hi <= 0 else 0

    def _mul(self, a, b) -> tuple:
        if a[0] is not None and a[0] is a[1] and not self.uses(a[0]):
            a, b = b, a
        if b[0] is not None and b[0] is b[1]:
            k = b[0]
            sign = self._sign(k)
            if sign > 0:
                return (None if a[0] is None else a[0] * k, None if a[1] is None else a[1] * k)
            if sign < 0:
                return (None if a[1] is None else a[1] * k, None if a[0] is None else a[0] * k)
            if a[0] is not None and a[1] is not None:
                x, y = a[0] * k, a[1] * k
                return (_op.min_(x, y), _op.max_(x, y))
            return (None, None)
        if all(isinstance(x, IntImm) for x in (*a, *b)):
            corners = [x.value * y.value for x in a for y in b]
            return (IntImm(a[0].dtype, min(corners)), IntImm(a[0].dtype, max(corners)))
        return (None, None)

    def _div(self, e) -> tuple:
        if self.uses(e.b):
            return self._fallback(e)
        lo, hi = self.eval(e.a)
        sign = self._sign(e.b)
        if isinstance(e, Div) and not (lo is not None and self.ana._rw.bound(lo)[0] >= 0):
            if not (isinstance(e.b, IntImm) and e.b.value > 0):
                return self._fallback(e)
        cls = type(e)
        if sign > 0 and self.ana._rw.bound(e.b)[0] > 0:
            return (None if lo is None else cls(lo, e.b), None if hi is None else cls(hi, e.b))
        if sign < 0 and self.ana._rw.bound(e.b)[1] < 0:
            return (None if hi is None else cls(hi, e.b), None if lo is None else cls(lo, e.b))
        return self._fallback(e)

    def _mod(self, e) -> tuple:
        if self.uses(e.b) or self.ana._rw.bound(e.b)[0] < 1:
            return self._fallback(e)
        lo, hi = self.eval(e.a)
        if lo is None or hi is None:
            return self._fallback(e)
        rw = self.ana._rw
        if rw.bound(lo)[0] < 0 and isinstance(e, Mod):
            return self._fallback(e)
        if lo is hi:
            return (type(e)(lo, e.b), type(e)(hi, e.b))
        b = e.b
        if self.ana.can_prove(lo >= 0) and self.ana.can_prove(hi < b):
            return (lo, hi)
        same_block = rw.simplify(FloorDiv(hi, b) - FloorDiv(lo, b)) if is_index_type(lo.dtype) \
            else None
        if isinstance(same_block, IntImm) and same_block.value == 0:
            return (FloorMod(lo, b), FloorMod(hi, b))
        return (IntImm(e.dtype, 0), b - 1)

    @staticmethod
    def _minmax(cls, a, b) -> tuple:
        fn = _op.min_ if cls is Min else _op.max_
        if cls is Min:
            lo = None if a[0] is None or b[0] is None else fn(a[0], b[0])
            hi = b[1] if a[1] is None else a[1] if b[1] is None else fn(a[1], b[1])
        else:
            lo = b[0] if a[0] is None else a[0] if b[0] is None else fn(a[0], b[0])
            hi = None if a[1] is None or b[1] is None else fn(a[1], b[1])
        return (lo, hi)

    @staticmethod
    def _union(a, b) -> tuple:
        lo = None if a[0] is None or b[0] is None else _op.min_(a[0], b[0])
        hi = None if a[1] is None or b[1] is None else _op.max_(a[1], b[1])
        return (lo, hi)


__all__ = ["IntervalSet", "eval_set", "union", "intersect"]
