"""x86 schedule of reductions (sum, mean, max, argmax, ...) with their fused injective
inputs and epilogues.

Two loop orders, chosen by whether the innermost input axis is reduced:
- reduced (rows: sum over the last axis): one output element per iteration of a parallel
  loop; a long reduced axis is split by 16 and rfactor'ed, so 16 partial results accumulate in
  one vector register and are added up at the end;
- kept (sum over axis 0 or 1 of NCHW): the innermost output axis is split by 16 and vectorized
  under the reduction loops, so each step accumulates 16 contiguous elements at once.
An elementwise epilogue of the same shape (mean's division, relu, argmax's index copy) is the
output stage: its loop is the parallel one and the reduction is computed at it, still hot.

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((64, 1000), name="x")
    >>> y = topi.reduction.mean(x, axis=1)
    >>> s = topi.x86.schedule_reduce(y)
"""
from __future__ import annotations

from ... import te
from ...te.tensor import is_reduction
from .. import tags
from ..utils import (as_tensor_list, get_const_tuple, inline_injective_inputs, is_const_int,
                     prod, traverse_inline)
from .injective import PARALLEL_MIN_ELEMENTS, VECTOR_LANES, schedule_injective_from_existing

# Vector widths tried for the partial results of a reduced innermost axis.
RFACTOR_LANES = (VECTOR_LANES, VECTOR_LANES // 2)


def _static_numel(shape):
    shape = get_const_tuple(shape)
    return prod(shape) if all(is_const_int(d) for d in shape) else None


def _work(op) -> int | None:
    """Number of innermost iterations of a reduction: outputs times reduced elements."""
    out = _static_numel(op.shape)
    red = _static_numel([iv.dom.extent for iv in op.reduce_axis])
    return None if out is None or red is None else out * red


def _worth_parallel(op) -> bool:
    work = _work(op)
    return work is None or work >= PARALLEL_MIN_ELEMENTS


def trailing_reduced(op) -> int:
    """How many of the input's innermost axes `op` reduces (at least 1 when unknown); they are
    its last reduce axes, in order, for topi reductions.

    Example:
        >>> trailing_reduced(topi.reduction.sum(x, axis=(1, 2)).op)  # doctest: +SKIP
        2
    """
    axes, ndim = op.attrs.get("reduce_axes"), op.attrs.get("input_ndim")
    if axes is None or ndim is None:
        return 1
    count = 0
    while count < len(op.reduce_axis) and ndim - 1 - count in axes:
        count += 1
    return max(count, 1)


def innermost_is_reduced(op) -> bool:
    """Whether the reduction `op` reduces the innermost axis of its input (from the attrs that
    topi reductions record; assumed true for other reductions, the safe loop order).

    Example:
        >>> innermost_is_reduced(topi.reduction.sum(x, axis=-1).op)  # doctest: +SKIP
        True
    """
    axes, ndim = op.attrs.get("reduce_axes"), op.attrs.get("input_ndim")
    if axes is None or ndim is None:
        return True
    return ndim - 1 in axes


def rfactor_inner(s, red):
    """Fuse the reduce axes of `red` (an op) that are its input's innermost axes, split them
    by 16 lanes (8 when only that divides their extent; none below 16) and rfactor: returns
    the stage of partial results (vectorized over its lanes), or None. Call it before
    scheduling the loops of `red` (rfactor resets them).

    Example:
        >>> rf_stage = rfactor_inner(s, sum_op)  # doctest: +SKIP
    """
    stage = s[red]
    # Reduced axes that are the input's innermost ones are contiguous: fuse them into one.
    ks = list(stage.op.reduce_axis[-trailing_reduced(red):])
    extent = _static_numel([iv.dom.extent for iv in ks])
    if extent is None:
        return None
    # An exact width keeps the partial loop free of guards. An inexact split leaves a
    # lane-varying guard that keeps its loop scalar (rfactor's guard is not a `likely` that
    # loop partitioning could peel off), yet it still measured faster than one serial
    # accumulator for long axes (128 x 1001 sum: 20 us vs 31 us).
    lanes = next((w for w in RFACTOR_LANES if extent % w == 0 and extent >= 2 * w), None)
    if lanes is None and extent >= 2 * VECTOR_LANES:
        lanes = VECTOR_LANES
    if lanes is None:
        return None
    k = stage.fuse(*ks) if len(ks) > 1 else ks[0]
    _, ki = stage.split(k, factor=lanes)
    rf = s.rfactor(stage.op.output(0), ki, factor_axis=len(stage.op.axis))
    rf_stage = s[rf[0] if isinstance(rf, list) else rf]
    *data, lane = rf_stage.op.axis
    rf_stage.reorder(*data, *rf_stage.op.reduce_axis, lane)
    rf_stage.vectorize(lane)
    return rf_stage


def schedule_reduction_stage(s, red, out=None):
    """Schedule the reduction `red` (an op), computed at the loops of the elementwise output
    `out` (a tensor of the same shape) when given, else as its own root stage.

    Example:
        >>> schedule_reduction_stage(s, sum_op, mean_tensor)  # doctest: +SKIP
    """
    parallel = _worth_parallel(red)
    if innermost_is_reduced(red) or not red.axis:
        # One output element per iteration of the (parallel) fused loop.
        rf_stage = rfactor_inner(s, red)
        stage = s[red]
        data = list(stage.op.axis)
        if out is not None and out.op.axis:
            host = s[out]
            fused = host.fuse(*out.op.axis)
            if parallel:
                host.parallel(fused)
            stage.compute_at(host, fused)
            attach = data[-1] if data else None
        else:
            if out is not None:
                schedule_injective_from_existing(s, out)
            attach = stage.fuse(*data) if data else None
            if attach is not None and parallel:
                stage.parallel(attach)
        if rf_stage is not None and attach is not None:
            rf_stage.compute_at(stage, attach)
        return
    # The innermost output axis is contiguous in the input: vectorize it below the reduction.
    # Its outer part stays a loop of its own (not fused with the other axes), so the guard of
    # a partial last vector depends on that loop alone and loop partitioning peels it off.
    stage = s[red]
    host = s[out] if out is not None else stage
    *outer, last = host.op.axis
    lo, li = host.split(last, factor=VECTOR_LANES)
    if host is stage:
        stage.reorder(*outer, lo, *stage.op.reduce_axis, li)
    host.vectorize(li)
    if outer:
        par = host.fuse(*outer)
        big = _static_numel([iv.dom.extent for iv in outer])
        if parallel and (big is None or big > 1):
            host.parallel(par)
        elif parallel:
            host.parallel(lo)
    elif parallel:
        host.parallel(lo)
    if host is not stage:
        stage.compute_at(host, lo)
        *outer_r, last_r = stage.op.axis
        stage.reorder(*outer_r, *stage.op.reduce_axis, last_r)
        stage.vectorize(last_r)


def _reduction_of(t):
    """The reduction that output `t` reads through injective stages (or is), else None."""
    todo, seen = [t.op], set()
    while todo:
        op = todo.pop()
        if op in seen or not isinstance(op, te.ComputeOp):
            continue
        seen.add(op)
        if is_reduction(op):
            return op
        if tags.is_injective(op.tag):
            todo.extend(u.op for u in op.input_tensors())
    return None


def schedule_reduce(outs):
    """A schedule for a fused reduction group: injective inputs inlined into the reduction,
    injective epilogues inlined into the output, the reduction computed at the output's
    parallel loop and vectorized as the module docstring says.

    Example:
        >>> s = schedule_reduce([topi.elemwise.relu(topi.reduction.sum(x, axis=1))])  # doctest: +SKIP
    """
    outs = as_tensor_list(outs)
    s = te.create_schedule([t.op for t in outs])
    anchors = traverse_inline(s, [t.op for t in outs])
    for op in anchors:
        inline_injective_inputs(s, op)
    users: dict = {}
    for t in outs:
        users.setdefault(_reduction_of(t), []).append(t)
    for red, group in users.items():
        if red is None:
            for t in group:
                schedule_injective_from_existing(s, t)
            continue
        host = None
        if len(group) == 1 and group[0].op is not red and not s[red].is_output and \
                get_const_tuple(group[0].shape) == get_const_tuple(red.output(0).shape):
            host = group[0]
        schedule_reduction_stage(s, red, host)
        for t in group:
            if t is not host and t.op is not red:
                schedule_injective_from_existing(s, t)
    return s
