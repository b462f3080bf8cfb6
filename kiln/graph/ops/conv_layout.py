"""Operators of the blocked convolution layout NCHW[x]c (kiln/topi/nn/conv2d_nchwc.py),
introduced by ConvertConvLayout:

    layout_transform(x; src_layout, dst_layout)    "NCHW" <-> "NCHW{b}c" (or block to block)
    nn.contrib_conv2d_nchwc(x, W; strides, padding, dilation, groups, out_dtype)
        x [N, C/ic, H, W, ic], W packed [O/oc, C/ic (1 when depthwise), KH, KW, ic (1), oc]
        → [N, O/oc, OH, OW, oc]; groups is 1, C (depthwise, W [O/oc, 1, KH, KW, 1, oc]) or
        grouped with whole channel blocks in each group (W [O/oc, C/(G ic), KH, KW, ic, oc])
    nn.contrib_conv2d_nchwc_int8(x, W; strides, padding, dilation, out_dtype, pad_value)
        x [N, C/ic, H, W, ic] uint8 / int8, W packed [O/oc, C/ic, KH, KW, ic/g, oc, g] int8
        (g = 4) or int16 (g = 2) → [N, O/oc, OH, OW, oc] int32 (kiln/topi/nn/conv2d_nchwc_int8.py)

Example:
    >>> xb = call("layout_transform", x, src_layout="NCHW", dst_layout="NCHW16c")  # doctest: +SKIP
    >>> y = call("nn.contrib_conv2d_nchwc", xb, w_packed, padding=(1, 1))  # doctest: +SKIP
"""
from __future__ import annotations

from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType
from .define import cpu, topi_compute
from .nn import ConvOperands
from .relations import is_known, padding4, tensor


def _block_of(layout, what) -> int:
    from ...topi.nn.conv2d_nchwc import parse_channel_layout
    from ...topi.utils import TopiError
    try:
        return parse_channel_layout(layout)
    except TopiError as err:
        raise GraphTypeError(f"{what}: {err}") from None


def _layout_transform_rel(types, attrs):
    data = tensor(types[0], "data")
    src = _block_of(attrs.src_layout, "src_layout")
    dst = _block_of(attrs.dst_layout, "dst_layout")
    if data.ndim != (5 if src else 4):
        raise GraphTypeError(f"layout_transform: data of rank {data.ndim} is not in layout "
                             f"{attrs.src_layout}")
    n, c, h, w = data.shape[:4]
    channels = c * src if src and is_known(c) else c
    if not is_known(channels):
        raise GraphTypeError("layout_transform needs a known channel count")
    if dst and channels % dst:
        raise GraphTypeError(f"layout_transform: {channels} channels do not split into "
                             f"blocks of {dst}")
    shape = (n, channels // dst, h, w, dst) if dst else (n, channels, h, w)
    return TensorType(shape, data.dtype)


register_op("layout_transform", type_rel=_layout_transform_rel, pattern=OpPattern.INJECTIVE,
            num_inputs=1, attrs={"src_layout": REQUIRED, "dst_layout": REQUIRED},
            compute=topi_compute("nn.conv2d_nchwc:layout_transform",
                                 lambda a, t: {"src_layout": a.src_layout,
                                               "dst_layout": a.dst_layout}),
            schedules=cpu("x86.layout:schedule_layout_transform"),
            doc="move a tensor between the NCHW and NCHW{b}c layouts")


def _conv_nchwc_rel(types, attrs):
    ops = ConvOperands(types, attrs, (5, 6),
                       "contrib_conv2d_nchwc takes 5-d data and a 6-d packed weight",
                       ("data", "packed weight"))
    data, weight = ops.data, ops.weight
    n, cb, h, w, ic = data.shape
    ob, kcb, kh, kw, kic, oc = weight.shape
    channels = cb * ic
    g = attrs.groups
    if g == channels and g != 1:
        if (kcb, kic) != (1, 1) or (ob * oc) % channels:
            raise GraphTypeError(f"contrib_conv2d_nchwc (depthwise): weight {weight.shape} "
                                 f"must be [O/oc, 1, KH, KW, 1, oc] with O a multiple of "
                                 f"{channels}")
    elif kic != ic or kcb * g != cb or ob % g:
        what = "input blocks" if g == 1 else f"input blocks per group ({g} groups)"
        raise GraphTypeError(f"contrib_conv2d_nchwc: the weight {weight.shape} expects "
                             f"{what} {kcb}x{kic}, data {data.shape} has {cb}x{ic}"
                             + (f" and {ob} output blocks" if g != 1 else ""))
    oh, ow = ops.out_hw(h, w, kh, kw)
    return TensorType((n, ob, oh, ow, oc), ops.out_dtype(attrs))


register_op("nn.contrib_conv2d_nchwc", type_rel=_conv_nchwc_rel,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
                   "out_dtype": None},
            compute=topi_compute("nn.conv2d_nchwc:conv2d_nchwc_any",
                                 lambda a, t: {"strides": a.strides,
                                               "padding": padding4(a.padding),
                                               "dilation": a.dilation, "groups": a.groups,
                                               "out_dtype": t.dtype}),
            schedules=cpu("x86.conv2d_nchwc:schedule_conv2d_nchwc"),
            doc="conv2d (or depthwise) in the blocked NCHW{b}c layout on a pre-packed weight")


def _conv_nchwc_int8_rel(types, attrs):
    data, weight = tensor(types[0], "data"), tensor(types[1], "packed weight")
    if data.ndim != 5 or weight.ndim != 7:
        raise GraphTypeError(f"contrib_conv2d_nchwc_int8 takes 5-d data and a 7-d packed "
                             f"weight, got ranks {data.ndim} and {weight.ndim}")
    if data.dtype not in ("uint8", "int8") or (weight.dtype, weight.shape[-1]) not in (
            ("int8", 4), ("int16", 2)):
        raise GraphTypeError(f"contrib_conv2d_nchwc_int8: data must be uint8 or int8 and the "
                             f"weight int8 in groups of 4 or int16 in pairs, got {data.dtype} "
                             f"and {weight.dtype} {weight.shape}")
    n, cb, h, w, ic = data.shape
    ob, kcb, kh, kw, cg, oc, g = weight.shape
    if attrs.groups != 1:
        raise GraphTypeError(f"contrib_conv2d_nchwc_int8 takes groups 1, got {attrs.groups}")
    if not isinstance(attrs.pad_value, int):
        raise GraphTypeError(f"contrib_conv2d_nchwc_int8: pad_value must be an int, got "
                             f"{attrs.pad_value!r}")
    if kcb != cb or cg * g != ic:
        raise GraphTypeError(f"contrib_conv2d_nchwc_int8: the weight {weight.shape} expects "
                             f"input blocks {kcb}x{cg * g}, data {data.shape} has {cb}x{ic}")
    wide = [TensorType((n, cb, h, w, ic), "int32"), TensorType((ob, kcb, kh, kw, ic, oc), "int32")]
    ops = ConvOperands(wide, attrs, (5, 6), "", ("data", "packed weight"))
    oh, ow = ops.out_hw(h, w, kh, kw)
    return TensorType((n, ob, oh, ow, oc), ops.out_dtype(attrs))


register_op("nn.contrib_conv2d_nchwc_int8", type_rel=_conv_nchwc_int8_rel,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
                   "out_dtype": "int32", "pad_value": 0},
            compute=topi_compute("nn.conv2d_nchwc_int8:conv2d_nchwc_int8",
                                 lambda a, t: {"strides": a.strides,
                                               "padding": padding4(a.padding),
                                               "dilation": a.dilation,
                                               "out_dtype": t.dtype,
                                               "pad_value": a.pad_value}),
            schedules=cpu("x86.conv2d_int8:schedule_conv2d_nchwc_int8"),
            doc="integer conv2d in the blocked layout on a weight packed for a dot-product "
                "instruction (groups of 4 int8 or pairs of int16 per output lane)")
