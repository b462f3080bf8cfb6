"""Integer 2-D convolution in the blocked layout, for dot-product instructions that sum `g`
consecutive input channels per output lane (x86 `vpdpbusd` / `vpmaddubsw`: g = 4 bytes;
`vpmaddwd`: g = 2 int16).

    data   [N, C/ic, H, W, ic]                 uint8 or int8 (ic a multiple of g)
    kernel [O/oc, C/ic, KH, KW, ic/g, oc, g]   int8 (g = 4) or int16 (g = 2), packed once
    out    [N, O/oc, OH, OW, oc]               int32

    out[n, ob, y, x, o] = sum_{cb, ry, rx, cg, k} pad(data)[n, cb, y*sh + ry*dh, x*sw + rx*dw,
                                                            cg*g + k] * kernel[ob, cb, ry, rx, cg, o, k]

The `g` products of one output lane lie next to each other in the kernel, and the lanes next
to each other: one vector load feeds all lanes, and the data's g values are broadcast as one
word. The padded (and, for int16 kernels, widened) data is a stage of its own, so a schedule
can tensorize the (o, k) nest without bounds tests in it. Groups: 1.

Example:
    >>> from kiln import te
    >>> x = te.placeholder((1, 2, 14, 14, 8), "uint8"); w = te.placeholder((4, 2, 3, 3, 2, 8, 4), "int8")
    >>> conv2d_nchwc_int8(x, w, 1, 1).shape
    (1, 4, 14, 14, 8)
"""
from __future__ import annotations

import numpy as np

from ... import te
from .. import tags
from ..utils import TopiError, get_const_tuple
from .conv2d import _conv_attrs
from .conv2d_nchwc import _out_hw, pack_conv_kernel_numpy

CONV2D_NCHWC_INT8 = "conv2d_nchwc_int8"
DATA_PAD = "data_pad_int8"


def pack_conv_kernel_int8_numpy(w: np.ndarray, in_block: int, out_block: int, group: int,
                                dtype: str) -> np.ndarray:
    """OIHW integer weight → [O/oc, I/ic, KH, KW, ic/g, oc, g] of `dtype` (numpy, once).

    Example:
        >>> pack_conv_kernel_int8_numpy(np.zeros((16, 8, 3, 3), "int8"), 8, 8, 4, "int8").shape
        (2, 1, 3, 3, 2, 8, 4)
    """
    if in_block % group:
        raise TopiError(f"pack_conv_kernel_int8_numpy: input block {in_block} is not a "
                        f"multiple of the group {group}")
    packed = pack_conv_kernel_numpy(w, in_block, out_block)      # [.., ic, oc]
    ob, cb, kh, kw, ic, oc = packed.shape
    packed = packed.reshape(ob, cb, kh, kw, ic // group, group, oc).transpose(0, 1, 2, 3, 4, 6, 5)
    return np.ascontiguousarray(packed.astype(dtype))


def conv2d_nchwc_int8(data, kernel, strides=1, padding=0, dilation=1, out_dtype="int32",
                      pad_value: int = 0):
    """The convolution of the module docstring, tagged "conv2d_nchwc_int8"; the padding holds
    `pad_value` (a quantized tensor's zero point, which stands for a real 0).

    Example:
        >>> y = conv2d_nchwc_int8(x, w, strides=1, padding=1)  # doctest: +SKIP
    """
    op = CONV2D_NCHWC_INT8
    if data.ndim != 5 or kernel.ndim != 7:
        raise TopiError(f"{op}: data must be 5-D and the kernel 7-D, got "
                        f"{tuple(data.shape)} and {tuple(kernel.shape)}")
    n, cb, h, w, ic = get_const_tuple(data.shape)
    ob, kcb, kh, kw, cg, oc, g = get_const_tuple(kernel.shape)
    if kcb != cb or cg * g != ic:
        raise TopiError(f"{op}: kernel {tuple(kernel.shape)} expects input blocks "
                        f"{kcb}x{cg * g}, data {tuple(data.shape)} has {cb}x{ic}")
    if data.dtype not in ("uint8", "int8") or kernel.dtype not in ("int8", "int16"):
        raise TopiError(f"{op}: data must be uint8 or int8 and the kernel int8 or int16, got "
                        f"{data.dtype} and {kernel.dtype}")
    strides, dilation, pads = _conv_attrs((kh, kw), strides, padding, dilation, op)
    (sh, sw), (dh, dw) = strides, dilation
    oh, ow = _out_hw(h, w, kh, kw, strides, dilation, pads, op)
    operand = "int16" if kernel.dtype == "int16" else data.dtype
    top, left, bottom, right = pads
    src = data
    if any(pads) or operand != data.dtype:
        def padded(b, c, y, x, i):
            iy, ix = y - top, x - left
            inside = te.all(iy >= 0, iy < h, ix >= 0, ix < w)
            return te.if_then_else(inside, data[b, c, iy, ix, i].astype(operand),
                                   te.const(pad_value, operand))
        src = te.compute((n, cb, h + top + bottom, w + left + right, ic), padded, name=DATA_PAD,
                         tag=tags.INJECTIVE)
    rco = te.reduce_axis((0, cb), name="rco")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rcg = te.reduce_axis((0, cg), name="rcg")
    rk = te.reduce_axis((0, g), name="rk")

    def fcompute(b, f, y, x, o):
        return te.sum(src[b, rco, y * sh + ry * dh, x * sw + rx * dw, rcg * g + rk].astype(out_dtype)
                      * kernel[f, rco, ry, rx, rcg, o, rk].astype(out_dtype),
                      axis=[rco, ry, rx, rcg, rk])

    attrs = {"strides": strides, "padding": pads, "dilation": dilation, "in_block": ic,
             "out_block": oc, "group": g, "pad_value": pad_value}
    return te.compute((n, ob, oh, ow, oc), fcompute, name=op, tag=op, attrs=attrs)
