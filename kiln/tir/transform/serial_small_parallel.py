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
from ..functor import post_order_visit
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


def _work(stmt, cap: int) -> int | None:
    """Element updates `stmt` makes, counted until they reach `cap` (a result >= cap means "at
    least cap": a big loop is not walked to the end); None when a symbolic extent or a call of
    unknown cost leaves it unknown."""
    if isinstance(stmt, BufferStore):
        return _store_work(stmt)
    if isinstance(stmt, For):
        if not isinstance(stmt.extent, IntImm):
            return None
        extent = max(stmt.extent.value, 0)
        inner = _work(stmt.body, -(-cap // extent)) if extent else 0
        return None if inner is None else extent * inner
    if isinstance(stmt, SeqStmt):
        total = 0
        for s in stmt.seq:
            w = _work(s, cap - total)
            if w is None:
                return None
            total += w
            if total >= cap:
                break
        return total
    if isinstance(stmt, IfThenElse):
        arms = [_work(s, cap) for s in (stmt.then_case, stmt.else_case) if s is not None]
        return None if None in arms else max(arms)
    if isinstance(stmt, (LetStmt, AttrStmt, Allocate, AssertStmt)):
        return _work(stmt.body, cap)
    if isinstance(stmt, Evaluate):
        value = stmt.value
        return 1 if isinstance(value, Call) and value.op == "prefetch" else None
    return None


def _serial_small(stmt):
    """The statement with its small parallel loops serial; walks statements only (a loop inside
    a parallel one runs inside its tasks and is left as it is)."""
    if isinstance(stmt, For):
        if stmt.kind == "parallel":
            work = _work(stmt, MIN_PARALLEL_WORK)
            small = work is not None and work < MIN_PARALLEL_WORK
            return stmt.replace(kind="serial") if small else stmt
        body = _serial_small(stmt.body)
        return stmt if body is stmt.body else stmt.replace(body=body)
    if isinstance(stmt, SeqStmt):
        seq = tuple(_serial_small(s) for s in stmt.seq)
        return stmt if all(a is b for a, b in zip(seq, stmt.seq)) else SeqStmt(seq)
    if isinstance(stmt, IfThenElse):
        then = _serial_small(stmt.then_case)
        other = None if stmt.else_case is None else _serial_small(stmt.else_case)
        if then is stmt.then_case and other is stmt.else_case:
            return stmt
        return IfThenElse(stmt.condition, then, other)
    if isinstance(stmt, (LetStmt, AttrStmt, Allocate, AssertStmt)):
        body = _serial_small(stmt.body)
        return stmt if body is stmt.body else stmt.replace(body=body)
    return stmt


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
        body = _serial_small(node.body)
        return node if body is node.body else node.with_body(body)
    return _serial_small(node)
