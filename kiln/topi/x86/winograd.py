"""x86 schedule of the Winograd convolution in the blocked layout (kiln.topi.nn.winograd),
and the rule for when to use it.

    data_pad   root: parallel over (blocks, rows), vector over the channel lanes
    V (input transform)   root: parallel over (blocks, tile rows); per tile its first pass
                           (VR, a x a vectors) computed at the tile, then the a x a points,
                           all unrolled (the selects fold), vector over ic lanes
    M (GEMM per point)    root, register tile like the direct conv: 2 output channel blocks
                           x up to 14 tiles of accumulators; per reduction step 2 kernel
                           vector loads + one broadcast per tile, each feeding 2 FMAs
    out (output transform + epilogue)   parallel over (n, blocks, tile rows); per m x m
                           tile its first pass (MC, a x m vectors) computed at the tile,
                           then the pixels, unrolled, vector over oc lanes; bias / relu /
                           residual add computed on the transformed values before the store

The GEMM's register tile and loop order, the unrolling of its lanes loop and the input
transform's tiles per task are the knobs of kiln.autotvm's "conv2d_winograd_nchwc.x86"
template: under a dispatch context that has a config for the op they come from it
(`tuned_values`), else from the heuristic (winograd_heuristic).

Example:
    >>> y = conv2d_winograd_nchwc(x, u, padding=1)  # doctest: +SKIP
    >>> s = schedule_conv2d_winograd_nchwc([topi.relu(y)])  # doctest: +SKIP
"""
from __future__ import annotations

from ..nn.winograd import CONV2D_WINOGRAD_NCHWC, winograd_stages, winograd_tiles
from ..utils import constant_factor, get_const_tuple, tuned_values
from .utils import (anchor_host, register_tile, register_tile_at, schedule_by_tag, vector_lanes)

MAX_GEMM_TILES = 14        # accumulators per channel block of the GEMM register tile
# The GEMM's parallel loop: over channel-block tiles, tile groups inside ("fp"), or the reverse.
GEMM_ORDERS = ("fp", "pf")


def _schedule_pad(s, t):
    st = s[t]
    axes = list(st.op.axis)
    st.vectorize(axes[-1])
    st.parallel(st.fuse(*axes[:-2]))


def _schedule_input_transform(s, v, columns, tiles):
    st = s[v]
    e1, e2, c, p, ci = st.op.axis
    py, px = st.split(p, factor=tiles)
    st.reorder(c, py, px, e1, e2, ci)
    st.parallel(st.fuse(c, py))
    st.unroll(e1)
    st.unroll(e2)
    st.vectorize(ci)
    # The first pass per column of the tile: its a input vectors loaded once for a points.
    _unrolled_pass_at(s, columns, st, px, order=(1, 0))


def _unrolled_pass_at(s, t, host_stage, at, order):
    """A transform's first pass computed at the tile loop `at` of host_stage: its two point
    axes unrolled in `order`, the lanes vectorized."""
    ts = s[t]
    ts.compute_at(host_stage, at)
    axes = ts.op.axis
    ts.reorder(axes[order[0]], axes[order[1]], *axes[2:])
    ts.unroll(axes[0])
    ts.unroll(axes[1])
    ts.vectorize(axes[-1])


def winograd_gemm_tile(out_blocks: int, ntiles: int) -> tuple:
    """(output channel blocks, tiles) of the batched GEMM's register tile: two blocks when
    they divide, and up to MAX_GEMM_TILES tiles (utils.register_tile over the tiles).

    Example:
        >>> winograd_gemm_tile(4, 196), winograd_gemm_tile(3, 16)
        ((2, 14), (1, 8))
    """
    blocks = 2 if out_blocks % 2 == 0 else 1
    _, cols = register_tile(1, ntiles, MAX_GEMM_TILES, MAX_GEMM_TILES)
    return blocks, cols


def _schedule_gemm(s, m, nblocks, cols, gemm_order, unroll_rci):
    local = s.cache_write(m, "local")
    st = s[m]
    e1, e2, f, p, fi = st.op.axis
    fo, fb = st.split(f, factor=nblocks)
    po, pi = st.split(p, factor=cols)
    outer = (fo, po) if gemm_order == "fp" else (po, fo)
    st.reorder(e1, e2, *outer, fb, pi, fi)
    st.parallel(st.fuse(e1, e2, outer[0]))
    st.vectorize(fi)
    # local's axes are (e1, e2, f, p, lanes): a tile of tiles x channel blocks x lanes.
    register_tile_at(s, local, st, outer[1], outer=[0, 1], tile=[3, 2, 4],
                     unroll_reduce=(1,) if unroll_rci else ())


def winograd_heuristic(anchor_op) -> dict:
    """schedule_winograd_tile's keyword arguments as the heuristic picks them: the GEMM tile
    of winograd_gemm_tile, one row of tiles per input-transform task.

    Example:
        >>> winograd_heuristic(y.op)  # doctest: +SKIP
        {'nblocks': 2, 'cols': 8, 'input_tiles': 4}
    """
    _, _, ob, ntiles, _ = get_const_tuple(winograd_stages(anchor_op).gemm.shape)
    _, _, oh, ow, _ = get_const_tuple(anchor_op.output(0).shape)
    # A symbolic batch of tiles: the tile is chosen for (and divides) one image's tiles.
    nblocks, cols = winograd_gemm_tile(ob, constant_factor(ntiles))
    return {"nblocks": nblocks, "cols": cols,
            "input_tiles": winograd_tiles(oh, ow, anchor_op.attrs["tile"])[1]}


def _schedule_winograd(s, anchor_op, outs):
    tuned = tuned_values(anchor_op)
    schedule_winograd_tile(s, anchor_op, outs,
                           **(winograd_heuristic(anchor_op) if tuned is None else tuned))


def schedule_winograd_tile(s, anchor_op, outs, nblocks: int, cols: int, input_tiles: int,
                           gemm_order: str = "fp", unroll_rci: bool = False):
    """The schedule of the module docstring with explicit choices: the GEMM's register tile
    (`nblocks` output channel blocks x `cols` tiles), its parallel loop over channel-block
    tiles outside tile groups ("fp") or the reverse ("pf"), its loop over the lanes of an
    input channel block unrolled when `unroll_rci`; the input transform's parallel tasks of
    `input_tiles` tiles each.

    Example:
        >>> schedule_winograd_tile(s, y.op, [y], nblocks=2, cols=8, input_tiles=4)  # doctest: +SKIP
    """
    if gemm_order not in GEMM_ORDERS:
        raise ValueError(f"schedule_winograd_tile: gemm_order is one of {GEMM_ORDERS}, got "
                         f"{gemm_order!r}")
    stages = winograd_stages(anchor_op)
    pad = stages.padded
    tile = anchor_op.attrs["tile"]
    if hasattr(pad.op, "body") and pad.op.name == "data_pad":
        _schedule_pad(s, pad)
    _schedule_input_transform(s, stages.input, stages.input_columns, input_tiles)
    _schedule_gemm(s, stages.gemm, nblocks, cols, gemm_order, unroll_rci)

    host, local = anchor_host(s, anchor_op, outs)
    # The output transform has no reduction: whichever stage computes it is inlined into
    # the host, so the epilogue runs on the transformed values before the store.
    if local.op is not host.op:
        s[local].compute_inline()
    hs = s[host]
    n, f, y, x, fi = hs.op.axis
    yo, yi = hs.split(y, factor=tile)
    xo, xi = hs.split(x, factor=tile)
    hs.reorder(n, f, yo, xo, yi, xi, fi)
    hs.parallel(hs.fuse(n, f, yo))
    hs.unroll(yi)
    hs.unroll(xi)
    hs.vectorize(fi)
    # The first pass per transform point e1: its a GEMM results loaded once for m pixels.
    _unrolled_pass_at(s, stages.output_rows, hs, xo, order=(0, 1))


def schedule_conv2d_winograd_nchwc(outs):
    """Schedule a fused group whose anchor is conv2d_winograd_nchwc, followed by injective
    ops (bias, relu, residual add) computed in the output transform.

    Example:
        >>> s = schedule_conv2d_winograd_nchwc([relu])  # doctest: +SKIP
    """
    return schedule_by_tag(outs, {CONV2D_WINOGRAD_NCHWC: _schedule_winograd})


# Times (medians of 7x20 runs, 2 threads, weights warm in cache) of the topi compute +
# schedule alone, measured on this machine: direct blocked conv vs F(2x2) vs F(4x4):
#   C2  56x56  64->64    direct ~468 us   F(2) ~295 us   F(4) ~171 us
#   C6  28x28 128->128   direct ~492 us   F(2) ~232 us   F(4) ~146 us
#   C9  14x14 256->256   direct ~518 us   F(2) ~232 us   F(4) ~183 us
#   C12  7x7  512->512   direct ~463 us   F(2) ~306 us   F(4) ~831 us (36/9 x the weight
#                        traffic, 37.7 MB, for 4 tiles of which 43% are padding)
# and off the benchmark list:
#   28x28  64->64    direct ~112 us   F(2) ~68 us    F(4) ~49 us
#   56x56 128->128   direct ~1793 us                 F(4) ~595 us
#   14x14 512->512   direct ~1785 us  F(2) ~879 us   F(4) ~1237 us (weight-bound again)
#   7x7   256->256   direct ~112 us   F(2) ~80 us
#   14x14  64->64    direct ~32 us    F(2) ~21 us    F(4) ~21 us
# The rule below covers that measured range only: channels 64..512 in whole 16-lane blocks,
# outputs 7..56 wide; F(4x4) from 14x14 outputs up while its weight (36 C O floats) stays
# within 256x256 channels' worth (9.4 MB), F(2x2) otherwise. With AVX2 (8-lane blocks) the
# same rule held where it was checked: ResNet-18 on a 2-core Zen 4 VM, untuned, ran 30.9 ms
# with direct convolutions and 25.2 ms with the rule's 8 Winograd layers.
# Grouped convolutions (ConvertConvLayout keeps each group's channels in whole blocks), a
# lone conv with its layout transforms, 2 threads, AVX2 (2-core EPYC VM), direct vs F(2) vs
# F(4): channels per group 64, 28x28 (128 ch): 690 / 859 / 442 us; 32, 28x28: 412 / 758 /
# 327; 32, 7x7 (1024 ch): 345 / 408 / 207; 16, 14x14 (160 ch): 111 / 91 / 119 and (512 ch)
# 330 / 268 / 379; 16, 7x7 (400 ch): 77 / 79 / 63; 16, 28x28: 119 / 151 / 116; 16, 56x56:
# 249 / 326 / 264; 8, 28x28: 417 / 596 / 417; 4, 56x56: 1052 / 2685 / 1451. The transforms
# cost the same per channel while each point's GEMM shrinks with the group: from 32
# channels per group F(4) wins, at 16 only on small outputs, below never. With the direct
# convolution's AVX2 row tiles (2 blocks x 4-5 columns, AVX2_BLOCK_COLS), again a lone conv
# + relu with its layout transforms, Winograd / direct: 16 per group, 14x14 512: 355 / 221
# us, 14x14 160: 119 / 93, 7x7 400: 81 / 60; 32 per group, 7x7 1024: 221 / 221, 28x28 128:
# 313 / 327; 64 per group, 28x28 128: 385 / 626. More shapes, same set-up: 32 per group,
# 56x56 256: 3871 / 2771, 14x14 512: 582 / 330, 28x28 256: 622 / 624, 7x7 1024: 212 / 221
# (in ResNeXt-50 the 7x7 F(4) kernel took 290 us against the direct one's 160: its weight is
# 4x as large, streamed from memory there, cached in a loop of one conv); 64 per group,
# 56x56 256: 6894 / 5041, 14x14 512: 617 / 656, 7x7 1024: 362 / 404. So F(4x4) only up to
# 28 wide outputs: from 14 wide with 64 channels per group, 28 wide with 32 (in
# bench/breadth.py, 28x28 128 groups=4 ran 0.88x ONNX Runtime's speed direct, 1.17x as F(4)).
_GROUPED_F4 = ((64, 14), (32, 28))     # (channels per group from, outputs from this wide)
_GROUPED_MAX_OUT = 28
_MIN_CHANNELS, _MAX_CHANNELS = 64, 512
_MIN_OUT, _MAX_OUT, _F4_MIN_OUT = 7, 56, 14
_F4_MAX_CHANNEL_PRODUCT = 256 * 256


def winograd_tile(data_shape, weight_shape, strides, padding, dilation, groups=1) -> int:
    """The Winograd output tile m (2 or 4) for a conv2d (NCHW data [N, C, H, W], OIHW
    weight, padding (top, left, bottom, right) or (ph, pw), groups 1 or grouped, not
    depthwise), or 0 where the direct blocked convolution is faster, the shape is outside
    the measured range, or the target has neither AVX-512 nor AVX2 (16 or 8 float32 lanes:
    where it was measured).

    Example:
        >>> winograd_tile((1, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
        2
        >>> winograd_tile((1, 128, 28, 28), (128, 64, 3, 3), (1, 1), (1, 1), (1, 1), groups=2)
        4
    """
    if vector_lanes("float32") not in (8, 16):
        return 0            # measured with AVX-512 and AVX2 only
    _, c, h, w = data_shape
    o, i, kh, kw = weight_shape
    if (kh, kw) != (3, 3) or tuple(strides) != (1, 1) or tuple(dilation) != (1, 1) \
            or i * groups != c or groups == c:
        return 0
    pads = tuple(padding)
    top, left, bottom, right = pads * 2 if len(pads) == 2 else pads
    oh, ow = h + top + bottom - 2, w + left + right - 2
    if not (_MIN_OUT <= min(oh, ow) and max(oh, ow) <= _MAX_OUT):
        return 0
    if groups != 1:
        return _grouped_tile(i, o // groups, min(oh, ow))
    if any(ch % 16 or not _MIN_CHANNELS <= ch <= _MAX_CHANNELS for ch in (c, o)):
        return 0
    return 4 if min(oh, ow) >= _F4_MIN_OUT and c * o <= _F4_MAX_CHANNEL_PRODUCT else 2


def _grouped_tile(cin: int, cout: int, out: int) -> int:
    """The tile for a grouped conv with `cin` -> `cout` channels per group and an `out` wide
    (smallest side) output (see the table above): F(4x4) up to 28 wide outputs, from 14 wide
    with 64 channels per group and from 28 wide with 32; else direct."""
    if cin % 16 or cout % 16 or out > _GROUPED_MAX_OUT:
        return 0
    fits = any(min(cin, cout) >= ch and out >= wide for ch, wide in _GROUPED_F4)
    return 4 if fits else 0


def use_winograd(data_shape, weight_shape, strides, padding, dilation) -> bool:
    """Whether a conv2d (NCHW data [N, C, H, W], OIHW weight, groups 1, padding (top, left,
    bottom, right)) should run as Winograd in the blocked layout: 3x3 stride-1 undilated
    convolutions of shapes where it measured faster than the direct blocked convolution;
    `winograd_tile` gives the tile for `winograd_weight_transform_numpy`.

    Example:
        >>> use_winograd((1, 64, 56, 56), (64, 64, 3, 3), (1, 1), (1, 1, 1, 1), (1, 1))
        True
    """
    return winograd_tile(data_shape, weight_shape, strides, padding, dilation) != 0
