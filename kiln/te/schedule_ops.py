"""From a bound-inferred schedule to a loop program over flat buffers.

Each computed stage becomes a loop nest over its leaf loops; stages attached with compute_at
are emitted (with their temporary buffer) inside their host loop, before the rest of the
host's body; reductions get an init nest and an update nest.
"""
from __future__ import annotations

from ..tir import dtype as dt
from ..tir.buffer import Buffer
from ..tir.expr import BufferLoad, IntImm, Range, Var
from ..tir.functor import IRMutator, substitute, uses_var
from ..tir.op import IRError, all_, convert, equal, less, likely
from ..tir.stmt import (Allocate, BufferStore, For, IfThenElse, SeqStmt,
                         ThreadAllReduce)
from ..tir.transform.inject_prefetch import PREFETCH_KEY
from ..tir.transform.thread_allreduce import store_combined
from .bound import counter_range, enclosing_loops, storage_scope
from .relations import inexact_splits, is_reduce, pass_up_index
from .schedule import ScheduleError
from .tensor import ComputeOp
from .tensorize import lower_tensorized, tensorized_leaf

# Elements above which a temporary whose extent depends on symbolic sizes alone is allocated at
# its exact size rather than at the bound the sizes' declared ranges give.
LARGE_TEMPORARY = 1 << 16


class Layout:
    """Where a tensor lives: a flat buffer, the region's origin, and per-dimension strides."""

    __slots__ = ("buffer", "mins", "strides", "alloc", "owner")

    def __init__(self, buffer, mins, strides, alloc, owner):
        self.buffer, self.mins, self.strides, self.alloc, self.owner = buffer, mins, strides, alloc, owner

    def offset(self, indices):
        off = convert(0, "int32")
        for i, m, s in zip(indices, self.mins, self.strides):
            off = off + (i - m) * s
        return off


def _compact_strides(shape, align=None):
    strides, acc = [None] * len(shape), convert(1)
    for k in range(len(shape) - 1, -1, -1):
        if align and k in align:
            factor, offset = align[k]
            # Round acc up so that acc % factor == offset.
            acc = ((acc + factor - offset - 1) // factor) * factor + offset
        strides[k] = acc
        acc = acc * shape[k]
    return strides, acc


class _LowerLoads(IRMutator):
    def __init__(self, layouts):
        super().__init__()
        self.layouts = layouts

    def visit_ProducerLoad(self, e):
        layout = self.layouts.get(e.producer)
        if layout is None:
            raise IRError(f"tensor '{e.producer.name}' is read but is neither computed here nor "
                          "given as an argument; add it to the argument list")
        indices = [self.visit(i) for i in e.indices]
        return BufferLoad(layout.buffer, layout.offset(indices))


class Builder:
    def __init__(self, sch, eff, ranges, arg_buffers, analyzer_factory):
        self.sch, self.eff, self.ranges = sch, eff, ranges
        self.layouts: dict = {}
        self.attached: dict = {}
        self.lowerer = None
        self.launch: dict = {}
        self.uniform_extents: dict = {}     # loop -> extent replacing one that varies by thread
        self.new_analyzer = analyzer_factory
        self._plan_layouts(arg_buffers)

    # ------------------------------------------------------------------ memory
    def _plan_layouts(self, arg_buffers):
        for tensor, buf in arg_buffers.items():
            strides = buf.strides()
            self.layouts[tensor] = Layout(buf, [convert(0)] * len(buf.shape), list(strides), None, None)
        for st in self.sch.stages:
            if not isinstance(st.op, ComputeOp) or st.attach_type == "inline":
                continue
            if st.attach_type == "scope":
                self.attached.setdefault((st.attach_stage, st.attach_ivar), []).append(st)
            for t in st.op.outputs:
                if t in self.layouts:
                    continue
                self.layouts[t] = self._temporary(st, t)
        self.lowerer = _LowerLoads(self.layouts)

    def _temporary(self, st, tensor):
        region = [self.ranges[iv] for iv in st.op.axis]
        ana = self.new_analyzer()
        for _, iv in enclosing_loops(st):
            ana.bind(iv.var, counter_range(self.ranges[iv]))
        extents = [self._upper_bound(r.extent, self.ranges.unclipped.get(iv), st, ana)
                   for iv, r in zip(st.op.axis, region)]
        if not all(isinstance(e, IntImm) for e in (r.extent for r in region)):
            extents = self._exact_if_large(extents, region, st, ana)
        strides, size = _compact_strides(extents, st.align_info)
        size = ana.simplify(size) if extents else convert(1)
        name = tensor.name
        buf = Buffer.make(name, tensor.dtype, (size,), scope=storage_scope(st))
        return Layout(buf, [r.min for r in region], [ana.simplify(s) for s in strides], size, st)

    def _exact_if_large(self, extents, region, st, ana):
        """A large temporary over symbolic sizes (a padded copy of a symbolic batch) gets its
        exact size, not that of the largest size the declared ranges allow; an axis whose
        extent varies with the loops around it keeps its bound."""
        total = 1
        for e in extents:
            total = total * e.value if isinstance(e, IntImm) and total is not None else None
        if total is not None and total <= LARGE_TEMPORARY:
            return extents
        loops = {iv.var for _, iv in enclosing_loops(st)}
        return [ana.simplify(r.extent) if not uses_var(r.extent, loops) else e
                for e, r in zip(extents, region)]

    def _upper_bound(self, extent, unclipped, st, ana):
        bounds = [ana.const_int_bound(e).max_value for e in (extent, unclipped) if e is not None]
        finite = [b for b in bounds if isinstance(b, int)]
        if finite:
            return convert(min(finite), extent.dtype)
        from ..arith import IntervalSet, eval_set
        s = IntervalSet.single_point(extent)
        for _, iv in reversed(enclosing_loops(st)):
            r = counter_range(self.ranges[iv])
            dom = {iv.var: IntervalSet(r.min, r.min + r.extent - 1)}
            s = eval_set(s.max, dom)
            if s.is_everything():
                raise IRError(f"cannot bound the size of the buffer of stage '{st.op.name}' "
                              f"(extent `{extent}`); compute it at an outer loop")
        return ana.simplify(s.max)

    def _buffer_of(self, tensor, primitive):
        layout = self.layouts.get(tensor)
        if layout is None:
            raise IRError(f"{primitive} of tensor '{tensor.name}', which is neither computed here "
                          "nor given as an argument")
        return layout.buffer

    def _realize(self, st, body):
        """Wrap body in the allocations of the stage's temporaries."""
        for t in st.op.outputs:
            layout = self.layouts[t]
            if layout.owner is st:
                body = Allocate(layout.buffer, layout.alloc, body)
        return body

    # ------------------------------------------------------------------ loop nests
    def _loop(self, st, iv, body):
        r = self.ranges[iv]
        if iv in self.uniform_extents:
            r = Range(r.min, self.uniform_extents[iv])
        attrs = st.iter_var_attrs.get(iv, {})
        kind = attrs.get("kind") or "serial"
        ann = tuple((f"pragma_{n}", v) for n, v in attrs.get("pragmas", ()))
        if attrs.get("prefetch"):
            ann += ((PREFETCH_KEY, tuple((self._buffer_of(t, "prefetch"), d)
                                       for t, d in attrs["prefetch"])),)
        thread = attrs.get("thread_ivar")
        if thread is not None and not thread.thread_tag.startswith("vthread"):
            self._check_launch(st, iv, thread.thread_tag, r.extent)
        if thread is not None and thread.dom is not None:
            declared = thread.dom.extent
            if not (isinstance(declared, IntImm) and isinstance(r.extent, IntImm)
                    and declared.value == r.extent.value):
                raise ScheduleError(f"bind on stage '{st.op.name}': axis '{iv.var.name}' has "
                                    f"extent {r.extent}, but its thread axis "
                                    f"'{thread.var.name}' was declared with extent {declared}")
        return For(iv.var, convert(0, r.extent.dtype), r.extent, kind, body, attrs.get("thread", ""), ann)

    def _check_launch(self, st, iv, tag, extent):
        """Loops bound to one tag in one kernel (a root stage's nest) are one hardware index:
        their extents must agree."""
        seen = self.launch.setdefault(tag, (st, iv, extent))
        other, other_iv, other_extent = seen
        if other_extent is not extent and str(other_extent) != str(extent):
            raise ScheduleError(
                f"bind on stage '{st.op.name}': axis '{iv.var.name}' is bound to {tag} with "
                f"extent {extent}, but stage '{other.op.name}' binds axis '{other_iv.var.name}' "
                f"to it with extent {other_extent} in the same kernel; split both by the same "
                f"factor")

    def _with_attached(self, st, iv, body):
        stages = self.attached.get((st, iv))
        if not stages:
            return body
        order = [s for s in self.sch.stages if s in stages]
        body = SeqStmt.flatten([self.nest(p) for p in order] + [body])
        for p in reversed(order):
            body = self._realize(p, body)
        return body

    def _wrap(self, st, leaves, body, attach=True):
        for iv in reversed(leaves):
            if attach:
                body = self._with_attached(st, iv, body)
            body = self._loop(st, iv, body)
        return body

    def nest(self, st):
        """The loop nest computing stage `st` (with the stages attached inside it)."""
        values = {iv: self.ranges[iv].min + iv.var for iv in st.leaf_iter_vars}
        pass_up_index(st.relations, self.ranges, values)
        op = st.op
        vmap = {iv.var: values[iv] for iv in op.axis + op.reduce_axis}
        guards = {iv: likely(less(values[iv], self.ranges[iv].min + self.ranges[iv].extent))
                  for iv in inexact_splits(st.relations, self.ranges, self.new_analyzer())}
        out_index = [vmap[iv.var] for iv in op.axis]
        layouts = [self.layouts[t] for t in op.outputs]
        lower = lambda e: self.lowerer.visit(substitute(e, vmap))  # noqa: E731
        tensorized = tensorized_leaf(st)
        if tensorized is not None:
            return lower_tensorized(self, st, *tensorized, values, guards,
                                    lambda: self._bodies(st, layouts, out_index, guards, lower))
        if op.reduce_axis:
            return self._reduction(st, layouts, out_index, guards, lower)
        _, stmt = self._bodies(st, layouts, out_index, guards, lower)
        return self._wrap(st, st.leaf_iter_vars, stmt)

    def _bodies(self, st, layouts, out_index, guards, lower):
        """What one iteration of the leaf loops does, guarded: (init, update) of a
        reduction, (None, store) otherwise."""
        offsets = [l.offset(out_index) for l in layouts]
        if not st.op.reduce_axis:
            stmt = SeqStmt.flatten([BufferStore(l.buffer, lower(b), off)
                                    for l, b, off in zip(layouts, self.eff[st], offsets)])
            return None, _guard(stmt, guards.values())
        red = self.eff[st][0]
        comb = red.combiner
        update = store_combined(comb, [(l.buffer, off) for l, off in zip(layouts, offsets)],
                                [lower(s) for s in red.source], st.op.name)
        update = _guard(update, list(guards.values()) + [lower(red.condition)])
        init = SeqStmt.flatten([BufferStore(l.buffer, lower(v), off) for l, v, off
                                in zip(layouts, red.init or comb.identity, offsets)])
        return _guard(init, [g for iv, g in guards.items() if not is_reduce(iv)]), update

    def _reduction(self, st, layouts, out_index, guards, lower):
        """Init nest over the data loops inside the outermost reduction loop, then update nest."""
        leaves = st.leaf_iter_vars
        by_threads = [iv for iv in leaves if is_reduce(iv) and _thread_tag(st, iv)]
        if by_threads:
            red = self.eff[st][0]
            offsets = [l.offset(out_index) for l in layouts]
            return self._cross_thread_reduction(st, layouts, offsets,
                                                [lower(s) for s in red.source],
                                                lower(red.condition), guards, by_threads)
        init, update = self._bodies(st, layouts, out_index, guards, lower)
        return self._reduction_nest(st, leaves, init, update)

    def _reduction_nest(self, st, leaves, init, update):
        """The loops `leaves` of a reduction: init over the data loops inside the first
        reduction loop, then the update."""
        first = next(k for k, iv in enumerate(leaves) if is_reduce(iv))
        inner = leaves[first:]
        init_nest = self._wrap(st, [iv for iv in inner if not is_reduce(iv)], init, attach=False)
        update_nest = self._wrap(st, inner, update)
        return self._wrap(st, leaves[:first], SeqStmt.flatten(init_nest, update_nest))

    def _cross_thread_reduction(self, st, layouts, offsets, sources, cond, guards, by_threads):
        """A reduction whose axes are partly bound to threadIdx: each thread reduces its share
        (the reduction loops not bound) into registers, then a ThreadAllReduce combines the
        threads' shares. Every thread takes part in the all-reduce, even one whose output
        element is out of range (it contributes the identity), since the all-reduce waits at
        barriers for all of them; only the store is guarded."""
        red = self.eff[st][0]
        comb = red.combiner
        name = st.op.name
        if red.init:
            raise ScheduleError(f"bind on stage '{name}': a reduction with an initial value "
                                "cannot be shared by threads (each thread would add it); bind "
                                "a data axis instead")
        for host, iv in enclosing_loops(st) + [(st, iv) for iv in st.leaf_iter_vars]:
            if _thread_tag(host, iv, "vthread"):
                raise ScheduleError(f"bind on stage '{name}': its reduction is bound to "
                                    f"threads inside virtual thread '{iv.var.name}' (of stage "
                                    f"'{host.op.name}'); the virtual threads would share one "
                                    "all-reduce, so compute the stage outside it")
        partials = [Buffer.make(f"{name}_partial{k}", r.dtype, (1,), scope="local")
                    for k, r in enumerate(comb.result)]
        zero = convert(0, "int32")
        init = SeqStmt.flatten([BufferStore(p, v, zero) for p, v in zip(partials, comb.identity)])
        own = [iv for iv in st.leaf_iter_vars if is_reduce(iv) and iv not in by_threads]
        outer = [iv for iv in st.leaf_iter_vars if iv not in own]
        uniform = self._uniform_loops(st, outer)
        update = _guard(store_combined(comb, [(p, zero) for p in partials], sources, name),
                        list(guards.values()) + uniform + [cond])
        results = [Var(f"{name}_red{k}", p.dtype) for k, p in enumerate(partials)]
        store = SeqStmt.flatten([BufferStore(l.buffer, r, off)
                                 for l, r, off in zip(layouts, results, offsets)])
        store_guards = [g for iv, g in guards.items() if not is_reduce(iv)] + uniform
        if layouts[0].buffer.scope != "local":
            # A buffer the threads share gets one write, by the first thread of the group.
            store_guards += [equal(iv.var, 0) for iv in by_threads]
        allreduce = ThreadAllReduce(comb, tuple(BufferLoad(p, zero) for p in partials),
                                    tuple(iv.var for iv in by_threads), tuple(results),
                                    _guard(store, store_guards))
        body = SeqStmt.flatten(init, self._wrap(st, own, update), allreduce)
        for p in partials:
            body = Allocate(p, convert(1, "int32"), body)
        return self._wrap(st, outer, body)

    def _uniform_loops(self, st, loops):
        """Every thread must reach a cross-thread reduction's barriers, so a loop around it
        whose extent varies by thread (a tile clipped at the tensor's edge) runs to its
        largest extent instead; returns the guards that skip the extra iterations."""
        ana = self.new_analyzer()
        for _, iv in enclosing_loops(st):
            ana.bind(iv.var, counter_range(self.ranges[iv]))
        guards = []
        for iv in loops:
            extent = self.ranges[iv].extent
            if isinstance(extent, IntImm) or _thread_tag(st, iv):
                continue
            most = ana.const_int_bound(extent).max_value
            if not isinstance(most, int):
                raise ScheduleError(f"bind on stage '{st.op.name}': loop '{iv.var.name}' around "
                                    f"its cross-thread reduction has extent `{extent}`, which "
                                    "differs between threads and has no bound; every thread "
                                    "must take part in each reduction")
            self.uniform_extents[iv] = convert(most, extent.dtype)
            guards.append(less(iv.var, extent))
        return guards

    def program(self):
        roots = [st for st in self.sch.stages
                 if isinstance(st.op, ComputeOp) and st.attach_type == "root"]
        nests = []
        for st in roots:
            self.launch = {}       # thread tag -> (stage, axis, extent) within this root's nest
            nests.append(self.nest(st))
        body = SeqStmt.flatten(nests)
        for st in reversed(roots):
            body = self._realize(st, body)
        return body


def _thread_tag(st, iv, prefix="threadIdx") -> str:
    """The tag of the thread index loop `iv` of stage `st` is bound to, when it starts with
    `prefix`; else ''."""
    tag = st.iter_var_attrs.get(iv, {}).get("thread") or ""
    return tag if tag.startswith(prefix) else ""


def _is_true(cond) -> bool:
    return getattr(cond, "value", None) == 1 and dt.is_bool(cond.dtype)


def _guard(stmt, conds):
    conds = [c for c in conds if not _is_true(c)]
    if not conds:
        return stmt
    return IfThenElse(all_(*conds), stmt)


def schedule_to_stmt(sch, eff, ranges, arg_buffers):
    """The loop program of a bound-inferred schedule.

    Example:
        >>> stmt = schedule_to_stmt(s, eff, ranges, {A: bufA, C: bufC})  # doctest: +SKIP
    """
    from ..arith import Analyzer
    return Builder(sch, eff, ranges, arg_buffers, Analyzer).program()

