"""3-D (volumetric) convolution and pooling over NCDHW data: video models (torchvision's R3D,
MC3, R(2+1)D, S3D) and ONNX Conv / MaxPool / AveragePool on 5-d tensors.

These ops have no kernels of their own. Each has a "legalize" rule
(kiln/graph/transform/legalize_volume.py), applied first in the pipeline, that writes it with
the 2-d ops whose blocked kernels are kiln's fast ones: a 3-d convolution is the sum over its
depth taps of 2-d convolutions over the frames each tap reads (the output frames as a batch),
and a 3-d pool, whose window is a box, is a 2-d pool of every frame followed by a pool along
the depth (a box's maximum, its sum and its element count all factor by axis).

Padding is (front, top, left, back, bottom, right), as TVM's conv3d; strides and dilation are
(depth, height, width).

Example:
    >>> y = call("nn.conv3d", x, w, strides=(1, 2, 2), padding=(1, 1, 1, 1, 1, 1))  # doctest: +SKIP
"""
from __future__ import annotations

from ...tir import dtype as dt
from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType
from .nn import ConvOperands, _check_positive, conv_out
from .pooling import pool_out
from .relations import padding6, tensor, triple


def _conv3d_rel(types, attrs):
    ops = ConvOperands(types, attrs, (5, 5), "conv3d takes 5-d data (NCDHW) and weight (OIDHW)",
                       spatial=3)
    (n, c), (o, i) = ops.data.shape[:2], ops.weight.shape[:2]
    ops.check_channels(c, i, o)
    pad = ops.padding
    out = tuple(conv_out(size, k, s, pad[a], pad[a + 3], d) for a, (size, k, s, d) in
                enumerate(zip(ops.data.shape[2:], ops.weight.shape[2:], ops.strides,
                              ops.dilation)))
    _check_positive(out, "output depth x height x width")
    return TensorType((n, o) + out, ops.out_dtype(attrs))


register_op("nn.conv3d", type_rel=_conv3d_rel, pattern=OpPattern.OPAQUE, num_inputs=2,
            attrs={"strides": (1, 1, 1), "padding": (0, 0, 0, 0, 0, 0),
                   "dilation": (1, 1, 1), "groups": 1, "out_dtype": None},
            doc="3-d convolution of NCDHW data by an OIDHW weight; padding (front, top, left, "
                "back, bottom, right); legalized into 2-d convolutions over the frames")


def _pool3d_rel(types, attrs):
    data = tensor(types[0], "data")
    if data.ndim != 5:
        raise GraphTypeError(f"data must be 5-d (NCDHW), got rank {data.ndim}")
    if attrs.get("count_include_pad") is not None and not dt.is_float(data.dtype):
        # averaged in two steps: integer division would truncate twice
        raise GraphTypeError(f"avg_pool3d takes floating-point data, got {data.dtype}")
    kernel = triple(attrs.pool_size, "pool_size", minimum=1)
    strides = triple(attrs.strides, "strides", minimum=1)
    dilation = triple(attrs.dilation, "dilation", minimum=1)
    pad = padding6(attrs.padding)
    if not isinstance(attrs.ceil_mode, bool):
        raise GraphTypeError(f"ceil_mode must be a bool, got {attrs.ceil_mode!r}")
    out = tuple(pool_out(size, k, s, pad[a], pad[a + 3], d, attrs.ceil_mode) for a, (size, k, s, d)
                in enumerate(zip(data.shape[2:], kernel, strides, dilation)))
    _check_positive(out, f"output of pool_size {kernel}:")
    return TensorType(data.shape[:2] + out, data.dtype)


_POOL_ATTRS = {"pool_size": REQUIRED, "strides": (1, 1, 1), "padding": (0, 0, 0, 0, 0, 0),
               "dilation": (1, 1, 1), "ceil_mode": False}
register_op("nn.max_pool3d", type_rel=_pool3d_rel, pattern=OpPattern.OPAQUE, num_inputs=1,
            attrs=dict(_POOL_ATTRS),
            doc="max over pool_size boxes of NCDHW data (padding never wins); legalized into "
                "2-d pools")
register_op("nn.avg_pool3d", type_rel=_pool3d_rel, pattern=OpPattern.OPAQUE, num_inputs=1,
            attrs={**_POOL_ATTRS, "count_include_pad": False},
            doc="mean over pool_size boxes of NCDHW data; count_include_pad counts padding in "
                "the divisor; legalized into 2-d pools")
