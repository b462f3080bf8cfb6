"""Quantized operators (qnn.*): tensors of an integer type that stand for real values
real = scale · (q − zero_point), with the arithmetic of ONNX's QuantizeLinear / QLinearConv.

Scales and zero points are inputs: a scalar (per tensor) or a vector along `axis` (per channel),
constants in every model kiln imports. The ops have no kernels of their own: LegalizeQnn
(kiln/graph/transform/legalize_qnn.py) rewrites each into integer and floating-point ops of the
catalog by the rule registered with it under "legalize", before fusion, so that a requantize
and a bias land in the kernel of the product that feeds them.

    qnn.quantize(x, scale, zp)            float → int: saturate(round(x / scale) + zp)
    qnn.dequantize(q, scale, zp)          int → float: (q − zp) · scale
    qnn.requantize(q, s, zp, s', zp')     int → int:   saturate(round((q − zp) · s / s') + zp')
    qnn.conv2d(x, w, x_zp, w_zp)          Σ (x − x_zp)(w − w_zp) in int32 (w_zp per channel)
    qnn.dense(x, w, x_zp, w_zp)           the same for y = x · wᵀ
    qnn.batch_matmul(a, b, a_zp, b_zp)    the same for batches of a · b (zero points scalar)
    qnn.add(a, b, sa, za, sb, zb, s, z)   quantize(dequantize(a) + dequantize(b)) in one step
                                          (rounded, then the zero point added)

Rounding is half to even; results saturate to the output type.

Example:
    >>> q = call("qnn.quantize", x, const(np.float32(0.1)), const(np.uint8(128)),
    ...          out_dtype="uint8")                                   # doctest: +SKIP
"""
from __future__ import annotations

import math

from ...tir import dtype as dt
from ..expr import GraphTypeError
from ..op import OpPattern, register_op
from ..ty import TensorType
from .nn import _batch_matmul_rel, _conv2d_rel, _dense_rel
from .relations import (broadcast, check_dtype, float_tensor, integer_tensor, normalize_axis,
                        tensor)

QUANTIZED_TYPES = ("int8", "uint8", "int16", "uint16", "int32")


def quantized_dtype(dtype, what: str = "out_dtype") -> str:
    """dtype normalized when it is one kiln quantizes to, else a GraphTypeError.

    Example:
        >>> quantized_dtype("uint8")
        'uint8'
    """
    dtype = check_dtype(dtype, what)
    if dtype not in QUANTIZED_TYPES:
        raise GraphTypeError(f"{what} {dtype} is not a quantized type "
                             f"({', '.join(QUANTIZED_TYPES)})")
    return dtype


def check_quant_param(t, data: TensorType, axis: int, what: str, is_scale: bool) -> None:
    """A scale (floating point) or zero point (integer): a scalar, or a vector of one value per
    element of data's `axis`."""
    t = float_tensor(t, what) if is_scale else integer_tensor(t, what)
    if math.prod(d for d in t.shape) == 1 and t.ndim <= 1:
        return
    if t.ndim != 1:
        raise GraphTypeError(f"{what} must be a scalar or a vector, got shape {t.shape}")
    axis = normalize_axis(axis, data.ndim)
    if t.shape[0] != data.shape[axis]:
        raise GraphTypeError(f"{what} has {t.shape[0]} values but axis {axis} of the data has "
                             f"{data.shape[axis]}")


def _quantize_rel(types, attrs):
    data = float_tensor(types[0], "data")
    check_quant_param(types[1], data, attrs.axis, "scale", True)
    check_quant_param(types[2], data, attrs.axis, "zero_point", False)
    return TensorType(data.shape, quantized_dtype(attrs.out_dtype))


def _dequantize_rel(types, attrs):
    data = integer_tensor(types[0], "data")
    quantized_dtype(data.dtype, "data")
    check_quant_param(types[1], data, attrs.axis, "scale", True)
    check_quant_param(types[2], data, attrs.axis, "zero_point", False)
    out = types[1].dtype if attrs.out_dtype is None else check_dtype(attrs.out_dtype)
    if not dt.is_float(out):
        raise GraphTypeError(f"out_dtype must be floating point, got {out}")
    return TensorType(data.shape, out)


def _requantize_rel(types, attrs):
    data = integer_tensor(types[0], "data")
    for t, what, is_scale in zip(types[1:], ("input_scale", "input_zero_point", "output_scale",
                                             "output_zero_point"), (True, False, True, False)):
        check_quant_param(t, data, attrs.axis, what, is_scale)
    if attrs.compute_dtype not in ("float32", "float64"):
        raise GraphTypeError(f"compute_dtype must be float32 or float64, got "
                             f"{attrs.compute_dtype!r}")
    return TensorType(data.shape, quantized_dtype(attrs.out_dtype))


def _int8_operands(types, names):
    for t, what in zip(types, names):
        dtype = integer_tensor(t, what).dtype
        if dtype not in ("int8", "uint8"):
            raise GraphTypeError(f"{what} must be int8 or uint8, got {dtype}")


def _zero_points(types, data, weight, what):
    check_quant_param(types[0], data, 1, "input_zero_point", False)
    if types[0].ndim and types[0].shape[0] != 1:
        raise GraphTypeError(f"input_zero_point of {what} must be a scalar")
    check_quant_param(types[1], weight, 0, "kernel_zero_point", False)


def _qnn_conv2d_rel(types, attrs):
    _int8_operands(types[:2], ("data", "weight"))
    if attrs.data_layout != "NCHW":
        raise GraphTypeError(f"qnn.conv2d takes NCHW data, got {attrs.data_layout}")
    _zero_points(types[2:], tensor(types[0]), tensor(types[1]), "qnn.conv2d")
    wide = [TensorType(t.shape, "int32") for t in types[:2]]
    return _conv2d_rel(wide, attrs.with_(out_dtype=check_dtype(attrs.out_dtype)))


def _qnn_dense_rel(types, attrs):
    _int8_operands(types[:2], ("data", "weight"))
    _zero_points(types[2:], tensor(types[0]), tensor(types[1]), "qnn.dense")
    out = _dense_rel([TensorType(t.shape, "int32") for t in types[:2]], attrs)
    return TensorType(out.shape, check_dtype(attrs.out_dtype))


def _qnn_batch_matmul_rel(types, attrs):
    _int8_operands(types[:2], ("a", "b"))
    for t, what in zip(types[2:], ("a_zero_point", "b_zero_point")):
        t = integer_tensor(t, what)
        if math.prod(t.shape) != 1:
            raise GraphTypeError(f"{what} of qnn.batch_matmul must be a scalar, got {t.shape}")
    out = _batch_matmul_rel([TensorType(t.shape, "int32") for t in types[:2]], attrs)
    return TensorType(out.shape, check_dtype(attrs.out_dtype))


def _qnn_add_rel(types, attrs):
    lhs, rhs = tensor(types[0], "lhs"), tensor(types[1], "rhs")
    for t, what in zip((lhs, rhs), ("lhs", "rhs")):
        quantized_dtype(t.dtype, what)
    names = ("lhs_scale", "lhs_zero_point", "rhs_scale", "rhs_zero_point", "output_scale",
             "output_zero_point")
    for k, (t, what) in enumerate(zip(types[2:], names)):
        t = tensor(t, what)
        if math.prod(t.shape) != 1:
            raise GraphTypeError(f"{what} of qnn.add must be a scalar, got shape {t.shape}")
        (float_tensor if k % 2 == 0 else integer_tensor)(t, what)
    shape = broadcast([lhs, TensorType(rhs.shape, lhs.dtype)], attrs).shape
    return TensorType(shape, quantized_dtype(attrs.out_dtype))


_CONV_ATTRS = {"strides": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1,
               "data_layout": "NCHW", "out_dtype": "int32"}

register_op("qnn.quantize", type_rel=_quantize_rel, pattern=OpPattern.OPAQUE, num_inputs=3,
            attrs={"axis": -1, "out_dtype": "int8"},
            doc="saturate(round(data / scale) + zero_point) as out_dtype")
register_op("qnn.dequantize", type_rel=_dequantize_rel, pattern=OpPattern.OPAQUE, num_inputs=3,
            attrs={"axis": -1, "out_dtype": None},
            doc="(data - zero_point) * scale, in the scale's type unless out_dtype says")
register_op("qnn.requantize", type_rel=_requantize_rel, pattern=OpPattern.OPAQUE,
            num_inputs=5, attrs={"axis": -1, "out_dtype": "int8", "compute_dtype": "float32"},
            doc="saturate(round((data - input_zero_point) * input_scale / output_scale) "
                "+ output_zero_point), the ratio applied in compute_dtype (the zero point "
                "added after rounding, as QuantizeLinear does)")
register_op("qnn.conv2d", type_rel=_qnn_conv2d_rel, pattern=OpPattern.OPAQUE, num_inputs=4,
            attrs=_CONV_ATTRS,
            doc="2-d convolution of (data - input_zero_point) and (weight - kernel_zero_point) "
                "summed in out_dtype; kernel_zero_point per output channel")
register_op("qnn.dense", type_rel=_qnn_dense_rel, pattern=OpPattern.OPAQUE, num_inputs=4,
            attrs={"out_dtype": "int32"},
            doc="(data - input_zero_point) @ (weight - kernel_zero_point).T summed in out_dtype")
register_op("qnn.batch_matmul", type_rel=_qnn_batch_matmul_rel, pattern=OpPattern.OPAQUE,
            num_inputs=4, attrs={"transpose_a": False, "transpose_b": False, "out_dtype": "int32"},
            doc="(a - a_zero_point) @ (b - b_zero_point) per batch, summed in out_dtype")
register_op("qnn.add", type_rel=_qnn_add_rel, pattern=OpPattern.OPAQUE, num_inputs=8,
            attrs={"out_dtype": "uint8"},
            doc="lhs + rhs of two quantized tensors, quantized to output_scale / zero_point")
