"""LegalizeQnn: every qnn.* call becomes integer and floating-point ops of the catalog (and
every other op with a "legalize" rule is rewritten by it: the 3-d ops of legalize_volume.py).

The qnn ops (kiln/graph/ops/quantize.py) have no kernels. Each registers a rule under the op
attribute "legalize" (here), and this pass applies them, so a graph that reaches fusion holds
only ops with computes:

    qnn.conv2d(x, w, zx, 0)        → nn.conv2d(pad(x, zx), w, out_dtype="int32") − zx · Σw
    qnn.dense(x, w, zx, 0)         → nn.dense(x, w, out_dtype="int32") − zx · Σw
    qnn.conv2d(x, w, zx, zw)       → nn.conv2d(int32(x) − zx, int32(w) − zw, out_dtype=int32)
    qnn.requantize(acc, s, 0, s', z') → saturate(round(float(acc) · s/s') + z')
    qnn.quantize / qnn.dequantize  → the ONNX arithmetic (kiln/graph/quantize_arith.py)

A convolution or dense with a constant weight whose zero points are 0 (what quantizers write)
runs on its 8-bit operands, the input zero point folded into one constant per output channel,
so that the layout passes can hand it to an integer kernel (uint8 x int8 dot products).
Otherwise the products shift their operands by the zero points in int32: exact, and correct
at padded borders (a padded element is a real zero, i.e. the zero point). FuseOps then puts
the shifts into the product's input stages and a requantize, bias and ReLU after it into its
output stage. Scales and zero points are per tensor (0-d) or per channel (1-d along `axis`); a
per-channel one is reshaped to broadcast against the data here.

Runs at every opt_level, first in the pipeline: the passes after it (folding, layouts) know
nothing of qnn ops.
"""
from __future__ import annotations

import numpy as np

from ..expr import Constant, const
from ..op import call, get_op, register_op_attr
from ..ops.relations import padding4
from .. import quantize_arith as arith
from . import legalize_volume  # noqa: F401  (the 3-d ops' rules, registered with their ops)
from .pass_infra import FunctionPass
from .rewrite import rewrite

KEY = "legalize"


def along(value, ndim: int, axis: int):
    """A scale or zero point shaped to broadcast against ndim-d data: a scalar as it is, a
    vector (C,) as C along `axis`.

    Example:
        >>> along(const(np.ones(3, "float32")), 4, 1).checked_type.shape   # doctest: +SKIP
        (1, 3, 1, 1)
    """
    shape = value.checked_type.shape
    if len(shape) == 0:
        return value
    if len(shape) == 1 and shape[0] == 1:
        return call("reshape", value, newshape=())
    axis %= ndim
    return call("reshape", value, newshape=tuple(shape[0] if k == axis else 1
                                                 for k in range(ndim)))


def _is_zero(value) -> bool:
    return isinstance(value, Constant) and not np.any(value.data)


def _zero_point(value, ndim: int, axis: int):
    """The zero point as a broadcastable operand, or None when it is a constant zero."""
    return None if _is_zero(value) else along(value, ndim, axis)


def _ndim(expr) -> int:
    return len(expr.checked_type.shape)


@register_op_attr("qnn.quantize", KEY)
def _quantize(c):
    x, scale, zero_point = c.args
    n, axis = _ndim(x), c.attrs.axis
    return arith.quantize(call, x, along(scale, n, axis), _zero_point(zero_point, n, axis),
                          c.attrs.out_dtype, scale.checked_type.dtype)


@register_op_attr("qnn.dequantize", KEY)
def _dequantize(c):
    x, scale, zero_point = c.args
    n, axis = _ndim(x), c.attrs.axis
    return arith.dequantize(call, x, along(scale, n, axis), _zero_point(zero_point, n, axis),
                            c.checked_type.dtype)


@register_op_attr("qnn.requantize", KEY)
def _requantize(c):
    x, in_scale, in_zero, out_scale, out_zero = c.args
    n, axis, compute = _ndim(x), c.attrs.axis, c.attrs.compute_dtype
    acc = x
    if not _is_zero(in_zero):
        acc = call("subtract", arith.cast_to(call, x, compute),
                   arith.cast_to(call, along(in_zero, n, axis), compute))
    multiplier = call("divide", arith.cast_to(call, along(in_scale, n, axis), compute),
                      arith.cast_to(call, along(out_scale, n, axis), compute))
    return arith.requantize(call, acc, multiplier, _zero_point(out_zero, n, axis),
                            c.attrs.out_dtype, compute, round_first=True)


def _operands(c, kernel_axis: int):
    data, weight, data_zero, weight_zero = c.args
    return (arith.shifted(call, data, _zero_point(data_zero, _ndim(data), 0)),
            arith.shifted(call, weight, _zero_point(weight_zero, _ndim(weight), kernel_axis)))


def _direct_zero(c):
    """The input zero point of product c when it can run on its 8-bit operands (a constant
    weight with zero points 0, symmetric as quantizers make them: the form integer kernels
    compute), else None."""
    _, weight, data_zero, weight_zero = c.args
    if isinstance(weight, Constant) and _is_zero(weight_zero) and isinstance(data_zero, Constant):
        return int(data_zero.data)
    return None


def _corrected(acc, weight, zero: int, shape):
    """acc − zero · Σw, one constant per output channel (the sum over each weight row)."""
    if not zero:
        return acc
    w = weight.data.astype("int64")
    sums = w.reshape(w.shape[0], -1).sum(axis=1) * zero
    return call("subtract", acc, const(sums.astype("int32").reshape(shape)))


def _direct_conv2d(c):
    """conv2d(x, w) − zx · Σw on the 8-bit operands themselves (see _direct_zero). The input
    zero point pads the data (a padded real zero), so the correction is one constant per
    output channel."""
    zero = _direct_zero(c)
    if zero is None:
        return None
    data, weight = c.args[:2]
    a = c.attrs
    top, left, bottom, right = padding4(a.padding)
    padding = a.padding
    if zero and any((top, left, bottom, right)):
        data = call("nn.pad", data, pad_width=((0, 0), (0, 0), (top, bottom), (left, right)),
                    pad_value=float(zero))
        padding = (0, 0, 0, 0)
    acc = call("nn.conv2d", data, weight, strides=a.strides, padding=padding,
               dilation=a.dilation, groups=a.groups, out_dtype="int32", span=c.span)
    return _corrected(acc, weight, zero, (1, -1, 1, 1))


@register_op_attr("qnn.conv2d", KEY)
def _conv2d(c):
    acc = _direct_conv2d(c)
    if acc is None:
        data, weight = _operands(c, 0)
        a = c.attrs
        acc = call("nn.conv2d", data, weight, strides=a.strides, padding=a.padding,
                   dilation=a.dilation, groups=a.groups, out_dtype="int32", span=c.span)
    return arith.cast_to(call, acc, c.attrs.out_dtype)


@register_op_attr("qnn.dense", KEY)
def _dense(c):
    zero = _direct_zero(c)
    if zero is not None:            # on the 8-bit operands; no padding to mind
        data, weight = c.args[:2]
        acc = _corrected(call("nn.dense", data, weight, out_dtype="int32", span=c.span),
                         weight, zero, (-1,))
    else:
        data, weight = _operands(c, 0)
        acc = call("nn.dense", data, weight, span=c.span)
    return arith.cast_to(call, acc, c.attrs.out_dtype)


@register_op_attr("qnn.batch_matmul", KEY)
def _batch_matmul(c):
    a, b = (arith.shifted(call, x, _zero_point(z, 0, 0)) for x, z in zip(c.args[:2], c.args[2:]))
    acc = call("nn.batch_matmul", a, b, transpose_a=c.attrs.transpose_a,
               transpose_b=c.attrs.transpose_b, span=c.span)
    return arith.cast_to(call, acc, c.attrs.out_dtype)


@register_op_attr("qnn.add", KEY)
def _add(c):
    lhs, rhs, ls, lz, rs, rz, out_scale, out_zero = c.args

    def term(x, scale, zero):
        x = arith.cast_to(call, x, "float32")
        if not _is_zero(zero):
            x = call("subtract", x, arith.cast_to(call, along(zero, 0, 0), "float32"))
        ratio = call("divide", along(scale, 0, 0), along(out_scale, 0, 0))
        return call("multiply", x, arith.cast_to(call, ratio, "float32"))

    total = call("add", term(lhs, ls, lz), term(rhs, rs, rz))
    return arith.requantize(call, total, None, _zero_point(out_zero, 0, 0),
                            c.attrs.out_dtype, "float32", round_first=True)


def _rules() -> dict:
    from ..op import list_ops
    rules = {}
    for name in list_ops():
        rule = get_op(name).get_attr(KEY)
        if rule is not None:
            rules[name] = [rule]
    return rules


def legalize_qnn(func):
    """Rewrite every qnn.* call of func into catalog ops (see the module docstring).

    Example:
        >>> legalize_qnn(Function([x], call("qnn.dequantize", x, s, z)))   # doctest: +SKIP
    """
    return rewrite(func, _rules())


def LegalizeQnn():
    """The LegalizeQnn function pass (opt_level 0).

    Example:
        >>> mod = LegalizeQnn()(mod)  # doctest: +SKIP
    """
    return FunctionPass(legalize_qnn, opt_level=0, name="LegalizeQnn")


__all__ = ["LegalizeQnn", "along", "legalize_qnn"]
