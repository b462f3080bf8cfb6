"""softmax and log_softmax along one axis, numerically stable (the row maximum is subtracted
before exp, as PyTorch does).

    softmax:      m = max_k x[k];  e = exp(x - m);  s = sum_k e[k];   out = e / s
    log_softmax:  m = max_k x[k];  s = sum_k exp(x[k] - m);           out = x - m - log(s)

The reductions are stages of their own (tags "comm_reduce"); the output carries the tag
"softmax" / "log_softmax" and attrs {"axis": axis}, which kiln.topi.x86.schedule_softmax reads.

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((8, 100), name="x")
    >>> y = topi.nn.softmax(x, axis=-1)
"""
from __future__ import annotations

from ... import te
from ...tir import dtype as dt
from .. import tags
from ..elemwise import check_tensor
from ..transform import normalize_axis
from ..utils import TopiError


def _row_reduce(x, axis, reducer, body, name):
    """reducer over `axis` of body(index tuple of x): the result has x's shape without `axis`."""
    shape = tuple(x.shape)
    k = te.reduce_axis((0, shape[axis]), name="k")

    def fcompute(*i):
        return reducer(body(i[:axis] + (k.var,) + i[axis:]), axis=k)

    return te.compute(shape[:axis] + shape[axis + 1:], fcompute, name=name, tag=tags.COMM_REDUCE,
                      attrs={"reduce_axes": (axis,), "input_ndim": x.ndim})


def _check(x, axis, name):
    check_tensor(x, name)
    if not dt.is_float(x.dtype):
        raise TopiError(f"{name} needs a floating-point tensor, got {x.name} of dtype {x.dtype}")
    if x.ndim == 0:
        raise TopiError(f"{name} needs at least one dimension, {x.name} is a scalar")
    return normalize_axis(axis, x.ndim, name)


def _drop(i, axis):
    return i[:axis] + i[axis + 1:]


def softmax(x, axis: int = -1):
    """exp(x - max) / sum(exp(x - max)) along `axis`, as torch.softmax.

    Example:
        >>> y = softmax(te.placeholder((4, 10), name="x"), axis=1)
    """
    axis = _check(x, axis, "softmax")
    mx = _row_reduce(x, axis, te.max, lambda i: x(*i), "softmax_max")
    e = te.compute(x.shape, lambda *i: te.exp(x(*i) - mx(*_drop(i, axis))), name="softmax_exp",
                   tag=tags.ELEMWISE)
    s = _row_reduce(e, axis, te.sum, lambda i: e(*i), "softmax_sum")
    return te.compute(x.shape, lambda *i: e(*i) / s(*_drop(i, axis)), name="softmax",
                      tag=tags.SOFTMAX, attrs={"axis": axis})


def log_softmax(x, axis: int = -1):
    """x - max - log(sum(exp(x - max))) along `axis`, as torch.log_softmax.

    Example:
        >>> y = log_softmax(te.placeholder((4, 10), name="x"))
    """
    axis = _check(x, axis, "log_softmax")
    mx = _row_reduce(x, axis, te.max, lambda i: x(*i), "log_softmax_max")
    s = _row_reduce(x, axis, te.sum, lambda i: te.exp(x(*i) - mx(*_drop(i, axis))),
                    "log_softmax_sum")

    def fcompute(*i):
        j = _drop(i, axis)
        return x(*i) - mx(*j) - te.log(s(*j))

    return te.compute(x.shape, fcompute, name="log_softmax", tag=tags.LOG_SOFTMAX,
                      attrs={"axis": axis})
