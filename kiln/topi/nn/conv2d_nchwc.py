"""2-D convolution in the blocked layout NCHW[x]c (a channel block of x = vector width).

    data   [N, C/ic, H, W, ic]            channel c -> (c // ic, c % ic)
    kernel [O/oc, C/ic, KH, KW, ic, oc]   (OIHW weight packed once, at compile time)
    out    [N, O/oc, OH, OW, oc]

    out[n, ob, y, x, oi] = sum_{cb, ry, rx, ci} pad(data)[n, cb, y*sh + ry*dh, x*sw + rx*dw, ci]
                                                 * kernel[ob, cb, ry, rx, ci, oi]

With oc = 16 float32 lanes, one output block row `out[n, ob, y, x0:x0+t, :]` is t zmm
registers, and every reduction step is one kernel vector load plus t broadcasts.

Grouped (1 < G < channels): kernel [O/oc, C/(G ic), KH, KW, ic, oc], the channel blocks inside
groups. Depthwise (groups == channels, multiplier m): kernel [O/oc, 1, KH, KW, 1, oc], output
channel f reads input channel f // m.

The layout helpers (`nchw_to_nchwc`, `pack_conv_kernel_numpy`, ...) convert numpy arrays; the
graph layer converts tensors with its own layout_transform op.

Example:
    >>> from kiln import te
    >>> x = te.placeholder((1, 4, 56, 56, 16)); w = te.placeholder((4, 4, 3, 3, 16, 16))
    >>> conv2d_nchwc(x, w, 1, 1).shape
    (1, 4, 56, 56, 16)
"""
from __future__ import annotations

import numpy as np

from ... import te
from ...tir.op import likely
from .. import tags
from ..utils import TopiError, get_const_tuple
from .conv2d import _conv_attrs, conv_out_size, pad_spatial

CONV2D_NCHWC = "conv2d_nchwc"
DEPTHWISE_CONV2D_NCHWC = "depthwise_conv2d_nchwc"


def _check_nd(t, ndim, what, op):
    if t.ndim != ndim:
        raise TopiError(f"{op}: {what} must be {ndim}-D, got shape {tuple(t.shape)}")


def _out_hw(h, w, kh, kw, strides, dilation, pads, op):
    (sh, sw), (dh, dw) = strides, dilation
    oh = conv_out_size(h, kh, sh, dh, pads[0], pads[2])
    ow = conv_out_size(w, kw, sw, dw, pads[1], pads[3])
    if oh < 1 or ow < 1:
        raise TopiError(f"{op}: the output would be empty ({oh}x{ow}) for input {h}x{w}, "
                        f"kernel {kh}x{kw}, padding {pads}")
    return oh, ow


# Widest output (columns) whose padding is read in place (see conv2d_nchwc): up to two
# register tiles of 14 columns, every x tile is a border tile and LoopPartition makes few
# pieces; wider outputs multiply the pieces (a C2-sized conv built ~6x slower, 0.15 -> 0.9 s)
# for a few percent, so they keep the padded copy.
INPLACE_PAD_MAX_WIDTH = 28


def pads_in_place(pads, out_width: int) -> bool:
    """Whether conv2d_nchwc reads a padded input in place (a `likely` bounds test on the
    reduction) rather than through a padded copy: padded, and at most INPLACE_PAD_MAX_WIDTH
    output columns.

    Example:
        >>> pads_in_place((1, 1, 1, 1), 28), pads_in_place((1, 1, 1, 1), 56)
        (True, False)
    """
    return any(pads) and out_width <= INPLACE_PAD_MAX_WIDTH


def conv2d_nchwc(data, kernel, strides=1, padding=0, dilation=1, out_dtype=None):
    """Convolution of blocked data [N, C/ic, H, W, ic] with a packed kernel
    [O/oc, C/(G ic), KH, KW, ic, oc]; output [N, O/oc, OH, OW, oc], tagged "conv2d_nchwc".

    The groups G are the kernel's share of the input blocks (G = (C/ic) / (C/(G ic))): 1 for
    an ordinary convolution; a grouped one has its channel blocks inside groups (ic divides
    C/G, oc divides O/G), so output block f reads the input blocks of its group,
    (f // (O/(G oc))) * C/(G ic) + rco, and each vector of oc lanes stays one group's.

    Padding is either a padded copy ("data_pad", which the x86 schedule computes at the
    root) or, when `pads_in_place`, a `likely` bounds test on the reduction itself
    (`sum(..., where=likely(in bounds))`) that reads the unpadded input: LoopPartition
    then clips the ry / rx loops of border tiles (taps that fall in the padding are
    skipped, not multiplied by zero) and leaves the interior guard-free.

    Example:
        >>> y = conv2d_nchwc(x, w, strides=1, padding=1)  # doctest: +SKIP
    """
    op = CONV2D_NCHWC
    _check_nd(data, 5, "data", op)
    _check_nd(kernel, 6, "kernel", op)
    n, cb, h, w, ic = get_const_tuple(data.shape)
    ob, kcb, kh, kw, kic, oc = get_const_tuple(kernel.shape)
    groups, in_block = group_blocks(op, data, kernel, ob, kcb, kic)
    strides, dilation, pads = _conv_attrs((kh, kw), strides, padding, dilation, op)
    (sh, sw), (dh, dw) = strides, dilation
    oh, ow = _out_hw(h, w, kh, kw, strides, dilation, pads, op)
    out_dtype = out_dtype or data.dtype
    rco = te.reduce_axis((0, kcb), name="rco")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rci = te.reduce_axis((0, ic), name="rci")
    attrs = {"strides": strides, "padding": pads, "dilation": dilation, "groups": groups,
             "in_block": ic, "out_block": oc}

    def product(src, b, f, iy, ix, fi):
        return (te.cast(src[b, in_block(f, rco), iy, ix, rci], out_dtype)
                * te.cast(kernel[f, rco, ry, rx, rci, fi], out_dtype))

    if flat_pixels((kh, kw), strides, pads):
        return _pixel_rows(data, (n, ob, oh, ow, oc), attrs, lambda b, f, y, x, fi: te.sum(
            product(data, b, f, y, x, fi), axis=[rco, ry, rx, rci]))
    if pads_in_place(pads, ow):
        top, left = pads[0], pads[1]

        def fcompute(b, f, y, x, fi):
            iy, ix = y * sh + ry * dh - top, x * sw + rx * dw - left
            inside = te.all(iy >= 0, iy < h, ix >= 0, ix < w)
            return te.sum(product(data, b, f, iy, ix, fi), axis=[rco, ry, rx, rci],
                          where=likely(inside))
    else:
        pad = pad_spatial(data, pads, "NCHW")        # H, W are axes 2, 3 in both layouts

        def fcompute(b, f, y, x, fi):
            return te.sum(product(pad, b, f, y * sh + ry * dh, x * sw + rx * dw, fi),
                          axis=[rco, ry, rx, rci])

    return te.compute((n, ob, oh, ow, oc), fcompute, name=op, tag=op, attrs=attrs)


def flat_pixels(kernel_hw, strides, pads) -> bool:
    """Whether conv2d_nchwc computes its output pixels as one row (see _pixel_rows): a 1x1
    convolution with stride 1 and no padding, where output pixel p reads input pixel p.

    Example:
        >>> flat_pixels((1, 1), (1, 1), (0, 0, 0, 0)), flat_pixels((3, 3), (1, 1), (1, 1, 1, 1))
        (True, False)
    """
    return tuple(kernel_hw) == (1, 1) and tuple(strides) == (1, 1) and not any(pads)


def _pixel_rows(data, out_shape, attrs, fcompute):
    """The convolution computed over the output pixels as one row [N, O/oc, 1, OH*OW, oc]
    (tagged conv2d_nchwc, attrs["pixels"] = (OH, OW)), returned through the view
    [N, O/oc, OH, OW, oc] (an injective stage that inlines, with the convolution's attrs).
    A register tile then runs along the pixels: a 7x7 output gets AVX2 tiles of two channel
    blocks x 5 pixels (the last one 4) where a 2-d tile of 7 x 7 is one or seven wide; a 1x1
    1024 -> 2048 ran ~185 against ~150 GFLOPS as one block x 7 columns.

    Example:
        >>> _pixel_rows(x, (1, 4, 7, 7, 8), attrs, fcompute).shape  # doctest: +SKIP
        (1, 4, 7, 7, 8)
    """
    n, ob, oh, ow, oc = out_shape
    row = te.compute((n, ob, 1, oh * ow, oc),
                     lambda b, f, _, p, fi: fcompute(b, f, p // ow, p % ow, fi),
                     name=CONV2D_NCHWC, tag=CONV2D_NCHWC, attrs={**attrs, "pixels": (oh, ow)})
    return te.compute(out_shape, lambda b, f, y, x, fi: row[b, f, 0, y * ow + x, fi],
                      name=CONV2D_NCHWC + "_pixels", tag=tags.INJECTIVE, attrs=attrs)


def reduction_op(out):
    """The op of a conv2d_nchwc output that holds its reduction: the output's own, or the
    pixel row its view reads (see _pixel_rows).

    Example:
        >>> reduction_op(conv2d_nchwc(x, w_1x1)).attrs["pixels"]  # doctest: +SKIP
        (7, 7)
    """
    inputs = out.op.input_tensors() if isinstance(out.op, te.ComputeOp) else []
    if out.op.tag == tags.INJECTIVE and len(inputs) == 1 \
            and "pixels" in getattr(inputs[0].op, "attrs", {}):
        return inputs[0].op
    return out.op


def group_blocks(op: str, data, kernel, ob: int, kcb: int, kic: int) -> tuple:
    """(groups, in_block) of a blocked convolution of `data` [N, C/ic, H, W, ic] with a
    kernel of `ob` output blocks and `kcb` x `kic` input blocks per group: the groups are the
    kernel's share of the input blocks, and in_block(f, rc) the data block that reduction
    step rc of output block f reads (its group's). TopiError when the blocks do not fit.

    Example:
        >>> g, in_block = group_blocks("conv", x, w, ob=8, kcb=2, kic=16)  # doctest: +SKIP
    """
    _, cb, _, _, ic = get_const_tuple(data.shape)
    if kic != ic or cb % kcb:
        raise TopiError(f"{op}: kernel {tuple(kernel.shape)} expects input blocks "
                        f"{kcb}x{kic} (per group), data {tuple(data.shape)} has {cb}x{ic}")
    groups = cb // kcb
    if ob % groups:
        raise TopiError(f"{op}: {ob} output channel blocks do not split into the {groups} "
                        f"groups the kernel {tuple(kernel.shape)} implies")
    per_group = ob // groups

    def in_block(f, rc):
        return rc if groups == 1 else f // per_group * kcb + rc
    return groups, in_block


def depthwise_conv2d_nchwc(data, kernel, strides=1, padding=0, dilation=1, out_dtype=None):
    """Depthwise convolution of blocked data [N, C/ic, H, W, ic] with kernel
    [O/oc, 1, KH, KW, 1, oc] (O = C * multiplier); tagged "depthwise_conv2d_nchwc".

    Example:
        >>> y = depthwise_conv2d_nchwc(x, w, strides=2, padding=1)  # doctest: +SKIP
    """
    op = DEPTHWISE_CONV2D_NCHWC
    _check_nd(data, 5, "data", op)
    _check_nd(kernel, 6, "kernel", op)
    n, cb, h, w, ic = get_const_tuple(data.shape)
    ob, one_c, kh, kw, one_i, oc = get_const_tuple(kernel.shape)
    if (one_c, one_i) != (1, 1):
        raise TopiError(f"{op}: kernel must be [O/oc, 1, KH, KW, 1, oc], got "
                        f"{tuple(kernel.shape)}")
    channels, out_channels = cb * ic, ob * oc
    if out_channels % channels:
        raise TopiError(f"{op}: {out_channels} output channels are not a multiple of the "
                        f"{channels} input channels")
    mult = out_channels // channels
    strides, dilation, pads = _conv_attrs((kh, kw), strides, padding, dilation, op)
    (sh, sw), (dh, dw) = strides, dilation
    oh, ow = _out_hw(h, w, kh, kw, strides, dilation, pads, op)
    out_dtype = out_dtype or data.dtype
    pad = pad_spatial(data, pads, "NCHW", likely=True)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    attrs = {"strides": strides, "padding": pads, "dilation": dilation, "groups": channels,
             "in_block": ic, "out_block": oc}
    # Same blocking in and out (the usual case) keeps the channel index affine in the block
    # lane, so the lane axis vectorizes to plain vector loads.
    same = mult == 1 and ic == oc

    def fcompute(b, f, y, x, fi):
        if same:
            src_b, src_i = f, fi
        else:
            c = (f * oc + fi) // mult
            src_b, src_i = c // ic, c % ic
        return te.sum(te.cast(pad[b, src_b, y * sh + ry * dh, x * sw + rx * dw, src_i],
                              out_dtype)
                      * te.cast(kernel[f, 0, ry, rx, 0, fi], out_dtype), axis=[ry, rx])

    return te.compute((n, ob, oh, ow, oc), fcompute, name=op, tag=op, attrs=attrs)


def _check_block(channels: int, block: int, what: str):
    if block < 1 or channels % block:
        raise TopiError(f"{what}: {channels} channels are not a multiple of block {block}")


def nchw_to_nchwc(x: np.ndarray, block: int) -> np.ndarray:
    """[N, C, H, W] -> [N, C/block, H, W, block] (numpy).

    Example:
        >>> nchw_to_nchwc(np.zeros((1, 32, 5, 5)), 16).shape
        (1, 2, 5, 5, 16)
    """
    n, c, h, w = x.shape
    _check_block(c, block, "nchw_to_nchwc")
    return np.ascontiguousarray(x.reshape(n, c // block, block, h, w).transpose(0, 1, 3, 4, 2))


def nchwc_to_nchw(x: np.ndarray) -> np.ndarray:
    """[N, C/c, H, W, c] -> [N, C, H, W] (numpy).

    Example:
        >>> nchwc_to_nchw(np.zeros((1, 2, 5, 5, 16))).shape
        (1, 32, 5, 5)
    """
    n, cb, h, w, c = x.shape
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3).reshape(n, cb * c, h, w))


def pack_conv_kernel_numpy(w: np.ndarray, in_block: int, out_block: int) -> np.ndarray:
    """OIHW weight -> [O/oc, I/ic, KH, KW, ic, oc] for conv2d_nchwc (numpy, done once); a
    grouped convolution's weight (I = C/G) packs the same way, its blocks inside groups.

    Example:
        >>> pack_conv_kernel_numpy(np.zeros((64, 32, 3, 3)), 16, 16).shape
        (4, 2, 3, 3, 16, 16)
    """
    o, i, kh, kw = w.shape
    _check_block(o, out_block, "pack_conv_kernel_numpy (output channels)")
    _check_block(i, in_block, "pack_conv_kernel_numpy (input channels)")
    packed = w.reshape(o // out_block, out_block, i // in_block, in_block, kh, kw)
    return np.ascontiguousarray(packed.transpose(0, 2, 4, 5, 3, 1))


def pack_depthwise_kernel_numpy(w: np.ndarray, out_block: int) -> np.ndarray:
    """Depthwise OIHW weight [O, 1, KH, KW] -> [O/oc, 1, KH, KW, 1, oc] (numpy).

    Example:
        >>> pack_depthwise_kernel_numpy(np.zeros((32, 1, 3, 3)), 16).shape
        (2, 1, 3, 3, 1, 16)
    """
    o, one, kh, kw = w.shape
    if one != 1:
        raise TopiError(f"pack_depthwise_kernel_numpy: weight must be [O, 1, KH, KW], "
                        f"got {w.shape}")
    _check_block(o, out_block, "pack_depthwise_kernel_numpy")
    packed = w.reshape(o // out_block, out_block, kh, kw).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(packed.reshape(o // out_block, 1, kh, kw, 1, out_block))


def channel_block(channels: int, lanes: int = 16) -> int:
    """The channel block for `channels`: all of them when they fit one vector (3 channels of
    an RGB image are one block), else the largest power of two up to the vector width that
    divides them (whole zmm / ymm registers, never odd lane counts).

    Example:
        >>> channel_block(64), channel_block(3), channel_block(24), channel_block(36)
        (16, 3, 8, 4)
    """
    if channels <= lanes:
        return max(1, channels)
    b = lanes
    while channels % b:
        b //= 2
    return b


def parse_channel_layout(layout: str) -> int:
    """The channel block of "NCHW" (0: not blocked) or "NCHW{b}c" (b).

    Example:
        >>> parse_channel_layout("NCHW"), parse_channel_layout("NCHW16c")
        (0, 16)
    """
    if layout == "NCHW":
        return 0
    digits = layout[4:-1]
    if layout.startswith("NCHW") and layout.endswith("c") and digits.isdigit() \
            and int(digits) > 0:
        return int(digits)
    raise TopiError(f"layout_transform: layout must be 'NCHW' or 'NCHW<b>c', got {layout!r}")


def layout_transform(data, src_layout: str, dst_layout: str):
    """Move a tensor between "NCHW" and blocked "NCHW{b}c" layouts (any block to any block);
    an injective compute tagged "injective".

    Example:
        >>> layout_transform(te.placeholder((1, 32, 4, 4)), "NCHW", "NCHW16c").shape
        (1, 2, 4, 4, 16)
    """
    src, dst = parse_channel_layout(src_layout), parse_channel_layout(dst_layout)
    shape = get_const_tuple(data.shape)
    if len(shape) != (5 if src else 4):
        raise TopiError(f"layout_transform: data of shape {shape} is not in layout {src_layout}")
    channels = shape[1] * src if src else shape[1]
    if dst and channels % dst:
        raise TopiError(f"layout_transform: {channels} channels do not split into blocks of "
                        f"{dst}")
    n, h, w = shape[0], shape[2], shape[3]

    def read(b, c, y, x):
        return data[b, c // src, y, x, c % src] if src else data[b, c, y, x]

    if dst:
        return te.compute((n, channels // dst, h, w, dst),
                          lambda b, cb, y, x, ci: read(b, cb * dst + ci, y, x),
                          name="layout_transform", tag=tags.INJECTIVE)
    return te.compute((n, channels, h, w), read, name="layout_transform", tag=tags.INJECTIVE)


def conv2d_nchwc_any(data, kernel, strides=1, padding=0, dilation=1, groups=1, out_dtype=None):
    """conv2d_nchwc (groups 1, or grouped with channel blocks inside groups) or
    depthwise_conv2d_nchwc (groups = channels), by `groups`.

    Example:
        >>> y = conv2d_nchwc_any(x, w, 1, 1, groups=1)  # doctest: +SKIP
    """
    _, cb, _, _, ic = get_const_tuple(data.shape)
    if groups == cb * ic and groups != 1:
        return depthwise_conv2d_nchwc(data, kernel, strides, padding, dilation, out_dtype)
    y = conv2d_nchwc(data, kernel, strides, padding, dilation, out_dtype)
    if y.op.attrs["groups"] != groups:
        raise TopiError(f"conv2d_nchwc: the kernel {tuple(get_const_tuple(kernel.shape))} "
                        f"implies {y.op.attrs['groups']} groups, not {groups}")
    return y
