"""2-D convolution computes: NCHW (kernel OIHW) and NHWC (kernel HWIO), with strides,
dilation, asymmetric padding and groups (depthwise when groups == in_channels).

    out[n, k, y, x] = sum_{c, ry, rx} pad(data)[n, g*Cg + c, y*sh + ry*dh, x*sw + rx*dw]
                                      * kernel[k, c, ry, rx],     g = k // (K / groups)
"""
from __future__ import annotations

from ... import te
from ...tir.op import likely as likely_
from .. import tags
from ..utils import TopiError, get_const_int, get_const_tuple


def _pair(value, what: str, op: str) -> tuple:
    if isinstance(value, (list, tuple)):
        if len(value) == 1:
            value = (value[0], value[0])
        if len(value) != 2:
            raise TopiError(f"{op}: {what} must be an int or a pair, got {value!r}")
        a, b = value
    else:
        a = b = value
    a, b = get_const_int(a, f"{op} {what}"), get_const_int(b, f"{op} {what}")
    return a, b


def positive_pair(value, what: str, op: str) -> tuple:
    """(h, w) from an int or a pair, each >= 1; TopiError names `op` and `what` otherwise.

    Example:
        >>> positive_pair(2, "strides", "conv2d")
        (2, 2)
    """
    a, b = _pair(value, what, op)
    if a < 1 or b < 1:
        raise TopiError(f"{op}: {what} must be >= 1, got {(a, b)}")
    return a, b


def get_pad_tuple(padding, kernel=None, dilation=(1, 1), op: str = "conv2d") -> tuple:
    """(top, left, bottom, right) from an int, (ph, pw), (top, left, bottom, right), or the
    strings "VALID" / "SAME" (SAME needs `kernel`: total pad d*(k-1), the extra on the bottom/right).

    Example:
        >>> get_pad_tuple(1), get_pad_tuple((1, 2)), get_pad_tuple((0, 1, 2, 3))
        ((1, 1, 1, 1), (1, 2, 1, 2), (0, 1, 2, 3))
    """
    if isinstance(padding, str):
        mode = padding.upper()
        if mode == "VALID":
            return (0, 0, 0, 0)
        if mode == "SAME" and kernel is not None:
            th, tw = (dilation[0] * (kernel[0] - 1), dilation[1] * (kernel[1] - 1))
            return (th // 2, tw // 2, th - th // 2, tw - tw // 2)
        raise TopiError(f"{op}: padding string must be 'VALID' or 'SAME', got {padding!r}")
    if isinstance(padding, (list, tuple)):
        vals = tuple(get_const_int(p, f"{op} padding") for p in padding)
        if len(vals) == 1:
            vals = vals * 4
        elif len(vals) == 2:
            vals = vals + vals
        elif len(vals) != 4:
            raise TopiError(f"{op}: padding must be an int, (ph, pw) or (top, left, bottom, "
                            f"right), got {padding!r}")
    else:
        vals = (get_const_int(padding, f"{op} padding"),) * 4
    if any(v < 0 for v in vals):
        raise TopiError(f"{op}: padding must be non-negative, got {vals}")
    return vals


def conv_out_size(size, kernel, stride, dilation, pad_before, pad_after):
    """Output length of a convolution along one axis (floor mode).

    Example:
        >>> conv_out_size(7, 3, 2, 1, 1, 1)
        4
    """
    return (size + pad_before + pad_after - dilation * (kernel - 1) - 1) // stride + 1


def pad_spatial(data, pads, layout: str, value=0.0, name: str = "data_pad",
                likely: bool = False):
    """Constant-pad the H and W axes of an NCHW or NHWC tensor; `pads` is (top, left,
    bottom, right). Returns `data` itself when nothing is padded. NCHW covers the blocked
    NCHW[x]c layout too (H, W are axes 2, 3). With `likely=True` the in-bounds test is
    marked `likely`, so that when a schedule inlines the padding into its consumer,
    LoopPartition splits the consumer's loops into guarded borders and a guard-free interior.

    Example:
        >>> xp = pad_spatial(x, (1, 1, 1, 1), "NCHW")  # doctest: +SKIP
    """
    top, left, bottom, right = pads
    if not any(pads):
        return data
    h_axis, w_axis = (2, 3) if layout == "NCHW" else (1, 2)
    shape = list(data.shape)
    h, w = shape[h_axis], shape[w_axis]
    shape[h_axis], shape[w_axis] = h + top + bottom, w + left + right
    fill = te.const(value, data.dtype)

    def fcompute(*idx):
        y, x = idx[h_axis], idx[w_axis]
        src = list(idx)
        src[h_axis], src[w_axis] = y - top, x - left
        conds = []
        if top:
            conds.append(y >= top)
        if bottom:
            conds.append(y < h + top)
        if left:
            conds.append(x >= left)
        if right:
            conds.append(x < w + left)
        inside = te.all(*conds)
        return te.if_then_else(likely_(inside) if likely else inside, data[tuple(src)], fill)

    return te.compute(shape, fcompute, name=name, tag=tags.INJECTIVE)


def _check_4d(t, what, op):
    if t.ndim != 4:
        raise TopiError(f"{op}: {what} must be 4-D, got shape {tuple(t.shape)}")


def _conv_attrs(kernel_hw, strides, padding, dilation, op):
    sh, sw = positive_pair(strides, "strides", op)
    dh, dw = positive_pair(dilation, "dilation", op)
    pads = get_pad_tuple(padding, kernel_hw, (dh, dw), op)
    return (sh, sw), (dh, dw), pads


def _groups(groups, in_channels, out_channels, kernel_in, op):
    groups = get_const_int(groups, f"{op} groups")
    if groups < 1:
        raise TopiError(f"{op}: groups must be >= 1, got {groups}")
    if isinstance(in_channels, int) and in_channels % groups:
        raise TopiError(f"{op}: in_channels {in_channels} is not divisible by groups {groups}")
    if isinstance(out_channels, int) and out_channels % groups:
        raise TopiError(f"{op}: out_channels {out_channels} is not divisible by groups {groups}")
    if isinstance(in_channels, int) and isinstance(kernel_in, int) and \
            kernel_in * groups != in_channels:
        raise TopiError(f"{op}: the kernel has {kernel_in} input channels per group, but data "
                        f"has {in_channels} channels in {groups} group(s) "
                        f"(expected {in_channels // groups})")
    return groups


class _ConvSetup:
    """What both layouts of conv2d derive from their arguments, checked once."""

    def __init__(self, **fields):
        self.__dict__.update(fields)


def _setup(op, layout, data, kernel, strides, padding, dilation, groups, out_dtype):
    _check_4d(data, "data", op)
    _check_4d(kernel, "kernel", op)
    if layout == "NCHW":
        n, c, h, w = get_const_tuple(data.shape)
        k, kc, kh, kw = get_const_tuple(kernel.shape)
    else:
        n, h, w, c = get_const_tuple(data.shape)
        kh, kw, kc, k = get_const_tuple(kernel.shape)
    (sh, sw), (dh, dw), pads = _conv_attrs((kh, kw), strides, padding, dilation, op)
    groups = _groups(groups, c, k, kc, op)
    oh = conv_out_size(h, kh, sh, dh, pads[0], pads[2])
    ow = conv_out_size(w, kw, sw, dw, pads[1], pads[3])
    if isinstance(oh, int) and isinstance(ow, int) and (oh < 1 or ow < 1):
        raise TopiError(f"{op}: the output would be empty ({oh}x{ow}) for input {h}x{w}, "
                        f"kernel {kh}x{kw}, padding {pads}, strides {(sh, sw)}, dilation {(dh, dw)}")
    return _ConvSetup(
        n=n, c=c, k=k, kc=kc, strides=(sh, sw), dilation=(dh, dw), oh=oh, ow=ow, groups=groups,
        out_dtype=out_dtype or data.dtype, pad=pad_spatial(data, pads, layout),
        ry=te.reduce_axis((0, kh), name="ry"), rx=te.reduce_axis((0, kw), name="rx"),
        attrs={"strides": (sh, sw), "padding": pads, "dilation": (dh, dw), "groups": groups})


def conv2d_nchw(data, kernel, strides=1, padding=0, dilation=1, groups=1, out_dtype=None):
    """2-D convolution, data NCHW, kernel OIHW (I = in_channels / groups), as torch's conv2d.

    Tagged "conv2d_nchw" (groups 1), "depthwise_conv2d_nchw" (groups == in_channels, one
    input channel per group) or "group_conv2d_nchw". `out_dtype` (default: data's) is the
    accumulation type.

    Example:
        >>> y = conv2d_nchw(x, w, strides=1, padding=(1, 1), dilation=1)  # doctest: +SKIP
    """
    g = _setup("conv2d_nchw", "NCHW", data, kernel, strides, padding, dilation, groups, out_dtype)
    n, c, k, kc = g.n, g.c, g.k, g.kc
    (sh, sw), (dh, dw), oh, ow, groups = g.strides, g.dilation, g.oh, g.ow, g.groups
    pad, ry, rx, attrs, out_dtype = g.pad, g.ry, g.rx, g.attrs, g.out_dtype

    def tap(b, ch, y, x, kk, cc):
        return (te.cast(pad[b, ch, y * sh + ry * dh, x * sw + rx * dw], out_dtype)
                * te.cast(kernel[kk, cc, ry, rx], out_dtype))

    if groups == 1:
        rc = te.reduce_axis((0, kc), name="rc")
        return te.compute((n, k, oh, ow), lambda b, f, y, x: te.sum(
            tap(b, rc, y, x, f, rc), axis=[rc, ry, rx]), name="conv2d_nchw",
            tag=tags.CONV2D_NCHW, attrs=attrs)
    out_per_group = k // groups
    if kc == 1:
        tag = tags.DEPTHWISE_CONV2D_NCHW if groups == c else tags.GROUP_CONV2D_NCHW
        return te.compute((n, k, oh, ow), lambda b, f, y, x: te.sum(
            tap(b, f // out_per_group, y, x, f, 0), axis=[ry, rx]),
            name=tag, tag=tag, attrs=attrs)
    rc = te.reduce_axis((0, kc), name="rc")
    return te.compute((n, k, oh, ow), lambda b, f, y, x: te.sum(
        tap(b, f // out_per_group * kc + rc, y, x, f, rc), axis=[rc, ry, rx]),
        name="group_conv2d_nchw", tag=tags.GROUP_CONV2D_NCHW, attrs=attrs)


def depthwise_conv2d_nchw(data, kernel, strides=1, padding=0, dilation=1, out_dtype=None):
    """Depthwise convolution: conv2d_nchw with groups = in_channels; kernel (C*m, 1, KH, KW).

    Example:
        >>> y = depthwise_conv2d_nchw(x, w, 1, 1)  # doctest: +SKIP
    """
    return conv2d_nchw(data, kernel, strides, padding, dilation,
                       groups=get_const_tuple(data.shape)[1], out_dtype=out_dtype)


def conv2d_nhwc(data, kernel, strides=1, padding=0, dilation=1, groups=1, out_dtype=None):
    """2-D convolution, data NHWC, kernel HWIO (I = in_channels / groups); tagged
    "conv2d_nhwc" for every group count (the x86 schedule vectorizes output channels).

    Example:
        >>> y = conv2d_nhwc(x, w, strides=2, padding="SAME")  # doctest: +SKIP
    """
    g = _setup("conv2d_nhwc", "NHWC", data, kernel, strides, padding, dilation, groups, out_dtype)
    n, k, kc = g.n, g.k, g.kc
    (sh, sw), (dh, dw), oh, ow, groups = g.strides, g.dilation, g.oh, g.ow, g.groups
    pad, ry, rx, attrs, out_dtype = g.pad, g.ry, g.rx, g.attrs, g.out_dtype
    rc = te.reduce_axis((0, kc), name="rc")
    out_per_group = k // groups

    def fcompute(b, y, x, f):
        ch = rc if groups == 1 else f // out_per_group * kc + rc
        return te.sum(te.cast(pad[b, y * sh + ry * dh, x * sw + rx * dw, ch], out_dtype)
                      * te.cast(kernel[ry, rx, rc, f], out_dtype), axis=[ry, rx, rc])

    return te.compute((n, oh, ow, k), fcompute, name="conv2d_nhwc", tag=tags.CONV2D_NHWC,
                      attrs=attrs)
