"""LoopPartition: split a loop so that its main part runs without `likely` guards.

For a loop over v whose body holds `likely(cond)` (in an IfThenElse or an if_then_else) with
cond linear in v, the values of v for which cond holds for every value of the loops inside
form an interval [L, U). The loop becomes up to three loops: [min, L), [L, U), [U, end);
the middle one is simplified knowing v's range, which removes the guard. Pieces that are
provably empty vanish; a loop whose guards cannot be analysed stays as it is.

An unrolled or vectorized loop inside whose extent is min(c, e(v)), a register tile cut at
the edge of its output, counts as the guard c <= e(v): it unrolls only where its extent is
constant. When no value of v meets every guard (a tile both at a padded border and at the cut
edge: 7 columns in tiles of 6), the loop is split on its upper bounds, then the pieces on the
lower ones.

Before:
    for io in range(floordiv(n + 31, 32)):
      for ii in range(32):
        if likely(io*32 + ii < n):
          B[io*32 + ii] = A[io*32 + ii]
After (n a size; the tail loop has min floordiv(n, 32), and at most one iteration):
    for io in range(floordiv(n, 32)):
      for ii in range(32):
        B[io*32 + ii] = A[io*32 + ii]
    for io_1 in range(floordiv(n, 32), floordiv(n + 31, 32)):
      for ii in range(n - io_1*32):
        B[io_1*32 + ii] = A[io_1*32 + ii]
"""
from __future__ import annotations

from ...arith import Analyzer, IntervalSet, detect_linear, eval_set
from ...arith.analyzer import _strip_likely
from ...arith.poly import is_index_type, poly_of, sub as poly_sub, to_expr
from ..expr import LT, And, Call, IntImm, IterVar, Let, Min, PrimExpr, Range, Reduce, Var
from ..function import PrimFunc
from ..functor import post_order_visit, substitute, uses_var
from ..op import IRError, floordiv, max_, min_
from ..stmt import (AttrStmt, For, IfThenElse, LetStmt, SeqStmt, Stmt, is_no_op)
from .simplify import StmtSimplifier, bind_shape_vars

_PARTITIONABLE = ("serial", "parallel")
# Unrolled and vectorized loops are split only into pieces of constant extent.
_CONSTANT_ONLY = ("unrolled", "vectorized")
_MAX_CONDITIONS = 16
_MAX_RESPLITS = 2        # nested one-sided splits of one loop nest


def loop_partition(node, analyzer: Analyzer | None = None):
    """Partition loops on their `likely` guards; a Stmt or PrimFunc in, the same kind out.

    Example:
        >>> from kiln.tir import Buffer, BufferLoad, BufferStore, For, IfThenElse, Var, const, likely
        >>> A = Buffer.make("A", "float32", (10,)); i = Var("i")
        >>> s = For(i, const(0), const(12), "serial",
        ...         IfThenElse(likely(i < 10), BufferStore(A, const(0.0), i)))
        >>> print(loop_partition(s))
        for i in range(10):
          A[i] = 0.0f
    """
    ana = analyzer or Analyzer()
    part = _Partitioner(ana)
    if isinstance(node, PrimFunc):
        with ana.scope():
            bind_shape_vars(ana, node)
            body = part.visit(node.body)
        return node if body is node.body else node.with_body(body)
    if isinstance(node, Stmt):
        return part.visit(node)
    raise IRError(f"loop_partition expects a Stmt or a PrimFunc, got {node!r}")


class _Partitioner:
    def __init__(self, ana: Analyzer):
        self.ana = ana
        self.simplifier = StmtSimplifier(ana)
        self._resplits = 0
        # Loops that a border piece does not split on guards (_other_dimensions).
        self._unsplit: frozenset = frozenset()

    def visit(self, s: Stmt) -> Stmt:
        if isinstance(s, For):
            if self._partitionable(s):
                pieces = self._partition(s)
                if pieces is not None:
                    return pieces
            return self._descend_for(s)
        if isinstance(s, IfThenElse):
            with self.ana.constraint(s.condition):
                then_case = self.visit(s.then_case)
            else_case = s.else_case
            if else_case is not None:
                with self.ana.constraint(~s.condition):
                    else_case = self.visit(else_case)
            if then_case is s.then_case and else_case is s.else_case:
                return s
            return IfThenElse(s.condition, then_case, else_case)
        if isinstance(s, LetStmt):
            with self.ana.scope():
                if is_index_type(s.value.dtype) and s.value.dtype == s.var.dtype:
                    self.ana.bind(s.var, s.value)
                body = self.visit(s.body)
            return s if body is s.body else LetStmt(s.var, s.value, body)
        if isinstance(s, AttrStmt):
            with self.ana.scope():
                if s.key == "thread_extent" and isinstance(s.node, IterVar):
                    self.ana.bind(s.node.var, Range(IntImm(s.node.var.dtype, 0), s.value))
                body = self.visit(s.body)
            return s if body is s.body else AttrStmt(s.node, s.key, s.value, body)
        if isinstance(s, SeqStmt):
            parts = [self.visit(x) for x in s.seq]
            if all(a is b for a, b in zip(parts, s.seq)):
                return s
            return SeqStmt.flatten(*parts)
        return self._generic(s)

    def _generic(self, s):
        values, changed = [], False
        for name in s._fields:
            value = getattr(s, name)
            new = self.visit(value) if isinstance(value, Stmt) else value
            changed |= new is not value
            values.append(new)
        return type(s)(*values) if changed else s

    def _descend_for(self, s: For) -> Stmt:
        with self.ana.scope():
            if is_index_type(s.loop_var.dtype):
                self.ana.bind(s.loop_var, Range(s.min, s.extent))
            body = self.visit(s.body)
        if body is s.body:
            return s
        return For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, s.annotations)

    def _partitionable(self, s: For) -> bool:
        if not is_index_type(s.loop_var.dtype):
            return False
        return s.kind in _PARTITIONABLE or (s.kind in _CONSTANT_ONLY and isinstance(s.extent, IntImm))

    # ------------------------------------------------------------------ the split
    def _partition(self, loop: For):
        v = loop.loop_var
        conditions = _collect_conditions(loop.body, guards=v not in self._unsplit)
        if not conditions:
            return None
        lo, ext = self.ana.simplify(loop.min), self.ana.simplify(loop.extent)
        with self.ana.scope():
            self.ana.bind(v, Range(lo, ext))
            bounds = self._bounds(v, conditions, _bound_inside(loop.body))
        if not bounds:
            return None
        pieces = self._split(loop, lo, ext, bounds)
        if not pieces and self._resplits < _MAX_RESPLITS:
            # No value of v satisfies every guard (a padded border and a cut tile in one
            # iteration, say): split on one side's guards, then split the pieces again.
            for side in ("high", "low"):
                pieces = self._split(loop, lo, ext, [b for b in bounds if b[0] == side])
                if len(pieces) > 1:
                    self._resplits += 1
                    try:
                        return self._finish(pieces, v, conditions, again=True)
                    finally:
                        self._resplits -= 1
            return None
        return self._finish(pieces, v, conditions) if pieces else None

    def _split(self, loop: For, lo, ext, bounds) -> list:
        """The pieces [lo, L), [L, U), [U, end) of the loop, [L, U) where every bound holds;
        [] when that middle piece is empty."""
        s = self.ana.simplify
        v = loop.loop_var
        low = high = None
        for side, value in bounds:
            if side == "high":
                high = value if high is None else s(min_(high, value))
            else:
                low = value if low is None else s(max_(low, value))
        end = s(lo + ext)
        start = lo if low is None else s(max_(lo, min_(low, end)))
        stop = end if high is None else s(max_(start, min_(high, end)))
        pre, main, post = s(start - lo), s(stop - start), s(end - stop)
        if loop.kind in _CONSTANT_ONLY and not all(isinstance(e, IntImm) for e in (pre, main, post)):
            return []
        if _is_zero(main):
            return []
        if _is_zero(pre) and _is_zero(post):
            return [self._piece(loop, v, lo, ext)]
        pieces = []
        if not _is_zero(pre):
            pieces.append(self._piece(loop, v.copy_with_suffix(""), lo, pre))
        pieces.append(self._piece(loop, v, start, main))
        if not _is_zero(post):
            pieces.append(self._piece(loop, v.copy_with_suffix(""), stop, post))
        return pieces

    def _piece(self, loop: For, var: Var, start, extent) -> Stmt:
        body = loop.body if var is loop.loop_var else substitute(loop.body, {loop.loop_var: var})
        return For(var, start, extent, loop.kind, body, loop.thread_tag, loop.annotations)

    def _finish(self, pieces, v: Var, conditions, again: bool = False) -> Stmt:
        """Simplify the pieces and visit what is inside; a piece is split again only when
        `again` (after a split on one side's guards). In a border piece (not the main one,
        whose loop variable is `v`), the loops of other dimensions keep their guards
        (_other_dimensions)."""
        unsplit = self._unsplit
        others = unsplit | _other_dimensions(v, conditions) if not again else unsplit
        out = []
        try:
            for piece in pieces:
                done = self.simplifier.visit(piece)
                if is_no_op(done):
                    continue
                self._unsplit = unsplit if piece.loop_var is v else others
                if isinstance(done, For) and done.loop_var is piece.loop_var and not again:
                    out.append(self._descend_for(done))
                else:
                    out.append(self.visit(done))
        finally:
            self._unsplit = unsplit
        return SeqStmt.flatten(*out)

    def _bounds(self, v: Var, conditions, inside: set) -> list:
        """("low", L) / ("high", U) for every analysable guard: it holds for every value of
        the inner loops where v >= L / v < U."""
        bounds = []
        for cond, dom in conditions:
            for part in _conjuncts(self.ana.simplify(_strip_likely(cond))):
                bound = self._guard_bound(v, part, dom, inside)
                if bound is not None:
                    bounds.append(bound)
        return bounds

    def _guard_bound(self, v, cond, dom, inside):
        """For `P < 0` linear in v: ("high", U) meaning v < U, or ("low", L) meaning v >= L."""
        if not isinstance(cond, LT) or not is_index_type(cond.a.dtype):
            return None
        p = to_expr(poly_sub(poly_of(cond.a), poly_of(cond.b)))
        if not uses_var(p, {v}):
            return None
        worst = p
        for _ in range(len(dom) + 1):
            relax = {u: d for u, d in dom.items() if uses_var(worst, {u})}
            if not relax:
                break
            worst = eval_set(worst, relax, self.ana).max_value
            if worst is None:
                return None
        if uses_var(worst, inside):
            return None
        linear = detect_linear(worst, [v])
        if linear is None or not isinstance(linear[0], IntImm) or linear[0].value == 0:
            return None
        a, b = linear[0].value, linear[1]
        s = self.ana.simplify
        if a > 0:       # a*v + b < 0  <=>  v <= floor((-b - 1) / a)
            return ("high", s(floordiv(-b - 1, a) + 1))
        return ("low", s(floordiv(b, -a) + 1))     # -|a|*v + b < 0  <=>  v > b / |a|


def _is_zero(e) -> bool:
    return isinstance(e, IntImm) and e.value <= 0


def _conjuncts(cond):
    if isinstance(cond, And):
        return _conjuncts(cond.a) + _conjuncts(cond.b)
    return [cond]


def _bound_inside(body) -> set:
    """Variables bound inside body (loops, lets, reductions): a region may not mention them."""
    found = set()

    def fn(n):
        if isinstance(n, For):
            found.add(n.loop_var)
        elif isinstance(n, (LetStmt, Let)):
            found.add(n.var)
        elif isinstance(n, Reduce):
            found.update(iv.var for iv in n.axis)

    post_order_visit(body, fn)
    return found


def _full_tile(loop: For):
    """`c - 1 < e` for an unrolled or vectorized loop of extent min(c, e) (c constant): a
    register tile's loop whose tile may be cut short at the edge. It unrolls only where its
    extent is the constant c, so the loops around it are split there like on a guard."""
    ext = loop.extent
    if loop.kind not in _CONSTANT_ONLY or not isinstance(ext, Min):
        return None
    for c, e in ((ext.a, ext.b), (ext.b, ext.a)):
        if isinstance(c, IntImm) and not isinstance(e, IntImm):
            return LT(IntImm(c.dtype, c.value - 1), e)
    return None


def _other_dimensions(v: Var, conditions) -> frozenset:
    """The inner loops that only guards without `v` mention: another dimension's border.

    A border piece of `v` (a padded first row) is a small part of the loop; splitting its
    inner loops on the other dimension's guards too (the first row's left, middle and right
    tiles) would copy the loop body again for each piece: a 2-D padded register tile was 9
    copies, 5 without. Splits on `v`'s own guards (a tail tile's inner loop) and on tile
    edges still happen there."""
    own, other = set(), set()
    for cond, dom in conditions:
        for part in _conjuncts(_strip_likely(cond)):
            inner = {u for u in dom if uses_var(part, {u})}
            (own if uses_var(part, {v}) else other).update(inner)
    return frozenset(other - own)


def _collect_conditions(body, guards: bool = True) -> list:
    """(condition, {inner loop var: IntervalSet}) for every `likely` guard in body (unless
    not `guards`), and for every unrolled or vectorized loop whose extent is cut at a tile's
    edge (_full_tile)."""
    out: list = []
    seen: set = set()

    def add(cond, dom):
        if cond not in seen and len(out) < _MAX_CONDITIONS:
            seen.add(cond)
            out.append((cond, dict(dom)))

    def find(expr, dom):
        if not guards:
            return

        def fn(n):
            if isinstance(n, Call) and n.op == "likely":
                add(n.args[0], dom)
        post_order_visit(expr, fn)

    def walk(st, dom):
        if isinstance(st, For):
            find(st.min, dom)
            find(st.extent, dom)
            edge = _full_tile(st)
            if edge is not None:
                add(edge, dom)
            inner = dict(dom)
            if is_index_type(st.loop_var.dtype):
                inner[st.loop_var] = IntervalSet(st.min, st.min + st.extent - 1)
            walk(st.body, inner)
            return
        for name in st._fields:
            value = getattr(st, name)
            if isinstance(value, Stmt):
                walk(value, dom)
            elif isinstance(value, tuple) and value and isinstance(value[0], Stmt):
                for x in value:
                    walk(x, dom)
            elif isinstance(value, PrimExpr):
                find(value, dom)

    walk(body, {})
    return out
