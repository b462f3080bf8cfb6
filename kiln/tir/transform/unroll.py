"""Unroll: expand `unrolled` loops (and small loop nests under the auto-unroll pragma).

Before:
    for k in range(3) unrolled:
      C[i*3 + k] = A[k]*2.0f
After:
    C[i*3] = A[0]*2.0f
    C[i*3 + 1] = A[1]*2.0f
    C[i*3 + 2] = A[2]*2.0f

Each copy of the body gets the loop variable replaced by a constant, fresh variables for the
loops, lets and allocations inside it (so every variable is still bound once), and integer
constant folding (so `if k < 2` inside the body picks its branch). Float arithmetic is not
folded: folding in double precision could change float32 results.

Auto-unroll (TVM's `auto_unroll_max_step`, roughly): under `AttrStmt(key=
"pragma_auto_unroll_max_step", value=N)` or a loop annotated with that key, or everywhere when
`auto_max_step=N` is passed, a serial loop of constant extent with no loop left inside it is
unrolled when extent x (statements in its body) <= N, or when its extent <= auto_max_extent.
The pragma is consumed. Code growth is capped: no loop is expanded into more than
MAX_UNROLLED_STATEMENTS (4096) statements; such a loop, like an `unrolled` loop whose extent is
not a constant, stays a `serial` loop. After this pass no loop has kind `unrolled`.
"""
from __future__ import annotations

from .. import dtype as dt
from .. import op
from ..buffer import Buffer
from ..expr import (EQ, GE, GT, LE, LT, NE, Add, And, Call, Cast, Div, FloorDiv,
                    FloorMod, IntImm, Let, Max, Min, Mod, Mul, Or, Select, Sub, Var)
from ..function import PrimFunc
from ..functor import IRMutator
from ..stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, For, IfThenElse,
                    LetStmt, SeqStmt, is_no_op, no_op)

MAX_UNROLLED_STATEMENTS = 4096
AUTO_UNROLL_KEY = "pragma_auto_unroll_max_step"


def unroll(node, auto_max_step: int = 0, auto_max_extent: int = 0, explicit_only: bool = False):
    """Expand `unrolled` loops, and auto-unroll small nests (see the module docstring).

    explicit_only=True expands only loops of kind `unrolled` and ignores the pragma.

    Example:
        >>> from kiln.tir import Buffer, BufferStore, For, Var, const
        >>> A = Buffer.make("A", "int32", (2,)); k = Var("k")
        >>> print(unroll(For(k, const(0), const(2), "unrolled", BufferStore(A, k * 5, k))))
        A[0] = 0
        A[1] = 5
    """
    unroller = _Unroller(auto_max_step, auto_max_extent, explicit_only)
    if isinstance(node, PrimFunc):
        return node.with_body(unroller.stmt(node.body, auto_max_step)[0])
    return unroller.stmt(node, auto_max_step)[0]


def _as_int(value, what):
    if isinstance(value, IntImm):
        return value.value
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise ValueError(f"{what} must be an integer constant, got {value!r}")


class _Unroller:
    """Bottom-up walk returning (new stmt, statement count, whether a loop remains inside)."""

    def __init__(self, auto_max_step, auto_max_extent, explicit_only):
        self.auto_max_extent = _as_int(auto_max_extent, "auto_max_extent")
        self.explicit_only = explicit_only
        _as_int(auto_max_step, "auto_max_step")

    def stmt(self, s, max_step):
        if isinstance(s, For):
            return self.loop(s, max_step)
        if isinstance(s, SeqStmt):
            parts = [self.stmt(x, max_step) for x in s.seq]
            seq = tuple(p[0] for p in parts)
            new = s if all(a is b for a, b in zip(seq, s.seq)) else SeqStmt.flatten(*seq)
            return new, sum(p[1] for p in parts), any(p[2] for p in parts)
        if isinstance(s, AttrStmt) and s.key == AUTO_UNROLL_KEY and not self.explicit_only:
            return self.stmt(s.body, _as_int(s.value, f"{AUTO_UNROLL_KEY} value"))
        if isinstance(s, IfThenElse):
            then, n1, l1 = self.stmt(s.then_case, max_step)
            other, n2, l2 = (None, 0, False) if s.else_case is None else \
                self.stmt(s.else_case, max_step)
            same = then is s.then_case and other is s.else_case
            return (s if same else IfThenElse(s.condition, then, other)), 1 + n1 + n2, l1 or l2
        if isinstance(s, (LetStmt, AttrStmt, Allocate, AssertStmt)):
            body, n, has_loop = self.stmt(s.body, max_step)
            own = 1 if isinstance(s, AssertStmt) else 0
            return (s if body is s.body else s.replace(body=body)), n + own, has_loop
        return s, 0 if is_no_op(s) else 1, False

    def loop(self, s, max_step):
        annotations = s.annotations
        if not self.explicit_only and any(k == AUTO_UNROLL_KEY for k, _ in annotations):
            annotations = tuple((k, v) for k, v in annotations if k != AUTO_UNROLL_KEY)
            max_step = _as_int(dict(s.annotations)[AUTO_UNROLL_KEY], f"{AUTO_UNROLL_KEY} value")
        body, steps, has_loop = self.stmt(s.body, max_step)
        extent = s.extent.value if isinstance(s.extent, IntImm) else None
        if extent is not None and extent * steps <= MAX_UNROLLED_STATEMENTS:
            explicit = s.kind == "unrolled"
            auto = (not self.explicit_only and s.kind == "serial" and not has_loop and
                    (0 < max_step and extent * steps <= max_step or
                     0 < self.auto_max_extent and extent <= self.auto_max_extent))
            if explicit or auto:
                return _expand(s, body), max(extent, 0) * steps, False
        kind = "serial" if s.kind == "unrolled" else s.kind
        if body is s.body and kind == s.kind and annotations == s.annotations:
            return s, steps, True
        return For(s.loop_var, s.min, s.extent, kind, body, s.thread_tag, annotations), steps, True


def _expand(loop, body):
    copies = []
    for k in range(max(loop.extent.value, 0)):
        value = op.add(loop.min, IntImm(loop.loop_var.dtype, k))
        copies.append(_Instantiate({loop.loop_var: value}).visit(body))
    return SeqStmt.flatten(*copies) if copies else no_op()


_FOLD = {Add: op.add, Sub: op.sub, Mul: op.mul, Div: op.div, Mod: op.truncmod,
         FloorDiv: op.floordiv, FloorMod: op.floormod, Min: op.min_, Max: op.max_,
         EQ: op.equal, NE: op.not_equal, LT: op.less, LE: op.less_equal, GT: op.greater,
         GE: op.greater_equal, And: op.logical_and, Or: op.logical_or}


class _Instantiate(IRMutator):
    """One copy of a loop body: substitute, give inner binders fresh variables, fold integers."""

    def __init__(self, vmap):
        super().__init__()
        self.vmap = dict(vmap)
        self.bufmap: dict = {}

    def _fresh(self, var):
        # A variable bound twice in one body keeps one replacement: memoized expressions
        # that mention it then stay right for both bindings.
        new = self.vmap.get(var)
        if not isinstance(new, Var):
            new = self.vmap[var] = Var(var.name, var.dtype)
        return new

    def visit_Var(self, v):
        return self.vmap.get(v, v)

    def visit_For(self, s):
        lo, extent = self.visit(s.min), self.visit(s.extent)
        var = self._fresh(s.loop_var)
        return For(var, lo, extent, s.kind, self.visit(s.body), s.thread_tag, s.annotations)

    def visit_LetStmt(self, s):
        value = self.visit(s.value)
        return LetStmt(self._fresh(s.var), value, self.visit(s.body))

    def visit_Let(self, e):
        value = self.visit(e.value)
        return Let(self._fresh(e.var), value, self.visit(e.body))

    def visit_Allocate(self, s):
        extent = self.visit(s.extent)
        self._fresh(s.buffer.data)
        return Allocate(self._buffer(s.buffer), extent, self.visit(s.body))

    def _buffer(self, buf):
        # Keyed by the data pointer, so every Buffer object viewing the allocation follows it.
        data = self.vmap.get(buf.data)
        if not isinstance(data, Var) or data is buf.data:
            return buf
        new = self.bufmap.get(buf)
        if new is None:
            new = self.bufmap[buf] = Buffer(buf.name, buf.dtype, buf.shape, data, buf.scope,
                                            buf.align)
        return new

    def visit_BufferLoad(self, e):
        index = self.visit(e.index)
        buf = self._buffer(e.buffer)
        return e if index is e.index and buf is e.buffer else type(e)(buf, index)

    def visit_BufferStore(self, s):
        value, index = self.visit(s.value), self.visit(s.index)
        buf = self._buffer(s.buffer)
        same = value is s.value and index is s.index and buf is s.buffer
        return s if same else BufferStore(buf, value, index)

    def visit_BinaryOp(self, e):
        a, b = self.visit(e.a), self.visit(e.b)
        if a is e.a and b is e.b:
            return e
        base = dt.element_of(a.dtype)
        builder = _FOLD.get(type(e))
        exact = dt.is_integral(base) or dt.is_bool(base)   # float folding could round differently
        if builder is not None and exact and a.dtype == b.dtype:
            return builder(a, b)
        return type(e)(a, b)

    def visit_Not(self, e):
        a = self.visit(e.a)
        return e if a is e.a else op.logical_not(a)

    def visit_Cast(self, e):
        value = self.visit(e.value)
        if value is e.value:
            return e
        if isinstance(value, IntImm) and dt.lanes_of(e.dtype) == 1:
            return op.cast(value, e.dtype)
        return Cast(e.dtype, value)

    def visit_Select(self, e):
        c, t, f = self.visit(e.condition), self.visit(e.true_value), self.visit(e.false_value)
        if isinstance(c, IntImm):
            return t if c.value else f
        return e if (c is e.condition and t is e.true_value and f is e.false_value) \
            else Select(c, t, f)

    def visit_Call(self, e):
        args = tuple(self.visit(a) for a in e.args)
        if e.op == "if_then_else" and isinstance(args[0], IntImm):
            return args[1] if args[0].value else args[2]
        if e.op == "likely" and isinstance(args[0], IntImm):
            return args[0]
        return e if all(a is b for a, b in zip(args, e.args)) else Call(e.dtype, e.op, args)

    def visit_IfThenElse(self, s):
        cond = self.visit(s.condition)
        if isinstance(cond, IntImm):
            if cond.value:
                return self.visit(s.then_case)
            return no_op() if s.else_case is None else self.visit(s.else_case)
        other = None if s.else_case is None else self.visit(s.else_case)
        return IfThenElse(cond, self.visit(s.then_case), other)

    def visit_SeqStmt(self, s):
        return SeqStmt.flatten(*(self.visit(x) for x in s.seq))


def unroll_vector_loops(node):
    """Make every `vectorized` loop an `unrolled` one (for targets whose threads are scalar,
    such as GPUs: each iteration becomes its own instruction stream of the same thread).

    Example:
        >>> from kiln.tir import Buffer, BufferStore, For, Var, const
        >>> A = Buffer.make("A", "int32", (2,)); k = Var("k")
        >>> unroll_vector_loops(For(k, const(0), const(2), "vectorized", BufferStore(A, k, k))).kind
        'unrolled'
    """
    class Devectorize(IRMutator):
        def visit_For(self, s):
            body = self.visit(s.body)
            if s.kind == "vectorized":
                return For(s.loop_var, s.min, s.extent, "unrolled", body, s.thread_tag,
                           s.annotations)
            return s if body is s.body else s.replace(body=body)

    if isinstance(node, PrimFunc):
        return node.with_body(Devectorize().visit(node.body))
    return Devectorize().visit(node)
