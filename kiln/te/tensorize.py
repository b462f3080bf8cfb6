"""Lowering of a tensorized loop nest: check that the loops under the tensorized axis compute
what the intrinsic declares, bind each operand's region to a buffer, and emit the intrinsic.

The intrinsic's axes pair with the stage's last axes (and its reduction axes with the stage's
last reduction axes), as in TVM: each paired axis must be covered exactly by the loops inside
the tensorized one, the other axes not at all. The stage's body, with its axes replaced by
(value at the region's start) + (intrinsic axis) and each load rebased to its region's start,
must then be the intrinsic's body. Every mismatch is a ScheduleError naming the stage, the
intrinsic and what differs.
"""
from __future__ import annotations

import math

from ..tir.expr import Add, IntImm, Mul, ProducerLoad, Reduce, Sub, Var
from ..tir.functor import IRMutator, free_vars, post_order_visit, substitute
from ..tir.node import Node
from ..tir.op import all_, convert, equal, floormod
from ..tir.stmt import IfThenElse, SeqStmt, Stmt
from .bound import counter_range, enclosing_loops
from .relations import Split, is_reduce
from .schedule import ScheduleError
from .tensor_intrin import BoundBuffer, is_any_stride, read_order


def tensorized_leaf(st):
    """(position, intrinsic) of the stage's tensorized leaf loop, or None."""
    for k, iv in enumerate(st.leaf_iter_vars):
        intrin = st.iter_var_attrs.get(iv, {}).get("tensorize")
        if intrin is not None:
            return k, intrin
    return None


class _Match:
    """One tensorize site: the stage, its loops and the analyzer that knows their ranges."""

    def __init__(self, builder, st, pos, intrin, values):
        self.b, self.st, self.intrin, self.values = builder, st, intrin, values
        self.outer, self.inner = st.leaf_iter_vars[:pos], st.leaf_iter_vars[pos:]
        self.ana = builder.new_analyzer()
        for _, iv in enclosing_loops(st):
            self.ana.bind(iv.var, counter_range(builder.ranges[iv]))
        for iv in st.leaf_iter_vars:
            self.ana.bind(iv.var, counter_range(builder.ranges[iv]))

    def error(self, message) -> ScheduleError:
        return ScheduleError(f"tensorize on stage '{self.st.op.name}' with intrinsic "
                             f"'{self.intrin.name}': {message}")

    # ------------------------------------------------------------------ loops
    def whole_tile(self, guards):
        """Conditions on the outer loops under which the loops inside run whole (the
        intrinsic's case; otherwise the plain loops run), as (all of them, those of data
        axes): a loop clipped at a tensor's edge runs to its constant bound, and a guard of a
        split that does not divide holds at the last iteration."""
        b, st = self.b, self.st
        inner_last, full, full_data = {}, [], []
        split_factor = {r.inner: r.factor.value for r in st.relations
                        if isinstance(r, Split) and isinstance(r.factor, IntImm)}
        for iv in self.inner:
            extent = b.ranges[iv].extent
            for other in b.attached.get((st, iv), ()):
                raise self.error(f"stage '{other.op.name}' is computed at loop '{iv.var.name}', "
                                 "inside the tensorized loops; compute it at an outer loop")
            most = extent.value if isinstance(extent, IntImm) else \
                self.ana.const_int_bound(extent).max_value
            if not isinstance(most, int):
                raise self.error(f"loop '{iv.var.name}' inside the tensorized loop has extent "
                                 f"`{extent}`, which has no constant bound")
            # An axis shorter than its split factor clips the inner loop: the tile is cut.
            most = max(most, split_factor.get(iv, 0))
            inner_last[iv.var] = convert(most - 1, iv.var.dtype)
            if not (isinstance(extent, IntImm) and extent.value == most):
                cond = equal(extent, convert(most, extent.dtype))
                full.append(cond)
                if not is_reduce(iv):
                    full_data.append(cond)
        for iv, g in guards.items():
            if any(v in inner_last for v in free_vars(g)):
                cond = self.ana.simplify(substitute(g, inner_last))
                full.append(cond)
                if not is_reduce(iv):
                    full_data.append(cond)
        for iv in self.inner:
            self.ana.bind(iv.var, (0, inner_last[iv.var]))
        self.inner_extents = [inner_last[iv.var].value + 1 for iv in self.inner]
        return full, full_data

    def cover(self):
        """Per root axis: (value at the region's start, iterations covered inside)."""
        inner_zero = {iv.var: convert(0, iv.var.dtype) for iv in self.inner}
        covered = {}
        for ax in self.st.op.axis + self.st.op.reduce_axis:
            v = self.values[ax]
            base = self.ana.simplify(substitute(v, inner_zero))
            bound = self.ana.const_int_bound(self.ana.simplify(v - base))
            covered[ax] = (base, bound.max_value + 1)
        return covered

    def pair_axes(self, covered):
        """{stage axis: intrinsic axis or None}, checking extents and coverage."""
        op, iop = self.st.op, self.intrin.op
        pairs = {}
        for mine, theirs, one, what in ((op.axis, iop.axis, "axis", "axes"),
                                        (op.reduce_axis, iop.reduce_axis, "reduction axis",
                                         "reduction axes")):
            if len(theirs) > len(mine):
                raise self.error(f"the intrinsic has {len(theirs)} {what}, the stage "
                                 f"{len(mine)}")
            lead = len(mine) - len(theirs)
            for ax in mine[:lead]:
                pairs[ax] = None
                if covered[ax][1] != 1:
                    raise self.error(f"{one} '{ax.var.name}' runs {covered[ax][1]} "
                                     "iterations inside the tensorized loop, but the intrinsic "
                                     f"pairs only the stage's last {len(theirs)} {what} with "
                                     "its own; move its loop outside the tensorized one")
            for ax, iax in zip(mine[lead:], theirs):
                pairs[ax] = iax
                want = iax.dom.extent.value
                if covered[ax][1] != want:
                    raise self.error(f"{one} '{ax.var.name}' runs {covered[ax][1]} "
                                     "iterations inside the tensorized loop; the intrinsic's "
                                     f"'{iax.var.name}' has {want}")
        inner_total = math.prod(self.inner_extents)
        intrin_total = math.prod(iv.dom.extent.value for iv in iop.axis + iop.reduce_axis)
        if inner_total != intrin_total:
            raise self.error(f"the loops inside the tensorized one run {inner_total} "
                             f"iterations, the intrinsic {intrin_total}: they do not map one "
                             "to one onto its axes")
        return pairs

    # ------------------------------------------------------------------ body
    def match_body(self, covered, pairs):
        """The regions read (tensor -> start indices), after checking the body."""
        st, iop = self.st, self.intrin.op
        vmap = {ax.var: covered[ax][0] + (iax.var if iax is not None else 0)
                for ax, iax in pairs.items()}
        body = self.b.eff[st][0]
        if st.op.num_outputs != 1:
            raise self.error(f"the stage computes {st.op.num_outputs} outputs; an intrinsic "
                             "computes one")
        body = substitute(body, vmap)
        mine, theirs = read_order(body), self.intrin.inputs
        if len(mine) != len(theirs):
            raise self.error(f"the stage reads {len(mine)} tensors "
                             f"({', '.join(t.name for t in mine)}), the intrinsic "
                             f"{len(theirs)} ({', '.join(t.name for t in theirs)})")
        tensor_map = dict(zip(mine, theirs))
        zero = {iax.var: convert(0, iax.var.dtype) for iax in iop.axis + iop.reduce_axis}
        for iax in iop.axis + iop.reduce_axis:
            self.ana.bind(iax.var, iax.dom)
        rebaser = _Rebase(self, tensor_map, zero)
        rebased = rebaser.visit(body)
        where = _first_difference(rebased, iop.body[0], self.ana)
        if where is not None:
            a, b = where
            raise self.error(f"the stage computes `{_brief(rebased)}`, the intrinsic "
                             f"`{_brief(iop.body[0])}`; they differ at `{a}` against `{b}`")
        return rebaser.starts

    # ------------------------------------------------------------------ operands
    def bind(self, tensor, itensor, start) -> BoundBuffer:
        layout = self.b.layouts.get(tensor)
        if layout is None:
            raise self.error(f"tensor '{tensor.name}' is read but is neither computed here nor "
                             "given as an argument")
        decl = self.intrin.decl(itensor)
        if layout.buffer.dtype != itensor.dtype:
            raise self.error(f"tensor '{tensor.name}' is {layout.buffer.dtype}; the intrinsic's "
                             f"'{itensor.name}' is {itensor.dtype}")
        rank = len(itensor.shape)
        strides = [self.ana.simplify(s) for s in layout.strides[len(layout.strides) - rank:]]
        offset = self.ana.simplify(layout.offset(start))
        what = f"operand '{itensor.name}' (tensor '{tensor.name}')"
        if decl.strides is None:
            want, acc = [], 1
            for extent in reversed(decl.shape):
                want.insert(0, convert(acc))
                acc *= extent.value
        else:
            want = decl.strides
        for k, (have, need) in enumerate(zip(strides, want)):
            if is_any_stride(need):
                continue
            if not _is_zero(self.ana.simplify(have - need)):
                raise self.error(f"{what} has strides ({', '.join(map(str, strides))}) in the "
                                 f"schedule; the intrinsic's buffer '{decl.name}' needs "
                                 f"({', '.join(map(str, want))}): dimension {k} differs")
        if decl.offset_factor > 1 and not _multiple_of(offset, decl.offset_factor, self.ana):
            raise self.error(f"{what} starts at element `{offset}`, which is not a multiple "
                             f"of {decl.offset_factor} as buffer '{decl.name}' declares")
        if decl.scope and layout.buffer.scope != decl.scope:
            raise self.error(f"{what} lives in scope '{layout.buffer.scope}'; the intrinsic "
                             f"needs '{decl.scope}' (cache_read/cache_write it there)")
        return BoundBuffer(itensor.name, layout.buffer, offset, itensor.shape, strides)


class _Rebase(IRMutator):
    """Loads of the stage's tensors become loads of the intrinsic's inputs, relative to the
    start of the region read; records each tensor's start."""

    def __init__(self, m: _Match, tensor_map, zero):
        super().__init__()
        self.m, self.tensor_map, self.zero = m, tensor_map, zero
        self.starts: dict = {}

    def visit_ProducerLoad(self, e):
        m, ana = self.m, self.m.ana
        itensor = self.tensor_map[e.producer]
        if e.producer.dtype != itensor.dtype:
            raise m.error(f"tensor '{e.producer.name}' is {e.producer.dtype}; the intrinsic's "
                          f"'{itensor.name}' is {itensor.dtype}")
        for index in e.indices:
            post_order_visit(index, self._no_loads)
        start = [ana.simplify(substitute(i, self.zero)) for i in e.indices]
        rel = [ana.simplify(i - s) for i, s in zip(e.indices, start)]
        lead = len(rel) - len(itensor.shape)
        if lead < 0 or any(not _is_zero(r) for r in rel[:lead]):
            raise m.error(f"tensor '{e.producer.name}' is read at `{e}`, which does not reduce "
                          f"to the {len(itensor.shape)} dimensions of the intrinsic's "
                          f"'{itensor.name}'")
        known = self.starts.setdefault(e.producer, start)
        if any(not _is_zero(ana.simplify(a - b)) for a, b in zip(known, start)):
            raise m.error(f"tensor '{e.producer.name}' is read at two regions "
                          f"({', '.join(map(str, known))}) and ({', '.join(map(str, start))}); "
                          "an operand binds one")
        return ProducerLoad(itensor, tuple(rel[lead:]))

    def _no_loads(self, n):
        if isinstance(n, ProducerLoad):
            raise self.m.error(f"an index reads tensor '{n.producer.name}'; an intrinsic's "
                               "operands are regions at computed offsets")


def _multiple_of(e, f, ana) -> bool:
    """Whether `e` is always a multiple of f: proved by the simplifier, or term by term."""
    if _is_zero(ana.simplify(floormod(e, f))):
        return True
    if isinstance(e, (Add, Sub)):
        return _multiple_of(e.a, f, ana) and _multiple_of(e.b, f, ana)
    if isinstance(e, Mul):
        return any(isinstance(x, IntImm) and x.value % f == 0 for x in (e.a, e.b)) or \
            _multiple_of(e.a, f, ana) or _multiple_of(e.b, f, ana)
    return isinstance(e, IntImm) and e.value % f == 0


def _brief(e):
    """A reduction by its summand (the combiner prints long)."""
    return e.source[e.value_index] if isinstance(e, Reduce) else e


def _is_zero(e) -> bool:
    return isinstance(e, IntImm) and e.value == 0


def _first_difference(a, b, ana):
    """None when a and b compute the same (integer indices compared after simplification),
    else the first pair of subexpressions that differ."""
    if a is b:
        return None
    if isinstance(a, ProducerLoad) and isinstance(b, ProducerLoad):
        if a.producer is not b.producer:
            return a, b
        for x, y in zip(a.indices, b.indices):
            if not _is_zero(ana.simplify(x - y)):
                return x, y
        return None
    if isinstance(a, Reduce) and isinstance(b, Reduce):
        ca, cb = a.combiner, b.combiner
        lhs_rhs = {v: w for v, w in zip(ca.lhs + ca.rhs, cb.lhs + cb.rhs)}
        same_combiner = (len(ca.lhs) == len(cb.lhs)
                         and all(substitute(x, lhs_rhs) is y for x, y in zip(ca.result, cb.result))
                         and all(x is y for x, y in zip(ca.identity, cb.identity)))
        if not same_combiner:
            return a, b
        for x, y in ((a.condition, b.condition), *zip(a.source, b.source)):
            d = _first_difference(x, y, ana)
            if d is not None:
                return d
        ia, ib = a.init or (), b.init or ()
        if len(ia) != len(ib) or any(x is not y for x, y in zip(ia, ib)) \
                or a.value_index != b.value_index:
            return a, b
        return None
    if type(a) is not type(b) or not isinstance(a, Node) or isinstance(a, Var):
        return a, b
    if getattr(a, "dtype", None) != getattr(b, "dtype", None):
        return a, b
    for f in type(a)._fields:
        x, y = getattr(a, f), getattr(b, f)
        if isinstance(x, Node) and isinstance(y, Node):
            d = _first_difference(x, y, ana)
            if d is not None:
                return d
        elif isinstance(x, tuple) and isinstance(y, tuple):
            if len(x) != len(y):
                return a, b
            for p, q in zip(x, y):
                d = _first_difference(p, q, ana) if isinstance(p, Node) else (None if p == q else (a, b))
                if d is not None:
                    return d
        elif x != y:
            return a, b
    return None


def lower_tensorized(builder, st, pos, intrin, values, guards, plain) -> Stmt:
    """The loop nest of stage `st` whose leaf loop `pos` and the loops inside it are replaced
    by `intrin`; where a tile is cut at a tensor's edge, the loops run as they are
    (`plain()` gives their (init, update) statements).

    Example:
        >>> stmt = lower_tensorized(builder, s[C], 2, gemv, values, guards, plain)  # doctest: +SKIP
    """
    m = _Match(builder, st, pos, intrin, values)
    bound = [iv for iv in st.leaf_iter_vars
             if is_reduce(iv) and st.iter_var_attrs.get(iv, {}).get("thread")]
    if bound:
        raise m.error(f"reduction loop '{bound[0].var.name}' is bound to threads; each would "
                      "reset and update the same output (bind data axes only)")
    full, full_data = m.whole_tile(guards)
    covered = m.cover()
    pairs = m.pair_axes(covered)
    starts = m.match_body(covered, pairs)
    ins = [m.bind(t, it, starts[t])
           for t, it in zip(read_order(builder.eff[st][0]), intrin.inputs)]
    out_start = [covered[ax][0] for ax in st.op.axis]
    outs = [m.bind(st.op.output(0), intrin.op.output(0), out_start)]
    result = intrin.lower_fn(ins, outs)
    if isinstance(result, Stmt):
        body, reset, update = result, None, None
    elif isinstance(result, tuple) and len(result) == 3:
        body, reset, update = result
    else:
        raise m.error(f"its lower function returned {result!r}; it returns a Stmt, or "
                      "(body, reset, update) for a reduction")
    from .schedule_ops import _guard
    inner_vars = {iv.var for iv in m.inner}
    outer_guards = {iv: g for iv, g in guards.items()
                    if not any(v in inner_vars for v in free_vars(g))}
    data_guards = [g for iv, g in outer_guards.items() if not is_reduce(iv)]
    inner, outer = m.inner, m.outer

    def either(conds, fast, slow):
        """The intrinsic where the tile is whole, else the plain loops."""
        return IfThenElse(all_(*conds), fast, slow()) if conds else fast

    first = next((k for k, iv in enumerate(outer) if is_reduce(iv)), None)
    if first is None:
        if body is None:
            raise m.error("its lower function gave no body (only reset and update); the whole "
                          "reduction is inside the tensorized loop, so it needs one")

        def slow():
            init, stmt = plain()
            if init is None:
                return builder._wrap(st, inner, stmt, attach=False)
            return builder._reduction_nest(st, inner, init, stmt)
        return builder._wrap(st, outer, either(
            full, _guard(body, list(outer_guards.values())), slow))
    if reset is None or update is None:
        raise m.error(f"the reduction loop '{outer[first].var.name}' is outside the tensorized "
                      "loop, so the intrinsic needs reset and update bodies, and its lower "
                      "function gave only a body")
    bodies = []                  # plain()'s (init, update), built once when needed

    def plain_body(k):
        if not bodies:
            bodies.extend(plain())
        return bodies[k]
    reset = either(full_data, _guard(reset, data_guards), lambda: builder._wrap(
        st, [iv for iv in inner if not is_reduce(iv)], plain_body(0), attach=False))
    update = either(full, _guard(update, list(outer_guards.values())),
                    lambda: builder._wrap(st, inner, plain_body(1), attach=False))
    init_nest = builder._wrap(st, [iv for iv in outer[first:] if not is_reduce(iv)], reset,
                              attach=False)
    update_nest = builder._wrap(st, outer[first:], update)
    return builder._wrap(st, outer[:first], SeqStmt.flatten(init_nest, update_nest))
