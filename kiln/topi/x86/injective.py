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
from ...arith import Analyzer
from ...te.inline import accesses, effective_bodies
from ...te.tensor import is_reduction
from ...tir.expr import Range, Var
from ...tir.functor import substitute, uses_var
from ..transform import ravel_index
from ..utils import as_tensor_list, get_const_tuple, is_const_int, prod, traverse_inline

VECTOR_LANES = 16          # float32 lanes of a zmm register
# Below this many elements a thread-pool launch (~5 us) costs more than the loop itself.
PARALLEL_MIN_ELEMENTS = 8192
# A contiguous run shorter than this vectorizes worse than gathers over the fully fused loop.
MIN_CONTIGUOUS_RUN = 8


def transposed_axis(s, out, loads=None):
    """The output axis that the innermost index of some input read follows instead of the
    output's innermost axis (a transpose: out[i, j] = x[j, i] gives i), or None. Inlined
    producers are looked through; `loads` are the stage's reads when already collected
    (_reads).

    Example:
        >>> transposed_axis(s, topi.transpose(x))  # doctest: +SKIP
        i0
    """
    stage = s[out]
    axes = list(stage.op.axis)
    if len(axes) < 2 or is_reduction(stage.op):
        return None
    last = {axes[-1].var}
    # simplified within the axes' ranges: a reshape's index arithmetic ((o * 4608 + c * 9 +
    # i * 3 + j) // 4608) names axes it does not depend on
    ana = Analyzer()
    for iv, n in zip(axes, get_const_tuple(out.shape)):
        if is_const_int(n):
            ana.bind(iv.var, Range(0, n))
    for load in _reads(s, out) if loads is None else loads:
        if len(load.indices) < 2:
            continue
        inner = ana.simplify(load.indices[-1])
        if uses_var(inner, last):
            continue
        used = [iv for iv in axes[:-1] if uses_var(inner, {iv.var})]
        if used:
            return used[-1]
    return None


def contiguous_suffix(s, out, loads=None) -> int:
    """How many trailing output axes can be fused into one vectorized axis along which every
    input read is contiguous (offset f + base) or fixed: all of them for elementwise work, the
    pixels of a channel for a channel shuffle (concatenate, reshape, transpose, split), whose
    fully fused index jumps between inputs and channels inside a vector (a gather per lane).
    `loads` as in transposed_axis.

    Example:
        >>> contiguous_suffix(s, channel_shuffle_output)  # doctest: +SKIP
        2
    """
    stage = s[out]
    axes = list(stage.op.axis)
    extents = get_const_tuple(out.shape)
    loads = _reads(s, out) if loads is None else loads
    if not all(is_const_int(d) for d in extents) or not all(
            is_const_int(d) for load in loads for d in load.producer.shape):
        return len(axes)
    offsets = [ravel_index(load.indices, get_const_tuple(load.producer.shape)) for load in loads]
    for k in range(len(axes), 1, -1):
        if _reads_contiguous(axes, extents, offsets, len(axes) - k):
            return k
    return 1


def _reads(s, out) -> list:
    """The loads of out's stage with its inlined producers substituted."""
    return accesses(effective_bodies(s)[s[out]])


def _reads_contiguous(axes, extents, offsets, first: int) -> bool:
    """Whether each offset, with axes[first:] fused into one variable f, is f + base or base
    (base free of f)."""
    fused = Var("f")
    ana = Analyzer()
    for iv, n in zip(axes[:first], extents[:first]):
        ana.bind(iv.var, Range(0, n))
    ana.bind(fused, Range(0, prod(extents[first:])))
    mapping, stride = {}, 1
    for iv, n in reversed(list(zip(axes[first:], extents[first:]))):
        index = fused // stride if stride > 1 else fused
        mapping[iv.var] = index % n if iv is not axes[first] else index
        stride *= n
    for offset in offsets:
        offset = substitute(offset, mapping)
        if uses_var(ana.simplify(offset - fused), {fused}) and uses_var(
                ana.simplify(offset), {fused}):
            return False
    return True


def _tile_transposed(stage, axes, row, parallel):
    """16 x 16 tiles over (row, the axes after it fused): the strided reads of a tile reuse 16
    cache lines. (Fused, because the axes after `row` may be short: a (512, 4608) transpose
    reshaped to (512, 512, 3, 3), a weight gradient, ran 3 columns per tile at 1.4 GB/s.)"""
    after = axes[axes.index(row) + 1:]
    last = stage.fuse(*after) if len(after) > 1 else after[0]
    ro, ri = stage.split(row, factor=VECTOR_LANES)
    lo, li = stage.split(last, factor=VECTOR_LANES)
    others = [a for a in axes if a is not row and a not in after]
    stage.reorder(*others, ro, lo, ri, li)
    stage.vectorize(li)
    outer = stage.fuse(*others, ro)
    if parallel:
        stage.parallel(outer)


def _vectorize_suffix(stage, axes, inner: int, parallel: bool):
    """The last `inner` axes fused and vectorized (16 lanes, then a tail), the rest fused and
    run on the thread pool."""
    outer = stage.fuse(*axes[:-inner])
    _, lanes = stage.split(stage.fuse(*axes[-inner:]), factor=VECTOR_LANES)
    stage.vectorize(lanes)
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
    loads = _reads(s, out)       # inlining the whole schedule: once for both questions
    row = transposed_axis(s, out, loads)
    if row is not None and numel is not None and numel > VECTOR_LANES ** 2:
        _tile_transposed(stage, axes, row, numel >= PARALLEL_MIN_ELEMENTS)
        return s
    inner = contiguous_suffix(s, out, loads) if numel is not None else len(axes)
    if inner < len(axes) and prod(shape[-inner:]) >= MIN_CONTIGUOUS_RUN:
        _vectorize_suffix(stage, axes, inner, numel >= PARALLEL_MIN_ELEMENTS)
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
