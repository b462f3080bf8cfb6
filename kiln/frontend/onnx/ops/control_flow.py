"""Control-flow ONNX ops (If, Loop, Scan), imported into kiln's static dataflow graph.

kiln compiles graphs of static shape without control flow, so each op is flattened while
importing (ctx.subgraph imports a branch or body with the outer scope visible):
- If: a condition known at import imports the taken branch only. A run-time condition
  imports both branches and selects each output with `where`; both branches then run on
  every call (the cost of the untaken one is paid), and their outputs must agree in shape
  and dtype.
- Loop: unrolled. The trip count and the initial condition are compile-time parameters (they
  decide how many iterations run and the shapes of the scan outputs); the condition the body
  computes must fold at import, so loops that stop on run-time data are unsupported.
- Scan: unrolled over its (static) sequence length, in opset 8 (batched) and 9+ forms.
Sequences and optionals as loop-carried values are not tensors and stay unsupported.

Example:
    >>> mod, params = from_onnx("if_model.onnx")   # doctest: +SKIP
"""
from __future__ import annotations

import numpy as np

from ..context import dtype_of, is_static, shape_of
from ..registry import converter

# Iterations past this many would unroll into a graph too large to compile in useful time.
MAX_UNROLL = 1024


def _value_type(value):
    """(shape, dtype) of a tensor value, for comparing the outputs of two branches."""
    return tuple(shape_of(value)), dtype_of(value)


def _stack(ctx, parts: list, axis: int):
    """The values `parts` (same type) joined along a new axis `axis` (numpy.stack)."""
    rank = len(shape_of(parts[0])) + 1
    if not -rank <= axis < rank:
        ctx.error(f"scan output axis {axis} is out of range for outputs of rank {rank}")
    axis %= rank
    expanded = [ctx.op("expand_dims", p, axis=axis) for p in parts]
    if len(expanded) == 1:
        return expanded[0]
    return ctx.op("concatenate", expanded, axis=axis)


def _flag(ctx, i: int, what: str) -> bool:
    """Input i, a one-element bool tensor known at import, as a Python bool."""
    value = np.asarray(ctx.static(i, what))
    if value.size != 1:
        ctx.error(f"input {i} ({what}) must hold one element, got shape {value.shape}")
    return bool(value.reshape(-1)[0])


@converter("If")
def _if(ctx):
    """The taken branch for a condition known at import; else both branches and `where`.

    Example:
        >>> ys = _if(ctx)    # cond is a graph input: where(cond, then_out, else_out)
        ... # doctest: +SKIP
    """
    if ctx.is_known(0):
        branch = "then_branch" if _flag(ctx, 0, "condition") else "else_branch"
        return ctx.subgraph(branch, [])
    if int(np.prod(ctx.shape(0))) != 1:
        ctx.error(f"the condition must hold one element, got shape {ctx.shape(0)}")
    then_out = ctx.subgraph("then_branch", [])
    else_out = ctx.subgraph("else_branch", [])
    if len(then_out) != len(else_out):
        ctx.error(f"then_branch has {len(then_out)} outputs, else_branch {len(else_out)}")
    for k, (a, b) in enumerate(zip(then_out, else_out)):
        if _value_type(a) != _value_type(b):
            ctx.unsupported(f"output {k} is {_value_type(a)} in then_branch and "
                            f"{_value_type(b)} in else_branch, and the condition is only "
                            f"known at run time")
    cond = ctx.op("reshape", ctx.input(0), newshape=())
    return [ctx.op("where", cond, a, b) for a, b in zip(then_out, else_out)]


@converter("Loop")
def _loop(ctx):
    """The body unrolled for as many iterations as the trip count and condition allow.

    Example:
        >>> finals_then_scans = _loop(ctx)     # trip count 5: five copies of the body
        ... # doctest: +SKIP
    """
    if not ctx.has_input(0) and not ctx.has_input(1):
        ctx.unsupported("no trip count and no condition (an endless loop)")
    trip = ctx.static_ints(0, "trip count M")[0] if ctx.has_input(0) else None
    cond = _flag(ctx, 1, "initial condition") if ctx.has_input(1) else True
    carried = [ctx.input(i) for i in range(2, ctx.num_inputs)]
    num_scans = len(ctx.attr("body").output) - 1 - len(carried)
    if num_scans < 0:
        ctx.error(f"the body has {num_scans + 1 + len(carried)} outputs, fewer than the "
                  f"condition and {len(carried)} loop-carried values")
    scans = [[] for _ in range(num_scans)]
    step = 0
    while cond and (trip is None or step < trip):
        if step == MAX_UNROLL:
            ctx.unsupported(f"more than {MAX_UNROLL} iterations to unroll")
        outs = ctx.subgraph("body", [np.array(step, np.int64), np.array(cond), *carried])
        if not is_static(outs[0]):
            ctx.unsupported("the loop condition depends on run-time data")
        cond = bool(np.asarray(outs[0]).reshape(-1)[0])
        carried = outs[1:1 + len(carried)]
        for parts, value in zip(scans, outs[1 + len(carried):]):
            parts.append(value)
        step += 1
    if scans and step == 0:
        ctx.unsupported("no iteration runs, so the scan outputs' shapes are unknown")
    return carried + [_stack(ctx, parts, 0) for parts in scans]


def _unrolled_scan(ctx, states, xs, directions, out_axes, out_directions, input_axes):
    """Final states and stacked scan outputs of the body run over the slices of `xs`
    (one iteration per index along each input's axis)."""
    lengths = set()
    for k, (x, axis) in enumerate(zip(xs, input_axes)):
        rank = len(shape_of(x))
        if not -rank <= axis < rank:
            ctx.error(f"scan input {k}: axis {axis} is out of range for rank {rank}")
        lengths.add(shape_of(x)[axis])
    if len(lengths) != 1:
        ctx.error(f"the scan inputs have different sequence lengths {sorted(lengths)}")
    (length,) = lengths
    scans = []
    for t in range(length):
        slices = [ctx.op("take", x, np.array(length - 1 - t if rev else t, np.int64),
                         axis=axis % len(shape_of(x)))
                  for x, axis, rev in zip(xs, input_axes, directions)]
        outs = ctx.subgraph("body", states + slices)
        states = outs[:len(states)]
        scans.append(outs[len(states):])
    num_scans = len(ctx.attr("body").output) - len(states)
    if num_scans and length == 0:
        ctx.unsupported("an empty sequence, so the scan outputs' shapes are unknown")
    stacked = []
    for k in range(num_scans):
        parts = [outs[k] for outs in scans]
        if out_directions[k]:
            parts.reverse()
        stacked.append(_stack(ctx, parts, out_axes[k]))
    return states, stacked


def _scan_attrs(ctx, num_inputs: int, num_outputs: int):
    """(input directions, output axes, output directions, input axes), defaults filled."""
    def ints(name, count):
        values = ctx.attr(name, None)
        values = [0] * count if values is None else [int(v) for v in values]
        if len(values) != count:
            ctx.error(f"attribute {name!r} needs {count} entries, got {len(values)}")
        return values
    if ctx.opset < 9:
        return ints("directions", num_inputs), [0] * num_outputs, [0] * num_outputs, \
            [0] * num_inputs
    return (ints("scan_input_directions", num_inputs), ints("scan_output_axes", num_outputs),
            ints("scan_output_directions", num_outputs), ints("scan_input_axes", num_inputs))


@converter("Scan")
def _scan(ctx):
    """The body unrolled over the sequence axis of the scan inputs.

    Example:
        >>> final_states_then_scan_outputs = _scan(ctx)      # doctest: +SKIP
    """
    first = 1 if ctx.opset < 9 else 0                   # opset 8 starts with sequence_lens
    inputs = [ctx.input(i) for i in range(first, ctx.num_inputs)]
    num_xs = int(ctx.attr("num_scan_inputs"))
    num_states = len(inputs) - num_xs
    if not 0 <= num_states <= len(inputs):
        ctx.error(f"num_scan_inputs is {num_xs} but the node has {len(inputs)} state and "
                  f"scan inputs")
    num_scans = len(ctx.attr("body").output) - num_states
    attrs = _scan_attrs(ctx, num_xs, num_scans)
    states, xs = inputs[:num_states], inputs[num_states:]
    if ctx.opset >= 9:
        finals, stacked = _unrolled_scan(ctx, states, xs, *attrs)
        return finals + stacked
    return _scan8(ctx, states, xs, attrs)


def _scan8(ctx, states, xs, attrs):
    """Opset 8's Scan: axis 0 of every input is a batch, scanned one entry at a time."""
    batch = shape_of(xs[0])[0] if xs else shape_of(states[0])[0]
    length = shape_of(xs[0])[1] if xs else 0
    if ctx.has_input(0):
        if not ctx.is_known(0):
            ctx.unsupported("sequence_lens known only at run time")
        lens = np.asarray(ctx.static(0, "sequence_lens")).reshape(-1)
        if np.any(lens != length):
            ctx.unsupported(f"sequence_lens {lens.tolist()} shorter than the sequence "
                            f"({length})")
    per_batch = []
    for b in range(batch):
        index = np.array(b, np.int64)
        finals, stacked = _unrolled_scan(
            ctx, [ctx.op("take", s, index, axis=0) for s in states],
            [ctx.op("take", x, index, axis=0) for x in xs], *attrs)
        per_batch.append(finals + stacked)
    return [_stack(ctx, list(column), 0) for column in zip(*per_batch)]
