"""x86 schedule of layer_norm / group_norm / instance_norm and their fused epilogues.

layer_norm: the axes before the normalized ones are fused into one parallel row loop; at each
row the sum and the squared-deviation sum are computed (16 partial sums in a vector when
the normalized axes hold 32 elements or more), then the normalized row is written with the
normalized axes fused, split by 16 and vectorized.
group_norm: the channel axis is split into (group, channel in group); (batch, group) is the
parallel row loop and the group's channels and spatial positions, contiguous in memory,
are the vectorized part.
batch_norm (inference) is a broadcast op: schedule it with schedule_injective.

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((32, 768), name="x")
    >>> s = topi.x86.schedule_layer_norm(topi.nn.layer_norm(x, None, None, axis=-1))
"""
from __future__ import annotations

from .. import tags
from ..utils import get_const_tuple
from .softmax import _vector_tail, schedule_internals, schedule_row_anchor, schedule_row_stages


def _group_loops(s, host, anchor, internals, parallel):
    groups = anchor.attrs["groups"]
    n, c, *spatial = host.op.axis
    channels = get_const_tuple(anchor.output(0).shape)[1]
    co, ci = host.split(c, factor=channels // groups)
    row_loop = host.fuse(n, co)
    _vector_tail(host, [ci, *spatial])
    if parallel:
        host.parallel(row_loop)
    schedule_internals(s, host, row_loop, internals, 2)


def _loops(s, host, anchor, internals, parallel):
    if "groups" in anchor.attrs:
        _group_loops(s, host, anchor, internals, parallel)
        return
    schedule_row_stages(s, host, internals, anchor.attrs["axis"], parallel, fuse_row=True)


def schedule_layer_norm(outs):
    """A schedule for layer_norm / group_norm / instance_norm followed by injective ops.

    Example:
        >>> s = schedule_layer_norm(topi.nn.layer_norm(x, g, b))  # doctest: +SKIP
    """
    return schedule_row_anchor(outs, (tags.LAYER_NORM,), "schedule_layer_norm", host_loops=_loops)


schedule_group_norm = schedule_layer_norm
schedule_instance_norm = schedule_layer_norm
