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
from ..utils import get_const_tuple, tuned_values
from .conv2d_nchwc import REDUCE_ORDER, _schedule_pad, channel_tile, tile_blocked_host
from .tensor_intrin import packed_int8_dot
from .utils import anchor_host, schedule_by_tag


def _schedule_int8(s, anchor_op, outs):
    tuned = tuned_values(anchor_op)
    if tuned is None:
        _, blocks, oh, ow, _ = get_const_tuple(anchor_op.output(0).shape)
        tuned = dict(zip(("nblocks", "rows", "cols"),
                         channel_tile(blocks, oh, ow, current_target().vector_registers,
                                      row_tiles=False)))
    schedule_int8_tile(s, anchor_op, outs, **tuned)


def schedule_int8_tile(s, anchor_op, outs, nblocks: int, rows: int, cols: int,
                       reduce_order=REDUCE_ORDER):
    """The schedule of the module docstring with an explicit register tile (`nblocks` channel
    blocks x `rows` x `cols`) and order of the reduction loops over input channel blocks,
    kernel rows and kernel columns (`reduce_order`, indices into (cb, ry, rx, cg); the
    channel groups of a block stay innermost).

    Example:
        >>> schedule_int8_tile(s, conv.op, [y], 2, 1, 4)  # doctest: +SKIP
    """
    for t in anchor_op.input_tensors():
        if t.op.name == DATA_PAD:
            _schedule_pad(s, t)
    target = current_target()
    kernel = anchor_op.input_tensors()[-1]
    lanes = get_const_tuple(anchor_op.output(0).shape)[-1]
    group = get_const_tuple(kernel.shape)[-1]
    intrin = packed_int8_dot(target, kernel.dtype, lanes, group)

    host, local = anchor_host(s, anchor_op, outs)
    hs, xo = tile_blocked_host(s, host, nblocks, rows, cols)

    ls = s[local]
    ls.compute_at(hs, xo)
    ln, lf, ly, lx, lo = ls.op.axis
    reduction = ls.op.reduce_axis
    ls.reorder(ln, *(reduction[k] for k in reduce_order), lf, ly, lx, lo, reduction[-1])
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
