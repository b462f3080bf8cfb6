"""GPU schedules of row-wise anchors (softmax, log_softmax, layer_norm) and their epilogues.

One block per row: the row's reductions (maximum, sums) are cross-thread reductions, each
thread reducing a strided share of the row and the block combining the shares, so every
thread holds the result in its registers; then the threads write the row, each the same
strided share. Elementwise stages between the reductions (softmax's exponentials) are
recomputed where they are read rather than stored. A row shorter than one warp, or one that
is not innermost (softmax over the channels of NCHW), gets the generic schedule: one thread
per output element.

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((32, 1000), name="x")
    >>> s = topi.gpu.schedule_softmax(topi.nn.softmax(x))
"""
from __future__ import annotations

from ... import te
from ...te.tensor import is_reduction
from .. import tags
from ..row_anchor import find_row_anchor, row_host
from ..utils import as_tensor_list, get_const_tuple, is_const_int, prod
from .generic import bind_elementwise, default_threads, schedule_generic

# Rows shorter than a warp leave most of a block's threads idle: one thread per element is
# better there.
MIN_ROW = 32
MAX_ROW_THREADS = 256


def row_threads(length: int) -> int:
    """Threads per row: a warp, doubled while each thread would still reduce 8 or more
    elements, up to 256 (or the target's limit).

    Example:
        >>> row_threads(128), row_threads(768), row_threads(30522)
        (32, 64, 256)
    """
    threads = 32
    while threads < MAX_ROW_THREADS and threads * 16 <= length:
        threads *= 2
    return default_threads(threads)


def schedule_rows(outs, anchor_tags, name: str, first_row_axis):
    """The one-block-per-row schedule of a group whose anchor normalizes its axes from
    `first_row_axis(anchor)` on (None: not this shape of row; the generic schedule then).

    Example:
        >>> s = schedule_rows([y], ("softmax",), "schedule_softmax", _last_axis)  # doctest: +SKIP
    """
    s, anchor, internals = find_row_anchor(outs, anchor_tags, name)
    first = first_row_axis(anchor)
    shape = get_const_tuple(anchor.output(0).shape)
    reductions = [op for op in internals if is_reduction(op)]
    if first is None or not all(is_const_int(d) for d in shape[first:]) or \
            prod(shape[first:]) < MIN_ROW or any(len(op.axis) != first for op in reductions):
        return schedule_generic(outs)
    host = row_host(s, anchor, as_tensor_list(outs), bind_elementwise)
    axes = list(host.op.axis)
    threads = row_threads(prod(shape[first:]))
    thread_x = te.thread_axis((0, threads), "threadIdx.x")
    _, tx = host.split(host.fuse(*axes[first:]), factor=threads)
    host.bind(tx, thread_x)
    block = None
    if first:
        block = host.fuse(*axes[:first])
        host.bind(block, te.thread_axis("blockIdx.x"))
    for op in internals:
        st = s[op]
        if not is_reduction(op):
            st.compute_inline()
            continue
        _, rtx = st.split(st.fuse(*st.op.reduce_axis), factor=threads)
        st.bind(rtx, thread_x)
        if block is not None:
            st.compute_at(host, block)
            st.set_scope("local")
    return s


# The topi computes record the axis non-negative.
def _softmax_axis(anchor):
    axis = anchor.attrs["axis"]
    return axis if axis == len(anchor.output(0).shape) - 1 else None


def _norm_axis(anchor):
    return None if "groups" in anchor.attrs else anchor.attrs["axis"]


def schedule_softmax(outs):
    """softmax / log_softmax over the innermost axis, with its epilogue (see the module doc).

    Example:
        >>> s = schedule_softmax(topi.nn.softmax(x))  # doctest: +SKIP
    """
    return schedule_rows(outs, (tags.SOFTMAX, tags.LOG_SOFTMAX), "schedule_softmax",
                         _softmax_axis)


def schedule_layer_norm(outs):
    """layer_norm (over its trailing axes) with its epilogue (see the module doc).

    Example:
        >>> s = schedule_layer_norm(topi.nn.layer_norm(x, g, b))  # doctest: +SKIP
    """
    return schedule_rows(outs, (tags.LAYER_NORM,), "schedule_layer_norm", _norm_axis)
