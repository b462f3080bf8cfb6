"""x86 schedule of resize: an index-remapping (gather) anchor without a reduction, so it is
inlined into the group's single output, whose columns are vectorized (16 lanes) and whose
(n, c, rows) run in parallel.

Example:
    >>> s = schedule_resize(topi.nn.resize2d(x, scale=2))  # doctest: +SKIP
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..utils import as_tensor_list, traverse_inline
from .utils import schedule_root_stage


def schedule_resize(outs):
    """Schedule a fused group whose anchor is resize2d (plus injective epilogue).

    Example:
        >>> s = schedule_resize([y])  # doctest: +SKIP
    """
    outs = as_tensor_list(outs)
    s = te.create_schedule([t.op for t in outs])
    out_ops = [t.op for t in outs]

    def callback(op):
        if op.tag == tags.RESIZE and op not in out_ops and len(outs) == 1:
            s[op].compute_inline()
        elif op.tag == tags.RESIZE and op not in out_ops:
            schedule_root_stage(s, op.output(0))

    traverse_inline(s, out_ops, callback)
    for t in outs:
        schedule_root_stage(s, t)
    return s
