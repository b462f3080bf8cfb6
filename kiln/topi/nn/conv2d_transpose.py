"""Transposed 2-D convolution (NCHW, kernel IOHW as torch.nn.functional.conv_transpose2d).

Computed as a stride-1 convolution with the flipped kernel over a "dilated and padded" copy
of the input (zeros between input pixels, d*(k-1) - pad around; output_padding extra on the
bottom/right). That copy is its own injective stage, so the convolution loop has no
conditions and vectorizes like conv2d_nchw:

    dp[n, c, i, j]   = data[n, c, (i - bh) / sh, (j - bw) / sw]  where divisible and in range, else 0
    out[n, o, y, x]  = sum_{c, ky, kx} dp[n, g*Cig + c, y + ky*dh, x + kx*dw]
                                       * kernel[g*Cig + c, o % Cog, KH-1-ky, KW-1-kx]
"""
from __future__ import annotations

from ... import te
from .. import tags
from ..utils import TopiError, get_const_int, get_const_tuple
from .conv2d import get_pad_tuple, positive_pair


def conv2d_transpose_out_size(size, kernel, stride, dilation, pad_before, pad_after, out_pad):
    """Output length along one axis: (size-1)*s - pads + d*(k-1) + output_padding + 1.

    Example:
        >>> conv2d_transpose_out_size(4, 3, 2, 1, 1, 1, 1)
        8
    """
    return (size - 1) * stride - pad_before - pad_after + dilation * (kernel - 1) + out_pad + 1


def conv2d_transpose_nchw(data, kernel, strides=1, padding=0, output_padding=0, dilation=1,
                          groups=1, out_dtype=None):
    """Transposed convolution: data (N, Cin, H, W), kernel (Cin, Cout/groups, KH, KW);
    padding as in conv2d (int, pair or (top, left, bottom, right)); tagged
    "conv2d_transpose_nchw".

    Example:
        >>> y = conv2d_transpose_nchw(x, w, strides=2, padding=1, output_padding=1)  # doctest: +SKIP
    """
    op = "conv2d_transpose_nchw"
    if data.ndim != 4 or kernel.ndim != 4:
        raise TopiError(f"{op}: data and kernel must be 4-D, got {tuple(data.shape)} and "
                        f"{tuple(kernel.shape)}")
    n, cin, h, w = get_const_tuple(data.shape)
    kin, cout_g, kh, kw = get_const_tuple(kernel.shape)
    sh, sw = positive_pair(strides, "strides", op)
    dh, dw = positive_pair(dilation, "dilation", op)
    if isinstance(output_padding, (list, tuple)):
        oph, opw = (get_const_int(v, f"{op} output_padding") for v in output_padding)
    else:
        oph = opw = get_const_int(output_padding, f"{op} output_padding")
    top, left, bottom, right = get_pad_tuple(padding, op=op)
    groups = get_const_int(groups, f"{op} groups")
    if groups < 1 or (isinstance(cin, int) and cin % groups):
        raise TopiError(f"{op}: groups must be >= 1 and divide in_channels {cin}, got {groups}")
    if isinstance(cin, int) and isinstance(kin, int) and kin != cin:
        raise TopiError(f"{op}: kernel has {kin} input channels, data has {cin}")
    if not (0 <= oph < max(sh, dh) and 0 <= opw < max(sw, dw)):
        raise TopiError(f"{op}: output_padding {(oph, opw)} must be smaller than the stride or "
                        f"the dilation ({(sh, sw)}, {(dh, dw)})")
    out_dtype = out_dtype or data.dtype
    oh = conv2d_transpose_out_size(h, kh, sh, dh, top, bottom, oph)
    ow = conv2d_transpose_out_size(w, kw, sw, dw, left, right, opw)
    if isinstance(oh, int) and isinstance(ow, int) and (oh < 1 or ow < 1):
        raise TopiError(f"{op}: the output would be empty ({oh}x{ow})")
    # Offsets of input pixel 0 in the dilated-padded frame (may be negative: then cropped).
    bh, bw = dh * (kh - 1) - top, dw * (kw - 1) - left
    ph, pw = oh + dh * (kh - 1), ow + dw * (kw - 1)
    zero = te.const(0, data.dtype)

    def dilate_pad(b, c, i, j):
        yi, xi = i - bh, j - bw
        conds = [yi >= 0, xi >= 0, yi < (h - 1) * sh + 1, xi < (w - 1) * sw + 1]
        if sh > 1:
            conds.append(yi % sh == 0)
        if sw > 1:
            conds.append(xi % sw == 0)
        return te.if_then_else(te.all(*conds), data[b, c, yi // sh, xi // sw], zero)

    dp = te.compute((n, cin, ph, pw), dilate_pad, name="data_dilate_pad", tag=tags.INJECTIVE)
    cin_g = cin // groups
    rc = te.reduce_axis((0, cin_g), name="rc")
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")

    def fcompute(b, o, y, x):
        c = rc if groups == 1 else o // cout_g * cin_g + rc
        return te.sum(te.cast(dp[b, c, y + ry * dh, x + rx * dw], out_dtype)
                      * te.cast(kernel[c, o % cout_g if groups > 1 else o,
                                       kh - 1 - ry, kw - 1 - rx], out_dtype),
                      axis=[rc, ry, rx])

    return te.compute((n, cout_g * groups, oh, ow), fcompute, name="conv2d_transpose_nchw",
                      tag=tags.CONV2D_TRANSPOSE_NCHW,
                      attrs={"strides": (sh, sw), "padding": (top, left, bottom, right),
                             "output_padding": (oph, opw), "dilation": (dh, dw),
                             "groups": groups})
