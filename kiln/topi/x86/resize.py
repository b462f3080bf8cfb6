"""x86 schedule of resize: an index-remapping (gather) anchor without a reduction, so it is
inlined into the group's single output, whose columns are vectorized (16 lanes) and whose
(n, c, rows) run in parallel. Its per-axis tap tables stay at the root (computed once, small);
the two axis passes of an antialiased downsampling run there too, their rows in parallel.

Example:
    >>> s = schedule_resize(topi.nn.resize2d(x, scale=2))  # doctest: +SKIP
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..utils import as_tensor_list, traverse_inline
from .utils import schedule_root_stage


def _schedule_tables(s, op):
    """The RESIZE_TABLE stages that `op` reads: the 4-d axis passes run their (n, c, rows) in
    parallel; the tap tables are a few hundred elements and keep their plain loops."""
    todo, seen = [t.op for t in op.input_tensors()], set()
    while todo:
        p = todo.pop()
        if p in seen or not isinstance(p, te.ComputeOp) or p.tag != tags.RESIZE_TABLE:
            continue
        seen.add(p)
        axes = list(s[p].op.axis)
        if len(axes) == 4:
            s[p].parallel(s[p].fuse(*axes[:3]))
        todo.extend(t.op for t in p.input_tensors())


def schedule_resize(outs):
    """Schedule a fused group whose anchor is resize2d (plus injective epilogue).

    Example:
        >>> s = schedule_resize([y])  # doctest: +SKIP
    """
    outs = as_tensor_list(outs)
    s = te.create_schedule([t.op for t in outs])
    out_ops = [t.op for t in outs]

    def callback(op):
        if op.tag != tags.RESIZE:
            return
        _schedule_tables(s, op)
        if op not in out_ops and len(outs) == 1:
            s[op].compute_inline()
        elif op not in out_ops:
            schedule_root_stage(s, op.output(0))

    traverse_inline(s, out_ops, callback)
    for t in outs:
        schedule_root_stage(s, t)
    return s
