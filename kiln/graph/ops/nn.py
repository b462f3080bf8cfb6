"""Neural-network operators with a compute-heavy anchor (convolutions, dense, pooling, norms)."""
from __future__ import annotations

from ..expr import GraphTypeError
from ..op import OpPattern, register_op
from ..ty import TensorType
from .relations import same_dtype, tensor


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def _padding4(p):
    p = (p,) if isinstance(p, int) else tuple(p)
    if len(p) == 1:
        return p * 4
    if len(p) == 2:
        return (p[0], p[1], p[0], p[1])
    if len(p) == 4:
        return p
    raise GraphTypeError(f"padding must have 1, 2 or 4 values, got {p}")


def conv_out(size, kernel, stride, pad_lo, pad_hi, dilation):
    return (size + pad_lo + pad_hi - dilation * (kernel - 1) - 1) // stride + 1


def _conv2d_rel(types, attrs):
    data, weight = tensor(types[0], "data"), tensor(types[1], "weight")
    if data.ndim != 4 or weight.ndim != 4:
        raise GraphTypeError("conv2d takes 4-d data and weight")
    dtype = same_dtype([data, weight])
    sh, sw = _pair(attrs.strides)
    dh, dw = _pair(attrs.dilation)
    pt, pl, pb, pr = _padding4(attrs.padding)
    g = attrs.groups
    if attrs.data_layout == "NCHW":
        n, c, h, w = data.shape
        o, i, kh, kw = weight.shape
    elif attrs.data_layout == "NHWC":
        n, h, w, c = data.shape
        kh, kw, i, o = weight.shape
    else:
        raise GraphTypeError(f"unsupported data_layout {attrs.data_layout!r}")
    if isinstance(c, int) and isinstance(i, int) and c != i * g:
        raise GraphTypeError(f"data has {c} channels but weight expects {i} x groups={g}")
    if isinstance(o, int) and o % g:
        raise GraphTypeError(f"{o} output channels do not split into {g} groups")
    oh, ow = conv_out(h, kh, sh, pt, pb, dh), conv_out(w, kw, sw, pl, pr, dw)
    if oh <= 0 or ow <= 0:
        raise GraphTypeError(f"output would be empty ({oh}x{ow})")
    shape = (n, o, oh, ow) if attrs.data_layout == "NCHW" else (n, oh, ow, o)
    return TensorType(shape, attrs.out_dtype or dtype)


register_op("nn.conv2d", type_rel=_conv2d_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=2,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
                   "data_layout": "NCHW", "out_dtype": None},
            doc="2-d convolution; weight OIHW for NCHW data, HWIO for NHWC")


def _dense_rel(types, attrs):
    data, weight = tensor(types[0], "data"), tensor(types[1], "weight")
    if weight.ndim != 2:
        raise GraphTypeError("dense weight must be 2-d (units, in)")
    if data.shape[-1] != weight.shape[1]:
        raise GraphTypeError(f"data's last dimension {data.shape[-1]} does not match weight's "
                             f"input dimension {weight.shape[1]}")
    return TensorType(data.shape[:-1] + (weight.shape[0],), same_dtype([data, weight]))


register_op("nn.dense", type_rel=_dense_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=2, doc="y = x @ W.T (W is (units, in), as torch.nn.Linear)")


def _bias_add_rel(types, attrs):
    data, bias = tensor(types[0], "data"), tensor(types[1], "bias")
    axis = attrs.axis % data.ndim
    if bias.ndim != 1 or bias.shape[0] != data.shape[axis]:
        raise GraphTypeError(f"bias of shape {bias.shape} does not match axis {attrs.axis} of "
                             f"{data.shape}")
    return TensorType(data.shape, same_dtype([data, bias]))


register_op("nn.bias_add", type_rel=_bias_add_rel, pattern=OpPattern.BROADCAST, num_inputs=2,
            attrs={"axis": 1})
