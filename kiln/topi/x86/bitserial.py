"""x86 schedules of the bit-serial operators (kiln.topi.nn.bitserial).

The output channels (units) are innermost in the packed weights, so one vector load brings the
words of `lanes` output channels and the data's word is broadcast against them:

    parallel (n, y):                              # dense: parallel (row tile, unit tile)
        for co-tile, x-tile:
            for ry, rx, cw:                       # reduction, outside the register tile
                for x, a, b, cb:                  # unrolled register tile
                    sums[x][a][b][cb] += popcount(bcast(d[.., x, a, cw]) & k[.., b, cw, cb])
            acc[x][cb] = sum over (a, b) of sums[x][a][b][cb] << (a + b)   # once per tile
            epilogue(acc) -> out                  # fused injective ops, in registers

The data is packed once, by its own stage at the root (parallel over pixels; the spatial
padding is inlined into it), so the tile reads words and no tile repacks a pixel.

AVX2 has no vector popcount: LLVM lowers ctpop of 8 x i32 to a nibble table (two vpshufb)
and a byte sum (vpsadbw), about a dozen instructions per AND, which bounds these kernels; the
tile leaves registers for the table, the mask and those temporaries (OPERAND_REGISTERS).

Example:
    >>> y = bitserial_conv2d_nhwc(x, k, 1, 1, 2, 1)  # doctest: +SKIP
    >>> s = schedule_bitserial_conv2d_nhwc([y])  # doctest: +SKIP
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..nn.bitserial import BITPACK, BITSERIAL_CONV2D, BITSERIAL_DENSE
from ..utils import get_const_tuple
from .utils import anchor_host, largest_divisor, schedule_by_tag, vector_lanes, vector_registers

# Registers a popcount tile leaves for the nibble table and mask, the kernel vector, the
# broadcast word and the popcount temporaries.
OPERAND_REGISTERS = 8
MAX_COLS = 8
MAX_CHANNEL_VECTORS = 2
MAX_ROWS = 4               # dense: rows of the register tile


def schedule_bitpack_stage(s, packed):
    """A bitpack stage at the root: all but its last two axes fused into one parallel loop
    (pixels of packed data, rows of a packed matrix), the word's bits (the reduction)
    unrolled so every shift is a constant.

    Example:
        >>> schedule_bitpack_stage(s, data_bitpack)  # doctest: +SKIP
    """
    st = s[packed]
    for t in packed.op.input_tensors():
        if isinstance(t.op, te.ComputeOp) and tags.is_injective(t.op.tag):
            s[t].compute_inline()
    axes = list(st.op.axis)
    outer = axes[:-2] if len(axes) > 2 else axes[:1]
    (k,) = st.op.reduce_axis
    st.unroll(k)
    if len(outer) > 1:
        st.parallel(st.fuse(*outer))
    elif outer:
        st.parallel(outer[0])


def _vector_width(channels: int, lanes: int) -> int:
    """Lanes of one vector of output channels: a whole register, or all the channels when
    they are fewer."""
    return min(lanes, channels)


def _register_tile(channels: int, width: int, lanes: int, planes: int) -> tuple:
    """(channel vectors, columns) of the register tile: up to two vectors of `lanes` output
    channels when they divide the channels, and columns dividing the output width, so that
    columns x plane pairs x vectors accumulators fit the budget."""
    budget = max(1, vector_registers() - OPERAND_REGISTERS)
    vectors = 1
    for v in range(MAX_CHANNEL_VECTORS, 0, -1):
        if channels % (v * lanes) == 0 and v * planes <= budget:
            vectors = v
            break
    cols = largest_divisor(width, max(1, min(MAX_COLS, budget // (vectors * planes))))
    return vectors, cols


def _tile_stages(s, anchor_op, outs, width: int, planes: int):
    """Tile the host of `anchor_op` (axes: leading rows, fused and parallel, the tiled width
    axis, the channels) into register tiles, and compute the plane sums and their combine
    (the anchor's own reduction) in each tile."""
    sums = anchor_op.input_tensors()[0]
    channels = get_const_tuple(anchor_op.output(0).shape)[-1]
    lanes = _vector_width(channels, vector_lanes(anchor_op.output(0).dtype))
    vectors, cols = _register_tile(channels, width, lanes, planes)

    host, local = anchor_host(s, anchor_op, outs)
    hs = s[host]
    *rows, x, co = hs.op.axis
    coo, coi = hs.split(co, factor=lanes * vectors)
    xo, xi = hs.split(x, factor=cols)
    if rows:
        hs.reorder(*rows, coo, xo, xi, coi)
        hs.parallel(hs.fuse(*rows) if len(rows) > 1 else rows[0])
        at = xo
    else:
        # No rows of pixels to share out (dense): the threads take tiles.
        hs.reorder(xo, coo, xi, coi)
        at = hs.fuse(xo, coo)
        hs.parallel(at)
    hs.vectorize(coi)

    # The sums: reduction outside, the tile's (columns, planes, vectors) unrolled inside, so
    # each broadcast data word meets every kernel vector while all accumulators stay live.
    ss = s[sums]
    ss.compute_at(hs, at)
    *_, sx, sa, sb, sco = ss.op.axis
    scb, slane = ss.split(sco, factor=lanes)
    ss.reorder(*ss.op.reduce_axis, sx, sa, sb, scb, slane)
    for axis in (sx, sa, sb, scb):
        ss.unroll(axis)
    ss.vectorize(slane)

    ls = s[local]
    ls.compute_at(hs, at)
    *_, lx, lco = ls.op.axis
    lcb, llane = ls.split(lco, factor=lanes)
    ra, rb = ls.op.reduce_axis
    ls.reorder(lx, lcb, ra, rb, llane)
    for axis in (lx, lcb, ra, rb):
        ls.unroll(axis)
    ls.vectorize(llane)


def _planes(anchor_op) -> int:
    return anchor_op.attrs["activation_bits"] * anchor_op.attrs["weight_bits"]


def _schedule_conv(s, op, outs):
    sums = op.input_tensors()[0]
    schedule_bitpack_stage(s, sums.op.input_tensors()[0])
    _, _, ow, _ = get_const_tuple(op.output(0).shape)
    _tile_stages(s, op, outs, ow, _planes(op))


def _schedule_dense(s, op, outs):
    """Dense as a convolution of one pixel per row: rows are tiled like a conv's columns."""
    sums = op.input_tensors()[0]
    schedule_bitpack_stage(s, sums.op.input_tensors()[0])
    m, _ = get_const_tuple(op.output(0).shape)
    _tile_stages(s, op, outs, m, _planes(op))


def _schedule_pack_only(s, op, outs):
    schedule_bitpack_stage(s, op.output(0))


_HANDLERS = {BITSERIAL_CONV2D: _schedule_conv, BITSERIAL_DENSE: _schedule_dense,
             BITPACK: _schedule_pack_only}


def schedule_bitserial_conv2d_nhwc(outs):
    """Schedule a fused group whose anchor is bitserial_conv2d_nhwc, followed by injective ops
    computed on the register tile.

    Example:
        >>> s = schedule_bitserial_conv2d_nhwc([y])  # doctest: +SKIP
    """
    return schedule_by_tag(outs, _HANDLERS)


def schedule_bitserial_dense(outs):
    """Schedule a fused group whose anchor is bitserial_dense, followed by injective ops.

    Example:
        >>> s = schedule_bitserial_dense([y])  # doctest: +SKIP
    """
    return schedule_by_tag(outs, _HANDLERS)


def schedule_bitpack(outs):
    """Schedule a bitpack on its own (a weight packed in the graph, before FoldConstant).

    Example:
        >>> s = schedule_bitpack([bitpack(w, 1, 2, 2)])  # doctest: +SKIP
    """
    return schedule_by_tag(outs, _HANDLERS)
