"""rfactor: factor a reduction over one of its (split) axes into a new stage.

    C[i] = sum(A[i, k], k)      with k split into (ko, ki), rfactor over ki:
    C.rf[ki, i] = sum(A[i, ko*f + ki], ko)
    C[i]        = sum(C.rf[kv, i], kv)
"""
from __future__ import annotations

from ..tir.expr import IterVar, Range, Reduce, Var
from ..tir.functor import substitute
from ..tir.op import const, convert, less, likely, logical_and
from .relations import inexact_splits, is_reduce, pass_down_domain, pass_up_index
from .tensor import ComputeOp, fresh_itervar, is_reduction


def rfactor(sch, tensor, axis: IterVar, factor_axis: int = 0):
    from ..arith import Analyzer
    from .schedule import ScheduleError

    stage = sch[tensor]
    op = stage.op
    if not is_reduction(op):
        raise ScheduleError(f"rfactor on stage '{op.name}': it is not a reduction")
    stage._leaf(axis, "rfactor")
    if not is_reduce(axis):
        raise ScheduleError(f"rfactor on stage '{op.name}': axis '{axis.var.name}' is not a "
                            "reduction axis")
    if not 0 <= factor_axis <= len(op.axis):
        raise ScheduleError(f"rfactor on stage '{op.name}': factor_axis {factor_axis} is out of "
                            f"range for {len(op.axis)} data axes")
    ana = Analyzer()
    dom = {iv: iv.dom for iv in op.axis + op.reduce_axis}
    pass_down_domain(stage.relations, dom, ana)

    ext = dom[axis].extent
    v = IterVar(Range(convert(0, ext.dtype), ext), Var(axis.var.name + ".v"), "data_par")
    others = [iv for iv in stage.leaf_iter_vars if is_reduce(iv) and iv is not axis]
    new_reduce = {iv: IterVar(dom[iv], Var(iv.var.name), "reduce") for iv in others}
    values = {axis: v.var, **{iv: new.var for iv, new in new_reduce.items()}}
    pass_up_index(stage.relations, dom, values)

    data_new = [fresh_itervar(iv) for iv in op.axis]
    vmap = {iv.var: new.var for iv, new in zip(op.axis, data_new)}
    guard = const(True)
    for r in op.reduce_axis:
        vmap[r.var] = values[r]
    for p in inexact_splits(stage.relations, dom, ana):
        if is_reduce(p):
            # likely(): loop partitioning peels the tail so the main loop has no guard.
            guard = logical_and(guard, likely(less(values[p], dom[p].min + dom[p].extent)))

    red = op.body[0]
    sources = tuple(substitute(s, vmap) for s in red.source)
    cond = substitute(red.condition, vmap)
    cond = logical_and(cond, guard)
    axes = tuple(new_reduce[iv] for iv in others)
    rf_axis = tuple(data_new[:factor_axis] + [v] + data_new[factor_axis:])
    rf_body = tuple(Reduce(red.combiner, sources, axes, cond, k, ()) for k in range(len(sources)))
    if not axes:
        # Nothing left to reduce: each factored slice is just the source.
        rf_body = sources
    rf_op = ComputeOp(op.name + ".rf", op.tag, op.attrs, rf_axis, axes, rf_body)

    kv = IterVar(Range(convert(0, ext.dtype), ext), Var(axis.var.name + ".v"), "reduce")
    idx = [iv.var for iv in op.axis]
    idx.insert(factor_axis, kv.var)
    final_sources = tuple(rf_op.output(k)[tuple(idx)] for k in range(rf_op.num_outputs))
    body = tuple(Reduce(red.combiner, final_sources, (kv,), const(True), k, red.init)
                 for k in range(len(final_sources)))
    new_op = ComputeOp(op.name, op.tag, op.attrs, op.axis, (kv,), body)

    sch._insert_stage(rf_op, stage, "")
    sch._replace_op(stage, new_op)
    stage._reset_loops()
    outs = list(rf_op.outputs)
    return outs[0] if len(outs) == 1 else outs
