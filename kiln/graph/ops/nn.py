"""Neural-network anchors: convolutions, dense / matmul, softmax, normalization, dropout."""
from __future__ import annotations

from ..expr import GraphTypeError
from ..op import OpPattern, register_op
from ..ty import TensorType
from .define import INJECTIVE, TopiRef, cpu, topi_compute, topi_schedule
from .relations import (check_dtype, float_tensor, is_known, normalize_axis, one_of, padding4,
                        padding6, pair, product_dtype, same_dtype, tensor, triple)


def conv_out(size, kernel, stride, pad_lo, pad_hi, dilation):
    """Output length of a convolution along one axis (floor mode).

    Example:
        >>> conv_out(224, 7, 2, 3, 3, 1)
        112
    """
    return (size + pad_lo + pad_hi - dilation * (kernel - 1) - 1) // stride + 1


def _check_positive(shape, what):
    if any(is_known(d) and d <= 0 for d in shape):
        raise GraphTypeError(f"the output would be empty: {what} {tuple(shape)}")


# ------------------------------------------------------------------------------ conv2d
class ConvOperands:
    """The checked operands and window attributes every convolution relation starts from, of
    2 `spatial` axes or 3 (padding (front, top, left, back, bottom, right))."""

    def __init__(self, types, attrs, ranks, takes: str, names=("data", "weight"),
                 spatial: int = 2):
        self.data, self.weight = tensor(types[0], names[0]), tensor(types[1], names[1])
        if (self.data.ndim, self.weight.ndim) != ranks:
            raise GraphTypeError(f"{takes}, got ranks {self.data.ndim} and {self.weight.ndim}")
        self.dtype = product_dtype([self.data, self.weight], attrs.get("out_dtype"))
        window, pads = (triple, padding6) if spatial == 3 else (pair, padding4)
        self.strides = window(attrs.strides, "strides", minimum=1)
        self.dilation = window(attrs.dilation, "dilation", minimum=1)
        self.padding = pads(attrs.padding)
        g = attrs.groups
        if not isinstance(g, int) or g < 1:
            raise GraphTypeError(f"groups must be a positive int, got {g!r}")
        self.groups = g

    def check_channels(self, c, i, o):
        """Data channels `c` against the weight's `i` per group, `o` outputs into groups."""
        g = self.groups
        if is_known(c) and is_known(i) and c != i * g:
            raise GraphTypeError(f"data has {c} channels but weight expects {i} x groups={g}")
        if is_known(o) and o % g:
            raise GraphTypeError(f"{o} output channels do not split into {g} groups")

    def out_hw(self, h, w, kh, kw):
        (sh, sw), (dh, dw), (pt, pl, pb, pr) = self.strides, self.dilation, self.padding
        oh, ow = conv_out(h, kh, sh, pt, pb, dh), conv_out(w, kw, sw, pl, pr, dw)
        _check_positive((oh, ow), "output height x width")
        return oh, ow

    def out_dtype(self, attrs):
        return self.dtype if attrs.out_dtype is None else check_dtype(attrs.out_dtype, "out_dtype")


def _conv2d_rel(types, attrs):
    ops = ConvOperands(types, attrs, (4, 4), "conv2d takes 4-d data and weight")
    data, weight = ops.data, ops.weight
    layout = one_of(attrs.data_layout, ("NCHW", "NHWC"), "data_layout")
    if layout == "NCHW":
        n, c, h, w = data.shape
        o, i, kh, kw = weight.shape
    else:
        n, h, w, c = data.shape
        kh, kw, i, o = weight.shape
    ops.check_channels(c, i, o)
    oh, ow = ops.out_hw(h, w, kh, kw)
    shape = (n, o, oh, ow) if layout == "NCHW" else (n, oh, ow, o)
    return TensorType(shape, ops.out_dtype(attrs))


_conv2d_nchw = TopiRef("nn.conv2d:conv2d_nchw")
_conv2d_nhwc = TopiRef("nn.conv2d:conv2d_nhwc")


def _conv2d_compute(attrs, inputs, out_type):
    fn = _conv2d_nchw if attrs.data_layout == "NCHW" else _conv2d_nhwc
    return [fn(inputs[0], inputs[1], strides=attrs.strides, padding=padding4(attrs.padding),
               dilation=attrs.dilation, groups=attrs.groups, out_dtype=out_type.dtype)]


_CONV2D_SCHEDULES = {"NCHW": TopiRef("x86.conv2d:schedule_conv2d_nchw"),
                     "NHWC": TopiRef("x86.conv2d:schedule_conv2d_nhwc")}


def _conv2d_schedule(attrs, outs, target=None):
    # One NCHW schedule covers plain, grouped and depthwise convolutions (by the anchor's tag).
    return _CONV2D_SCHEDULES[attrs.data_layout](list(outs))


register_op("nn.conv2d", type_rel=_conv2d_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=2,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
                   "data_layout": "NCHW", "out_dtype": None},
            compute=_conv2d_compute,
            schedules={"cpu": _conv2d_schedule,
                       "gpu": topi_schedule("gpu.conv2d:schedule_conv2d_nchw")},
            doc="2-d convolution; weight OIHW for NCHW data, HWIO for NHWC; padding "
                "(top, left, bottom, right)")


def _conv2d_transpose_rel(types, attrs):
    ops = ConvOperands(types, attrs, (4, 4),
                       "conv2d_transpose takes 4-d data (NCHW) and weight (IOHW)")
    data, weight, dtype, g = ops.data, ops.weight, ops.dtype, ops.groups
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = ops.strides, ops.dilation, ops.padding
    oph, opw = pair(attrs.output_padding, "output_padding", minimum=0)
    if oph >= max(sh, dh) or opw >= max(sw, dw):
        raise GraphTypeError(f"output_padding {(oph, opw)} must be smaller than the stride or "
                             f"the dilation")
    n, c, h, w = data.shape
    i, o, kh, kw = weight.shape
    if is_known(c) and is_known(i) and c != i:
        raise GraphTypeError(f"data has {c} channels but weight (IOHW) has {i} input channels")
    if is_known(c) and c % g:
        raise GraphTypeError(f"{c} input channels do not split into {g} groups")
    oh = (h - 1) * sh - pt - pb + dh * (kh - 1) + oph + 1
    ow = (w - 1) * sw - pl - pr + dw * (kw - 1) + opw + 1
    _check_positive((oh, ow), "output height x width")
    return TensorType((n, o * g, oh, ow), dtype)


register_op("nn.conv2d_transpose", type_rel=_conv2d_transpose_rel,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2,
            attrs={"strides": (1, 1), "padding": (0, 0, 0, 0), "output_padding": (0, 0),
                   "dilation": (1, 1), "groups": 1},
            compute=topi_compute("nn.conv2d_transpose:conv2d_transpose_nchw",
                                 lambda a, t: {"strides": a.strides,
                                               "padding": padding4(a.padding),
                                               "output_padding": a.output_padding,
                                               "dilation": a.dilation, "groups": a.groups}),
            schedules=cpu("x86.conv2d:schedule_conv2d_transpose"),
            doc="transposed 2-d convolution (NCHW data, IOHW weight as torch)")


# ------------------------------------------------------------------------------ dense, matmul
def _dense_rel(types, attrs):
    data, weight = tensor(types[0], "data"), tensor(types[1], "weight")
    if data.ndim < 1 or weight.ndim != 2:
        raise GraphTypeError(f"dense takes data (..., in) and a 2-d weight (units, in), got "
                             f"ranks {data.ndim} and {weight.ndim}")
    if not _same_dim(data.shape[-1], weight.shape[1]):
        raise GraphTypeError(f"data's last dimension {data.shape[-1]} does not match weight's "
                             f"input dimension {weight.shape[1]}")
    out_dtype = attrs.get("out_dtype")
    dtype = product_dtype([data, weight], out_dtype)
    out = dtype if out_dtype is None else check_dtype(out_dtype, "out_dtype")
    return TensorType(data.shape[:-1] + (weight.shape[0],), out)


def _same_dim(a, b) -> bool:
    return a is b or (is_known(a) and is_known(b) and a == b) or not (is_known(a) and is_known(b))


# dense, matmul and batch_matmul share one GPU schedule (shared-memory and register tiles).
GPU_DENSE = {"gpu": topi_schedule("gpu.dense:schedule_dense")}

register_op("nn.dense", type_rel=_dense_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=2, attrs={"out_dtype": None},
            compute=topi_compute("nn.dense:dense", lambda a, t: {"out_dtype": t.dtype}),
            schedules={**cpu("x86.dense:schedule_dense"), **GPU_DENSE},
            doc="y = x @ W.T (W is (units, in), as torch.nn.Linear); integer operands of "
                "different types (uint8 x int8) sum in out_dtype")


def _matmul_dims(a, b, ta, tb):
    m, k = (a[-1], a[-2]) if ta else (a[-2], a[-1])
    k2, n = (b[-1], b[-2]) if tb else (b[-2], b[-1])
    if not _same_dim(k, k2):
        raise GraphTypeError(f"the reduction dimensions differ: {k} (a{'ᵀ' if ta else ''}) vs "
                             f"{k2} (b{'ᵀ' if tb else ''})")
    return m, n


def _matmul_rel(types, attrs):
    a, b = tensor(types[0], "a"), tensor(types[1], "b")
    if a.ndim != 2 or b.ndim != 2:
        raise GraphTypeError(f"matmul takes 2-d operands, got ranks {a.ndim} and {b.ndim}")
    m, n = _matmul_dims(a.shape, b.shape, attrs.transpose_a, attrs.transpose_b)
    return TensorType((m, n), same_dtype([a, b]))


register_op("nn.matmul", type_rel=_matmul_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=2, attrs={"transpose_a": False, "transpose_b": False},
            compute=topi_compute("nn.dense:matmul",
                                 lambda a, t: {"transpose_a": a.transpose_a,
                                               "transpose_b": a.transpose_b}),
            schedules={**cpu("x86.dense:schedule_matmul"), **GPU_DENSE},
            doc="a @ b of 2-d operands, either transposed first")


def _batch_matmul_rel(types, attrs):
    a, b = tensor(types[0], "a"), tensor(types[1], "b")
    if a.ndim != 3 or b.ndim != 3:
        raise GraphTypeError(f"batch_matmul takes 3-d operands, got ranks {a.ndim} and {b.ndim}")
    ba, bb = a.shape[0], b.shape[0]
    if is_known(ba) and ba == 1:
        batch = bb
    elif (is_known(bb) and bb == 1) or _same_dim(ba, bb):
        batch = ba
    else:
        raise GraphTypeError(f"batch sizes {ba} and {bb} differ (only a batch of 1 broadcasts)")
    m, n = _matmul_dims(a.shape, b.shape, attrs.transpose_a, attrs.transpose_b)
    return TensorType((batch, m, n), same_dtype([a, b]))


register_op("nn.batch_matmul", type_rel=_batch_matmul_rel,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2,
            attrs={"transpose_a": False, "transpose_b": False},
            compute=topi_compute("nn.dense:batch_matmul",
                                 lambda a, t: {"transpose_a": a.transpose_a,
                                               "transpose_b": a.transpose_b}),
            schedules={**cpu("x86.dense:schedule_batch_matmul"), **GPU_DENSE},
            doc="a[i] @ b[i] of 3-d operands (a batch of 1 broadcasts), either transposed")


# ------------------------------------------------------------------------------ softmax, norms
def _softmax_rel(types, attrs):
    x = float_tensor(types[0])
    normalize_axis(attrs.axis, x.ndim)
    return x


GPU_SOFTMAX = {"gpu": topi_schedule("gpu.row:schedule_softmax")}

register_op("nn.softmax", type_rel=_softmax_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=1, attrs={"axis": -1},
            compute=topi_compute("nn.softmax:softmax", lambda a, t: {"axis": a.axis}),
            schedules={**cpu("x86.softmax:schedule_softmax"), **GPU_SOFTMAX},
            doc="exp(x - max) / sum(exp(x - max)) along axis")
register_op("nn.log_softmax", type_rel=_softmax_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=1, attrs={"axis": -1},
            compute=topi_compute("nn.softmax:log_softmax", lambda a, t: {"axis": a.axis}),
            schedules={**cpu("x86.softmax:schedule_softmax"), **GPU_SOFTMAX},
            doc="x - max - log(sum(exp(x - max))) along axis")


def _layer_norm_rel(types, attrs):
    x = float_tensor(types[0], "data")
    axis = normalize_axis(attrs.axis, x.ndim)
    trailing = x.shape[axis:]
    for what, t in (("gamma", types[1]), ("beta", types[2])):
        t = tensor(t, what)
        if t.ndim != len(trailing) or not all(_same_dim(a, b) for a, b in zip(t.shape, trailing)):
            raise GraphTypeError(f"{what} of shape {t.shape} must have the normalized shape "
                                 f"{tuple(trailing)} (the axes from {attrs.axis} on)")
    same_dtype([x, types[1], types[2]])
    _check_epsilon(attrs.epsilon)
    return x


def _check_epsilon(eps):
    if not isinstance(eps, (int, float)) or eps < 0:
        raise GraphTypeError(f"epsilon must be a non-negative number, got {eps!r}")


register_op("nn.layer_norm", type_rel=_layer_norm_rel, pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
            num_inputs=3, attrs={"axis": -1, "epsilon": 1e-5},
            compute=topi_compute("nn.norm:layer_norm",
                                 lambda a, t: {"axis": a.axis, "eps": float(a.epsilon)}),
            schedules={**cpu("x86.norm:schedule_layer_norm"),
                       "gpu": topi_schedule("gpu.row:schedule_layer_norm")},
            doc="(x - mean) / sqrt(var + epsilon) * gamma + beta over the axes from axis on")


def _batch_norm_rel(types, attrs):
    x = float_tensor(types[0], "data")
    axis = normalize_axis(attrs.axis, x.ndim)
    for what, t in zip(("gamma", "beta", "moving_mean", "moving_var"), types[1:]):
        t = tensor(t, what)
        if t.ndim != 1 or not _same_dim(t.shape[0], x.shape[axis]):
            raise GraphTypeError(f"{what} of shape {t.shape} must be 1-d of size "
                                 f"{x.shape[axis]} (axis {attrs.axis} of the data)")
    same_dtype(types)
    _check_epsilon(attrs.epsilon)
    return x


register_op("nn.batch_norm", type_rel=_batch_norm_rel, pattern=OpPattern.BROADCAST,
            num_inputs=5, attrs={"axis": 1, "epsilon": 1e-5},
            compute=topi_compute("nn.norm:batch_norm",
                                 lambda a, t: {"axis": a.axis, "eps": float(a.epsilon)}),
            schedules=INJECTIVE,
            doc="inference batch norm: (x - mean) / sqrt(var + epsilon) * gamma + beta, one "
                "output (SimplifyInference folds it away)")


def _dropout_rel(types, attrs):
    x = tensor(types[0])
    if not isinstance(attrs.rate, (int, float)) or not 0 <= attrs.rate < 1:
        raise GraphTypeError(f"rate must be in [0, 1), got {attrs.rate!r}")
    return x


register_op("nn.dropout", type_rel=_dropout_rel, pattern=OpPattern.ELEMWISE, num_inputs=1,
            attrs={"rate": 0.5}, compute=topi_compute("elemwise:identity"),
            schedules=INJECTIVE, doc="identity at inference (SimplifyInference removes it)")
