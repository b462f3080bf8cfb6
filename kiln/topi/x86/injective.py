"""x86 schedule of injective fused groups (elementwise, broadcast, reshape, transpose, ...).

Each output's loops are fused into one, split by the vector width, the inner part vectorized
and the outer part run on the thread pool; injective producers are inlined into it.

Example:
    >>> from kiln import te, topi
    >>> x = te.placeholder((37, 19), name="x")
    >>> y = topi.elemwise.relu(topi.broadcast.add(x, 1.0))
    >>> s = topi.x86.schedule_injective(y)
"""
from __future__ import annotations

from ... import te
from ...te.inline import accesses, effective_bodies
from ...te.tensor import is_reduction
from ...tir.functor import uses_var
from ..utils import as_tensor_list, get_const_tuple, is_const_int, prod, traverse_inline

VECTOR_LANES = 16          # float32 lanes of a zmm register
# Below this many elements a thread-pool launch (~5 us) costs more than the loop itself.
PARALLEL_MIN_ELEMENTS = 8192


def transposed_axis(s, out):
    """The output axis that the innermost index of some input read follows instead of the
    output's innermost axis (a transpose: out[i, j] = x[j, i] gives i), or None. Inlined
    producers are looked through.

    Example:
        >>> transposed_axis(s, topi.transpose(x))  # doctest: +SKIP
        i0
    """
    stage = s[out]
    axes = list(stage.op.axis)
    if len(axes) < 2 or is_reduction(stage.op):
        return None
    last = {axes[-1].var}
    for load in accesses(effective_bodies(s)[stage]):
        if len(load.indices) < 2 or uses_var(load.indices[-1], last):
            continue
        used = [iv for iv in axes[:-1] if uses_var(load.indices[-1], {iv.var})]
        if used:
            return used[-1]
    return None


def _tile_transposed(stage, axes, row, parallel):
    """16 x 16 tiles over (row, last axis): the strided reads of a tile reuse 16 cache lines."""
    last = axes[-1]
    ro, ri = stage.split(row, factor=VECTOR_LANES)
    lo, li = stage.split(last, factor=VECTOR_LANES)
    others = [a for a in axes if a is not row and a is not last]
    stage.reorder(*others, ro, lo, ri, li)
    stage.vectorize(li)
    outer = stage.fuse(*others, ro)
    if parallel:
        stage.parallel(outer)


def schedule_injective_from_existing(s, out):
    """Schedule the stage of `out` in s: fuse, vectorize the inner 16, parallelize the rest
    (16 x 16 tiles instead when the output transposes an input).

    Example:
        >>> schedule_injective_from_existing(s, y)  # doctest: +SKIP
    """
    stage = s[out]
    axes = list(stage.op.axis)
    if not axes:
        return s
    shape = get_const_tuple(out.shape)
    numel = prod(shape) if all(is_const_int(d) for d in shape) else None
    row = transposed_axis(s, out)
    if row is not None and numel is not None and numel > VECTOR_LANES ** 2:
        _tile_transposed(stage, axes, row, numel >= PARALLEL_MIN_ELEMENTS)
        return s
    fused = stage.fuse(*axes)
    if numel is not None and numel <= VECTOR_LANES:
        if numel > 1:
            stage.vectorize(fused)
        return s
    outer, inner = stage.split(fused, factor=VECTOR_LANES)
    stage.vectorize(inner)
    if numel is None or numel >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(outer)
    return s


def schedule_injective(outs):
    """A schedule for a group of injective outputs: producers inlined, each output fused,
    vectorized by 16 lanes and parallel. Several outputs (e.g. the parts of a split) work.

    Example:
        >>> s = schedule_injective([y])  # doctest: +SKIP
    """
    outs = as_tensor_list(outs)
    s = te.create_schedule([t.op for t in outs])
    traverse_inline(s, [t.op for t in outs])
    for t in outs:
        schedule_injective_from_existing(s, t)
    return s


schedule_elemwise = schedule_injective
schedule_broadcast = schedule_injective
