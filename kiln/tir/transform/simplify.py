"""Simplify: arith's simplifier applied to every expression of a statement, in context.

Descending, loop variables are bound to their ranges, Let variables to their values, and the
condition of an IfThenElse is assumed in its then-branch (its negation in the else-branch).
Loops of extent 0 disappear, loops of extent 1 become a substitution, and an IfThenElse whose
condition is decided keeps only the branch taken.

Before:
    for i in range(1):
      for j in range(16):
        if likely(j < 16):
          B[i*16 + j] = A[floordiv(j, 4)*4 + floormod(j, 4)]
After:
    for j in range(16):
      B[j] = A[j]
"""
from __future__ import annotations

from ...arith import Analyzer
from ...arith.poly import is_index_type
from ..expr import FloatImm, IntImm, IterVar, PrimExpr, Range, Var
from ..function import PrimFunc
from ..functor import substitute, uses_var
from ..op import IRError, logical_not
from ..stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For, IfThenElse,
                    LetStmt, SeqStmt, Stmt, is_no_op, no_op)


def simplify(node, analyzer: Analyzer | None = None):
    """Simplify a statement or a PrimFunc; returns the same kind.

    Example:
        >>> from kiln.tir import Buffer, BufferStore, For, Var, const
        >>> A = Buffer.make("A", "int32", (8,)); i = Var("i")
        >>> s = For(i, const(0), const(8), "serial", BufferStore(A, (i * 2 + i) - i * 3, i))
        >>> print(simplify(s))
        for i in range(8):
          A[i] = 0
    """
    return StmtSimplifier(analyzer or Analyzer()).run(node)


class StmtSimplifier:
    """Statement walker of the Simplify pass; reusable by passes that hold an Analyzer."""

    def __init__(self, analyzer: Analyzer):
        self.ana = analyzer
        self._table = {
            For: self._for, LetStmt: self._let, IfThenElse: self._if, AttrStmt: self._attr,
            AssertStmt: self._assert, BufferStore: self._store, Allocate: self._allocate,
            SeqStmt: self._seq, Evaluate: self._evaluate,
        }

    def run(self, node):
        if isinstance(node, PrimFunc):
            with self.ana.scope():
                bind_shape_vars(self.ana, node)
                body = self.visit(node.body)
            return node if body is node.body else node.with_body(body)
        if isinstance(node, Stmt):
            return self.visit(node)
        if isinstance(node, PrimExpr):
            return self.ana.simplify(node)
        raise IRError(f"simplify expects a Stmt, a PrimFunc or an expression, got {node!r}")

    def expr(self, e):
        return self.ana.simplify(e)

    # No memo on statements: the same statement node can sit in different contexts.
    def visit(self, s: Stmt) -> Stmt:
        method = self._table.get(type(s))
        if method is None:
            return self._generic(s)
        return method(s)

    def _for(self, s: For) -> Stmt:
        lo, ext = self.expr(s.min), self.expr(s.extent)
        if isinstance(ext, IntImm) and ext.value <= 0:
            return no_op()
        if isinstance(ext, IntImm) and ext.value == 1 and s.kind != "thread_binding":
            body = self.visit(substitute(s.body, {s.loop_var: lo}))
            # A pragma outlives its loop: it marks the work inside for a back-end (VDLA's
            # dma_copy / alu), one iteration or many.
            for key, value in reversed(s.annotations):
                if key.startswith("pragma_") and not is_no_op(body):
                    body = AttrStmt(None, key, value, body)
            return body
        with self.ana.scope():
            self.ana.bind(s.loop_var, Range(lo, ext))
            body = self.visit(s.body)
        if is_no_op(body):
            return no_op()
        if lo is s.min and ext is s.extent and body is s.body:
            return s
        return For(s.loop_var, lo, ext, s.kind, body, s.thread_tag, s.annotations)

    def _let(self, s: LetStmt) -> Stmt:
        value = self.expr(s.value)
        if isinstance(value, (IntImm, FloatImm, Var)):
            return self.visit(substitute(s.body, {s.var: value}))
        with self.ana.scope():
            if is_index_type(value.dtype) and value.dtype == s.var.dtype:
                self.ana.bind(s.var, value)
            body = self.visit(s.body)
        if not uses_var(body, {s.var}):
            return body
        if value is s.value and body is s.body:
            return s
        return LetStmt(s.var, value, body)

    def _if(self, s: IfThenElse) -> Stmt:
        cond = self.expr(s.condition)
        if isinstance(cond, IntImm):
            if cond.value:
                return self.visit(s.then_case)
            return self.visit(s.else_case) if s.else_case is not None else no_op()
        with self.ana.constraint(cond):
            then_case = self.visit(s.then_case)
        else_case = None
        if s.else_case is not None:
            with self.ana.constraint(logical_not(cond)):
                else_case = self.visit(s.else_case)
            if is_no_op(else_case):
                else_case = None
        if is_no_op(then_case):
            if else_case is None:
                return no_op()
            return IfThenElse(self.expr(logical_not(cond)), else_case)
        if cond is s.condition and then_case is s.then_case and else_case is s.else_case:
            return s
        return IfThenElse(cond, then_case, else_case)

    def _attr(self, s: AttrStmt) -> Stmt:
        value = self.expr(s.value) if isinstance(s.value, PrimExpr) else s.value
        with self.ana.scope():
            if s.key in ("thread_extent", "virtual_thread") and isinstance(s.node, IterVar) \
                    and isinstance(value, PrimExpr) and is_index_type(s.node.var.dtype):
                self.ana.bind(s.node.var, Range(IntImm(s.node.var.dtype, 0), value))
            body = self.visit(s.body)
        if value is s.value and body is s.body:
            return s
        return AttrStmt(s.node, s.key, value, body)

    def _assert(self, s: AssertStmt) -> Stmt:
        cond = self.expr(s.condition)
        body = self.visit(s.body)
        if isinstance(cond, IntImm) and cond.value:
            return body
        return AssertStmt(cond, s.message, body)

    def _store(self, s: BufferStore) -> Stmt:
        value, index = self.expr(s.value), self.expr(s.index)
        if value is s.value and index is s.index:
            return s
        return BufferStore(s.buffer, value, index)

    def _allocate(self, s: Allocate) -> Stmt:
        extent, body = self.expr(s.extent), self.visit(s.body)
        if extent is s.extent and body is s.body:
            return s
        return Allocate(s.buffer, extent, body)

    def _seq(self, s: SeqStmt) -> Stmt:
        parts = [self.visit(x) for x in s.seq]
        if all(a is b for a, b in zip(parts, s.seq)):
            return s
        return SeqStmt.flatten(*parts)

    def _evaluate(self, s: Evaluate) -> Stmt:
        value = self.expr(s.value)
        return s if value is s.value else Evaluate(value)

    def _generic(self, s):
        values, changed = [], False
        for name in s._fields:
            value = getattr(s, name)
            if isinstance(value, Stmt):
                new = self.visit(value)
            elif isinstance(value, PrimExpr):
                new = self.expr(value)
            else:
                new = value
            changed |= new is not value
            values.append(new)
        return type(s)(*values) if changed else s


def bind_shape_vars(ana: Analyzer, func: PrimFunc) -> None:
    """Symbolic sizes of a PrimFunc are non-negative."""
    for v in func.shape_vars:
        if is_index_type(v.dtype):
            ana.bind(v, (0, None))
