"""x86 schedule of depthwise conv2d in the blocked layout NCHW16c (stride 1 and 2).

Depthwise convolution does 9 FMAs per output vector (3x3) and is bound by memory traffic,
so the schedule's job is to touch each input and output byte once:

    parallel (n, f, y-chunk):                     # whole channel blocks, a band of rows
      for y-tile in chunk:  for x-tile:           # loop-partitioned: borders / interior
        for ry, rx:                               # unrolled
          w = kernel[f, 0, ry, rx, 0, 0:16]
          acc[r][c] += in[y*s + ry, x*s + rx, 0:16] * w   # rows x cols, unrolled
        epilogue(acc) -> out                      # bias / relu / clip in registers

The padding stage is inlined: its in-bounds test is `likely` (see depthwise_conv2d_nchwc),
so LoopPartition splits the y-tile and x-tile loops into border pieces, where the guards
stay, and an interior without any guard, which reads the unpadded input directly. There is
no padded copy. A tile of several rows reuses each loaded input row across ry; with all
tile loops unrolled, LLVM loads each input vector of the tile once and reuses it across
rx (stride 1 and 2 alike: the loads are whole channel vectors, never gathers). The
epilogue's tile loops are unrolled too: with constant indices LLVM keeps the accumulator
tile in registers (left as loops, it stays in memory and the kernel runs ~2x slower).

The tile, the row chunks, which kernel loops are unrolled and whether the padding is a copy
are the knobs of kiln.autotvm's "depthwise_conv2d_nchwc.x86" template: under a dispatch
context that has a config for the op they come from it (`tuned_values`), else from the
heuristics below (depthwise_heuristic).

Example:
    >>> y = depthwise_conv2d_nchwc(x, w, 1, 1)  # doctest: +SKIP
    >>> s = schedule_by_tag([topi.relu(y)],
    ...                     {DEPTHWISE_CONV2D_NCHWC: schedule_depthwise})  # doctest: +SKIP
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..utils import get_const_tuple, tuned_values
from .utils import (anchor_host, const_extent, register_tile, schedule_root_stage, vector_registers)

MAX_ACCUMULATORS = 16      # zmm accumulators; the others hold kernel and input vectors
MAX_COLS = 8
OPERAND_REGISTERS = 4      # registers a tile leaves for input and kernel vectors
# Parallel tasks wanted per pool thread, so that chunks of rows balance over the pool.
TASKS_PER_CORE = 4


def depthwise_tile(oh: int, ow: int) -> tuple:
    """(rows, cols) of the register tile (utils.register_tile): cols a divisor of `ow` up
    to MAX_COLS, then as many rows (dividing `oh`) as the accumulator budget allows (fewer
    with AVX2's 16 registers). Tiles that divide the output keep every tile loop constant,
    so it unrolls. (8 columns x 2 rows measured best for D1-D9, stride 1
    and 2 alike; 14 x 1 and 4 x 4 are within ~10%.)

    Example:
        >>> depthwise_tile(112, 112), depthwise_tile(56, 56), depthwise_tile(7, 7)
        ((2, 8), (2, 8), (1, 7))
    """
    budget = min(MAX_ACCUMULATORS, vector_registers() - OPERAND_REGISTERS)
    return register_tile(oh, ow, budget, min(MAX_COLS, budget))


def row_chunks(tasks_outer: int, row_tiles: int, cores: int | None = None) -> int:
    """How many parallel chunks to cut the row tiles into: enough that n * channel blocks *
    chunks gives every thread TASKS_PER_CORE tasks, each chunk a whole number of row tiles.
    `cores` defaults to the runtime pool's thread count (KILN_NUM_THREADS), the figure the
    code generator builds parallel loops for.

    Example:
        >>> row_chunks(2, 56, cores=2), row_chunks(64, 7, cores=2)
        (4, 1)
    """
    if cores is None:
        from ...runtime import num_threads
        cores = num_threads()
    want = max(1, -(-TASKS_PER_CORE * cores // max(1, tasks_outer)))
    if want >= row_tiles:
        return row_tiles
    for d in range(want, row_tiles + 1):
        if row_tiles % d == 0:
            return d
    return row_tiles


def _schedule_input(s, data, pad_root: bool = False):
    """Inline the padding (its `likely` guards are partitioned away in the interior), or with
    `pad_root` make it a padded copy at the root; any other injective producer, and whatever
    the padding reads, is computed at the root."""
    if not (isinstance(data.op, te.ComputeOp) and tags.is_injective(data.op.tag)):
        return
    if data.op.name != "data_pad":
        schedule_root_stage(s, data)
        return
    if pad_root:
        schedule_root_stage(s, data)
    else:
        s[data].compute_inline()
    for t in data.op.input_tensors():
        if isinstance(t.op, te.ComputeOp) and tags.is_injective(t.op.tag):
            schedule_root_stage(s, t)


# Which kernel loops (ry, rx) the accumulator stage unrolls, by name of the choice.
UNROLL_KERNEL = {"both": (0, 1), "rx": (1,), "none": ()}


def depthwise_heuristic(anchor_op) -> dict:
    """schedule_depthwise_tile's keyword arguments as the heuristic picks them: the register
    tile of depthwise_tile and the row chunks of row_chunks.

    Example:
        >>> depthwise_heuristic(y.op)  # doctest: +SKIP
        {'rows': 2, 'cols': 8, 'chunks': 4}
    """
    n, ob, oh, ow, _ = (const_extent(e, 1) for e in get_const_tuple(anchor_op.output(0).shape))
    rows, cols = depthwise_tile(oh, ow)
    return {"rows": rows, "cols": cols, "chunks": row_chunks(n * ob, -(-oh // rows))}


def schedule_depthwise(s, anchor_op, outs):
    """Schedule handler (for schedule_by_tag) of a fused group whose anchor is
    depthwise_conv2d_nchwc: the padding inlined, a rows x cols x 16 register tile, and the
    injective epilogue (bias, relu, clip) computed on the tile. The tile and chunks are the
    tuned config's when an autotvm dispatch context has one, else the heuristic's.

    Example:
        >>> handlers = {DEPTHWISE_CONV2D_NCHWC: schedule_depthwise}  # doctest: +SKIP
        >>> s = schedule_by_tag([relu], handlers)  # doctest: +SKIP
    """
    tuned = tuned_values(anchor_op)
    schedule_depthwise_tile(s, anchor_op, outs,
                            **(depthwise_heuristic(anchor_op) if tuned is None else tuned))


def schedule_depthwise_tile(s, anchor_op, outs, rows: int, cols: int, chunks: int,
                            unroll_kernel: str = "both", pad_root: bool = False):
    """The schedule of the module docstring with an explicit register tile (`rows` x `cols`
    x the lanes), the row tiles cut into `chunks` parallel tasks per (n, channel block)
    (clipped to the number of row tiles), the kernel loops unrolled as `unroll_kernel` says
    ("both", "rx" or "none"), and the padding inlined or, with `pad_root`, a padded copy.

    Example:
        >>> schedule_depthwise_tile(s, y.op, [y], rows=2, cols=8, chunks=4)  # doctest: +SKIP
    """
    if unroll_kernel not in UNROLL_KERNEL:
        raise ValueError(f"schedule_depthwise_tile: unroll_kernel is one of "
                         f"{', '.join(UNROLL_KERNEL)}, got {unroll_kernel!r}")
    _schedule_input(s, anchor_op.input_tensors()[0], pad_root)
    host, local = anchor_host(s, anchor_op, outs)
    oh = const_extent(get_const_tuple(anchor_op.output(0).shape)[2], 1)

    hs = s[host]
    bn, f, y, x, fi = hs.op.axis
    yo, yi = hs.split(y, factor=rows)
    xo, xi = hs.split(x, factor=cols)
    yoo, yoi = hs.split(yo, nparts=min(chunks, -(-oh // rows)))
    hs.reorder(bn, f, yoo, yoi, xo, yi, xi, fi)
    hs.parallel(hs.fuse(bn, f, yoo))
    hs.unroll(yi)
    hs.unroll(xi)
    hs.vectorize(fi)

    ls = s[local]
    ls.compute_at(hs, xo)
    ln, lf, ly, lx, lfi = ls.op.axis
    ls.reorder(ln, lf, *ls.op.reduce_axis, ly, lx, lfi)
    for i in UNROLL_KERNEL[unroll_kernel]:
        ls.unroll(ls.op.reduce_axis[i])
    ls.unroll(ly)
    ls.unroll(lx)
    ls.vectorize(lfi)
