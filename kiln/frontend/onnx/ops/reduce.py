"""Reductions: ReduceSum/Mean/Max/Min/Prod and the composed ones (L1, L2, LogSumExp ...),
ArgMax/ArgMin. Axes come as an attribute or (ReduceSum from opset 13, the others from 18) as
an input."""
from __future__ import annotations

from ..registry import converter

_AXES_INPUT_SINCE = {"ReduceSum": 13}


def _axes(ctx):
    """Normalized reduced axes, or None for 'all', or () for 'no-op'."""
    ndim = ctx.ndim(0)
    if ctx.opset >= _AXES_INPUT_SINCE.get(ctx.op_type, 18):
        axes = ctx.static_ints(1, "axes") if ctx.has_input(1) else []
    else:
        axes = [int(a) for a in ctx.attr("axes", [])]
    if not axes:
        return () if ctx.attr("noop_with_empty_axes", 0) else None
    for a in axes:
        if not -ndim <= a < ndim:
            ctx.error(f"axis {a} is out of range for rank {ndim}")
    return tuple(sorted({a % ndim for a in axes}))


def _reduce(ctx, name, x, axes, keepdims):
    return ctx.op(name, x, axis=axes, keepdims=keepdims)


_SIMPLE = {"ReduceSum": "sum", "ReduceMean": "mean", "ReduceMax": "max", "ReduceMin": "min",
           "ReduceProd": "prod"}


@converter(*_SIMPLE, "ReduceL1", "ReduceL2", "ReduceSumSquare", "ReduceLogSum",
           "ReduceLogSumExp")
def _reduction(ctx):
    x = ctx.input(0)
    axes = _axes(ctx)
    keep = bool(ctx.attr("keepdims", 1))
    op = ctx.op_type
    if axes == ():
        return x
    if op in _SIMPLE:
        return _reduce(ctx, _SIMPLE[op], x, axes, keep)
    if op == "ReduceL1":
        return _reduce(ctx, "sum", ctx.op("abs", x), axes, keep)
    if op == "ReduceSumSquare":
        return _reduce(ctx, "sum", ctx.op("multiply", x, x), axes, keep)
    if op == "ReduceL2":
        return ctx.op("sqrt", _reduce(ctx, "sum", ctx.op("multiply", x, x), axes, keep))
    if op == "ReduceLogSum":
        return ctx.op("log", _reduce(ctx, "sum", x, axes, keep))
    # ReduceLogSumExp, shifted by the maximum so exp does not overflow.
    peak = _reduce(ctx, "max", x, axes, True)
    total = _reduce(ctx, "sum", ctx.op("exp", ctx.op("subtract", x, peak)), axes, keep)
    if not keep:
        peak = _reduce(ctx, "max", x, axes, False)
    return ctx.op("add", ctx.op("log", total), peak)


@converter("ArgMax", "ArgMin")
def _arg(ctx):
    ndim = ctx.ndim(0)
    axis = int(ctx.attr("axis", 0))
    if not -ndim <= axis < ndim:
        ctx.error(f"axis {axis} is out of range for rank {ndim}")
    return ctx.op("argmax" if ctx.op_type == "ArgMax" else "argmin", ctx.input(0),
                  axis=axis % ndim, keepdims=bool(ctx.attr("keepdims", 1)),
                  select_last_index=bool(ctx.attr("select_last_index", 0)))
