"""GPU schedule of reductions (sum, mean, max, argmax, ...) with fused inputs and epilogue.

One block per output element, its threads sharing the reduced elements (a cross-thread
reduction, as topi/gpu/row.py does for softmax rows); an elementwise epilogue of the output's
shape (mean's division, argmax's index copy) computes from the result in the registers.
Reductions over fewer elements than a warp get the generic schedule (one thread per output
element, reducing sequentially).

Example:
    >>> from kiln import te, topi
    >>> s = topi.gpu.schedule_reduce(topi.reduction.sum(te.placeholder((8, 4096), name="x"), 1))
"""
from __future__ import annotations

from ... import te
from ...te.tensor import is_reduction
from ..utils import (as_tensor_list, get_const_tuple, inline_injective_inputs, is_const_int, prod,
                     traverse_inline)
from .generic import schedule_generic
from .row import MIN_ROW, row_threads


def schedule_reduce(outs):
    """A schedule for a fused reduction group (see the module doc).

    Example:
        >>> s = schedule_reduce([topi.reduction.mean(x, axis=(2, 3))])  # doctest: +SKIP
    """
    outs = as_tensor_list(outs)
    s = te.create_schedule([t.op for t in outs])
    reductions = [op for op in traverse_inline(s, [t.op for t in outs]) if is_reduction(op)]
    if len(reductions) != 1 or len(outs) != 1:
        return schedule_generic(outs)
    red = reductions[0]
    extents = [iv.dom.extent for iv in red.reduce_axis]
    if not all(is_const_int(e) for e in extents):
        return schedule_generic(outs)
    count = prod(get_const_tuple(extents))
    if count < MIN_ROW or get_const_tuple(outs[0].shape) != get_const_tuple(red.output(0).shape):
        return schedule_generic(outs)
    inline_injective_inputs(s, red)
    host = s[outs[0]]
    block = None
    if host.op.axis:
        block = host.fuse(*host.op.axis)
        host.bind(block, te.thread_axis("blockIdx.x"))
    st = s[red]
    threads = row_threads(count)
    _, tx = st.split(st.fuse(*st.op.reduce_axis), factor=threads)
    st.bind(tx, te.thread_axis((0, threads), "threadIdx.x"))
    if host is not st and block is not None:
        st.compute_at(host, block)
        st.set_scope("local")
    return s
