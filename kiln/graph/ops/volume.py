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

from ..expr import GraphTypeError
from ..op import REQUIRED, OpPattern, register_op
from ..ty import TensorType
from .nn import conv_out
from .pooling import pool_out
from .relations import int_tuple, is_known, product_dtype, tensor, check_dtype


def triple(value, what: str, minimum: int | None = None) -> tuple:
    """(d, h, w) from an int, (v,) or three values.

    Example:
        >>> triple(2, "strides"), triple((1,), "dilation")
        ((2, 2, 2), (1, 1, 1))
    """
    if isinstance(value, tuple) and len(value) == 1:
        value = value * 3
    return int_tuple(value, what, 3, minimum)


def padding6(value, what: str = "padding") -> tuple:
    """(front, top, left, back, bottom, right) from an int, (p,), (pd, ph, pw) or six values.

    Example:
        >>> padding6((1, 2, 3))
        (1, 2, 3, 1, 2, 3)
    """
    if isinstance(value, int) and not isinstance(value, bool):
        value = (value,)
    if isinstance(value, tuple) and len(value) == 1:
        value = value * 6
    elif isinstance(value, tuple) and len(value) == 3:
        value = value * 2
    return int_tuple(value, what, 6, minimum=0)


def _data(t):
    t = tensor(t, "data")
    if t.ndim != 5:
        raise GraphTypeError(f"data must be 5-d (NCDHW), got rank {t.ndim}")
    return t


def _empty(out, what):
    if any(is_known(d) and d <= 0 for d in out):
        raise GraphTypeError(f"the output would be empty: {what} {tuple(out)}")


def _conv3d_rel(types, attrs):
    data, weight = _data(types[0]), tensor(types[1], "weight")
    if weight.ndim != 5:
        raise GraphTypeError(f"conv3d takes a 5-d weight (OIDHW), got rank {weight.ndim}")
    dtype = product_dtype([data, weight], attrs.out_dtype)
    strides = triple(attrs.strides, "strides", minimum=1)
    dilation = triple(attrs.dilation, "dilation", minimum=1)
    pad = padding6(attrs.padding)
    g = attrs.groups
    if not isinstance(g, int) or g < 1:
        raise GraphTypeError(f"groups must be a positive int, got {g!r}")
    n, c = data.shape[:2]
    o, i = weight.shape[:2]
    if is_known(c) and is_known(i) and c != i * g:
        raise GraphTypeError(f"data has {c} channels but weight expects {i} x groups={g}")
    if is_known(o) and o % g:
        raise GraphTypeError(f"{o} output channels do not split into {g} groups")
    out = tuple(conv_out(size, k, s, pad[a], pad[a + 3], d) for a, (size, k, s, d) in
                enumerate(zip(data.shape[2:], weight.shape[2:], strides, dilation)))
    _empty(out, "output depth x height x width")
    return TensorType((n, o) + out, dtype if attrs.out_dtype is None
                      else check_dtype(attrs.out_dtype, "out_dtype"))


register_op("nn.conv3d", type_rel=_conv3d_rel, pattern=OpPattern.OPAQUE, num_inputs=2,
            attrs={"strides": (1, 1, 1), "padding": (0, 0, 0, 0, 0, 0),
                   "dilation": (1, 1, 1), "groups": 1, "out_dtype": None},
            doc="3-d convolution of NCDHW data by an OIDHW weight; padding (front, top, left, "
                "back, bottom, right); legalized into 2-d convolutions over the frames")


def _pool3d_rel(types, attrs):
    data = _data(types[0])
    kernel = triple(attrs.pool_size, "pool_size", minimum=1)
    strides = triple(attrs.strides, "strides", minimum=1)
    dilation = triple(attrs.dilation, "dilation", minimum=1)
    pad = padding6(attrs.padding)
    if not isinstance(attrs.ceil_mode, bool):
        raise GraphTypeError(f"ceil_mode must be a bool, got {attrs.ceil_mode!r}")
    out = tuple(pool_out(size, k, s, pad[a], pad[a + 3], d, attrs.ceil_mode) for a, (size, k, s, d)
                in enumerate(zip(data.shape[2:], kernel, strides, dilation)))
    _empty(out, f"output of pool_size {kernel}:")
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
