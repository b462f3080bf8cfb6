"""The Analyzer: what is known about variables, and the questions asked about expressions.

It holds a stack of contexts. A context knows constant bounds of variables, symbolic bounds
(`i <= n - 4`), facts assumed true (from `constraint`) and memo tables; `scope()` and
`constraint()` push a child context and pop it on exit, so knowledge never leaks out of the
block that assumed it. Results are memoized per context; a `bind` clears the current memo.
"""
from __future__ import annotations

import math
from contextlib import contextmanager

from ..tir import dtype as dt
from ..tir.expr import (EQ, LT, And, Broadcast, Call, FloorDiv, IntImm, Max, Min, Not, Or,
                        PrimExpr, Range, Var)
from ..tir.op import IRError, convert
from . import bound as B
from .bound import ConstIntBound
from .const_bound import expr_bound, poly_bound
from .poly import Poly, add as poly_add, is_index_type, poly_of, scale, sub as poly_sub, to_expr

# Symbolic bound substitution when proving: rounds of substitution, and how deep proofs nest.
_SUBST_ROUNDS = 4
_MAX_PROOF_DEPTH = 2


class _Context:
    __slots__ = ("bounds", "ranges", "facts", "le0", "memo", "bound_memo", "prove_memo")

    def __init__(self, parent: "_Context | None" = None):
        if parent is None:
            self.bounds, self.ranges, self.facts, self.le0 = {}, {}, set(), []
        else:
            self.bounds = dict(parent.bounds)
            self.ranges = dict(parent.ranges)
            self.facts = set(parent.facts)
            self.le0 = list(parent.le0)
        self.clear_memo()

    def clear_memo(self):
        self.memo: dict = {}
        self.bound_memo: dict = {}
        self.prove_memo: dict = {}


class Analyzer:
    """Integer analysis under bindings of variables to ranges and assumed facts.

    Example:
        >>> from kiln.tir import Var, Range, const
        >>> i, j = Var("i"), Var("j")
        >>> ana = Analyzer()
        >>> ana.bind(j, Range(const(0), const(4)))
        >>> ana.simplify((i * 4 + j) // 4)
        i
    """

    def __init__(self):
        from .rewrite import Rewriter
        self._ctx = _Context()
        self._stack: list[_Context] = []
        self._rw = Rewriter(self)
        self._proof_depth = 0

    # ------------------------------------------------------------------ knowledge
    def bind(self, var: Var, rng, allow_override: bool = True) -> None:
        """Declare the values var takes: a Range (min, extent), a (lo, hi_inclusive) pair of
        ints or expressions (math.inf allowed), an IntervalSet, or one expression (var == it).

        Example:
            >>> from kiln.tir import Var
            >>> ana, i = Analyzer(), Var("i")
            >>> ana.bind(i, (0, 9))
            >>> ana.const_int_bound(i * 2)
            ConstIntBound[0, 18]
        """
        if not isinstance(var, Var):
            raise IRError(f"Analyzer.bind needs a Var, got {var!r}")
        if not allow_override and var in self._ctx.bounds:
            raise IRError(f"variable {var.name} is already bound in this analyzer")
        lo, hi = self._bounds_of_binding(var, rng)
        ctx = self._ctx
        const_lo = self._const_end(lo, 0)
        const_hi = self._const_end(hi, 1)
        ctx.bounds[var] = (const_lo, const_hi)
        sym_lo = () if lo is None or isinstance(lo, IntImm) else _alternatives(lo, Max)
        sym_hi = () if hi is None or isinstance(hi, IntImm) else _alternatives(hi, Min)
        if sym_lo or sym_hi:
            ctx.ranges[var] = (sym_lo, sym_hi)
        else:
            ctx.ranges.pop(var, None)
        ctx.clear_memo()

    def _bounds_of_binding(self, var, rng):
        from .int_set import IntervalSet
        if isinstance(rng, Range):
            lo = self.simplify(convert(rng.min, var.dtype))
            extent = self.simplify(convert(rng.extent, var.dtype))
            # A bound variable has a value, so its range is not empty: max(e, 0) is e here.
            if isinstance(extent, Max) and isinstance(extent.b, IntImm) and extent.b.value <= 0:
                extent = extent.a
            hi = self.simplify(lo + extent - 1)
            return lo, hi
        if isinstance(rng, IntervalSet):
            return (None if rng.min_value is None else self.simplify(rng.min_value),
                    None if rng.max_value is None else self.simplify(rng.max_value))
        if isinstance(rng, PrimExpr):
            e = self.simplify(rng)
            return e, e
        if isinstance(rng, (tuple, list)) and len(rng) == 2:
            ends = []
            for end in rng:
                if end is None or (isinstance(end, float) and math.isinf(end)):
                    ends.append(None)
                else:
                    ends.append(self.simplify(convert(end, var.dtype)))
            return ends[0], ends[1]
        raise IRError(f"cannot bind {var.name} to {rng!r}: expected a Range, an IntervalSet, "
                      f"an expression or a (lo, hi) pair")

    def _const_end(self, e, side: int):
        if e is None:
            return -B.INF if side == 0 else B.INF
        return expr_bound(self, e)[side]

    @contextmanager
    def scope(self):
        """A block whose bindings and constraints are forgotten on exit.

        Example:
            >>> from kiln.tir import Var
            >>> ana, i = Analyzer(), Var("i")
            >>> with ana.scope():
            ...     ana.bind(i, (0, 3))
            ...     ana.can_prove(i < 4)
            True
        """
        self._stack.append(self._ctx)
        self._ctx = _Context(self._ctx)
        try:
            yield self
        finally:
            self._ctx = self._stack.pop()

    @contextmanager
    def constraint(self, cond):
        """Assume cond (a boolean expression) inside the block. A vector condition is
        assumed only when it is a broadcast of one scalar condition.

        Example:
            >>> from kiln.tir import Var
            >>> ana, i, n = Analyzer(), Var("i"), Var("n")
            >>> with ana.constraint(i < n - 3):
            ...     ana.can_prove(i + 3 < n)
            True
        """
        cond = convert(cond)
        if not dt.is_bool(cond.dtype):
            raise IRError(f"Analyzer.constraint needs a boolean condition, got `{cond}` "
                          f"of type {cond.dtype}")
        cond = self.simplify(_strip_likely(cond))
        if isinstance(cond, Broadcast):
            cond = cond.value
        with self.scope():
            if dt.lanes_of(cond.dtype) == 1:    # a vector condition says nothing about all lanes
                self._assume(cond)
                self._ctx.clear_memo()
            yield self

    def _assume(self, cond):
        if isinstance(cond, IntImm):
            return
        if isinstance(cond, And):
            self._assume(cond.a)
            self._assume(cond.b)
            return
        cond = _strip_likely(cond)
        self._ctx.facts.add(cond)
        if isinstance(cond, (LT, EQ)) and is_index_type(cond.a.dtype) and not dt.is_uint(cond.a.dtype):
            p = poly_sub(poly_of(cond.a), poly_of(cond.b))
            if isinstance(cond, LT):
                self._learn_le0(poly_add(p, Poly({}, 1, p.dtype)))
            else:
                self._learn_le0(p)
                self._learn_le0(scale(p, -1))

    def _learn_le0(self, p: Poly):
        """Record p <= 0, and the bounds it puts on each variable that appears alone in it."""
        if not p.terms:
            return
        ctx = self._ctx
        ctx.le0.append(p)
        for mono, coef in list(p.terms.items()):
            if len(mono) != 1 or not isinstance(mono[0], Var):
                continue
            v = mono[0]
            rest = Poly(dict(p.terms), p.const, p.dtype)
            del rest.terms[mono]
            if any(_mentions(m, v) for m in rest.terms):
                continue
            r_lo, r_hi = poly_bound(self, rest)
            lo, hi = ctx.bounds.get(v, expr_bound(self, v))
            syms_lo, syms_hi = ctx.ranges.get(v, ((), ()))
            k = abs(coef)
            if coef > 0:    # k*v <= -rest
                if r_lo != -B.INF:
                    hi = min(hi, (-r_lo) // k)
                if rest.terms:
                    neg = scale(rest, -1)
                    e = to_expr(neg) if k == 1 else self.simplify(FloorDiv(to_expr(neg), IntImm(p.dtype, k)))
                    syms_hi = (e,) + syms_hi
            else:           # k*v >= rest
                if r_lo != -B.INF:
                    lo = max(lo, -((-r_lo) // k))
                if rest.terms:
                    e = to_expr(rest) if k == 1 else self.simplify(
                        -FloorDiv(to_expr(scale(rest, -1)), IntImm(p.dtype, k)))
                    syms_lo = (e,) + syms_lo
            ctx.bounds[v] = (lo, hi)
            if syms_lo or syms_hi:
                ctx.ranges[v] = (syms_lo, syms_hi)
            ctx.bound_memo.clear()

    # ------------------------------------------------------------------ questions
    def simplify(self, expr) -> PrimExpr:
        """A canonical, folded form of expr under what is known.

        Example:
            >>> from kiln.tir import Var
            >>> x = Var("x")
            >>> Analyzer().simplify((x // 8) * 8 + x % 8)
            x
        """
        return self._rw.simplify(convert(expr))

    def const_int_bound(self, expr) -> ConstIntBound:
        """Constant bounds of an integer expression (math.inf when unbounded).

        Example:
            >>> from kiln.tir import Var
            >>> ana, i = Analyzer(), Var("i")
            >>> ana.bind(i, (0, 7))
            >>> ana.const_int_bound(i % 4 + 1)
            ConstIntBound[1, 4]
        """
        return B.to_bound(expr_bound(self, convert(expr)))

    def can_prove(self, cond) -> bool:
        """True only if cond is provably true under the bindings and constraints.

        Example:
            >>> from kiln.tir import Var
            >>> ana, i = Analyzer(), Var("i")
            >>> ana.bind(i, (0, 7))
            >>> ana.can_prove(i < 8), ana.can_prove(i < 7)
            (True, False)
        """
        result = self.simplify(convert(cond))
        return isinstance(result, IntImm) and result.value != 0

    def can_prove_equal(self, a, b) -> bool:
        """True if a and b provably have the same value.

        Example:
            >>> from kiln.tir import Var
            >>> x = Var("x")
            >>> Analyzer().can_prove_equal(x * 2 + x, x * 3)
            True
        """
        a, b = convert(a), convert(b)
        if is_index_type(a.dtype) and is_index_type(b.dtype) and a.dtype == b.dtype:
            diff = self.simplify(a - b)
            return isinstance(diff, IntImm) and diff.value == 0
        return self.simplify(a) is self.simplify(b)

    def int_set(self, expr, dom_map):
        """eval_set(expr, dom_map) with this analyzer."""
        from .int_set import eval_set
        return eval_set(expr, dom_map, self)

    # TVM spellings of the same simplifier.
    def canonical_simplify(self, expr) -> PrimExpr:
        return self.simplify(expr)

    def rewrite_simplify(self, expr) -> PrimExpr:
        return self.simplify(expr)

    # ------------------------------------------------------------------ proofs on sums
    def _prove_le0(self, p: Poly) -> bool:
        """Is p <= 0 for every value of its variables? (False means: not proved.)"""
        if poly_bound(self, p)[1] <= 0:
            return True
        if self._proof_depth >= _MAX_PROOF_DEPTH:
            return False
        memo = self._ctx.prove_memo
        key = p.key()
        hit = memo.get(key)
        if hit is not None:
            return hit
        memo[key] = False       # a proof that needs itself fails
        self._proof_depth += 1
        try:
            result = self._prove_le0_slow(p)
        finally:
            self._proof_depth -= 1
        memo[key] = result
        return result

    def _prove_le0_slow(self, p: Poly) -> bool:
        ctx = self._ctx
        candidates = [p]
        for known in ctx.le0:
            k = _ratio(p, known)
            if k:
                diff = self._rw.normalize(poly_sub(p, scale(known, k)))
                if poly_bound(self, diff)[1] <= 0:
                    return True
                candidates.append(diff)
        if not ctx.ranges:
            return False
        for q in candidates:
            if self._prove_by_substitution(q):
                return True
        return False

    def _prove_by_substitution(self, p: Poly) -> bool:
        """Replace variables by their symbolic upper/lower bounds (by the sign of their
        coefficient) and check the constant bound of what remains."""
        ranges = self._ctx.ranges
        for attempt in range(3):
            q = p
            more_choices = False
            for _ in range(_SUBST_ROUNDS):
                subs = []
                for mono, coef in q.terms.items():
                    if len(mono) != 1 or mono[0] not in ranges:
                        continue
                    v = mono[0]
                    options = ranges[v][1 if coef > 0 else 0]
                    if not options:
                        continue
                    if len(options) > attempt + 1:
                        more_choices = True
                    if any(_mentions(m, v) for m in q.terms if m is not mono):
                        continue
                    subs.append((mono, coef, options[min(attempt, len(options) - 1)]))
                if not subs:
                    break
                replaced = {mono for mono, _, _ in subs}
                new = Poly({m: c for m, c in q.terms.items() if m not in replaced}, q.const, q.dtype)
                for _, coef, end in subs:
                    new = poly_add(new, poly_of(end), coef)
                q = self._rw.normalize(new)
                if poly_bound(self, q)[1] <= 0:
                    return True
            if not more_choices:
                break
        return False


def _alternatives(e, cls) -> tuple:
    """Symbolic bounds to try for e: for an upper bound `r + min(a, b)` also r + a and r + b
    (each is an upper bound too); for a lower bound with max likewise. e itself comes last."""
    if not is_index_type(e.dtype):
        return (e,)
    p = poly_of(e)
    hits = [m for m, c in p.terms.items() if c == 1 and len(m) == 1 and type(m[0]) is cls]
    if len(hits) != 1:
        return (e,)
    operands = []

    def flatten(x):
        if type(x) is cls:
            flatten(x.a)
            flatten(x.b)
        else:
            operands.append(x)

    flatten(hits[0][0])
    rest = Poly(dict(p.terms), p.const, p.dtype)
    del rest.terms[hits[0]]
    options = []
    for x in operands:
        q = poly_add(rest, poly_of(x))
        if q.terms:
            options.append(to_expr(q))
    return tuple(options) + (e,)


def _ratio(p: Poly, known: Poly) -> int:
    """k > 0 such that p - k*known cancels a term of p (0 when there is none)."""
    for mono, coef in known.terms.items():
        c = p.terms.get(mono)
        if c is not None and (c > 0) == (coef > 0) and c % coef == 0:
            return c // coef
    return 0


def _mentions(mono: tuple, v: Var) -> bool:
    from ..tir.functor import uses_var
    for atom in mono:
        if atom is v or (not isinstance(atom, Var) and uses_var(atom, {v})):
            return True
    return False


def _strip_likely(cond):
    """cond without `likely` hints in its boolean structure (they say nothing about values)."""
    while isinstance(cond, Call) and cond.op == "likely":
        cond = cond.args[0]
    if isinstance(cond, (And, Or)):
        a, b = _strip_likely(cond.a), _strip_likely(cond.b)
        return cond if a is cond.a and b is cond.b else type(cond)(a, b)
    if isinstance(cond, Not):
        a = _strip_likely(cond.a)
        return cond if a is cond.a else Not(a)
    return cond

