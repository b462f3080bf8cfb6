"""What every target's schedule of a row-wise anchor (softmax, log_softmax, layer_norm) needs
to know about its fused group: the anchor, the stages it computes before its output (the
reductions along the row and the elementwise stages between them), and which stage carries
the loop over rows. Each target then lays out the loops its own way (topi/x86/softmax.py,
topi/gpu/row.py).

Example:
    >>> s, anchor, internals = find_row_anchor([y], ("softmax",), "schedule_softmax")  # doctest: +SKIP
"""
from __future__ import annotations

from .. import te
from ..te.tensor import is_reduction
from . import tags
from .utils import TopiError, as_tensor_list, get_const_tuple, inline_injective_inputs, traverse_inline


def find_row_anchor(outs, anchor_tags, name: str):
    """A new schedule of the group, its one anchor (an op tagged with one of anchor_tags) and
    the anchor's internal stages; injective inputs of both are inlined.

    Example:
        >>> s, anchor, internals = find_row_anchor([y], ("softmax",), "schedule_softmax")  # doctest: +SKIP
    """
    outs = as_tensor_list(outs)
    s = te.create_schedule([t.op for t in outs])
    anchors = [op for op in traverse_inline(s, [t.op for t in outs]) if op.tag in anchor_tags]
    if len(anchors) != 1:
        raise TopiError(f"{name}: expected one {' / '.join(anchor_tags)} op in the group, found "
                        f"{len(anchors)}")
    anchor = anchors[0]
    internals = internal_stages(anchor)
    for op in internals + [anchor]:
        inline_injective_inputs(s, op, keep=set(internals))
    return s, anchor, internals


def internal_stages(anchor) -> list:
    """The stages a row-wise anchor (softmax, layer_norm) computes before its output: the
    reductions it reads and the elementwise stages between them, in producer-first order.

    Example:
        >>> [op.name for op in internal_stages(topi.nn.softmax(x).op)]  # doctest: +SKIP
        ['softmax_max', 'softmax_exp', 'softmax_sum']
    """
    todo, members = list(anchor.input_tensors()), {}     # a dict: discovery order is kept
    while todo:
        t = todo.pop()
        op = t.op
        if op in members or not isinstance(op, te.ComputeOp):
            continue
        if is_reduction(op) or any(is_reduction(u.op) for u in op.input_tensors()):
            members[op] = None
            todo.extend(op.input_tensors())
    # Producer-first order, as the schedule lists its stages.
    order, seen = [], set()

    def visit(op):
        if op in seen:
            return
        seen.add(op)
        for u in op.input_tensors():
            if u.op in members:
                visit(u.op)
        order.append(op)

    for op in members:
        visit(op)
    return order


def row_host(s, anchor, outs, schedule_other):
    """The stage that carries the row loop: the single output when it only applies
    elementwise ops of the same shape to the anchor (the anchor is then inlined into it), or
    the anchor itself, with `schedule_other(s, tensor)` scheduling the group's other outputs.

    Example:
        >>> host = row_host(s, softmax_op, outs, schedule_injective_from_existing)  # doctest: +SKIP
    """
    anchor_out = anchor.output(0)
    shape = get_const_tuple(anchor_out.shape)
    if len(outs) == 1 and outs[0].op is not anchor and \
            get_const_tuple(outs[0].shape) == shape and _reads_elementwise(outs[0].op, anchor, shape):
        s[anchor].compute_inline()
        return s[outs[0]]
    for t in outs:
        if t.op is not anchor:
            schedule_other(s, t)
    return s[anchor]


def _reads_elementwise(op, anchor, shape) -> bool:
    """op reaches anchor only through same-shape elementwise/broadcast stages (so each
    output element needs the anchor at the same index only)."""
    todo, seen = [op], set()
    while todo:
        o = todo.pop()
        if o in seen:
            continue
        seen.add(o)
        for t in o.input_tensors():
            if t.op is anchor:
                continue
            if isinstance(t.op, te.ComputeOp) and _reaches(t.op, anchor):
                if not tags.is_broadcast(t.op.tag) or get_const_tuple(t.shape) != shape:
                    return False
                todo.append(t.op)
    return tags.is_broadcast(op.tag)


def _reaches(op, target) -> bool:
    todo, seen = [op], set()
    while todo:
        o = todo.pop()
        if o is target:
            return True
        if o in seen:
            continue
        seen.add(o)
        todo.extend(t.op for t in o.input_tensors())
    return False
