"""Cross-thread reductions (ThreadAllReduce) as a tree in shared memory.

Runs after bind_threads, when a kernel's thread indices and their extents are known. Every
thread of the block stores its value into its own slot of a shared buffer; the slots of one
group (the threads that differ only in the reduced indices) are then combined pairwise,
halving the distance each step, until the group's first slot holds the result, which every
thread reads. thread_sync puts a barrier between the steps (each reads what the previous
wrote). All threads of the kernel get a slot, also those whose indices the reduction does not
mention: they compute the same values and must not combine into each other's slots.

Before (threadIdx.x of extent 4 reduced):
    s = thread_allreduce(comm_reducer((x), (y) => (x + y), ...), [p[0]], threads=[threadIdx.x])
    if threadIdx.x == 0: B[blockIdx.x] = s
After:
    red = allocate(float32, [4], scope='shared')
    red[threadIdx.x] = p[0]
    if threadIdx.x < 2: red[threadIdx.x] = red[threadIdx.x] + red[threadIdx.x + 2]
    if threadIdx.x < 1: red[threadIdx.x] = red[threadIdx.x] + red[threadIdx.x + 1]
    s = red[0]
    if threadIdx.x == 0: B[blockIdx.x] = s
"""
from __future__ import annotations

from ..buffer import Buffer
from ..expr import BufferLoad, Var
from ..function import PrimFunc
from ..functor import IRMutator, substitute
from ..op import IRError, all_, convert, less
from ..stmt import Allocate, BufferStore, IfThenElse, LetStmt, SeqStmt
from .bind_threads import THREAD_EXTENT


def lower_thread_allreduce(func):
    """Lower every ThreadAllReduce of every kernel to a shared-memory tree.

    Example:
        >>> f = thread_sync(lower_thread_allreduce(bind_threads(f)))   # doctest: +SKIP
    """
    body = func.body if isinstance(func, PrimFunc) else func
    out = _Lower().visit(body)
    return func.with_body(out) if isinstance(func, PrimFunc) else out


def store_combined(comb, places, values, name: str):
    """The statement storing comb(old, values) into (buffer, index) places, one per result of
    the combiner; a tuple reduction reads every old value before it writes any.

    Example:
        >>> store_combined(sum_reducer, [(acc, 0)], [A[i]], "acc")   # doctest: +SKIP
        acc[0] = acc[0] + A[i]
    """
    loads = [BufferLoad(buf, off) for buf, off in places]
    results = [substitute(r, {**dict(zip(comb.lhs, loads)), **dict(zip(comb.rhs, values))})
               for r in comb.result]
    if len(results) == 1:
        return BufferStore(places[0][0], results[0], places[0][1])
    temps = [Var(f"{name}_v{k}", r.dtype) for k, r in enumerate(results)]
    update = SeqStmt.flatten([BufferStore(buf, t, off) for (buf, off), t in zip(places, temps)])
    for t, r in reversed(list(zip(temps, results))):
        update = LetStmt(t, r, update)
    return update


class _Lower(IRMutator):
    def __init__(self):
        super().__init__()
        self.threads: dict = {}            # threadIdx variable of the kernel -> extent

    def visit_AttrStmt(self, s):
        if s.key == THREAD_EXTENT and s.node.name.startswith("threadIdx"):
            self.threads[s.node] = s.value.value
            out = self.generic_visit(s)
            del self.threads[s.node]
            return out
        return self.generic_visit(s)

    def visit_ThreadAllReduce(self, s):
        body = self.visit(s.body)
        unknown = [v.name for v in s.threads if v not in self.threads]
        if unknown:
            raise IRError(f"a cross-thread reduction over {', '.join(unknown)} outside a kernel "
                          "that launches those threads")
        reduced = list(s.threads)
        group = [v for v in self.threads if v not in reduced]
        r_index, r_size = _flat(reduced, self.threads)
        g_index, g_size = _flat(group, self.threads)
        slot = g_index * r_size + r_index
        bufs = [Buffer.make(f"red_buf{k}", v.dtype, (g_size * r_size,), scope="shared")
                for k, v in enumerate(s.values)]
        steps = [SeqStmt.flatten([BufferStore(b, v, slot) for b, v in zip(bufs, s.values)])]
        offset = 1                            # the largest power of two below r_size
        while offset * 2 < r_size:
            offset *= 2
        while offset >= 1 and r_size > 1:
            partner = [BufferLoad(b, slot + offset) for b in bufs]
            cond = all_(less(r_index, offset), less(r_index + offset, r_size))
            steps.append(IfThenElse(cond, store_combined(s.combiner, [(b, slot) for b in bufs],
                                                         partner, "red")))
            offset //= 2
        for var, b in reversed(list(zip(s.results, bufs))):
            body = LetStmt(var, BufferLoad(b, g_index * r_size), body)
        out = SeqStmt.flatten(steps + [body])
        for b in bufs:
            out = Allocate(b, convert(g_size * r_size, "int32"), out)
        return out


def _flat(threads, extents):
    """The row-major index over `threads` (first outermost) and its extent."""
    index, size = convert(0, "int32"), 1
    for v in threads:
        index = index * extents[v] + v
        size *= extents[v]
    return index, size


