"""Storage rewrite: temporaries whose lifetimes do not overlap share one allocation.

Before:
    T1 = allocate(float32, [64], scope='local')
    T2 = allocate(float32, [32], scope='local')
    for i in range(64):
      T1[i] = A[i]*2.0f
    for i in range(32):
      B[i] = T1[i] + T1[i + 32]
    for i in range(32):
      T2[i] = B[i] + 1.0f
    for i in range(32):
      C[i] = T2[i]
After:
    T1 = allocate(float32, [64], scope='local')
    ...                      (the T2 loops now read and write T1)

The unit of time is a statement of a sequence: a buffer allocated around a SeqStmt (directly, or
by an Allocate that is itself one of the statements) lives from the first to the last
statement that touches it. Two buffers merge when those spans do not overlap, they have the same
dtype and scope (not GPU shared memory), and constant sizes; the shared buffer has the larger size. An allocation
hoisted out of a statement of the sequence to merge with another never crosses a loop, so an
Allocate inside a parallel loop body stays per iteration (per thread). Allocations never
touched are dropped. Buffers whose data pointer is used other than by loads and stores are
left alone.
"""
from __future__ import annotations

from ..expr import BufferLoad, IntImm, Var
from ..function import PrimFunc
from ..functor import IRMutator, post_order_visit
from ..stmt import (Allocate, AssertStmt, AttrStmt, BufferStore, For, IfThenElse, LetStmt,
                    SeqStmt)


def storage_rewrite(node):
    """Let temporaries with disjoint lifetimes share memory (see the module docstring).

    Example:
        >>> from kiln.tir import Buffer, BufferLoad, BufferStore, SeqStmt, Allocate, const
        >>> T1, T2 = (Buffer.make(n, "int32", (4,), "local") for n in ("T1", "T2"))
        >>> A = Buffer.make("A", "int32", (4,))
        >>> body = SeqStmt((BufferStore(T1, const(1), const(0)),
        ...                 BufferStore(A, BufferLoad(T1, const(0)), const(0)),
        ...                 BufferStore(T2, const(2), const(0)),
        ...                 BufferStore(A, BufferLoad(T2, const(0)), const(1))))
        >>> print(storage_rewrite(Allocate(T1, const(4), Allocate(T2, const(4), body))))
        T1 = allocate(int32, [4], scope='local')
        T1[0] = 1
        A[0] = T1[0]
        T1[0] = 2
        A[1] = T1[0]
    """
    if isinstance(node, PrimFunc):
        return node.with_body(_visit(node.body))
    return _visit(node)


def _visit(s):
    if isinstance(s, (Allocate, SeqStmt)):
        chain, inner = _peel(s)
        if isinstance(inner, SeqStmt):
            return _merge(chain, [_visit(c) for c in inner.seq], True)
        return _merge(chain, [_visit(inner)], False)
    if isinstance(s, IfThenElse):
        other = None if s.else_case is None else _visit(s.else_case)
        return IfThenElse(s.condition, _visit(s.then_case), other)
    if isinstance(s, (For, LetStmt, AttrStmt, AssertStmt)):
        return s.replace(body=_visit(s.body))
    return s


def _peel(s):
    """Split a chain of nested Allocates from the statement they wrap."""
    chain = []
    while isinstance(s, Allocate):
        chain.append(s)
        s = s.body
    return chain, s


class _Usage:
    """Which buffers each statement of the sequence touches, and which need to stay put."""

    def __init__(self, children):
        self.touched = []
        self.var_uses: set = set()
        self.allocated: set = set()     # data vars allocated below the candidates
        self.views: dict = {}           # data var -> Buffer objects that load / store it
        for child in children:
            seen: set = set()
            self.touched.append(seen)
            post_order_visit(child, lambda n, seen=seen: self._note(n, seen))

    def _note(self, n, seen):
        if isinstance(n, (BufferLoad, BufferStore)):
            seen.add(n.buffer.data)
            self.views.setdefault(n.buffer.data, set()).add(n.buffer)
        elif isinstance(n, Var):
            self.var_uses.add(n)
        elif isinstance(n, Allocate):
            self.allocated.add(n.buffer.data)

    def span(self, buf):
        hits = [k for k, seen in enumerate(self.touched) if buf.data in seen]
        return (hits[0], hits[-1]) if hits else None

    def pinned(self, buf) -> bool:
        """Used through its raw pointer, through another Buffer object, or allocated again."""
        return (buf.data in self.var_uses or buf.data in self.allocated
                or not self.views.get(buf.data, {buf}) <= {buf})


class _Slot:
    def __init__(self, alloc, span):
        self.members = [alloc]
        self.last = span[1]
        self.size = alloc.extent.value

    def fits(self, alloc, span):
        rep = self.members[0].buffer
        # Shared memory is never reused: another thread of the block may still read the old
        # tile when this one writes the new (thread_sync orders accesses to one buffer only).
        return (rep.dtype == alloc.buffer.dtype and rep.scope == alloc.buffer.scope
                and rep.scope != "shared" and self.last < span[0])


def _merge(chain, children, is_seq):
    child_chains = [_peel(c) for c in children]
    candidates = list(chain) + [a for allocs, _ in child_chains for a in allocs]
    # Usage is read below the candidate Allocates, so that an Allocate of the same buffer
    # deeper down (which pins it) is told apart from the candidate itself.
    usage = _Usage([inner for _, inner in child_chains])
    counts: dict = {}
    for a in candidates:
        counts[a.buffer.data] = counts.get(a.buffer.data, 0) + 1

    dropped, slots = set(), []
    spans = {a.buffer: usage.span(a.buffer) for a in candidates}
    order = sorted(range(len(candidates)),
                   key=lambda k: (spans[candidates[k].buffer] or (-1, -1))[0])
    for k in order:
        alloc = candidates[k]
        buf, span = alloc.buffer, spans[alloc.buffer]
        pinned = counts[buf.data] > 1 or usage.pinned(buf)
        if span is None and not pinned:
            dropped.add(buf)
            continue
        if pinned or not isinstance(alloc.extent, IntImm):
            continue
        slot = next((s for s in slots if s.fits(alloc, span)), None)
        if slot is None:
            slots.append(_Slot(alloc, span))
        else:
            slot.members.append(alloc)
            slot.last = span[1]
            slot.size = max(slot.size, alloc.extent.value)

    shared = [s for s in slots if len(s.members) > 1]
    bufmap, merged_allocs = {}, {}
    for slot in shared:
        rep = slot.members[0]
        new = rep.buffer
        if len(new.shape) != 1 or new.shape[0] is not IntImm(rep.extent.dtype, slot.size):
            new = rep.buffer.replace(shape=(IntImm(rep.extent.dtype, slot.size),))
        for a in slot.members:
            bufmap[a.buffer] = new
        merged_allocs[rep.buffer] = (new, IntImm(rep.extent.dtype, slot.size))
    gone = dropped | {a.buffer for s in shared for a in s.members[1:]}

    remap = _Remap(bufmap) if bufmap else None
    new_children = []
    for allocs, inner in child_chains:
        body = remap.visit(inner) if remap else inner
        for a in reversed(allocs):
            if a.buffer in gone or a.buffer in merged_allocs:
                continue
            body = a.replace(body=body)
        new_children.append(body)
    body = SeqStmt.flatten(*new_children) if is_seq else new_children[0]

    chain_bufs = {a.buffer for a in chain}
    for rep, (buf, extent) in merged_allocs.items():   # slots first used inside a statement
        if rep not in chain_bufs:
            body = Allocate(buf, extent, body)
    for a in reversed(chain):
        if a.buffer in gone:
            continue
        if a.buffer in merged_allocs:
            body = Allocate(*merged_allocs[a.buffer], body)
        else:
            body = a.replace(body=body)
    return body


class _Remap(IRMutator):
    def __init__(self, bufmap):
        super().__init__()
        self.bufmap = bufmap

    def visit_BufferLoad(self, e):
        index = self.visit(e.index)
        buf = self.bufmap.get(e.buffer, e.buffer)
        return e if buf is e.buffer and index is e.index else BufferLoad(buf, index)

    def visit_BufferStore(self, s):
        value, index = self.visit(s.value), self.visit(s.index)
        buf = self.bufmap.get(s.buffer, s.buffer)
        same = buf is s.buffer and value is s.value and index is s.index
        return s if same else BufferStore(buf, value, index)

