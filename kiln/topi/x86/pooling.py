"""x86 schedules of pooling.

Window pooling: the output is tiled (4 rows x 16 columns); the window reduction runs inside
the tile with its loops outside the tile's rows and columns, so each reduction step is one
vector load per row (strided loads when the stride is not 1) into 4 vector accumulators;
(n, c, row blocks) run in parallel. The padding stage is computed at the root, vectorized.
Adaptive and global pooling: one parallel loop over (n, c), with the output's columns
vectorized when they are wide enough.
Blocked layout NCHW{b}c ([N, C/b, H, W, b]): the inner channel axis is the vector; the window
tile is 2 rows x 4 columns of such vectors, reduction loops outside, (n, c/b, row blocks)
parallel; the padding is read in place (a bounds test). Adaptive/global: (n, c/b) parallel,
reduction over the window outside the vectorized inner channels.

Example:
    >>> s = schedule_pool(topi.nn.pool2d(x, 2, 2))  # doctest: +SKIP
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..utils import get_const_tuple
from .utils import (anchor_host, block_factor, register_tile_at, schedule_by_tag,
                    schedule_root_stage, tile_factor)

VECTOR_WIDTH = 16
ROW_BLOCK = 4


BLOCKED_ROWS = 2
BLOCKED_COLS = 4


def _schedule_window_pool_blocked(s, host, local, oh, ow):
    hs = s[host]
    n, c, y, x, cc = hs.op.axis
    yo, yi = hs.split(y, factor=block_factor(oh, BLOCKED_ROWS, 1))
    xo, xi = hs.split(x, factor=block_factor(ow, BLOCKED_COLS, 1))
    hs.reorder(n, c, yo, xo, yi, xi, cc)
    hs.parallel(hs.fuse(n, c, yo))
    hs.vectorize(cc)
    register_tile_at(s, local, hs, xo, outer=[0, 1], tile=[2, 3, 4])


def _schedule_window_pool(s, anchor_op, outs):
    blocked = len(anchor_op.output(0).shape) == 5
    for t in anchor_op.input_tensors():
        if tags.is_injective(t.op.tag) and isinstance(t.op, te.ComputeOp):
            # Blocked: the window reads the input in place, the padding a bounds test that
            # LoopPartition takes out of the interior tiles (ResNet's 3x3/2 max pool of
            # 64 x 112 x 112: 282 us with a padded copy, 65 us in place).
            if blocked:
                s[t].compute_inline()
            else:
                schedule_root_stage(s, t)
    host, local = anchor_host(s, anchor_op, outs)
    _, _, oh, ow = get_const_tuple(anchor_op.output(0).shape)[:4]
    if blocked:
        _schedule_window_pool_blocked(s, host, local, oh, ow)
        return
    hs = s[host]
    n, c, y, x = hs.op.axis
    yo, yi = hs.split(y, factor=block_factor(oh, ROW_BLOCK, 2))
    xo, xi = hs.split(x, factor=tile_factor(ow, VECTOR_WIDTH))
    hs.reorder(n, c, yo, xo, yi, xi)
    fused = hs.fuse(n, c, yo)
    hs.parallel(fused)
    hs.vectorize(xi)
    register_tile_at(s, local, hs, xo, outer=[0, 1], tile=[2, 3])


def _schedule_adaptive_pool(s, anchor_op, outs):
    host, local = anchor_host(s, anchor_op, outs)
    _, _, oh, ow = get_const_tuple(anchor_op.output(0).shape)[:4]
    hs = s[host]
    if len(hs.op.axis) == 5:
        n, c, y, x, cc = hs.op.axis
        fused = hs.fuse(n, c)
        hs.parallel(fused)
        hs.vectorize(cc)
        ls = s[local]
        ls.compute_at(hs, fused)
        ln, lc, ly, lx, lcc = ls.op.axis
        ls.reorder(ln, lc, ly, lx, *ls.op.reduce_axis, lcc)
        ls.vectorize(lcc)
        return
    n, c, y, x = hs.op.axis
    fused = hs.fuse(n, c)
    hs.parallel(fused)
    if ow > 1:
        _, xi = hs.split(x, factor=tile_factor(ow, VECTOR_WIDTH))
        hs.vectorize(xi)
    s[local].compute_at(hs, fused)




def schedule_pool(outs):
    """Schedule a fused group whose anchor is pool2d (max, or the sum of avg whose division
    and any later injective ops are the epilogue).

    Example:
        >>> s = schedule_pool([y])  # doctest: +SKIP
    """
    return schedule_by_tag(outs, {tags.POOL: _schedule_window_pool})


def schedule_adaptive_pool(outs):
    """Schedule a fused group whose anchor is adaptive_pool2d / global_pool2d.

    Example:
        >>> s = schedule_adaptive_pool([y])  # doctest: +SKIP
    """
    return schedule_by_tag(outs, {tags.ADAPTIVE_POOL: _schedule_adaptive_pool})


schedule_global_pool = schedule_adaptive_pool
