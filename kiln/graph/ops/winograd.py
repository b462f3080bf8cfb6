"""The Winograd convolution in the blocked layout (kiln/topi/nn/winograd.py):

    nn.contrib_conv2d_winograd_nchwc(x, U; strides, padding, dilation, groups, out_dtype)
        x [N, C/ic, H, W, ic], U [a, a, O/oc, C/(G ic), ic, oc] (the 3x3 weight transformed
        offline by topi.nn.winograd.winograd_weight_transform_numpy, a = tile + 2; G groups
        with whole channel blocks each) → [N, O/oc, OH, OW, oc]; strides and dilation must
        be 1 (kept as attributes so that a conv2d call's attributes carry over unchanged)

Example:
    >>> y = call("nn.contrib_conv2d_winograd_nchwc", xb, u, padding=(1, 1))  # doctest: +SKIP
"""
from __future__ import annotations

from ..expr import GraphTypeError
from ..op import OpPattern, register_op
from ..ty import TensorType
from .define import cpu, topi_compute
from .nn import ConvOperands
from .relations import padding4

_TILES = (2, 4)


def _winograd_rel(types, attrs):
    name = "contrib_conv2d_winograd_nchwc"
    ops = ConvOperands(types, attrs, (5, 6),
                       f"{name} takes 5-d data and a 6-d transformed weight",
                       ("data", "transformed weight"))
    if ops.strides != (1, 1) or ops.dilation != (1, 1):
        raise GraphTypeError(f"{name}: needs strides 1 and dilation 1, got strides "
                             f"{ops.strides}, dilation {ops.dilation}")
    data, weight = ops.data, ops.weight
    n, cb, h, w, ic = data.shape
    a, a2, ob, kcb, kic, oc = weight.shape
    if a != a2 or a - 2 not in _TILES:
        raise GraphTypeError(f"{name}: the transformed weight {weight.shape} must start with "
                             f"a x a, a = tile + 2 for a tile in {_TILES}")
    g = ops.groups
    if kic != ic or kcb * g != cb or ob % g:
        raise GraphTypeError(f"{name}: the weight {weight.shape} expects input blocks "
                             f"{kcb}x{kic} per group ({g} groups), data {data.shape} has "
                             f"{cb}x{ic}")
    oh, ow = ops.out_hw(h, w, 3, 3)
    return TensorType((n, ob, oh, ow, oc), ops.out_dtype(attrs))


register_op("nn.contrib_conv2d_winograd_nchwc", type_rel=_winograd_rel,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
                   "out_dtype": None},
            compute=topi_compute("nn.winograd:conv2d_winograd_nchwc",
                                 lambda a, t: {"strides": a.strides,
                                               "padding": padding4(a.padding),
                                               "dilation": a.dilation, "out_dtype": t.dtype}),
            schedules=cpu("x86.winograd:schedule_conv2d_winograd_nchwc"),
            doc="3x3 stride-1 conv2d by Winograd F(m x m, 3x3) in the blocked NCHW{b}c layout "
                "on an offline-transformed weight")
