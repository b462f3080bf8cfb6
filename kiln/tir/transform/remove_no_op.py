"""Remove statements that have no effect.

Before:
    for i in range(n):
      if i < 4:
        0
      A[i] = A[i]
    for j in range(0):
      B[j] = 1.0f
    C[0] = 2.0f
After:
    C[0] = 2.0f

Dropped: Evaluate of an expression without side effects (constants, arithmetic, loads, pure
math calls); loops whose body does nothing or whose constant extent is <= 0; IfThenElse with two
empty branches (an empty `then` flips the condition); Let / Attr / Allocate around nothing;
stores of the value just loaded from the same location (`x[i] = x[i]`). Sequences are flattened
and a one-statement sequence is the statement. A constant IfThenElse condition picks its branch.
"""
from __future__ import annotations

from .. import op
from ..expr import BufferLoad, Call, IntImm, Not
from ..function import PrimFunc
from ..functor import IRMutator, post_order_visit
from ..stmt import Evaluate, IfThenElse, SeqStmt, is_no_op, no_op
from .vectorize import ELEMENTWISE_CALLS

_PURE_CALLS = ELEMENTWISE_CALLS | {"if_then_else", "likely"}


def remove_no_op(node):
    """Drop statements without effect and flatten sequences (see the module docstring).

    Example:
        >>> from kiln.tir import Buffer, BufferLoad, BufferStore, Evaluate, SeqStmt, const
        >>> A = Buffer.make("A", "int32", (4,))
        >>> s = SeqStmt((Evaluate(const(0)), BufferStore(A, BufferLoad(A, const(1)), const(1)),
        ...              BufferStore(A, const(7), const(0))))
        >>> print(remove_no_op(s))
        A[0] = 7
    """
    if isinstance(node, PrimFunc):
        return node.with_body(_RemoveNoOp().visit(node.body))
    return _RemoveNoOp().visit(node)


def has_side_effect(expr) -> bool:
    """True if evaluating expr might do more than compute a value (a call not known pure).

    Example:
        >>> from kiln.tir import Call, const
        >>> has_side_effect(const(1) + 2), has_side_effect(Call("int32", "printf", ()))
        (False, True)
    """
    found = []

    def check(n):
        if not found and isinstance(n, Call) and n.op not in _PURE_CALLS:
            found.append(n)

    post_order_visit(expr, check)
    return bool(found)


def _leftover(*exprs):
    """What must still run when a statement is dropped: its impure expressions, if any."""
    kept = [Evaluate(e) for e in exprs if e is not None and has_side_effect(e)]
    return SeqStmt.flatten(*kept) if kept else no_op()


class _RemoveNoOp(IRMutator):
    def visit_Evaluate(self, s):
        return no_op() if not has_side_effect(s.value) else s

    def visit_SeqStmt(self, s):
        return SeqStmt.flatten(*(self.visit(x) for x in s.seq))

    def visit_BufferStore(self, s):
        value = s.value
        if isinstance(value, BufferLoad) and value.buffer is s.buffer and value.index is s.index:
            return _leftover(s.index)
        return self.generic_visit(s)

    def visit_For(self, s):
        body = self.visit(s.body)
        if (isinstance(s.extent, IntImm) and s.extent.value <= 0) or is_no_op(body):
            return _leftover(s.min, s.extent)
        return s if body is s.body else s.replace(body=body)

    def visit_IfThenElse(self, s):
        cond = s.condition
        if isinstance(cond, IntImm):
            taken = s.then_case if cond.value else s.else_case
            return no_op() if taken is None else self.visit(taken)
        then = self.visit(s.then_case)
        other = None if s.else_case is None else self.visit(s.else_case)
        if other is not None and is_no_op(other):
            other = None
        if is_no_op(then):
            if other is None:
                return _leftover(cond)
            flipped = cond.a if isinstance(cond, Not) else op.logical_not(cond)
            return IfThenElse(flipped, other)
        return IfThenElse(cond, then, other)

    def _wrapper(self, s, *exprs):
        body = self.visit(s.body)
        if is_no_op(body):
            return _leftover(*exprs)
        return s if body is s.body else s.replace(body=body)

    def visit_LetStmt(self, s):
        return self._wrapper(s, s.value)

    def visit_AttrStmt(self, s):
        return self._wrapper(s)

    def visit_Allocate(self, s):
        return self._wrapper(s, s.extent)
