"""What the tiled GPU schedules (dense, conv2d) share: finding their anchor in a fused group,
the anchor's accumulators in each thread's registers with its two operands staged through
shared memory, and the cooperative fetch that fills a shared tile with all the block's
threads."""
from __future__ import annotations

from ... import te
from ...te.tensor import ComputeOp


def single_anchor(outs, anchor_tags):
    """The one compute tagged with one of `anchor_tags` behind a group's single output, else
    None (several outputs, or not exactly one such compute).

    Example:
        >>> single_anchor([relu], {"dense"}) is dense.op                  # doctest: +SKIP
        True
    """
    found, todo, seen = [], [o.op for o in outs], set()
    while todo:
        op = todo.pop()
        if op in seen or not isinstance(op, ComputeOp):
            continue
        seen.add(op)
        if op.tag in anchor_tags:
            found.append(op)
        todo.extend(t.op for t in op.input_tensors())
    return found[0] if len(outs) == 1 and len(found) == 1 else None


def stage_operands(outs, anchor):
    """A schedule of the fused group `outs` (one output) in which `anchor`, a reduction over
    two operands, accumulates in registers ("local") and reads both operands through shared
    memory; every other stage (padding, packing, the epilogue) is inlined where it is read.
    Returns (schedule, output stage, local stage, [shared stages of the operands]).

    Example:
        >>> s, out, local, shared = stage_operands([relu], conv.op)     # doctest: +SKIP
    """
    s = te.create_schedule([o.op for o in outs])
    if outs[0].op is anchor:
        local = s[s.cache_write(anchor.output(0), "local")]
    else:
        local = s[anchor]
        local.set_scope("local")
    shared = [s[s.cache_read(t, "shared", [local])] for t in local.op.input_tensors()]
    # (the cache stages rewired their readers: the output's op is read from the schedule)
    out = s.outputs[0]
    keep = {out, local, *shared}
    for st in list(s.stages):
        if isinstance(st.op, ComputeOp) and st not in keep and not st.op.reduce_axis:
            st.compute_inline()
    return s, s[out.op.output(0)], local, shared


def cooperative_fetch(stage, threads) -> None:
    """The copy loop of a shared-memory stage fused and split over the block's threads:
    `threads` are (thread axis, extent) pairs, innermost first, so that neighbouring threads
    copy neighbouring elements.

    Example:
        >>> cooperative_fetch(a_shared, [(thread_x, 16), (thread_y, 8)])   # doctest: +SKIP
    """
    rest = stage.fuse(*stage.op.axis)
    for thread, extent in threads:
        rest, fetch = stage.split(rest, factor=extent)
        stage.bind(fetch, thread)
