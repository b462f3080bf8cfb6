"""x86 schedules of 2-D convolutions (NCHW, NHWC, depthwise, grouped, transposed).

NCHW: the output is tiled (8 output channels x 16 output columns) — or, for depthwise,
(8 output rows x 16 columns), since a depthwise kernel is reused across rows, not channels.
The accumulator tile (the anchor, or its cache_write when the anchor is the output) is
computed inside the tile with the reduction loops outside the tile's own loops: every
reduction step is one vector load of input columns and one broadcast kernel value per
channel, feeding 8 (4) vector accumulators. The fused epilogue then reads the tile.
NHWC: the tile is (4 output pixels x 16-32 output channels), channels vectorized, so kernel
rows (HWIO: output channels contiguous) are vector loads and input pixels broadcast.
Padding (and the dilated input of a transposed convolution) is its own stage, so the
convolution loop carries no bound checks: at the root, parallel and vectorized — except for
depthwise, which is memory bound: there each parallel task pads the input rows of its own row
block (one channel) into a buffer that stays in L1, instead of a pass over the whole input
(1.5-2x faster on MobileNet's depthwise shapes).

Example:
    >>> y = topi.nn.conv2d_nchw(x, w, 1, 1, 1)  # doctest: +SKIP
    >>> s = schedule_conv2d_nchw(y)  # doctest: +SKIP
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..utils import get_const_tuple, tuned_values
from .utils import (anchor_host, block_factor, register_tile_at, schedule_by_tag,
                    schedule_root_stage, tile_factor)

VECTOR_WIDTH = 16        # output columns per vector (float32 zmm)
CHANNEL_BLOCK = 8        # output channels per register tile (NCHW)
ROW_BLOCK = 8            # output rows per register tile (depthwise)
PIXEL_BLOCK = 4          # output pixels per register tile (NHWC)
NHWC_CHANNELS = 32       # output channels per register tile (NHWC)


def _input_stages(anchor_op) -> list:
    return [t for t in anchor_op.input_tensors()
            if tags.is_injective(t.op.tag) and isinstance(t.op, te.ComputeOp)]


def _schedule_inputs(s, anchor_op):
    """Padding / dilation stages feeding the anchor are computed once, at the root."""
    for t in _input_stages(anchor_op):
        schedule_root_stage(s, t)


def nchw_tile(anchor_op) -> dict:
    """The heuristic's keyword arguments of schedule_nchw_tile for an NCHW convolution: 8
    output channels x 1 row x 16 columns, or for depthwise 1 channel x 8 rows x 16 columns
    with the padding computed per row block (blocks fused into the parallel loop prefer
    sizes that divide; a narrow output gets its whole width).

    Example:
        >>> nchw_tile(depthwise.op)  # doctest: +SKIP
        {'channels': 1, 'rows': 7, 'cols': 16, 'pad_at_tile': True}
    """
    depthwise = anchor_op.tag == tags.DEPTHWISE_CONV2D_NCHW
    channel_block, row_block = (1, ROW_BLOCK) if depthwise else (CHANNEL_BLOCK, 1)
    _, k, oh, ow = get_const_tuple(anchor_op.output(0).shape)
    return {"channels": block_factor(k, channel_block, max(1, channel_block // 2)),
            "rows": block_factor(oh, row_block, max(1, row_block // 2)),
            "cols": tile_factor(ow, VECTOR_WIDTH), "pad_at_tile": depthwise}


def schedule_nchw_tile(s, anchor_op, outs, channels: int, rows: int, cols: int,
                       pad_at_tile: bool = False, reduce_order=None, unroll_reduce=()):
    """The NCHW schedule of the module docstring with an explicit register tile: `channels`
    output channels x `rows` output rows (both in the parallel loop) x `cols` output columns
    (vectorized); padding computed per parallel block when `pad_at_tile`, else once at the
    root. The reduction loops run in `reduce_order` (indices into the anchor's reduce axes:
    (rc, ry, rx), or (ry, rx) for depthwise; default their declared order), those listed in
    `unroll_reduce` unrolled.

    Example:
        >>> schedule_nchw_tile(s, conv.op, [relu], 8, 1, 16)  # doctest: +SKIP
    """
    if not pad_at_tile:
        _schedule_inputs(s, anchor_op)
    host, local = anchor_host(s, anchor_op, outs)

    hs = s[host]
    n, f, y, x = hs.op.axis
    fo, fi = hs.split(f, factor=channels)
    yo, yi = hs.split(y, factor=rows)
    xo, xi = hs.split(x, factor=cols)
    hs.reorder(n, fo, yo, xo, fi, yi, xi)
    fused = hs.fuse(n, fo, yo)
    hs.parallel(fused)
    hs.vectorize(xi)
    if pad_at_tile:
        for t in _input_stages(anchor_op):
            st = s[t]
            st.compute_at(hs, fused)
            _, lanes = st.split(st.op.axis[-1], factor=VECTOR_WIDTH)
            st.vectorize(lanes)

    register_tile_at(s, local, hs, xo, outer=[0], tile=[1, 2, 3], reduce=reduce_order,
                     unroll_reduce=unroll_reduce)


def _schedule_nhwc(s, anchor_op, outs):
    _schedule_inputs(s, anchor_op)
    host, local = anchor_host(s, anchor_op, outs)
    _, oh, ow, k = get_const_tuple(anchor_op.output(0).shape)
    pb = block_factor(ow, PIXEL_BLOCK, 2)
    # 32 channels (two vectors) per tile, or 16 when that avoids a partial last tile.
    channels = 16 if isinstance(k, int) and k % NHWC_CHANNELS and k % 16 == 0 else NHWC_CHANNELS
    vc = tile_factor(k, channels)

    hs = s[host]
    n, y, x, f = hs.op.axis
    xo, xi = hs.split(x, factor=pb)
    fo, fi = hs.split(f, factor=vc)
    hs.reorder(n, y, xo, fo, xi, fi)
    # Pixel and channel tiles stay serial loops so that their partial last tiles are split
    # off (loop partitioning) instead of making every tile's extents symbolic.
    hs.parallel(hs.fuse(n, y))
    hs.vectorize(fi)

    register_tile_at(s, local, hs, fo, outer=[0, 1], tile=[2, 3])




def _schedule_nchw(s, op, outs):
    tuned = tuned_values(op)
    schedule_nchw_tile(s, op, outs, **(nchw_tile(op) if tuned is None else tuned))


def _schedule_transpose(s, op, outs):
    schedule_nchw_tile(s, op, outs, **nchw_tile(op))


_NCHW = {tags.CONV2D_NCHW: _schedule_nchw, tags.GROUP_CONV2D_NCHW: _schedule_nchw,
         tags.DEPTHWISE_CONV2D_NCHW: _schedule_nchw,
         tags.CONV2D_TRANSPOSE_NCHW: _schedule_transpose}


def schedule_conv2d_nchw(outs):
    """Schedule a fused group whose anchor is an NCHW convolution (plain, grouped or
    depthwise) followed by injective ops (bias, relu...).

    Example:
        >>> s = schedule_conv2d_nchw([relu])  # doctest: +SKIP
    """
    return schedule_by_tag(outs, _NCHW)


def schedule_depthwise_conv2d(outs):
    """Schedule a fused group whose anchor is depthwise_conv2d_nchw.

    Example:
        >>> s = schedule_depthwise_conv2d(y)  # doctest: +SKIP
    """
    return schedule_by_tag(outs, _NCHW)


def schedule_group_conv2d(outs):
    """Schedule a fused group whose anchor is group_conv2d_nchw.

    Example:
        >>> s = schedule_group_conv2d(y)  # doctest: +SKIP
    """
    return schedule_by_tag(outs, _NCHW)


def schedule_conv2d_transpose(outs):
    """Schedule a fused group whose anchor is conv2d_transpose_nchw.

    Example:
        >>> s = schedule_conv2d_transpose(y)  # doctest: +SKIP
    """
    return schedule_by_tag(outs, _NCHW)


def schedule_conv2d_nhwc(outs):
    """Schedule a fused group whose anchor is conv2d_nhwc (any group count).

    Example:
        >>> s = schedule_conv2d_nhwc(y)  # doctest: +SKIP
    """
    return schedule_by_tag(outs, {tags.CONV2D_NHWC: _schedule_nhwc})
