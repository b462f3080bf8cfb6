"""x86 schedules of convolutions in the blocked layout NCHW[x]c (kiln.topi.nn.conv2d_nchwc).

Register tile: `rows` output rows x `cols` output columns x one channel block of 16 lanes,
i.e. rows * cols zmm accumulators (up to ~16 of the 32 registers). The accumulator tile (the
anchor, or its cache_write when the anchor is the output) is computed inside the tile with
every reduction loop outside the tile's own loops:

    parallel (n, ob, y-tile):  for x-tile:
        for cb, ry, rx, ci:                       # reduction
            w = kernel[ob, cb, ry, rx, ci, 0:16]  # one vector load
            acc[r][c] += broadcast(in[..]) * w    # rows*cols FMAs, unrolled
        epilogue(acc) -> out                      # bias / relu / residual, still in registers

Depthwise: the same tile, the reduction is (ry, rx) and the input is a vector load per
accumulator (lanes are channels on both sides). A 1x1 convolution has a short reduction per
output, so it gets the largest tile (rows x cols up to 16) for more reuse of each kernel load.

Padding is its own stage at the root (parallel, vectorized), so the tile loops carry no bound
checks.

Example:
    >>> y = topi.nn.conv2d_nchwc.conv2d_nchwc(x, w, 1, 1)  # doctest: +SKIP
    >>> s = schedule_conv2d_nchwc(topi.relu(y))  # doctest: +SKIP
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..nn.conv2d_nchwc import CONV2D_NCHWC, DEPTHWISE_CONV2D_NCHWC
from ..utils import get_const_tuple
from .utils import anchor_host, schedule_by_tag, schedule_root_stage

MAX_ACCUMULATORS = 16      # zmm accumulators per tile; the rest hold kernel / input vectors
MAX_COLS = 14


def _largest_divisor(n: int, limit: int) -> int:
    for d in range(max(1, min(n, limit)), 0, -1):
        if n % d == 0:
            return d
    return 1


def register_tile(oh: int, ow: int, max_acc: int = MAX_ACCUMULATORS,
                  max_cols: int = MAX_COLS) -> tuple:
    """(rows, cols) of the output register tile: tile sizes that divide the output (no
    partial tiles, so every tile loop is constant and unrolled), as many accumulators as fit.
    cols prefers a divisor of `ow` in [max_cols/2, max_cols]; rows fill the remaining budget.

    Example:
        >>> register_tile(56, 56), register_tile(7, 7), register_tile(8, 8)
        ((1, 14), (1, 7), (2, 8))
    """
    cols = _largest_divisor(ow, max_cols)
    if cols < max_cols // 2 and ow > max_cols:
        # No good divisor (a prime width): a fixed tile with a split-off tail is better than
        # a one-column tile.
        cols = max_cols // 2 + 1
    rows = _largest_divisor(oh, max(1, max_acc // cols))
    return rows, cols


def _schedule_inputs(s, anchor_op):
    for t in anchor_op.input_tensors():
        if tags.is_injective(t.op.tag) and isinstance(t.op, te.ComputeOp):
            schedule_root_stage(s, t)


def _schedule_blocked(s, anchor_op, outs):
    _schedule_inputs(s, anchor_op)
    host, local = anchor_host(s, anchor_op, outs)
    _, _, oh, ow, _ = get_const_tuple(anchor_op.output(0).shape)
    kernel_hw = anchor_op.input_tensors()[-1].shape[2:4]
    one_by_one = all(int(k) == 1 for k in get_const_tuple(kernel_hw))
    max_acc = MAX_ACCUMULATORS if one_by_one or anchor_op.tag == CONV2D_NCHWC else 12
    rows, cols = register_tile(oh, ow, max_acc)

    hs = s[host]
    n, f, y, x, fi = hs.op.axis
    yo, yi = hs.split(y, factor=rows)
    xo, xi = hs.split(x, factor=cols)
    hs.reorder(n, f, yo, xo, yi, xi, fi)
    hs.parallel(hs.fuse(n, f, yo))
    hs.vectorize(fi)

    ls = s[local]
    ls.compute_at(hs, xo)
    ln, lf, ly, lx, lfi = ls.op.axis
    ls.reorder(ln, lf, *ls.op.reduce_axis, ly, lx, lfi)
    if anchor_op.tag == DEPTHWISE_CONV2D_NCHWC:
        for r in ls.op.reduce_axis:
            ls.unroll(r)
    ls.unroll(ly)
    ls.unroll(lx)
    ls.vectorize(lfi)


_HANDLERS = {CONV2D_NCHWC: _schedule_blocked, DEPTHWISE_CONV2D_NCHWC: _schedule_blocked}


def schedule_conv2d_nchwc(outs):
    """Schedule a fused group whose anchor is conv2d_nchwc or depthwise_conv2d_nchwc,
    followed by injective ops (bias, relu, residual add) computed on the register tile.

    Example:
        >>> s = schedule_conv2d_nchwc([relu])  # doctest: +SKIP
    """
    return schedule_by_tag(outs, _HANDLERS)


def schedule_depthwise_conv2d_nchwc(outs):
    """Schedule a fused group whose anchor is depthwise_conv2d_nchwc.

    Example:
        >>> s = schedule_depthwise_conv2d_nchwc(y)  # doctest: +SKIP
    """
    return schedule_conv2d_nchwc(outs)
