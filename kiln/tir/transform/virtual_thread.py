"""Virtual threads: a loop bound to "vthread" becomes interleaved code in one thread.

The TVM paper's §4.4: a schedule splits a block's work into n virtual threads, each with its
own registers, and the compiler lowers them into one instruction stream, so independent work
of different virtual threads interleaves (on a GPU: more independent loads and FMAs in flight
per thread). For `for v in vthread(n): body`:

- a buffer allocated inside body and written with values or at indices that depend on v (a
  virtual thread's accumulators) gets one copy per virtual thread: its extent times n, its
  accesses offset by v * extent;
- the loop over v is pushed inward through loops, allocations and branches that do not depend
  on v, down to the statements that do, so the work shared by all virtual threads (e.g. a
  cooperative fetch into shared memory) runs once and the rest is n copies side by side.

Virtual threads are independent by construction (the schedule binds data-parallel axes only),
so running statement by statement instead of thread by thread computes the same result.
"""
from __future__ import annotations

from ..expr import BufferLoad, IntImm
from ..function import PrimFunc
from ..functor import IRMutator, post_order_visit
from ..stmt import (Allocate, AttrStmt, BufferStore, For, IfThenElse, LetStmt, SeqStmt)


def is_vthread_loop(s) -> bool:
    return isinstance(s, For) and s.kind == "thread_binding" and s.thread_tag.startswith("vthread")


def inject_virtual_thread(func):
    """Interleave every loop bound to a vthread (innermost first).

    Example:
        >>> f = inject_virtual_thread(bind_threads(kiln.lower(s, args)))   # doctest: +SKIP
    """
    body = func.body if isinstance(func, PrimFunc) else func
    out = _Inject().visit(body)
    return func.with_body(out) if isinstance(func, PrimFunc) else out


class _Inject(IRMutator):
    def visit_For(self, s):
        s = self.generic_visit(s)
        if not is_vthread_loop(s):
            return s
        if not isinstance(s.extent, IntImm):
            from .bind_threads import ThreadBindingError
            raise ThreadBindingError(f"loop '{s.loop_var.name}' is bound to {s.thread_tag} with "
                                     f"extent `{s.extent}`; virtual threads need a constant count")
        return _expand(s)


def _expand(loop):
    v, n = loop.loop_var, loop.extent.value
    touched_vars, touched_bufs = _touched(loop.body, v)
    allocs: dict = {}

    def collect(node):
        if isinstance(node, Allocate) and node.buffer.data in touched_bufs:
            allocs[node.buffer.data] = node.extent

    post_order_visit(loop.body, collect)
    body = _Privatize(v, n, allocs).visit(loop.body) if allocs else loop.body

    def touches(stmt) -> bool:
        hit = False

        def fn(node):
            nonlocal hit
            if hit:
                return
            if node is v or node in touched_vars:
                hit = True
            elif isinstance(node, (BufferLoad, BufferStore)) and node.buffer.data in touched_bufs:
                hit = True

        post_order_visit(stmt, fn)
        return hit

    def wrap(stmt):
        return For(v, loop.min, loop.extent, "unrolled", stmt)

    def push(stmt):
        if not touches(stmt):
            return stmt
        if isinstance(stmt, SeqStmt):
            return SeqStmt.flatten([push(x) for x in stmt.seq])
        if isinstance(stmt, For):
            if touches(stmt.min) or touches(stmt.extent):
                return wrap(stmt)
            return stmt.replace(body=push(stmt.body))
        if isinstance(stmt, Allocate):
            return stmt.replace(body=push(stmt.body))
        if isinstance(stmt, AttrStmt):
            return stmt.replace(body=push(stmt.body))
        if isinstance(stmt, IfThenElse) and not touches(stmt.condition):
            return IfThenElse(stmt.condition, push(stmt.then_case),
                              None if stmt.else_case is None else push(stmt.else_case))
        return wrap(stmt)

    return push(body)


def _touched(body, v):
    """Variables (lets) and allocated buffers whose values depend on v, to a fixed point."""
    allocated: set = set()
    post_order_visit(body, lambda n: allocated.add(n.buffer.data) if isinstance(n, Allocate) else None)
    tvars, tbufs = {v}, set()
    lets, stores = [], []

    def gather(n):
        if isinstance(n, LetStmt):
            lets.append(n)
        elif isinstance(n, BufferStore) and n.buffer.data in allocated:
            stores.append(n)

    post_order_visit(body, gather)

    def depends(*exprs) -> bool:
        hit = False

        def fn(node):
            nonlocal hit
            if not hit and (node in tvars or isinstance(node, BufferLoad) and node.buffer.data in tbufs):
                hit = True

        for e in exprs:
            post_order_visit(e, fn)
        return hit

    changed = True
    while changed:
        changed = False
        for let in lets:
            if let.var not in tvars and depends(let.value):
                tvars.add(let.var)
                changed = True
        for st in stores:
            if st.buffer.data not in tbufs and depends(st.value, st.index):
                tbufs.add(st.buffer.data)
                changed = True
    tvars.discard(v)
    return tvars, tbufs


class _Privatize(IRMutator):
    """One copy per virtual thread of the buffers in `allocs` (data var -> old extent)."""

    def __init__(self, v, count, allocs):
        super().__init__()
        self.v, self.count, self.allocs = v, count, allocs

    def _index(self, buffer, index):
        extent = self.allocs.get(buffer.data)
        return index if extent is None else self.v * extent + index

    def visit_Allocate(self, s):
        body = self.visit(s.body)
        extent = self.allocs.get(s.buffer.data)
        if extent is None:
            return s.replace(body=body) if body is not s.body else s
        return Allocate(s.buffer, extent * self.count, body)

    def visit_BufferLoad(self, e):
        index = self.visit(e.index)
        return BufferLoad(e.buffer, self._index(e.buffer, index))

    def visit_BufferStore(self, s):
        value, index = self.visit(s.value), self.visit(s.index)
        return BufferStore(s.buffer, value, self._index(s.buffer, index))
