"""Barriers between threads of a block, where shared memory needs them and only there.

A shared buffer written by some threads and read by others (a cooperative fetch, then the
compute that reads the tile) needs a barrier between the write and the read; and a loop whose
body reads a tile and then, in its next iteration, overwrites it needs one before the
overwrite. Within a sequence of statements, a barrier goes before a statement whose shared
accesses conflict (read after write, write after read) with an access since
the previous barrier; a loop gets one at the start of its body when the accesses after the
body's last barrier conflict with those before its first. Two writes are not ordered (each
element of a shared tile has one writer in a correct schedule).

A barrier must be reached by every thread of the block, so one needed inside a branch on a
thread index is an error that names the buffer rather than a barrier that would deadlock.
"""
from __future__ import annotations

from ..expr import BufferLoad, Call
from ..function import PrimFunc
from ..functor import post_order_visit
from ..op import IRError
from ..stmt import (Allocate, BufferStore, Evaluate, For, IfThenElse, SeqStmt)
from .bind_threads import THREAD_EXTENT

BARRIER = "thread_barrier"


def barrier():
    """The statement that waits for every thread of the block (and makes its shared-memory
    writes visible to them)."""
    return Evaluate(Call("int32", BARRIER, ()))


def is_barrier(s) -> bool:
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.op == BARRIER


def thread_sync(func):
    """Insert barriers for the shared buffers of every kernel.

    Example:
        >>> f = thread_sync(inject_virtual_thread(bind_threads(f)))   # doctest: +SKIP
    """
    body = func.body if isinstance(func, PrimFunc) else func
    shared: set = set()
    post_order_visit(body, lambda n: shared.add(n.buffer.data)
                     if isinstance(n, Allocate) and n.buffer.scope == "shared" else None)
    if not shared:
        return func
    out = _Sync(shared).stmt(body)
    return func.with_body(out) if isinstance(func, PrimFunc) else out


class _Accesses:
    """Shared buffers read and written by a statement."""

    def __init__(self, reads=frozenset(), writes=frozenset()):
        self.reads, self.writes = set(reads), set(writes)

    def conflicts(self, later: "_Accesses") -> bool:
        # Read after write and write after read. Two writes need no order: in a correct
        # schedule each element of a shared tile has one writer.
        return bool(self.writes & later.reads or self.reads & later.writes)

    def __or__(self, other: "_Accesses") -> "_Accesses":
        return _Accesses(self.reads | other.reads, self.writes | other.writes)

    def add(self, other: "_Accesses") -> None:
        self.reads |= other.reads
        self.writes |= other.writes

    def __bool__(self):
        return bool(self.reads or self.writes)


class _Sync:
    def __init__(self, shared):
        self.shared = shared
        self.thread_vars: set = set()      # variables of thread indices (from thread_extent)
        self.divergent = 0                 # depth of branches on a thread index

    def accesses(self, s) -> _Accesses:
        acc = _Accesses()

        def fn(n):
            if isinstance(n, BufferLoad) and n.buffer.data in self.shared:
                acc.reads.add(n.buffer.data)
            elif isinstance(n, BufferStore) and n.buffer.data in self.shared:
                acc.writes.add(n.buffer.data)

        post_order_visit(s, fn)
        return acc

    def stmt(self, s):
        if isinstance(s, SeqStmt):
            return self.seq(list(s.seq), cyclic=False)
        if isinstance(s, For):
            body = s.body
            # A loop whose trip count differs by thread is a branch on a thread index.
            on_thread = self._uses_thread(s.min) or self._uses_thread(s.extent)
            self.divergent += on_thread
            if self.accesses(body):
                body = self.loop_body(body)
            self.divergent -= on_thread
            return s.replace(body=body)
        if isinstance(s, IfThenElse):
            on_thread = self._uses_thread(s.condition)
            self.divergent += on_thread
            then = self.stmt(s.then_case)
            other = None if s.else_case is None else self.stmt(s.else_case)
            self.divergent -= on_thread
            return IfThenElse(s.condition, then, other)
        if getattr(s, "key", None) == THREAD_EXTENT:
            self.thread_vars.add(s.node)
        if hasattr(s, "body"):
            return s.replace(body=self.stmt(s.body))
        return s

    def _uses_thread(self, e) -> bool:
        hit = False

        def fn(n):
            nonlocal hit
            hit = hit or n in self.thread_vars

        post_order_visit(e, fn)
        return int(hit)

    def loop_body(self, body):
        inner, chain = body, []
        while isinstance(inner, Allocate):
            chain.append(inner)
            inner = inner.body
        parts = list(inner.seq) if isinstance(inner, SeqStmt) else [inner]
        out = self.seq(parts, cyclic=True)
        for a in reversed(chain):
            out = a.replace(body=out)
        return out

    def seq(self, parts, cyclic: bool):
        parts = [self.stmt(p) for p in parts]
        accs = [self.accesses(p) for p in parts]
        out, pending = [], _Accesses()
        first = None                       # accesses before the first barrier (cyclic case)
        for p, acc in zip(parts, accs):
            if pending.conflicts(acc):
                out.append(self._barrier(acc | pending))
                if first is None:
                    first = pending
                pending = _Accesses()
            out.append(p)
            pending.add(acc)
            if _ends_with_barrier(p):
                if first is None:
                    first = pending
                pending = _Accesses()
        if cyclic:
            head = first if first is not None else pending
            if pending.conflicts(head):
                out.insert(0, self._barrier(pending))
        return SeqStmt.flatten(out)

    def _barrier(self, acc):
        if self.divergent:
            raise IRError("a barrier is needed for shared buffer(s) "
                          + ", ".join(sorted(str(b.name) for b in acc.reads | acc.writes))
                          + " inside a branch or loop that depends on a thread index, where "
                          "not every thread would reach it; compute the shared stage (or the "
                          "cross-thread reduction) outside the guarded region")
        return barrier()


def _ends_with_barrier(s) -> bool:
    last = s.seq[-1] if isinstance(s, SeqStmt) else s
    return is_barrier(last)

