"""x86 schedules of convolutions in the blocked layout NCHW[x]c (kiln.topi.nn.conv2d_nchwc).

Register tile: `blocks` output channel blocks of 16 lanes x `rows` output rows x `cols`
output columns, i.e. blocks * rows * cols zmm accumulators (up to 28 of the 32 registers).
The accumulator tile (the anchor, or its cache_write when the anchor is the output) is
computed inside the tile with every reduction loop outside the tile's own loops:

    parallel (n, ob-tile, y-tile):  for x-tile:
        for cb, ry, rx, ci:                          # reduction
            w[b] = kernel[ob+b, cb, ry, rx, ci, 0:16]  # `blocks` vector loads
            for r, c:                                # unrolled
                v = broadcast(in[..])                # one broadcast ...
                acc[r][c][b] += v * w[b]             # ... feeds `blocks` FMAs
        epilogue(acc) -> out                         # bias / relu / residual, in registers

Two channel blocks per tile make a reduction step (blocks + rows*cols) loads for
blocks*rows*cols FMAs: with one block the step is load-bound (15 loads for 14 FMAs, and
this CPU issues two 512-bit loads and two FMAs per cycle). The channel blocks are the
innermost tile loop so each broadcast is live for `blocks` FMAs only; with the pixel loop
innermost, LLVM hoists all broadcasts and spills accumulators.

Depthwise convolutions have their own schedule (depthwise_nchwc.py).

Padding: outputs up to nn.conv2d_nchwc.INPLACE_PAD_MAX_WIDTH columns read the unpadded
input in place (the reduction carries a `likely` bounds test; LoopPartition splits the
row and x-tile loops and clips ry / rx in border tiles, so the interior has no guard and
no padding tap is computed). Wider outputs keep a padded copy, its own stage at the root
(parallel over rows, a serial loop over columns of vector channel blocks), so the tile
loops carry no bound checks.

Example:
    >>> y = topi.nn.conv2d_nchwc.conv2d_nchwc(x, w, 1, 1)  # doctest: +SKIP
    >>> s = schedule_conv2d_nchwc(topi.relu(y))  # doctest: +SKIP
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..nn.conv2d_nchwc import CONV2D_NCHWC, DEPTHWISE_CONV2D_NCHWC
from ..utils import as_tensor_list, get_const_tuple, prod, tuned_values
from .depthwise_nchwc import schedule_depthwise
from .utils import (anchor_host, largest_divisor, register_tile, register_tile_at, schedule_by_tag,
                    schedule_root_stage, tail_tile, vector_registers)

MAX_ACCUMULATORS = 16      # zmm accumulators per channel block of a tile
MAX_COLS = 14
MAX_BLOCK_PIXELS = 14      # pixels per tile when it has two channel blocks (28 accumulators)
# AVX2 (16 registers): two blocks x 4 or 5 columns of one row, the last tile shorter
# (tail_tile), for every output at least 4 wide. 2 x 6 leaves the two kernel vectors and the
# broadcast one spare register and LLVM spills (AlexNet's 27x27 5x5 g2: 186 GFLOPS as 2 x 6,
# 196 as 2 x 5); measured with 3x3 kernels, 2 threads, against the former divisor tiles:
# 28x28 128 -> 128 197 (2 x 4) vs 137 GFLOPS, 14x14 256 -> 256 194 (2 x 5: 5 + 5 + 4) vs
# 142 (2 x 2 x 2), 7x7 512 -> 512 171 (2 x 4: 4 + 3) vs 82 (1 x 7), ResNeXt's 14x14 512
# groups=32 172 vs 139; 56x56 64 -> 64 is unchanged (2 x 4, ~181).
AVX2_BLOCK_COLS = (4, 5)
TAIL_MIN_TILES = 4         # whole tiles a row needs before channel_tile accepts a tail
OPERAND_REGISTERS = 4      # registers a tile leaves for kernel vectors and the broadcast
REDUCE_ORDER = (0, 1, 2, 3)  # reduction loops: channel blocks, ry, rx, channels in a block
# Pixel rows (1x1 convolutions) up to PASS_PIXELS long on AVX-512 whose tile would read more
# than PASS_BYTES of kernel run in passes over input channel blocks (pixel_pass_tile).
PASS_PIXELS = 14 * 14
PASS_BYTES = 20 * 1024        # the kernel a pass aims at: its share of a 48 KiB L1
PASS_MAX_BYTES = 32 * 1024    # ... and may reach, so that the passes divide the input blocks
PASS_ACCUMULATORS = 24        # with the tile's kernel vectors and a broadcast: 29-31 registers
PASS_MAX_BLOCKS = 6


def channel_tile(blocks: int, oh: int, ow: int, registers: int | None = None,
                 row_tiles: bool = True) -> tuple:
    """(channel blocks, rows, cols) of the register tile of a blocked convolution with
    `blocks` output channel blocks and an oh x ow output: two blocks when they divide, and
    as many accumulators as the target's vector registers hold besides the operands (28 of
    AVX-512's 32, 12 of AVX2's 16); on AVX2 one row of 4 or 5 columns (AVX2_BLOCK_COLS)
    unless `row_tiles` is False (the int8 convolutions, measured with the divisor tiles).

    Example:
        >>> channel_tile(4, 56, 56, 32), channel_tile(32, 7, 7, 32), channel_tile(1, 8, 8, 32)
        ((2, 1, 14), (2, 1, 7), (1, 2, 8))
        >>> channel_tile(4, 56, 56, 16), channel_tile(64, 7, 7, 16), channel_tile(64, 14, 14, 16)
        ((2, 1, 4), (2, 1, 4), (2, 1, 5))
        >>> channel_tile(32, 27, 27, 16), channel_tile(64, 1, 49, 16)
        ((2, 1, 5), (2, 1, 5))
    """
    registers = registers or vector_registers()
    budget = registers - OPERAND_REGISTERS
    if row_tiles and blocks % 2 == 0 and registers <= 16 and ow >= AVX2_BLOCK_COLS[0]:
        if oh == 1 and ow >= TAIL_MIN_TILES * AVX2_BLOCK_COLS[-1]:
            # One row (a 1x1 conv's pixels) has one tail in all: 2 x 5 beat an exact 2 x 4
            # by 7-9% (1x1 256 -> 512 at 28x28, 256 -> 128 at 56x56).
            return 2, 1, AVX2_BLOCK_COLS[-1]
        return 2, 1, tail_tile(ow, *AVX2_BLOCK_COLS)
    if blocks % 2 == 0:
        pixels = min(MAX_BLOCK_PIXELS, budget // 2)
        # Two blocks only with a whole tile (no tail) that fills the budget: with AVX2's 6
        # pixels a 7-wide output would get a 1-column tile or a tail (C12 7x7: 78 GFLOPS as
        # (2, 1, 6) with a tail, 207 as (1, 1, 7)); a 14x14 one gets 2 rows x 2 columns
        # (a 512 -> 1024 1x1: ~150 GFLOPS, against ~65 as (1, 1, 7)).
        cols = largest_divisor(ow, min(MAX_COLS, pixels))
        rows = largest_divisor(oh, pixels // cols)
        if rows * cols <= pixels // 2 and ow // pixels >= TAIL_MIN_TILES:
            # At most half the budget in whole tiles: full-width tiles and a tail beat them
            # while the tail is a small part of the row (AlexNet's 27x27 5x5 conv: ~138
            # against ~110 GFLOPS).
            return 2, 1, pixels
        if 2 * rows * cols >= pixels:
            return 2, rows, cols
    acc = min(MAX_ACCUMULATORS, budget)
    return (1,) + register_tile(oh, ow, acc, min(MAX_COLS, acc))


def pixel_pass_tile(blocks: int, pixels: int, in_blocks: int, block_bytes: int,
                    registers: int | None = None, groups: int = 1) -> tuple | None:
    """(channel blocks, pixels, input blocks per pass) of the register tile of a 1x1
    convolution computed as a row of `pixels` pixels in passes over its `in_blocks` input
    channel blocks (`block_bytes` of kernel per input and output block; `groups` groups of
    blocks / groups output blocks), or None where passes do not pay: below 32 registers, past
    PASS_PIXELS pixels, where channel_tile's tile reads at most PASS_BYTES of kernel (unless it
    is one block of an odd count: load-bound), where no tile of several blocks divides a
    group's blocks, where the row has fewer than two tiles, or where one pass would cover the
    input blocks.

    A whole reduction per tile streams the tile's kernel (2 blocks x 1024 channels: 128 KiB)
    through the cache once per pixel tile; in passes of a few input blocks that part of the
    kernel stays in L1 while every pixel tile uses it, and the accumulators of the whole row
    are kept in memory between passes. The tile is the one with the fewest loads per FMA
    (blocks + pixels per blocks x pixels) of at most PASS_ACCUMULATORS accumulators whose
    block count divides a group's blocks (so the blocks share each broadcast; MLAS's NCHWc
    kernels use 4 x 6). On the 2-core AVX-512 VM, kernel alone: 7x7 400 -> 400 107 -> 151
    GFLOPS ((1, 7) -> (5, 4) in passes), 7x7 1024 -> 2048 159 -> 209, 14x14 1024 -> 512
    160 -> 202; 14x14 160 -> 160, whose (2, 14) tile reads 20 KiB, lost (185 -> 139) and
    keeps it.

    Example:
        >>> pixel_pass_tile(25, 49, 25, 1024, 32), pixel_pass_tile(128, 49, 64, 1024, 32)
        ((5, 4, 5), (4, 6, 4))
        >>> pixel_pass_tile(10, 196, 10, 1024, 32), pixel_pass_tile(128, 49, 64, 1024, 16)
        (None, None)
    """
    registers = registers or vector_registers()
    if registers < 32 or pixels > PASS_PIXELS:
        return None
    nblocks, _, _ = channel_tile(blocks, 1, pixels, registers)
    load_bound = nblocks == 1 and blocks % 2 == 1
    if not load_bound and nblocks * in_blocks * block_bytes <= PASS_BYTES:
        return None

    def loads_per_fma(tile):
        b, p = tile
        return (b + p) / (b * p)
    tiles = [(b, min(pixels, PASS_ACCUMULATORS // b)) for b in range(1, PASS_MAX_BLOCKS + 1)
             if (blocks // groups) % b == 0]
    nblocks, cols = min(tiles, key=loads_per_fma)
    passes = pass_blocks(nblocks, block_bytes, in_blocks)
    if nblocks == 1 or pixels < 2 * cols or passes >= in_blocks:
        return None
    return nblocks, cols, passes


def pass_blocks(nblocks: int, block_bytes: int, in_blocks: int) -> int:
    """Input channel blocks per pass of a pass tile of `nblocks` output blocks: the divisor of
    `in_blocks` nearest to what keeps the pass's kernel within PASS_BYTES, up to
    PASS_MAX_BYTES (a last, shorter pass would keep bound tests in its pixel tiles).

    Example:
        >>> pass_blocks(4, 1024, 64), pass_blocks(5, 1024, 25), pass_blocks(5, 1024, 60)
        (4, 5, 4)
    """
    aim = max(1, PASS_BYTES // (nblocks * block_bytes))
    fits = [d for d in range(1, in_blocks + 1)
            if in_blocks % d == 0 and nblocks * d * block_bytes <= PASS_MAX_BYTES]
    return min(fits or [1], key=lambda d: (abs(d - aim), d))


def unrolls_block_channels(anchor_op, registers: int | None = None) -> bool:
    """Whether the register tile unrolls the loop over the channels of an input block (the
    innermost reduction loop): on AVX2, for kernels up to 3x3. LLVM unrolls that loop for some
    tiles and not others; unrolled, a 1x1 7x7 2048 -> 1024 tile of 2 x 6 ran 182 GFLOPS
    against 144, 3x3 tiles of 2 x 4 / 2 x 5 gained 30-40% at 28x28 and 14x14 (see
    AVX2_BLOCK_COLS), while AlexNet's 5x5 lost 15%. AVX-512's 16-channel blocks were not
    measured and keep LLVM's choice.

    Example:
        >>> [unrolls_block_channels(conv3x3.op, r) for r in (16, 32)]  # doctest: +SKIP
        [True, False]
    """
    kernel = next((t for t in anchor_op.input_tensors() if t.ndim == 6), None)
    if (registers or vector_registers()) > 16 or kernel is None:
        return False
    _, _, kh, kw, _, _ = get_const_tuple(kernel.shape)
    return kh * kw <= 9


def _schedule_pad(s, t):
    """A padding stage of a blocked tensor [.., H, W, lanes] at the root: parallel over
    (.., H), serial over W, vector over the lanes, so the border test costs a compare per
    vector and no index division."""
    st = s[t]
    axes = list(st.op.axis)
    st.vectorize(axes[-1])
    if len(axes) > 2:
        st.parallel(st.fuse(*axes[:-2]))


def _schedule_inputs(s, anchor_op, pad_root: bool = True):
    for t in anchor_op.input_tensors():
        if tags.is_injective(t.op.tag) and isinstance(t.op, te.ComputeOp):
            if len(t.shape) == 5:
                if pad_root:
                    _schedule_pad(s, t)
                else:
                    s[t].compute_inline()
            else:
                schedule_root_stage(s, t)


def default_tile(anchor_op, registers: int | None = None) -> dict:
    """schedule_blocked_tile's tile arguments the heuristic picks for a blocked convolution:
    pixel_pass_tile's tile and passes for a row of pixels where they pay, else channel_tile's
    tile.

    Example:
        >>> default_tile(conv.op)   # 7x7 1024 -> 2048, AVX-512  # doctest: +SKIP
        {'nblocks': 4, 'rows': 1, 'cols': 6, 'pass_blocks': 4}
    """
    _, blocks, oh, ow, _ = get_const_tuple(anchor_op.output(0).shape)
    if "pixels" in anchor_op.attrs:
        in_blocks, block_bytes = _kernel_blocks(anchor_op)
        tile = pixel_pass_tile(blocks, ow, in_blocks, block_bytes, registers,
                               anchor_op.attrs.get("groups", 1))
        if tile is not None:
            return {"nblocks": tile[0], "rows": 1, "cols": tile[1], "pass_blocks": tile[2]}
    nblocks, rows, cols = channel_tile(blocks, oh, ow, registers)
    return {"nblocks": nblocks, "rows": rows, "cols": cols}


def _kernel_blocks(anchor_op) -> tuple:
    """(input channel blocks one output block reads, bytes of kernel per input and output
    block) of a blocked convolution."""
    kernel = next(t for t in anchor_op.input_tensors() if t.ndim == 6)
    _, in_blocks, kh, kw, ic, oc = get_const_tuple(kernel.shape)
    from ...tir import dtype as dt
    return in_blocks, kh * kw * ic * oc * dt.bytes_of(str(kernel.dtype))


def _schedule_blocked(s, anchor_op, outs):
    tuned = tuned_values(anchor_op)
    schedule_blocked_tile(s, anchor_op, outs,
                          **(default_tile(anchor_op) if tuned is None else tuned))


def schedule_blocked_tile(s, anchor_op, outs, nblocks: int, rows: int, cols: int,
                          pad_root: bool = True, reduce_order=REDUCE_ORDER,
                          unroll_rx: bool = False, pass_blocks: int = 0):
    """The blocked schedule of the module docstring with an explicit register tile (`nblocks`
    channel blocks x `rows` x `cols`) and, when the convolution has a padded copy, whether
    that copy is its own stage at the root (else it is inlined into the reduction); the
    reduction loops run in `reduce_order` (indices of (channel blocks, ry, rx, channels in a
    block)), the kernel-column loop rx unrolled when `unroll_rx`. A convolution computed as a
    row of pixels with `pass_blocks` > 0 runs in passes over that many input channel blocks
    (see pixel_pass_tile and schedule_pixel_passes).

    Example:
        >>> schedule_blocked_tile(s, conv.op, [conv], 2, 1, 14)  # doctest: +SKIP
    """
    _schedule_inputs(s, anchor_op, pad_root)
    if "pixels" in anchor_op.attrs and pass_blocks:
        host, local = anchor_host(s, anchor_op, outs, view=_pixels_view(anchor_op, outs))
        schedule_pixel_passes(s, host, local, nblocks, rows * cols, pass_blocks)
        return
    rows_outer = _input_outweighs_kernel(anchor_op)
    if "pixels" in anchor_op.attrs:
        host, local = anchor_host(s, anchor_op, outs, view=_pixels_view(anchor_op, outs))
        hs, xo, _ = tile_pixel_row(s, host, nblocks, rows * cols, rows_outer)
    else:
        host, local = anchor_host(s, anchor_op, outs)
        hs, xo = tile_blocked_host(s, host, nblocks, rows, cols, rows_outer)

    # (n, f, y, x, lanes): the channel blocks innermost of the unrolled tile.
    unroll = ((2,) if unroll_rx else ()) + ((3,) if unrolls_block_channels(anchor_op) else ())
    register_tile_at(s, local, hs, xo, outer=[0], tile=[2, 3, 1, 4], reduce=reduce_order,
                     unroll_reduce=unroll)


def _input_outweighs_kernel(anchor_op) -> bool:
    """Whether a convolution reads more input than kernel (bytes): then its output rows go
    outside its blocks of output channels (see tile_blocked_host), else the blocks go
    outside and each block's kernel is read once."""
    size = {t.ndim: prod(get_const_tuple(t.shape)) for t in anchor_op.input_tensors()}
    if not all(isinstance(v, int) for v in size.values()):
        return False                            # a symbolic batch: keep the former order
    return size[5] >= size[6]                   # data [N, C/ic, H, W, ic], kernel 6-d


def tile_blocked_host(s, host, nblocks: int, rows: int, cols: int, rows_outer: bool = False):
    """Tile a blocked output [n, f, y, x, lanes] into `nblocks` x `rows` x `cols` register
    tiles: the (n, f-tile, y-tile) loops fused and parallel (y-tile before f-tile when
    `rows_outer`), the lanes vectorized. Returns (the host's stage, the x-tile loop, where the
    tile's accumulators are computed). With the rows outside, each thread's rows of input
    stay in cache while every block of output channels reads them, and the kernel is read
    once per row; with the blocks outside, the kernel once and the whole input once per
    block. Inside ResNeXt-50, its 1x1 convs at 56x56 (3.2 MB in, 128 KB of kernel) took 20%
    longer with the blocks outside; its 7x7 grouped conv (200 KB in, 1.2 MB) 75% longer with
    the rows outside.

    Example:
        >>> hs, xo = tile_blocked_host(s, conv, 2, 1, 4)  # doctest: +SKIP
    """
    hs = s[host]
    n, f, y, x, fi = hs.op.axis
    fo, fb = hs.split(f, factor=nblocks)
    yo, yi = hs.split(y, factor=rows)
    xo, xi = hs.split(x, factor=cols)
    if rows_outer:
        hs.reorder(n, yo, fo, xo, fb, yi, xi, fi)
        hs.parallel(hs.fuse(n, yo, fo))
    else:
        hs.reorder(n, fo, yo, xo, fb, yi, xi, fi)
        hs.parallel(hs.fuse(n, fo, yo))
    hs.vectorize(fi)
    return hs, xo


def _pixels_view(anchor_op, outs):
    """The [N, O/oc, OH, OW, oc] view of a convolution computed as a row of pixels (the
    stage reading the anchor), or None when nothing in the group reads it that way."""
    seen, stack = set(), [t.op for t in as_tensor_list(outs)]
    while stack:
        op = stack.pop()
        if op in seen or not isinstance(op, te.ComputeOp):
            continue
        seen.add(op)
        for t in op.input_tensors():
            if t.op is anchor_op:
                return op
            stack.append(t.op)
    return None


def tile_pixel_row(s, host, nblocks: int, pixels: int, tiles_outer: bool = False):
    """Tile the [n, f, y, x, lanes] output of a convolution computed as a row of pixels:
    (y, x) fused into one pixel axis, tiles of `nblocks` channel blocks x `pixels` pixels
    (the last one shorter). With `tiles_outer`, the pixel-tile loop is parallel and the
    channel blocks run inside it (see tile_blocked_host's rows_outer); else the (n, f-tile)
    loops are fused and parallel, the pixel-tile loop inside. Either way the pixel-tile loop
    is not fused with another, so that LoopPartition cuts the last, shorter tile off (in a
    fused loop every tile's extent would be a min() and no tile would unroll). Returns (the
    host's stage, the loop where the tile's accumulators are computed, the parallel loop).

    Example:
        >>> hs, at, task = tile_pixel_row(s, relu, 2, 5)  # doctest: +SKIP
    """
    hs = s[host]
    n, f, y, x, fi = hs.op.axis
    fo, fb = hs.split(f, factor=nblocks)
    # The host is the view [.., OH, OW, ..], or the row itself (its height 1) when the row
    # stays at the root: then its pixels are x alone.
    pixel = x if get_const_tuple(host.shape)[2] == 1 else hs.fuse(y, x)
    po, pi = hs.split(pixel, factor=pixels)
    hs.vectorize(fi)
    if tiles_outer:
        hs.reorder(n, po, fo, fb, pi, fi)
        hs.parallel(po)
        return hs, fo, po
    hs.reorder(n, fo, po, fb, pi, fi)
    task = hs.fuse(n, fo)
    hs.parallel(task)
    return hs, po, task


def schedule_pixel_passes(s, host, local, nblocks: int, pixels: int, pass_blocks: int):
    """A row of pixels [n, f, 1, P, lanes] (the convolution `local`, read by `host`) in
    passes: the threads take (n, blocks of `nblocks` output channel blocks); each computes
    its whole row of accumulators, pass by pass over `pass_blocks` input channel blocks, in
    register tiles of `nblocks` x `pixels` (the last tile shorter), and the host's epilogue
    then reads them tile by tile.

    Example:
        >>> schedule_pixel_passes(s, relu, conv, 4, 6, 5)  # doctest: +SKIP
    """
    hs, _, task = tile_pixel_row(s, host, nblocks, pixels)
    ls = s[local]
    ls.compute_at(hs, task)
    ln, lf, ly, lx, lfi = ls.op.axis
    rco, ry, rx, rci = ls.op.reduce_axis
    lxo, lxi = ls.split(lx, factor=pixels)
    passes, rcb = ls.split(rco, factor=pass_blocks)
    ls.reorder(ln, passes, lxo, rcb, ry, rx, rci, lf, ly, lxi, lfi)
    for axis in (lf, ly, lxi):
        ls.unroll(axis)
    ls.vectorize(lfi)


_HANDLERS = {CONV2D_NCHWC: _schedule_blocked, DEPTHWISE_CONV2D_NCHWC: schedule_depthwise}


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
