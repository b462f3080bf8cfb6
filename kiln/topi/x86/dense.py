"""x86 schedules of dense, matmul and batch_matmul (the GEMM blocking of
bench/gemm_schedule.py).

The output is tiled MR rows x NR columns; the accumulator tile (the anchor, or its
cache_write) is computed inside the tile: k outermost, rows unrolled, the NR columns
vectorized, so MR * NR / 16 zmm registers accumulate while k runs, and the fused epilogue
(bias, relu...) reads the tile right after. Batches and row tiles run in parallel (column
tiles when there are too few rows). Packed operands ("dense_pack" stages) are computed at the
root, parallel.

Example:
    >>> y = topi.nn.dense(x, w, b)  # doctest: +SKIP
    >>> s = schedule_dense(topi.relu(y))  # doctest: +SKIP
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..nn.dense import PACK_TAG
from ..utils import (as_tensor_list, get_const_tuple, is_const_int, prod, traverse_inline,
                     tuned_values)
from .utils import (anchor_host, block_factor, const_extent, tail_tile, tile_factor,
                    vector_lanes, vector_registers)

MR = 8            # rows of the register tile (AVX-512; fewer when registers are fewer)
BATCH_PARALLEL_MIN = 4     # batches from which threads may take whole batches (_batch_parallel)


def _schedule_pack(s, packed):
    """Panels [.., nb, k, NR] from rows of the operand: blocks of 16 k x NR columns, read
    along contiguous k (one cache line per row) and written NR-strided; panels in parallel.
    (Vector gathers across NR rows measured ~2x slower: the rows alias in the cache.)"""
    st = s[packed]
    axes = list(st.op.axis)
    k, cols = axes[-2], axes[-1]
    ko, ki = st.split(k, factor=tile_factor(k.dom.extent, 16))
    st.reorder(ko, cols, ki)
    st.unroll(ki)
    st.parallel(st.fuse(*axes[:-2]))


def gemm_row_axis(shape) -> int:
    """The position (from the end) of a GEMM output's row axis: -2, or -3 when the -2 one is
    a single row behind batch axes ((L, 1, E) @ W, as nn.MultiheadAttention projects its
    (sequence, batch, embedding) input): the sequence then is the rows, not L batches of one
    row each (torchvision's ViT-B/16 projection ran at 8% of the peak as 197 one-row GEMMs).

    Example:
        >>> gemm_row_axis((197, 1, 2304)), gemm_row_axis((1, 128, 768))
        (-3, -2)
    """
    if len(shape) >= 3 and isinstance(shape[-2], int) and shape[-2] == 1 and shape[-3] != 1:
        return -3
    return -2


def gemm_panel_width(anchor_op) -> int:
    """NR, the columns of a packed panel of a GEMM anchor: the register tile is as wide as a
    panel (or a few), which keeps `j // NR` constant inside it.

    Example:
        >>> gemm_panel_width(dense_op)   # (128, 768) x (768, 3072)  # doctest: +SKIP
        32
    """
    shape = get_const_tuple(anchor_op.output(0).shape)
    lanes = vector_lanes(anchor_op.output(0).dtype)
    if "pack_width" in anchor_op.attrs:
        return tile_factor(shape[-1], anchor_op.attrs["pack_width"])
    # A wide unpacked operand (its column tiles go to the threads: gemm_col_parallel) gets
    # one-vector tiles where they divide the columns and two-vector ones would not: no
    # partial tile to cut off (a grouped 1x1 conv's 784 pixels: 32-wide tiles with the
    # batches in the parallel loop ran at 3% of the peak, 16-wide at 50%).
    n = const_extent(shape[-1], 0)
    if len(shape) > 1 and n > const_extent(shape[gemm_row_axis(shape)], n) and n % (2 * lanes) \
            and n % lanes == 0:
        return lanes
    return tile_factor(shape[-1], 2 * lanes)


def gemm_rows(anchor_op) -> int:
    """MR, the rows of the register tile that the heuristic picks for a GEMM anchor
    (1 for a product of a 1-D vector).

    Example:
        >>> gemm_rows(dense_op)   # (128, 768) x (768, 768) on AVX-512  # doctest: +SKIP
        8
    """
    shape = get_const_tuple(anchor_op.output(0).shape)
    if len(shape) == 1:
        return 1
    lanes = vector_lanes(anchor_op.output(0).dtype)
    # AVX-512: 8 rows x 2 registers = 16 accumulators; AVX2 (16 registers): 6 x 2.
    rows_max = min(MR, (vector_registers() - 4) // max(1, gemm_panel_width(anchor_op) // lanes))
    least = min(4, rows_max)
    m = shape[gemm_row_axis(shape)]
    if not isinstance(m, int):
        return block_factor(m, rows_max, least)
    # Where no tile size divides the rows: the fewest tiles, then the fullest last one (7
    # rows as 4 + 3, not 6 + 1: a last tile streams the weight panel as a full one does; a
    # 7 x 768 by 768 x 2304 dense took 161 us against 181 us on AVX2).
    return tail_tile(m, least, rows_max)


def gemm_k_unroll(anchor_op) -> int:
    """k steps the heuristic unrolls per iteration of a GEMM's k loop: 4 when they divide k.

    Example:
        >>> gemm_k_unroll(dense_op)   # k = 768  # doctest: +SKIP
        4
    """
    (k,) = anchor_op.reduce_axis
    kext = get_const_tuple((k.dom.extent,))[0]
    return 4 if is_const_int(kext) and int(kext) % 4 == 0 and int(kext) >= 8 else 1


def gemm_col_parallel(anchor_op, mr: int) -> bool:
    """Whether the heuristic gives the threads column tiles: when there are too few row
    tiles of `mr` rows for them (e.g. a batch-1 dense), or when the right operand is read
    unpacked and is the larger one (n > m: a 1x1 convolution as W (O, C) @ x (C, H*W)) — then
    each column tile of it is loaded once and meets every row of the small left operand,
    instead of the whole right operand streaming through the cache once per row tile
    (a 56x56 64->256 1x1 conv: 0.21 ms against 0.29 ms). Never with one column tile.

    Example:
        >>> gemm_col_parallel(dense_op, 8)   # (1, 768) x (768, 3072)  # doctest: +SKIP
        True
    """
    shape = get_const_tuple(anchor_op.output(0).shape)
    if len(shape) == 1:
        return False
    nr = gemm_panel_width(anchor_op)
    rows = const_extent(shape[gemm_row_axis(shape)], 64)
    row_tasks = const_extent(prod(shape[:-1]), 64) // mr
    col_tiles = -(-const_extent(shape[-1], nr) // nr)
    unpacked_wide = (not any(t.op.tag == PACK_TAG for t in anchor_op.input_tensors())
                     and const_extent(shape[-1], 0) > rows)
    return (row_tasks < 4 or unpacked_wide) and col_tiles > 1


def _batch_parallel(anchor_op, mr: int) -> bool:
    """Whether the threads take whole batches (rows a partial tile at the end, and at least
    BATCH_PARALLEL_MIN batches to share)."""
    shape = get_const_tuple(anchor_op.output(0).shape)
    if len(shape) < 3 or not all(isinstance(d, int) for d in shape):
        return False
    row = gemm_row_axis(shape)
    return shape[row] % mr != 0 and prod(shape[:row]) >= BATCH_PARALLEL_MIN


def gemm_panel_operand(anchor_op):
    """The right operand of a GEMM anchor when it is read in packed panels [.., nb, k, NR] (a
    column tile's panel is contiguous), else None: dense's weight (packed by its compute or
    given packed), a matmul's packed b.

    Example:
        >>> gemm_panel_operand(dense_op).shape   # doctest: +SKIP
        (96, 768, 32)
    """
    inputs = anchor_op.input_tensors()
    for t in inputs:
        if t.op.tag == PACK_TAG:
            return t
    if anchor_op.tag == tags.DENSE and len(inputs) == 2 and inputs[1].ndim == 3:
        return inputs[1]        # the body reads the data first, then the packed weight
    return None


def _schedule_gemm(s, anchor_op, outs):
    tuned = tuned_values(anchor_op)
    if tuned is None:
        return schedule_gemm_tile(s, anchor_op, outs, gemm_rows(anchor_op))
    return schedule_gemm_tile(s, anchor_op, outs, **tuned)


def schedule_gemm_tile(s, anchor_op, outs, mr: int, k_unroll: int | None = None,
                       col_parallel: bool | None = None, panels: int = 1, prefetch: int = 0):
    """The GEMM schedule of the module docstring with an explicit tile of `mr` rows (ignored
    for a product of a 1-D vector) and `panels` packed panels of NR columns (NR is the packed
    panel width; a tile of 2 panels makes 2 loads of the left operand's broadcast feed
    twice the FMAs, for half the rows). `k_unroll` k steps are
    unrolled per iteration of the k loop (None: 4 when k allows); `col_parallel` makes the
    threads take column tiles instead of row tiles (None: only when row tiles are too few).
    `prefetch` > 0 prefetches the packed panels that many column tiles ahead, spread over the
    current tile's k loop (Stage.prefetch; packed operands only: an unpacked column tile is not
    contiguous).

    Example:
        >>> schedule_gemm_tile(s, dense.op, [dense], 4)  # doctest: +SKIP
    """
    for t in anchor_op.input_tensors():
        if t.op.tag == PACK_TAG:
            _schedule_pack(s, t)
    host, local = anchor_host(s, anchor_op, outs)
    nr = gemm_panel_width(anchor_op)
    hs = s[host]
    axes = list(hs.op.axis)
    if len(axes) == 1:
        # dense of a 1-D vector: one row, column tiles in parallel.
        jo, ji = hs.split(axes[0], factor=nr)
        hs.parallel(jo)
        tile_loop, rows = jo, 1
    else:
        shape = get_const_tuple(host.shape)
        row = gemm_row_axis(shape)
        io, jo, ii, ji = hs.tile(axes[row], axes[-1], mr, nr * panels)
        batch = axes[:row]              # (a single-row axis after the rows stays, extent 1)
        # Threads take row tiles (with the batches); column tiles stay a serial loop, so a
        # partial last column tile is split off by loop partitioning. With too few row tiles
        # for the threads (e.g. a batch-1 dense), the column tiles go parallel instead.
        if col_parallel is None:
            col_parallel = gemm_col_parallel(anchor_op, mr)
        whole_tiles, partial = divmod(const_extent(shape[-1], 0), nr * panels)
        ragged = col_parallel and batch and partial
        if ragged and const_extent(prod(shape[:row]), 0) >= BATCH_PARALLEL_MIN:
            # A partial last column tile: fused with the batches, every tile's width would
            # be symbolic (grouped 1x1 convs of 196 pixels ran at 4 GFLOPS). With batches
            # for the threads, they take whole batches and loop partitioning cuts each
            # batch's partial tile off (8 groups: 171 against 138 GFLOPS with the column
            # tiles parallel); else the column tiles go parallel alone (two whole ones at
            # least), the partial one cut off after them.
            hs.reorder(*batch, jo, io, ii, ji)
            hs.parallel(hs.fuse(*batch))
            col_loop, tile_loop = jo, io
        elif ragged and whole_tiles >= 2:
            hs.reorder(jo, *batch, io, ii, ji)
            hs.parallel(jo)
            col_loop, tile_loop = jo, io
        elif col_parallel:
            hs.reorder(*batch, jo, io, ii, ji)
            col_loop = hs.fuse(*batch, jo)
            hs.parallel(col_loop)
            tile_loop = io
        elif _batch_parallel(anchor_op, mr):
            # Rows that mr does not divide: with the row tiles fused into the parallel loop
            # every tile's row count would be symbolic (no register tile at all: attention's
            # 197x197 scores ran at 14% of the peak); over the batches alone, loop
            # partitioning splits off the one partial row tile.
            hs.parallel(hs.fuse(*batch))
            tile_loop = col_loop = jo
        else:
            hs.parallel(hs.fuse(*batch, io))
            tile_loop = col_loop = jo
        rows = mr
        panels_of = gemm_panel_operand(anchor_op)
        if prefetch and panels_of is not None:
            hs.prefetch(panels_of, col_loop, prefetch)
    hs.vectorize(ji)

    ls = s[local]
    ls.compute_at(hs, tile_loop)
    laxes = list(ls.op.axis)
    cols = laxes[-1]
    row_axes = [laxes[gemm_row_axis(get_const_tuple(local.shape))]] if len(laxes) > 1 else []
    outer = [a for a in laxes[:-1] if all(a is not r for r in row_axes)]
    # Panels split off the columns, so `j // NR` is one value per panel; the panel loop is
    # inside the rows, so each broadcast of a row's value feeds every panel.
    col_axes = [cols]
    if panels > 1:
        col_axes = list(ls.split(cols, factor=nr))
        cols = col_axes[-1]
    (k,) = ls.op.reduce_axis
    if k_unroll is None:
        k_unroll = gemm_k_unroll(anchor_op)
    if k_unroll > 1:
        ko, ki = ls.split(k, factor=k_unroll)
        ls.reorder(*outer, ko, ki, *row_axes, *col_axes)
        ls.unroll(ki)
    else:
        ls.reorder(*outer, k, *row_axes, *col_axes)
    if rows > 1:
        ls.unroll(row_axes[0])
    if panels > 1:
        ls.unroll(col_axes[0])
    ls.vectorize(cols)
    return s


def _schedule(outs, anchor_tags):
    outs = as_tensor_list(outs)
    s = te.create_schedule([t.op for t in outs])

    def callback(op):
        if op.tag in anchor_tags:
            _schedule_gemm(s, op, outs)

    traverse_inline(s, [t.op for t in outs], callback)
    return s


def schedule_dense(outs):
    """Schedule a fused group whose anchor is `dense` (plus bias / activation epilogue).

    Example:
        >>> s = schedule_dense([relu_of_dense])  # doctest: +SKIP
    """
    return _schedule(outs, (tags.DENSE,))


def schedule_matmul(outs):
    """Schedule a fused group whose anchor is `matmul`.

    Example:
        >>> s = schedule_matmul(c)  # doctest: +SKIP
    """
    return _schedule(outs, (tags.MATMUL,))


def schedule_batch_matmul(outs):
    """Schedule a fused group whose anchor is `batch_matmul` (batches fused into the
    parallel loop).

    Example:
        >>> s = schedule_batch_matmul(c)  # doctest: +SKIP
    """
    return _schedule(outs, (tags.BATCH_MATMUL,))
