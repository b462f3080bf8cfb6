"""x86 schedule of the integer blocked convolution (kiln.topi.nn.conv2d_nchwc_int8): the float
blocked convolution's register tile (conv2d_nchwc.py) with each output vector's dot products
tensorized into the target's instruction (`vpdpbusd`, `vpmaddubsw` or `vpmaddwd`, chosen by
the packed kernel's dtype and group: tensor_intrin.packed_int8_dot).

    parallel (n, ob-tile, y-tile):  for x-tile:
        for cb, ry, rx, cg:                          # reduction, outside the tile
            for b, r, c:                             # unrolled tile: blocks x rows x cols
                acc[b][r][c] += dot(in[.., cg*g : cg*g + g], kernel[ob+b, .., cg, :, :])
        epilogue(acc) -> out                         # bias, requantize, relu: in registers

The padded data is its own stage at the root (parallel over rows, vectors over the channel
block), so the tile reads it without bounds tests.

Example:
    >>> s = schedule_conv2d_nchwc_int8([requantized])  # doctest: +SKIP
"""
from __future__ import annotations

from ...target import current_target
from ..nn.conv2d_nchwc_int8 import CONV2D_NCHWC_INT8, DATA_PAD
from ..utils import get_const_tuple
from .conv2d_nchwc import _schedule_pad, channel_tile, tile_blocked_host
from .tensor_intrin import packed_int8_dot
from .utils import anchor_host, schedule_by_tag


def _schedule_int8(s, anchor_op, outs):
    for t in anchor_op.input_tensors():
        if t.op.name == DATA_PAD:
            _schedule_pad(s, t)
    target = current_target()
    kernel = anchor_op.input_tensors()[-1]
    _, blocks, oh, ow, lanes = get_const_tuple(anchor_op.output(0).shape)
    group = get_const_tuple(kernel.shape)[-1]
    intrin = packed_int8_dot(target, kernel.dtype, lanes, group)
    nblocks, rows, cols = channel_tile(blocks, oh, ow, target.vector_registers)

    host, local = anchor_host(s, anchor_op, outs)
    hs, xo = tile_blocked_host(s, host, nblocks, rows, cols)

    ls = s[local]
    ls.compute_at(hs, xo)
    ln, lf, ly, lx, lo = ls.op.axis
    rco, ry, rx, rcg, rk = ls.op.reduce_axis
    ls.reorder(ln, rco, ry, rx, rcg, lf, ly, lx, lo, rk)
    for axis in (lf, ly, lx):
        ls.unroll(axis)
    ls.tensorize(lo, intrin)


def schedule_conv2d_nchwc_int8(outs):
    """Schedule a fused group whose anchor is conv2d_nchwc_int8, followed by injective ops
    (bias, requantize, relu, residual add) computed on the register tile.

    Example:
        >>> s = schedule_conv2d_nchwc_int8([y])  # doctest: +SKIP
    """
    return schedule_by_tag(outs, {CONV2D_NCHWC_INT8: _schedule_int8})
