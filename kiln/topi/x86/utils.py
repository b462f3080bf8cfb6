"""Pieces shared by the x86 anchor schedules (conv2d, dense, pooling, resize).

A fused group is an anchor op (conv2d, dense, pool...) followed by injective ops; only the
group's outputs have buffers. `anchor_host` decides where the anchor is computed: inside the
tile loops of the single output (so a bias add and relu run while the tile is in registers),
or, when the anchor itself is an output, in a "local" cache stage computed inside the tiles of
the anchor's own copy-out stage.

Example:
    >>> host, local = anchor_host(s, conv.op, [relu])  # doctest: +SKIP
    >>> # tile s[host]; s[local].compute_at(s[host], tile_axis); vectorize local's inner axis
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..utils import as_tensor_list, get_const_tuple, is_const_int, prod, traverse_inline
from .injective import PARALLEL_MIN_ELEMENTS, schedule_injective_from_existing

VECTOR_LANES = 16          # float32 lanes of a zmm register (memory-bound stages; LLVM splits
                           # them into two ymm operations on AVX2)


def vector_lanes(dtype: str) -> int:
    """Lanes of one vector register of the current target for `dtype` (AVX-512: 16 for
    float32, 8 for float64; AVX2: 8 and 4). Register-tiled schedules size their tiles by it.

    Example:
        >>> vector_lanes("float64")     # on this AVX-512 host
        8
    """
    from ...target import current_target
    from ...tir import dtype as dt
    return max(1, current_target().vector_width_bits // dt.bits_of(dtype))


def vector_registers() -> int:
    """Vector registers of the current target (32 with AVX-512, 16 with AVX2): register
    tiles keep their accumulators plus a few operand registers within this.

    Example:
        >>> vector_registers()          # on this AVX-512 host
        32
    """
    from ...target import current_target
    return current_target().vector_registers


def const_extent(value, default: int) -> int:
    """`value` when it is a constant int, else `default` (symbolic shapes).

    Example:
        >>> const_extent(7, 16)
        7
    """
    return int(value) if is_const_int(value) else default


def tile_factor(extent, preferred: int) -> int:
    """The split factor for an axis: `preferred`, or the whole extent when it is smaller
    (no guarded tail for tiny axes).

    Example:
        >>> tile_factor(7, 16), tile_factor(40, 16)
        (7, 16)
    """
    extent = const_extent(get_const_tuple((extent,))[0], preferred)
    return max(1, min(preferred, extent))


def block_factor(extent, preferred: int, smallest: int) -> int:
    """The size of a register block along an axis that is fused into a parallel loop, where
    a partial last block would make the block's loops symbolic (not unrollable): the whole
    extent if it fits, else the largest divisor in [smallest, preferred], else `preferred`.

    Example:
        >>> block_factor(12, 8, 4), block_factor(5, 8, 4), block_factor(13, 8, 4)
        (6, 5, 8)
    """
    extent = const_extent(get_const_tuple((extent,))[0], preferred)
    if extent <= preferred:
        return max(1, extent)
    for d in range(preferred, smallest - 1, -1):
        if extent % d == 0:
            return d
    return preferred


def tail_tile(n: int, least: int, most: int) -> int:
    """A tile size in [least, most] for an axis of extent n whose last tile may be shorter:
    n itself if it fits, else the largest size that divides n, else the one with the fewest
    tiles, then the fullest last tile (7 as 4 + 3, not 5 + 2 or 6 + 1).

    Example:
        >>> tail_tile(56, 4, 5), tail_tile(14, 4, 5), tail_tile(7, 4, 5), tail_tile(3, 4, 5)
        (4, 5, 4, 3)
    """
    if n <= most:
        return max(1, n)
    divisors = [d for d in range(least, most + 1) if n % d == 0]
    if divisors:
        return divisors[-1]
    return min(range(least, most + 1), key=lambda d: (-(-n // d), -(n % d)))


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of n that is at most limit (at least 1).

    Example:
        >>> largest_divisor(56, 16), largest_divisor(13, 8)
        (14, 1)
    """
    for d in range(max(1, min(n, limit)), 0, -1):
        if n % d == 0:
            return d
    return 1


def register_tile(oh: int, ow: int, max_acc: int = 16, max_cols: int = 14) -> tuple:
    """(rows, cols) of the output register tile: tile sizes that divide the output (no
    partial tiles, so every tile loop is constant and unrolled; a partial column tile
    measured 3x slower), as many accumulators as fit. cols is the largest divisor of `ow`
    up to max_cols unless that is below max_cols/2 (a prime width: then a fixed tile with
    a split-off tail); rows (dividing `oh`) fill the remaining budget.

    Example:
        >>> register_tile(56, 56), register_tile(7, 7), register_tile(8, 8)
        ((1, 14), (1, 7), (2, 8))
    """
    cols = largest_divisor(ow, max_cols)
    if cols < max_cols // 2 and ow > max_cols:
        cols = max_cols // 2 + 1
    rows = largest_divisor(oh, max(1, max_acc // cols))
    return rows, cols


def _same_shape(a, b) -> bool:
    sa, sb = get_const_tuple(a.shape), get_const_tuple(b.shape)
    return len(sa) == len(sb) and all(x is y or (isinstance(x, int) and x == y)
                                      for x, y in zip(sa, sb))


def _elementwise_path(out_op, anchor_op) -> bool:
    """True if out_op reads anchor_op and every op between them is elementwise/broadcast with
    the anchor's shape, so that out[idx] reads anchor[idx] at the same index. Ops that do not
    lead to the anchor (a reshaped bias) do not matter."""
    anchor = anchor_op.output(0)
    memo: dict = {}

    def reaches(op) -> bool:
        if op is anchor_op:
            return True
        if op not in memo:
            memo[op] = False
            memo[op] = tags.is_injective(op.tag) and any(reaches(t.op) for t in op.input_tensors())
        return memo[op]

    if not reaches(out_op):
        return False
    return all(tags.is_broadcast(op.tag) and _same_shape(op.output(0), anchor)
               for op, hit in memo.items() if hit)


def anchor_host(s, anchor_op, outs, view=None):
    """Where to compute the anchor: returns (host, local) tensors. `local` is the stage with
    the anchor's reduction, to be computed at a tile loop of `host`, whose loops are tiled
    like the anchor's output, or like `view`'s when given: the op through which the group
    reads the anchor in another shape (a convolution computed as a row of pixels, read as
    rows and columns), which bound inference maps back to the anchor. Outputs other than
    `host` get the default injective schedule.

    Example:
        >>> host, local = anchor_host(s, dense.op, [relu])  # doctest: +SKIP
    """
    outs = as_tensor_list(outs)
    anchor = anchor_op.output(0)
    out_ops = [t.op for t in outs]
    reader = anchor_op if view is None else view      # what the group's outputs read
    if view is not None and view in out_ops:
        local, host = anchor, view.output(0)
    elif anchor_op not in out_ops and len(outs) == 1 and _elementwise_path(out_ops[0], reader):
        local, host = anchor, outs[0]
    else:
        # The anchor is an output, feeds several outputs, or is reshaped on the way (a pixel
        # row's view inlines): keep it at the root, with its own register tile.
        local, host = s.cache_write(anchor, "local"), anchor
    for t in outs:
        if t.op is not host.op and t.op is not anchor_op:
            schedule_injective_from_existing(s, t)
    return host, local


def register_tile_at(s, local, host_stage, at, outer, tile, reduce=None, unroll_reduce=()) -> None:
    """Compute the accumulator stage `local` at loop `at` of host_stage as a register tile:
    its axes `outer` (indices into local's axes), then every reduction loop (in the order of
    the indices `reduce`, default their declared order; those in `unroll_reduce` unrolled),
    then the tile axes `tile` in that order, all unrolled except the innermost, which is
    vectorized. With the reduction outside the tile, the accumulators stay in registers while
    it runs.

    Example:
        >>> register_tile_at(s, local, s[conv], xo, outer=[0], tile=[2, 3, 1, 4])  # doctest: +SKIP
    """
    ls = s[local]
    ls.compute_at(host_stage, at)
    axes = ls.op.axis
    raxes = ls.op.reduce_axis
    order = [raxes[i] for i in (range(len(raxes)) if reduce is None else reduce)]
    ls.reorder(*[axes[i] for i in outer], *order, *[axes[i] for i in tile])
    for i in unroll_reduce:
        ls.unroll(raxes[i])
    for i in tile[:-1]:
        ls.unroll(axes[i])
    ls.vectorize(axes[tile[-1]])


def schedule_root_stage(s, tensor):
    """A producer computed at the root (padding, packing): the innermost axis split by 16 and
    vectorized, the other axes fused into one parallel loop.

    Example:
        >>> schedule_root_stage(s, data_pad)  # doctest: +SKIP
    """
    st = s[tensor]
    axes = list(st.op.axis)
    if not axes:
        return
    lanes = tile_factor(axes[-1].dom.extent, VECTOR_LANES)
    if lanes > 1:
        _, inner = st.split(axes[-1], factor=lanes)
        st.vectorize(inner)
    if len(axes) > 1:
        st.parallel(st.fuse(*axes[:-1]))


def schedule_by_tag(outs, handlers: dict):
    """A schedule for a fused group: injective stages inlined, and each remaining compute
    handed to handlers[its tag] as handler(s, op, outs).

    Example:
        >>> s = schedule_by_tag(outs, {"pool": _schedule_pool})   # doctest: +SKIP
    """
    outs = as_tensor_list(outs)
    s = te.create_schedule([t.op for t in outs])

    def callback(op):
        handler = handlers.get(op.tag)
        if handler is not None:
            handler(s, op, outs)

    traverse_inline(s, [t.op for t in outs], callback)
    return s


def _reachable_stages(out_ops) -> list:
    """Every compute reachable from out_ops, each once."""
    seen, order, todo = set(), [], list(out_ops)
    while todo:
        op = todo.pop()
        if op in seen or not isinstance(op, te.ComputeOp):
            continue
        seen.add(op)
        order.append(op)
        todo.extend(t.op for t in op.input_tensors())
    return order


def schedule_stages_at_root(outs):
    """Schedule a kernel made of a chain of data-dependent stages (sorts, scatters, pooled
    bins, sampled columns): injective stages that are not outputs are inlined into their
    readers; every other stage is computed at the root, once, as one fused loop over its
    output that runs on the thread pool when it is large (reduction loops stay inside).
    Such stages read each other at data-dependent positions, so tiling them buys nothing.

    Example:
        >>> s = schedule_stages_at_root([values, indices])   # doctest: +SKIP
    """
    outs = as_tensor_list(outs)
    out_ops = [t.op for t in outs]
    s = te.create_schedule(out_ops)
    for op in _reachable_stages(out_ops):
        stage = s[op]
        if tags.is_injective(op.tag) and not stage.is_output:
            stage.compute_inline()
            continue
        axes = list(stage.op.axis)
        if not axes:
            continue
        fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
        shape = get_const_tuple(op.output(0).shape)
        if all(is_const_int(d) for d in shape) and prod(shape) >= PARALLEL_MIN_ELEMENTS:
            stage.parallel(fused)
    return s


def schedule_index_add(outs):
    """index_add (kiln.topi.indexing): the loops over the output's axes up to the indexed one
    (parallel), then the reduction over the indices, then the slice's inner axes, fused and
    vectorized, so each index is compared once per slice and the slice added with vector
    operations only where it matches (the test is invariant in the inner loop).

    Example:
        >>> s = schedule_index_add([out])   # doctest: +SKIP
    """
    outs = as_tensor_list(outs)
    s = te.create_schedule([outs[0].op])
    out = outs[0]
    stage = s[out.op]
    axes, (r,) = list(stage.op.axis), list(stage.op.reduce_axis)
    axis = int(out.op.attrs["axis"])
    outer, inner = axes[:axis + 1], axes[axis + 1:]
    fused_outer = stage.fuse(*outer) if len(outer) > 1 else outer[0]
    if inner:
        fused_inner = stage.fuse(*inner) if len(inner) > 1 else inner[0]
        lanes = vector_lanes(out.dtype)
        extent = prod(get_const_tuple(out.shape)[axis + 1:])
        if extent % lanes == 0:
            io, ii = stage.split(fused_inner, factor=lanes)
            stage.reorder(fused_outer, r, io, ii)
            stage.vectorize(ii)
        else:
            stage.reorder(fused_outer, r, fused_inner)
    if prod(get_const_tuple(out.shape)) >= PARALLEL_MIN_ELEMENTS:
        stage.parallel(fused_outer)
    return s
