"""Bound inference: the range of every loop of every stage.

Stages are visited consumers first. A stage computed at the root produces everything its
consumers read; a stage attached at loop `iv` of another stage produces only what one
iteration of that loop needs: consumer loops enclosing the attach point stay fixed (as
symbols), the others are relaxed over their ranges. Regions are clipped to the tensor's domain.
"""
from __future__ import annotations

from ..tir.expr import Add, IntImm, Max, Min, Range, Sub
from ..tir.functor import substitute, uses_var
from ..tir.op import convert, max_, min_
from .inline import accesses
from .relations import Fuse, Split, pass_down_domain, split_factor
from .tensor import ComputeOp


def enclosing_loops(stage) -> list:
    """(stage, iter var) of every loop around where `stage` is computed, outermost first.

    A loop's variable counts from 0: the value of leaf `iv` is ranges[iv].min + iv.var."""
    if stage.attach_type != "scope":
        return []
    host, iv = stage.attach_stage, stage.attach_ivar
    k = host.leaf_iter_vars.index(iv)
    return enclosing_loops(host) + [(host, v) for v in host.leaf_iter_vars[:k + 1]]


def _interval(r: Range):
    from ..arith import IntervalSet
    return IntervalSet(r.min, r.min + r.extent - 1)


def _pass_up_sets(stage, sets: dict, ranges: dict) -> dict:
    from ..arith import IntervalSet
    for rel in reversed(stage.relations):
        if isinstance(rel, Split):
            o, i = sets[rel.outer], sets[rel.inner]
            f = split_factor(rel, ranges)
            r = ranges[rel.parent]
            if o.is_single_point() and i.is_single_point():
                sets[rel.parent] = IntervalSet.single_point(r.min + o.min * f + i.min)
            else:
                hi = min_(r.min + o.max * f + i.max, r.min + r.extent - 1)
                sets[rel.parent] = IntervalSet(r.min + o.min * f + i.min, hi)
        elif isinstance(rel, Fuse):
            fs = sets[rel.fused]
            ro, ri = ranges[rel.outer], ranges[rel.inner]
            if fs.is_single_point():
                sets[rel.outer] = IntervalSet.single_point(ro.min + fs.min // ri.extent)
                sets[rel.inner] = IntervalSet.single_point(ri.min + fs.min % ri.extent)
            else:
                sets[rel.outer], sets[rel.inner] = _interval(ro), _interval(ri)
    return sets


def counter_range(r: Range) -> Range:
    """The range of a loop's counter variable (loops are rebased to start at 0)."""
    return Range(convert(0, r.extent.dtype), r.extent)


def _relax(s, var, r: Range):
    from ..arith import IntervalSet, eval_set
    if s.is_everything():
        return s
    dom = {var: _interval(counter_range(r))}
    lo, hi = eval_set(s.min, dom), eval_set(s.max, dom)
    if lo.is_everything() or hi.is_everything():
        return IntervalSet.everything()
    return IntervalSet(lo.min, hi.max)


def _analyzer_for(stage, ranges):
    from ..arith import Analyzer
    ana = Analyzer()
    for _, iv in enclosing_loops(stage):
        ana.bind(iv.var, counter_range(ranges[iv]))
    return ana


def _thread_tag(stage, iv) -> str:
    return stage.iter_var_attrs.get(iv, {}).get("thread", "")


def storage_scope(stage) -> str:
    """Where a stage's buffer lives: its set scope, else "local" when computed inside a loop
    bound to threadIdx (each thread computes its own part), else "global".

    Example:
        >>> storage_scope(s[AA])   # doctest: +SKIP
        'shared'
    """
    if stage.scope:
        return stage.scope
    inside_threads = any(_thread_tag(host, iv).startswith("threadIdx")
                         for host, iv in enclosing_loops(stage))
    return "local" if inside_threads else "global"


# A loop bound to a thread index is relaxed (the buffer covers all its values) when the buffer
# is shared by those threads: a global buffer by all blocks and threads, a shared buffer by the
# threads (and virtual threads) of a block, a local buffer by nobody.
_STORAGE_RANK = {"global": 0, "shared": 1, "local": 2}


def _thread_rank(tag: str) -> int:
    return 0 if tag.startswith("blockIdx") else 1


def _fixed_loops(stage) -> set:
    """Enclosing loops whose value is fixed for one instance of the stage's buffer."""
    rank = _STORAGE_RANK[storage_scope(stage).partition(".")[0]]
    return {iv for host, iv in enclosing_loops(stage)
            if not _thread_tag(host, iv) or rank > _thread_rank(_thread_tag(host, iv))}


def _requested_region(stage, consumers, eff, ranges, unclipped) -> list:
    from ..arith import eval_set, union
    fixed = _fixed_loops(stage)
    op = stage.op
    per_dim = [[] for _ in op.axis]
    mine = set(op.outputs)
    for c in consumers:
        leaf_sets = {}
        from ..arith import IntervalSet
        for iv in c.leaf_iter_vars:
            r = ranges[iv]
            leaf_sets[iv] = IntervalSet.single_point(r.min + iv.var) if iv in fixed else _interval(r)
        root_sets = _pass_up_sets(c, leaf_sets, ranges)
        dom_map = {iv.var: root_sets[iv] for iv in c.op.axis + c.op.reduce_axis}
        fused, fused_sets, fused_ana = _fused_roots(c, root_sets, ranges)
        outer = [iv for _, iv in enclosing_loops(c) if iv not in fixed]
        # Index expressions are interned, and the loads of one consumer repeat most of them
        # (a transform's select chain reads one tile through dozens of loads): each distinct
        # index is evaluated once per dimension.
        seen: set = set()
        for load in accesses(eff[c]):
            if load.producer not in mine:
                continue
            for k, index in enumerate(load.indices):
                if (k, id(index)) in seen:     # by identity: == builds an EQ node
                    continue
                seen.add((k, id(index)))
                s = eval_set(index, dom_map)
                if fused and uses_var(index, fused):
                    s = _through_fused(index, fused, fused_sets, dom_map, fused_ana) or s
                for iv in reversed(outer):
                    s = _relax(s, iv.var, ranges[iv])
                per_dim[k].append(s)
    ana = _analyzer_for(stage, ranges)
    region = []
    for iv, sets in zip(op.axis, per_dim):
        full = iv.dom
        u = union(sets) if sets else None
        if u is None or u.is_everything():
            region.append(full)
            continue
        lo = ana.simplify(max_(u.min, full.min))
        hi = ana.simplify(min_(u.max, full.min + full.extent - 1))
        region.append(Range(lo, _extent(lo, hi, ana)))
        # Clipping makes the extent depend on the tile (min(k, n - i*k)); the unclipped extent
        # is usually loop-invariant and bounds what a buffer must hold.
        unclipped[iv] = _extent(u.min, u.max, ana)
    return region


def _fused_roots(stage, sets: dict, ranges: dict) -> tuple:
    """For each fusion of two root axes whose fused loop spans several values, the root
    variables as expressions of the fused one (outer = f // inner extent, inner = f % inner
    extent), and the fused variables' sets. Relaxing a fused pair axis by axis gives the
    bounding box of what the fused loop covers: 5 consecutive pixels of a 7-wide image span
    two rows, so a box 2 x 7; read through y*7 + x they are exactly 5 values. Also returns
    an Analyzer that knows the fused loops' constant ranges, so that an axis of extent 1
    fused with another folds away (f // n == 0 for f < n)."""
    from ..arith import Analyzer
    roots = set(stage.op.axis)
    exprs, fused_sets, ana = {}, {}, None
    for rel in stage.relations:
        if not isinstance(rel, Fuse) or rel.outer not in roots or rel.inner not in roots:
            continue
        fs = sets.get(rel.fused)
        if fs is None or fs.is_single_point() or fs.is_everything():
            continue
        ro, ri = ranges[rel.outer], ranges[rel.inner]
        exprs[rel.outer.var] = ro.min + rel.fused.var // ri.extent
        exprs[rel.inner.var] = ri.min + rel.fused.var % ri.extent
        fused_sets[rel.fused.var] = fs
        ana = ana or Analyzer()
        r = ranges[rel.fused]
        if isinstance(r.min, IntImm) and isinstance(r.extent, IntImm):
            ana.bind(rel.fused.var, r)
    return exprs, fused_sets, ana


def _through_fused(index, fused: dict, fused_sets: dict, dom_map: dict, ana):
    """The set of `index` evaluated through the fused variables when it is linear in them
    (exact then), else None; `ana` simplifies (see _fused_roots)."""
    from ..arith import detect_linear, eval_set
    alt = ana.simplify(substitute(index, fused))
    coefs = None if uses_var(alt, fused) else detect_linear(alt, list(fused_sets))
    if coefs is None or any(uses_var(c, fused_sets) for c in coefs):
        return None
    return eval_set(alt, {**dom_map, **fused_sets})


def _extent(lo, hi, ana):
    """hi - lo + 1 with min/max distributed, so that min(i*4 + 3, 9) - i*4 + 1 becomes
    min(4, 10 - i*4): each piece simplifies on its own and the bound is visible."""
    parts = _distribute(hi, Min)
    if parts:
        return ana.simplify(min_(_extent(lo, parts[0], ana), _extent(lo, parts[1], ana)))
    parts = _distribute(lo, Max)
    if parts:
        return ana.simplify(min_(_extent(parts[0], hi, ana), _extent(parts[1], hi, ana)))
    return ana.simplify(hi - lo + 1)


def _distribute(e, cls):
    """(a + r, b + r) if e is cls(a, b) + r (r free of cls), else None."""
    if isinstance(e, cls):
        return e.a, e.b
    if isinstance(e, (Add, Sub)):
        inner = _distribute(e.a, cls)
        if inner:
            rebuild = (lambda x: x + e.b) if isinstance(e, Add) else (lambda x: x - e.b)
            return rebuild(inner[0]), rebuild(inner[1])
        if isinstance(e, Add):
            inner = _distribute(e.b, cls)
            if inner:
                return e.a + inner[0], e.a + inner[1]
    return None


class Bounds(dict):
    """IterVar → Range, plus `unclipped`: for data axes of attached stages, the extent of the
    region before clipping to the tensor's domain (an upper bound that often is constant)."""

    def __init__(self):
        super().__init__()
        self.unclipped: dict = {}


def infer_bound(sch, eff, consumers) -> Bounds:
    """IterVar → Range for every iter var of every computed stage.

    Example:
        >>> ranges = infer_bound(s, effective_bodies(s), consumers)  # doctest: +SKIP
    """
    ranges = Bounds()
    for st in reversed(sch.stages):
        if not isinstance(st.op, ComputeOp) or st.attach_type == "inline":
            continue
        op = st.op
        if st.is_output or not consumers[st]:
            region = [iv.dom for iv in op.axis]
        else:
            region = _requested_region(st, consumers[st], eff, ranges, ranges.unclipped)
        for iv, r in zip(op.axis, region):
            ranges[iv] = r
        for iv in op.reduce_axis:
            ranges[iv] = iv.dom
        bound = {iv for iv, attrs in st.iter_var_attrs.items() if attrs.get("thread")}
        pass_down_domain(st.relations, ranges, _analyzer_for(st, ranges), bound)
    return ranges

