"""x86 schedule of softmax / log_softmax and their fused epilogues.

A "row" is one position of every axis before the softmax axis. The output's row loop (all
those axes fused) runs in parallel; at each row, the maximum, the exponentials and their sum
are computed into small temporaries, while the row is in cache. Along the softmax axis:
- if it is the innermost axis, elementwise stages split it by 16 and vectorize, and the two
  reductions accumulate 16 partial results in a vector (rfactor) when it is 32 or longer;
- otherwise the axes after it are contiguous: every stage vectorizes them (fused, split by
  16) below its loop over the softmax axis.

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((32, 100), name="x")
    >>> s = topi.x86.schedule_softmax(topi.nn.softmax(x))
"""
from __future__ import annotations

from ...te.tensor import is_reduction
from .. import tags
from ..row_anchor import find_row_anchor, row_host
from ..utils import as_tensor_list, get_const_tuple, is_const_int, prod
from .injective import PARALLEL_MIN_ELEMENTS, VECTOR_LANES, schedule_injective_from_existing
from .reduction import rfactor_inner

SOFTMAX_TAGS = (tags.SOFTMAX, tags.LOG_SOFTMAX)


def _vector_tail(stage, axes):
    """Fuse the contiguous `axes` (innermost last), split by 16 and vectorize the inner part."""
    if not axes:
        return
    fused = stage.fuse(*axes)
    _, inner = stage.split(fused, factor=VECTOR_LANES)
    stage.vectorize(inner)


def schedule_row_stages(s, host, internals, axis: int, parallel: bool, fuse_row: bool = False):
    """Shared by softmax and normalization schedules: `host` (a stage whose axes are the input's)
    gets a parallel loop over the fused axes before `axis` and a vectorized inner part (the
    axes after `axis`, or with fuse_row the axes from `axis` on); each internal stage is
    computed at that loop (at the root when there is none) and vectorized along its own
    contiguous axes.

    Example:
        >>> schedule_row_stages(s, s[y], internal_stages(y.op), axis=1, parallel=True)  # doctest: +SKIP
    """
    axes = list(host.op.axis)
    outer, row, inner = axes[:axis], axes[axis], axes[axis + 1:]
    row_loop = host.fuse(*outer) if outer else None
    _vector_tail(host, [row] + inner if fuse_row or not inner else inner)
    if row_loop is not None and parallel:
        host.parallel(row_loop)
    schedule_internals(s, host, row_loop, internals, axis)


def schedule_internals(s, host, row_loop, internals, n_outer: int):
    """Compute each internal stage at `row_loop` of `host` (root when None). A reduction whose
    data axes are all outer ones (the reduced axes include the innermost) accumulates 16
    partial results in a vector (rfactor) when possible; otherwise its data axes after the
    first `n_outer` are contiguous and vectorized below the reduction loop. An elementwise
    stage vectorizes its axes after the first n_outer + 1 (or that one when it is the last).

    Example:
        >>> schedule_internals(s, s[y], row_loop, internal_stages(y.op), 1)  # doctest: +SKIP
    """
    for op in internals:
        if is_reduction(op):
            rf = rfactor_inner(s, op) if len(op.axis) <= n_outer else None
            st = s[op]
            data = list(st.op.axis)
            st.reorder(*data[:n_outer], *st.op.reduce_axis, *data[n_outer:])
            _vector_tail(st, data[n_outer:])
            if row_loop is not None:
                st.compute_at(host, row_loop)
            if rf is not None and data:
                rf.compute_at(st, data[-1])
        else:
            st = s[op]
            data = list(st.op.axis)
            _vector_tail(st, data[n_outer + 1:] or data[n_outer:n_outer + 1])
            if row_loop is not None:
                st.compute_at(host, row_loop)


def schedule_row_anchor(outs, anchor_tags, name: str, fuse_row: bool = False, host_loops=None):
    """Schedule a fused group whose anchor is a row-wise op with attrs {"axis": ...}.

    Example:
        >>> s = schedule_row_anchor([y], ("softmax",), "schedule_softmax")  # doctest: +SKIP

    `host_loops(s, host, anchor, internals, parallel)`, when given, replaces the default loop
    structure (schedule_row_stages).
    """
    s, anchor, internals = find_row_anchor(outs, anchor_tags, name)
    axis = anchor.attrs["axis"]
    host = row_host(s, anchor, as_tensor_list(outs), schedule_injective_from_existing)
    numel = get_const_tuple(anchor.output(0).shape)
    numel = prod(numel) if all(is_const_int(d) for d in numel) else None
    parallel = numel is None or numel >= PARALLEL_MIN_ELEMENTS
    if host_loops is not None:
        host_loops(s, host, anchor, internals, parallel)
    else:
        schedule_row_stages(s, host, internals, axis, parallel, fuse_row)
    return s


def schedule_softmax(outs):
    """A schedule for softmax or log_softmax followed by injective ops (see the module doc).

    Example:
        >>> s = schedule_softmax(topi.nn.softmax(x))  # doctest: +SKIP
    """
    return schedule_row_anchor(outs, SOFTMAX_TAGS, "schedule_softmax")


schedule_log_softmax = schedule_softmax
