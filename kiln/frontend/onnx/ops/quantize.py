"""Quantization ONNX ops: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear and the integer
products MatMulInteger, ConvInteger, QLinearMatMul, QLinearConv.

Quantize and dequantize with static scales become qnn.quantize / qnn.dequantize; 2-d integer
convolutions, and matmuls with a constant B, become qnn.conv2d / qnn.dense (which LegalizeQnn
runs in int8 kernels where it can); the rest is a composition of catalog ops that FuseOps
turns into one elementwise kernel around the (integer) matmul or convolution. Rounding is half to even ("round") and results saturate to
the integer type: clip in floating point, then cast, so the cast never sees a value out of
range. Requantization multiplies the int32 accumulator by the scale ratio in float64 (int32
values are exact there), as the ONNX reference does. Integer types: uint8, int8,
uint16, int16 (and int32 inputs of DequantizeLinear); float8, int4, int2 and float4 are not
supported.
"""
from __future__ import annotations

import copy
import math

import numpy as np

from onnx import TensorProto, helper

from ....graph import quantize_arith as arith
from ..context import shape_of
from ..registry import converter, get_converter
from .linalg import batch_matmul
from .nn import _auto_pads, _spatial_attrs
from .tensor import reshape_to

_ONNX_TYPES = {TensorProto.UINT8: "uint8", TensorProto.INT8: "int8",
               TensorProto.UINT16: "uint16", TensorProto.INT16: "int16"}
_PRECISIONS = {TensorProto.FLOAT: "float32", TensorProto.FLOAT16: "float16",
               TensorProto.DOUBLE: "float64"}
_SUPPORTED = "kiln supports uint8, int8, uint16 and int16"


def _type_name(elem_type: int) -> str:
    return helper.tensor_dtype_to_string(elem_type).removeprefix("TensorProto.")


def _quantized_type(ctx, dtype: str, what: str) -> str:
    if dtype not in arith.RANGES or dtype == "int32":
        ctx.unsupported(f"{what} of type {dtype} ({_SUPPORTED})")
    return dtype


# -- scale and zero-point layouts ------------------------------------------------------------

def _blocked(ctx, value, shape, x_shape, axis: int, block: int, what: str):
    """A blocked scale or zero point (x's shape with ceil(D / block) along axis) repeated
    block times along axis and cut to x's extent."""
    if len(shape) != len(x_shape) or any(s != d for k, (s, d) in
                                         enumerate(zip(shape, x_shape)) if k != axis):
        ctx.error(f"{what} shape {tuple(shape)} must equal the input shape {tuple(x_shape)} "
                  f"except along axis {axis}")
    if shape[axis] != -(-x_shape[axis] // block):
        ctx.error(f"{what} has {shape[axis]} blocks along axis {axis}; an axis of "
                  f"{x_shape[axis]} in blocks of {block} needs {-(-x_shape[axis] // block)}")
    spread = tuple(shape[:axis + 1]) + (block,) + tuple(shape[axis + 1:])
    value = ctx.op("broadcast_to", reshape_to(ctx, value, spread[:axis + 1] + (1,) +
                                              spread[axis + 2:]), shape=spread)
    value = reshape_to(ctx, value, tuple(shape[:axis]) + (shape[axis] * block,) +
                       tuple(shape[axis + 1:]))
    if shape[axis] * block != x_shape[axis]:
        value = ctx.op("strided_slice", value, begin=(0,), end=(x_shape[axis],),
                       strides=(1,), axes=(axis,))
    return value


def quant_param(ctx, i: int, x_shape, axis: int, block: int = 0):
    """Scale or zero point input i shaped to broadcast against x: a scalar (per tensor), a
    vector along `axis` (per axis) or, with block > 0, a blocked tensor repeated to x's shape.

    Example:
        >>> s = quant_param(ctx, 1, (1, 3, 4, 4), axis=1)   # (3,) to (1, 3, 1, 1)  # doctest: +SKIP
    """
    what = f"input {i} ({ctx.node.input[i]!r})"
    value, shape = ctx.input(i), tuple(ctx.shape(i))
    if math.prod(shape) == 1:
        return reshape_to(ctx, value, ())
    if not -len(x_shape) <= axis < len(x_shape):
        ctx.error(f"axis {axis} is out of range for an input of rank {len(x_shape)}")
    axis %= len(x_shape)
    if block:
        return _blocked(ctx, value, shape, x_shape, axis, block, what)
    if len(shape) != 1 or shape[0] != x_shape[axis]:
        ctx.error(f"{what} of shape {shape} is neither a scalar nor a vector of the "
                  f"{x_shape[axis]} elements along axis {axis} of x")
    return reshape_to(ctx, value, tuple(x_shape[axis] if k == axis else 1
                                        for k in range(len(x_shape))))


def _layout(ctx):
    """(axis, block_size) attributes of Quantize/DequantizeLinear."""
    block = int(ctx.attr("block_size", 0))
    if block < 0:
        ctx.error(f"block_size must be positive, got {block}")
    return int(ctx.attr("axis", 1)), block


# -- QuantizeLinear / DequantizeLinear -------------------------------------------------------

def _qnn_params(ctx, x_shape, axis: int, block: int, dtype: str):
    """(scale, zero point, axis) as numpy values for a qnn.quantize / qnn.dequantize call, or
    None where the float composition is needed: every input known at import (it folds), scales
    computed at run time, or blocked scales."""
    if block or not ctx.is_known(1) or (ctx.has_input(2) and not ctx.is_known(2)):
        return None
    if all(ctx.is_static(i) for i in range(min(ctx.num_inputs, 3)) if ctx.has_input(i)):
        return None
    scale = np.asarray(ctx.static(1, "scale"))
    zero_point = (np.asarray(ctx.static(2, "zero point")) if ctx.has_input(2)
                  else np.zeros(scale.shape, dtype))
    if not -len(x_shape) <= axis < len(x_shape) or zero_point.shape != scale.shape:
        return None
    if scale.size == 1:
        return scale.reshape(()), zero_point.reshape(()), axis % len(x_shape)
    if scale.shape != (x_shape[axis],):
        return None
    return scale, zero_point, axis % len(x_shape)


def _quantize_check(attrs, opset):
    out = attrs.get("output_dtype", 0)
    if out and out not in _ONNX_TYPES:
        return f"output_dtype {_type_name(out)}: {_SUPPORTED}"
    precision = attrs.get("precision", 0)
    if precision and precision not in _PRECISIONS:
        return f"precision {_type_name(precision)}"
    return None


@converter("QuantizeLinear", check=_quantize_check)
def _quantize_linear(ctx):
    x_shape = ctx.shape(0)
    axis, block = _layout(ctx)
    dtype = _ONNX_TYPES.get(int(ctx.attr("output_dtype", 0)), "uint8")
    if ctx.has_input(2):
        dtype = _quantized_type(ctx, ctx.dtype(2), "y_zero_point")
        if ctx.attr("output_dtype", 0) and _ONNX_TYPES[ctx.attr("output_dtype")] != dtype:
            ctx.error(f"output_dtype {_type_name(ctx.attr('output_dtype'))} differs from "
                      f"y_zero_point's type {dtype}")
    precision = _PRECISIONS.get(int(ctx.attr("precision", 0)), ctx.dtype(1))
    if not precision.startswith("float"):
        ctx.error(f"y_scale must be floating point, got {ctx.dtype(1)}")
    qnn = _qnn_params(ctx, x_shape, axis, block, dtype)
    if qnn is not None and precision == ctx.dtype(0) == ctx.dtype(1) == "float32":
        scale, zero_point, axis = qnn
        return ctx.op("qnn.quantize", ctx.input(0), scale, zero_point, axis=axis, out_dtype=dtype)
    zero_point = quant_param(ctx, 2, x_shape, axis, block) if ctx.has_input(2) else None
    scale = quant_param(ctx, 1, x_shape, axis, block)
    return arith.quantize(ctx.op, ctx.input(0), scale, zero_point, dtype, precision)


def _dequantize_check(attrs, opset):
    out = attrs.get("output_dtype", 0)
    if out and out not in _PRECISIONS:
        return f"output_dtype {_type_name(out)}"
    return None


@converter("DequantizeLinear", check=_dequantize_check)
def _dequantize_linear(ctx):
    x, x_shape, x_type = ctx.input(0), ctx.shape(0), ctx.dtype(0)
    if x_type != "int32":
        _quantized_type(ctx, x_type, "x")
    axis, block = _layout(ctx)
    scale_type = ctx.dtype(1)
    if not scale_type.startswith("float"):
        ctx.error(f"x_scale must be floating point, got {scale_type}")
    out = _PRECISIONS.get(int(ctx.attr("output_dtype", 0)), scale_type)
    if ctx.has_input(2) and ctx.dtype(2) != x_type:
        ctx.error(f"x_zero_point has type {ctx.dtype(2)}, x has {x_type}")
    qnn = _qnn_params(ctx, x_shape, axis, block, x_type)
    if qnn is not None and out == scale_type == "float32":
        scale, zero_point, axis = qnn
        return ctx.op("qnn.dequantize", x, scale, zero_point, axis=axis)
    zero_point = None
    if ctx.has_input(2):
        zero_point = quant_param(ctx, 2, x_shape, axis, block)
    return arith.dequantize(ctx.op, x, quant_param(ctx, 1, x_shape, axis, block), zero_point,
                            out)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(ctx):
    x = ctx.input(0)
    if ctx.dtype(0) != "float32":
        ctx.error(f"x must be float32, got {ctx.dtype(0)}")
    zero = ctx.scalar(0, x)
    # The range always includes 0, so that 0 is exactly representable.
    hi = ctx.op("maximum", ctx.op("max", x), zero)
    lo = ctx.op("minimum", ctx.op("min", x), zero)
    span = ctx.op("where", ctx.op("equal", hi, lo), ctx.scalar(1, x), ctx.op("subtract", hi, lo))
    scale = ctx.op("divide", span, ctx.scalar(255, x))
    zero_point = ctx.op("round", ctx.op("clip", ctx.op("negative", ctx.op("divide", lo, scale)),
                                        a_min=0.0, a_max=255.0))
    y = arith.quantize(ctx.op, x, scale, zero_point, "uint8", "float32")
    return [y, scale, ctx.op("cast", zero_point, dtype="uint8")]


# -- integer matmul and convolution ----------------------------------------------------------

def _int8_operand(ctx, i: int, what: str):
    dtype = ctx.dtype(i)
    if dtype not in ("int8", "uint8"):
        ctx.error(f"{what} (input {i}) must be int8 or uint8, got {dtype}")
    return ctx.input(i)


def _zero_point(ctx, i: int, of: int):
    """Zero point input i of operand input `of`, or None when absent."""
    if not ctx.has_input(i):
        return None
    if ctx.dtype(i) != ctx.dtype(of):
        ctx.error(f"zero point (input {i}) has type {ctx.dtype(i)}, its operand (input {of}) "
                  f"{ctx.dtype(of)}")
    return ctx.input(i)


def _per_row(ctx, value, rows: int):
    """A per-row (M,) vector of matrix A (M, K) as (M, 1); any other shape broadcasts as is."""
    shape = tuple(shape_of(value))
    if math.prod(shape) == 1:
        return reshape_to(ctx, value, ())
    if len(shape) == 1 and shape[0] == rows:
        return reshape_to(ctx, value, (rows, 1))
    return value


def _matmul_int32(ctx, a_index: int, b_index: int, zero_points=(None, None)):
    """(a - a_zero) @ (b - b_zero) in int32 (numpy.matmul broadcasting) of inputs a_index and
    b_index with zero points at input indices zero_points; a's zero point is per row, b's
    per column."""
    a, b = _int8_operand(ctx, a_index, "A"), _int8_operand(ctx, b_index, "B")
    a_zero, b_zero = (None if k is None else _zero_point(ctx, k, of)
                      for k, of in zip(zero_points, (a_index, b_index)))
    dense = _qnn_dense(ctx, a, b_index, a_zero, b_zero, zero_points[1])
    if dense is not None:
        return dense
    rows = shape_of(a)[-2] if len(shape_of(a)) > 1 else 1
    a32 = arith.shifted(ctx.op, a, None if a_zero is None else _per_row(ctx, a_zero, rows))
    b32 = arith.shifted(ctx.op, b, None if b_zero is None else _per_row(ctx, b_zero, 0))
    constant_b = ctx.is_weight(b_index) and (b_zero is None or ctx.is_weight(zero_points[1]))
    return batch_matmul(ctx, a32, b32, b_is_weight=constant_b)


def _qnn_dense(ctx, a, b_index: int, a_zero, b_zero, b_zero_index):
    """qnn.dense for a product with a constant 2-d B, one zero point for A and one per column
    (or one) for B: the form LegalizeQnn runs in int8 kernels. None for other forms."""
    shape_a = tuple(shape_of(a))
    if not (ctx.is_known(b_index) and ctx.ndim(b_index) == 2 and len(shape_a) >= 2):
        return None
    if a_zero is not None and math.prod(shape_of(a_zero)) != 1:
        return None
    n = ctx.shape(b_index)[1]
    if b_zero is not None and not (ctx.is_known(b_zero_index)
                                   and math.prod(shape_of(b_zero)) in (1, n)):
        return None
    weight = np.ascontiguousarray(np.asarray(ctx.static(b_index, "B")).T)
    b_zero = _or_zero(ctx, b_zero, weight)
    b_zero = reshape_to(ctx, b_zero, () if math.prod(shape_of(b_zero)) == 1 else (n,))
    return ctx.op("qnn.dense", a, weight, reshape_to(ctx, _or_zero(ctx, a_zero, a), ()), b_zero,
                  out_dtype="int32")


def _or_zero(ctx, zero_point, operand):
    """An absent zero point as a 0 of its operand's type."""
    return ctx.scalar(0, operand) if zero_point is None else zero_point


@converter("MatMulInteger")
def _matmul_integer(ctx):
    return _matmul_int32(ctx, 0, 1, zero_points=(2, 3))


def _per_channel(ctx, value, channels: int, trailing: int, what: str):
    """A scalar, or a vector of one value per output channel shaped (channels, 1, ...) with
    `trailing` ones, to broadcast against a weight or an NC... output."""
    shape = tuple(shape_of(value))
    if math.prod(shape) == 1:
        return reshape_to(ctx, value, ())
    if shape != (channels,):
        ctx.error(f"{what} of shape {shape} is neither a scalar nor one per output channel "
                  f"({channels})")
    return reshape_to(ctx, value, (channels,) + (1,) * trailing)


def _conv_int32(ctx, x, x_zero, w, w_zero, bias=None):
    """The Conv of this node's attributes on (x - x_zero) and (w - w_zero) in int32; w's zero
    point may be per output channel."""
    if x_zero is not None and math.prod(shape_of(x_zero)) != 1:
        ctx.error(f"x_zero_point must be a scalar, got shape {tuple(shape_of(x_zero))}")
    w_shape = tuple(shape_of(w))
    if w_zero is not None:
        w_zero = _per_channel(ctx, w_zero, w_shape[0], len(w_shape) - 1, "w_zero_point")
    x_zero = None if x_zero is None else reshape_to(ctx, x_zero, ())
    if len(w_shape) == 4:
        y = _qnn_conv2d(ctx, x, x_zero, w, w_zero)
        return y if bias is None else ctx.op("nn.bias_add", y, bias, axis=1)
    # Same attributes as Conv: convert a view of this node whose inputs are the shifted ones.
    view = copy.copy(ctx)
    view.inputs = [arith.shifted(ctx.op, x, x_zero), arith.shifted(ctx.op, w, w_zero)]
    if bias is not None:
        view.inputs.append(bias)
    return get_converter("Conv").fn(view)


def _qnn_conv2d(ctx, x, x_zero, w, w_zero):
    """qnn.conv2d of this node's Conv attributes: LegalizeQnn runs it on the 8-bit operands
    (int8 kernels) when the weight is a constant with zero points 0."""
    kernel = list(ctx.attr("kernel_shape", shape_of(w)[2:]))
    strides, dilations, pads = _spatial_attrs(ctx, 2)
    pads = _auto_pads(ctx, shape_of(x)[2:], kernel, strides, dilations, pads)
    w_zero = _or_zero(ctx, w_zero, w)
    if len(shape_of(w_zero)) > 1:   # (O, 1, 1, 1) per output channel: qnn takes a vector
        w_zero = reshape_to(ctx, w_zero, (shape_of(w)[0],))
    return ctx.op("qnn.conv2d", x, w, _or_zero(ctx, x_zero, x), w_zero, strides=tuple(strides),
                  dilation=tuple(dilations), padding=tuple(pads),
                  groups=int(ctx.attr("group", 1)), out_dtype="int32")


@converter("ConvInteger")
def _conv_integer(ctx):
    x, w = _int8_operand(ctx, 0, "x"), _int8_operand(ctx, 1, "w")
    return _conv_int32(ctx, x, _zero_point(ctx, 2, 0), w, _zero_point(ctx, 3, 1))


def _scale(ctx, i: int, what: str):
    if not ctx.dtype(i).startswith("float"):
        ctx.error(f"{what} must be floating point, got {ctx.dtype(i)}")
    return ctx.input(i)


def _output_zero_point(ctx, i: int):
    dtype = _quantized_type(ctx, ctx.dtype(i), "y_zero_point")
    if math.prod(ctx.shape(i)) != 1:
        ctx.error(f"y_zero_point must be a scalar, got shape {tuple(ctx.shape(i))}")
    return reshape_to(ctx, ctx.input(i), ()), dtype


@converter("QLinearMatMul")
def _qlinear_matmul(ctx):
    acc = _matmul_int32(ctx, 0, 3, zero_points=(2, 5))
    rows = ctx.shape(0)[-2] if len(ctx.shape(0)) > 1 else 1
    a_scale = _per_row(ctx, _scale(ctx, 1, "a_scale"), rows)
    b_scale = _per_row(ctx, _scale(ctx, 4, "b_scale"), 0)
    # The scale ratio in the scales' own precision, as the ONNX definition computes it.
    multiplier = ctx.op("divide", ctx.op("multiply", a_scale, b_scale),
                        reshape_to(ctx, _scale(ctx, 6, "y_scale"), ()))
    zero_point, dtype = _output_zero_point(ctx, 7)
    return arith.requantize(ctx.op, acc, multiplier, zero_point, dtype)


@converter("QLinearConv")
def _qlinear_conv(ctx):
    x, w = _int8_operand(ctx, 0, "x"), _int8_operand(ctx, 3, "w")
    bias = None
    if ctx.has_input(8):
        if ctx.dtype(8) != "int32":
            ctx.error(f"B must be int32, got {ctx.dtype(8)}")
        bias = ctx.input(8)
    acc = _conv_int32(ctx, x, _zero_point(ctx, 2, 0), w, _zero_point(ctx, 5, 3), bias)
    w_scale = _per_channel(ctx, _scale(ctx, 4, "w_scale"), ctx.shape(3)[0],
                           len(ctx.shape(0)) - 2, "w_scale")
    x_scale = reshape_to(ctx, _scale(ctx, 1, "x_scale"), ())
    y_scale = reshape_to(ctx, _scale(ctx, 6, "y_scale"), ())
    multiplier = ctx.op("divide", ctx.op("multiply", x_scale, w_scale), y_scale)
    zero_point, dtype = _output_zero_point(ctx, 7)
    return arith.requantize(ctx.op, acc, multiplier, zero_point, dtype)
