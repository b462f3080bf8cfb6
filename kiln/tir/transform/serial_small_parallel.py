"""Run a parallel loop serially when its whole work is smaller than what a launch costs.

Before (a 6x6 output, 3 row tiles on the pool):
    for yo in parallel(3):
      for k in range(27):
        for x in range(6):
          for y in range(2):
            C[...] = C[...] + A[...] * W[...]
After (972 scalar updates: no thread pool):
    for yo in range(3):
      ...

A launch on the thread pool costs about 1 us with its threads spinning (measured on the 2-core
VMs here: a parallel loop over 1,024 to 4,096 float32 elements ran in 1.1 us, serially in
0.03-0.09 us; the two meet near 16,384), and far more when another process holds the cores:
each launch then waits for a descheduled pool thread, a scheduler tick of 4-24 ms. A kernel of
a microsecond gains nothing from the pool and risks that wait, which made in-model selection
measure such a kernel at 8-24 ms instead of 0.001 ms.

Work is counted as element updates: each store counts its lanes (times CALL_WORK more for each
math function it evaluates: exp, tanh, erf ... cost tens of operations an element), times the
constant extents of the loops around it inside the parallel loop; a branch counts its larger
arm. A loop with a symbolic extent, or a call of unknown cost, stays parallel.

This overrides a schedule's `parallel` on loops that small (Stage.parallel says so).
"""
from __future__ import annotations

from .. import op
from ..dtype import lanes_of
from ..expr import Call, IntImm
from ..function import PrimFunc
from ..functor import IRMutator, post_order_visit
from ..stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, Evaluate, For, IfThenElse,
                    LetStmt, SeqStmt)

# Element updates below which a parallel loop runs serially: where a launch's ~1 us matches
# the serial time of the loop (elementwise float32: parallel and serial met near 16,384).
MIN_PARALLEL_WORK = 16384
# Element updates a math function counts for (a vectorized exp or tanh: ~10-30 operations).
CALL_WORK = 16
_MATH_CALLS = frozenset(op.FLOAT_UNARY) | {"pow", "fmod"}


def _store_work(store: BufferStore) -> int:
    calls = []
    post_order_visit(store.value, lambda n: calls.append(n) if isinstance(n, Call) and
                     n.op in _MATH_CALLS else None)
    return lanes_of(store.value.dtype) * (1 + CALL_WORK * len(calls))


def _work(stmt) -> int | None:
    """Element updates `stmt` makes, or None when a symbolic extent leaves it unknown."""
    if isinstance(stmt, BufferStore):
        return _store_work(stmt)
    if isinstance(stmt, For):
        inner = _work(stmt.body)
        if inner is None or not isinstance(stmt.extent, IntImm):
            return None
        return max(stmt.extent.value, 0) * inner
    if isinstance(stmt, SeqStmt):
        parts = [_work(s) for s in stmt.seq]
        return None if None in parts else sum(parts)
    if isinstance(stmt, IfThenElse):
        arms = [_work(s) for s in (stmt.then_case, stmt.else_case) if s is not None]
        return None if None in arms else max(arms)
    if isinstance(stmt, (LetStmt, AttrStmt, Allocate, AssertStmt)):
        return _work(stmt.body)
    if isinstance(stmt, Evaluate):
        value = stmt.value
        return 1 if isinstance(value, Call) and value.op == "prefetch" else None
    return None


class _SerialSmallParallel(IRMutator):
    def visit_For(self, s):
        if s.kind != "parallel":
            body = self.visit(s.body)
            return s if body is s.body else s.replace(body=body)
        work = _work(s)
        if work is not None and work < MIN_PARALLEL_WORK:
            return s.replace(kind="serial")
        return s            # loops inside a parallel one run inside its tasks


def serial_small_parallel(node):
    """Make parallel loops with less than MIN_PARALLEL_WORK element updates serial (see the
    module docstring).

    Example:
        >>> from kiln.tir import Buffer, BufferStore, For, Var, const
        >>> A = Buffer.make("A", "float32", (64,))
        >>> i = Var("i", "int32")
        >>> loop = For(i, const(0), const(64), "parallel", BufferStore(A, const(1.0), i))
        >>> serial_small_parallel(loop).kind
        'serial'
    """
    if isinstance(node, PrimFunc):
        return node.with_body(_SerialSmallParallel().visit(node.body))
    return _SerialSmallParallel().visit(node)
