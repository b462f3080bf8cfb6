"""Inject prefetch: turn a loop's `prefetch` annotation (Stage.prefetch) into prefetch
instructions spread over the iterations inside the loop.

A loop annotated `prefetch=((buf, d),)` reads a region of `buf` in each of its iterations.
While iteration i runs, the lines of the region that iteration i + d reads are prefetched a
few at a time: one step at the top of each iteration of the loops inside i that enclose every
read of `buf` (the chain down to the innermost such loop, or less deep where more steps than
4 per line would only repeat requests), so the memory system sees a steady trickle of requests
instead of a burst. (A dense layer's weight panel of 96 KB requested in one
burst at the top of the iteration ran no faster than without prefetch; spread over the k loop
it ran 24% faster with its weights evicted.)

The region is the flat interval [lo, hi] of buf's indices read in one iteration (a superset
when the reads are strided); each step prefetches ceil(span / N) elements, N the iterations of
the chain, rounded to cache lines. Indices are clamped into the buffer (the last iterations
prefetch past the loop's end), and the prefetch hint is for the L2 and outer caches (the
region is for a later iteration, not the next few instructions).

Before:
    for p in range(96) prefetch=((W, 1),):
      for io in range(16):
        for ko in range(192):
          ... W[ramp(p*24576 + ko*128, 1, 32)] ...
After:
    for p in range(96):
      for io in range(16):
        for ko in range(192):
          prefetch(W[min(p*24576 + 24576 + (io*192 + ko)*8, 2359295)])
          ...
"""
from __future__ import annotations

from ...arith import Analyzer, IntervalSet, eval_set, union
from .. import dtype as dt
from ..expr import BufferLoad, IntImm, Range, Var
from ..function import PrimFunc
from ..functor import IRMutator, free_vars, post_order_visit, substitute
from ..op import IRError, cast, const, min_, prefetch
from ..stmt import Allocate, AttrStmt, For, LetStmt, SeqStmt

PREFETCH_KEY = "prefetch"
CACHE_LINE_BYTES = 64
MAX_UNROLLED_LINES = 4      # more lines per step: a loop of prefetches
MAX_STEPS_PER_LINE = 4      # the spread stops at the loop depth that would exceed it


def inject_prefetch(func):
    """Lower every `prefetch` loop annotation of func (see the module docstring).

    Example:
        >>> f = inject_prefetch(lowered)   # doctest: +SKIP
    """
    if isinstance(func, PrimFunc):
        return func.with_body(_Injector().visit(func.body))
    return _Injector().visit(func)


def _reads(stmt, buf) -> int:
    """How many loads of buf the statement holds."""
    count = [0]

    def visit(n):
        if isinstance(n, BufferLoad) and n.buffer is buf:
            count[0] += 1
    post_order_visit(stmt, visit)
    return count[0]


def _top_loops(stmt) -> list:
    """The loops of stmt not nested in another loop of it (through sequences, allocations,
    lets and attributes)."""
    if isinstance(stmt, For):
        return [stmt]
    if isinstance(stmt, SeqStmt):
        return [f for s in stmt.seq for f in _top_loops(s)]
    if isinstance(stmt, (Allocate, LetStmt, AttrStmt)):
        return _top_loops(stmt.body)
    return []


def _chain(body, buf) -> list:
    """The serial loops of constant extent, outermost first, each the one loop of its parent
    that encloses every read of buf."""
    chain, stmt = [], body
    total = _reads(stmt, buf)
    while True:
        reading = [f for f in _top_loops(stmt) if _reads(f, buf)]
        if (len(reading) != 1 or _reads(reading[0], buf) != total or reading[0].kind != "serial"
                or not isinstance(reading[0].extent, IntImm)):
            return chain
        chain.append(reading[0])
        stmt = reading[0].body


def _region(loop, body, buf) -> IntervalSet:
    """The flat indices of buf read in one iteration of loop, in terms of its variable."""
    dom, indices = {}, []

    def visit(n):
        if isinstance(n, For):
            dom[n.loop_var] = IntervalSet(n.min, n.min + n.extent - 1)
        elif isinstance(n, BufferLoad) and n.buffer is buf:
            indices.append(n.index)
    post_order_visit(body, visit)
    region = union([eval_set(index, dom) for index in indices])
    # Only what is known at the top of the loop's body may appear: the loop's variable and
    # what the loop itself does not bind (the region is evaluated deeper, but for the loop's
    # next iterations).
    known = set(free_vars(loop)) | {loop.loop_var}
    if (region.is_everything() or region.min is None or region.max is None
            or not set(free_vars(region.min)) | set(free_vars(region.max)) <= known):
        raise IRError(f"prefetch of '{buf.name}' at loop '{loop.loop_var.name}': cannot bound "
                      "the region of it that one iteration reads")
    return region


class _Injector(IRMutator):
    def visit_For(self, s):
        body = self.visit(s.body)
        keep = tuple((k, v) for k, v in s.annotations if k != PREFETCH_KEY)
        for key, value in s.annotations:
            if key == PREFETCH_KEY:
                for buf, distance in value:
                    body = _inject(s, body, buf, distance)
        if body is s.body and keep == s.annotations:
            return s
        return For(s.loop_var, s.min, s.extent, s.kind, body, s.thread_tag, keep)


def _inject(loop, body, buf, distance: int):
    if not _reads(body, buf):
        raise IRError(f"prefetch of '{buf.name}' at loop '{loop.loop_var.name}': the loop does "
                      "not read it")
    region = _region(loop, body, buf)
    ahead = {loop.loop_var: loop.loop_var + distance}
    lo = substitute(region.min, ahead)
    ana = Analyzer()
    ana.bind(loop.loop_var, Range(loop.min, loop.extent))
    span = ana.const_int_bound(region.max - region.min + 1).max_value
    if not isinstance(span, int):
        raise IRError(f"prefetch of '{buf.name}' at loop '{loop.loop_var.name}': the region one "
                      "iteration reads has no constant bound")
    line = max(1, CACHE_LINE_BYTES // dt.bytes_of(buf.dtype))
    chain, steps = [], 1
    for f in _chain(body, buf):
        # Deeper loops would only repeat requests for the same lines.
        if steps * f.extent.value > MAX_STEPS_PER_LINE * -(-span // line):
            break
        chain.append(f)
        steps *= f.extent.value
    step_index = const(0, lo.dtype)
    for f in chain:
        step_index = step_index * f.extent.value + (f.loop_var - f.min)
    per_step = -(-span // steps)
    lines = -(-per_step // line)
    last = _flat_size(buf, lo.dtype) - 1
    start = lo + step_index * per_step
    if lines <= MAX_UNROLLED_LINES:
        stmts = [prefetch(buf, min_(start + j * line, last)) for j in range(lines)]
        fetch = SeqStmt.flatten(*stmts)
    else:
        j = Var("prefetch.j", lo.dtype)
        fetch = For(j, const(0, lo.dtype), const(lines, lo.dtype), "serial",
                    prefetch(buf, min_(start + j * line, last)))
    return _place(body, chain, fetch)


def _flat_size(buf, dtype):
    size = const(1, dtype)
    for extent in buf.shape:
        size = size * (extent if extent.dtype == dtype else cast(extent, dtype))
    return size


def _place(stmt, chain, fetch):
    """stmt with fetch at the top of the body of chain's last loop (at its top if no chain)."""
    if not chain:
        return SeqStmt.flatten(fetch, stmt)
    target = chain[0]

    class Put(IRMutator):
        def visit_For(self, s):
            if s is target:
                return For(s.loop_var, s.min, s.extent, s.kind, _place(s.body, chain[1:], fetch),
                           s.thread_tag, s.annotations)
            return s
    return Put().visit(stmt)
