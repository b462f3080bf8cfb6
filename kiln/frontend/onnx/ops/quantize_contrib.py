"""ONNX Runtime's quantized contrib ops (domain com.microsoft), which `quantize_static` writes in
the QOperator format next to the standard QLinearConv / QLinearMatMul: QLinearAdd, QLinearMul,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearSigmoid, QLinearLeakyRelu,
QLinearSoftmax, QLinearConcat and QGemm.

Each is what its name says between a DequantizeLinear of its inputs and a QuantizeLinear of its
output (the definitions in ONNX Runtime's ContribOperators.md), so each converts to that QDQ
form: qnn.dequantize, the float op (the standard op's own converter), qnn.quantize.
FakeQuantizationToInteger then computes in integers what it has rules for (QLinearAdd becomes
qnn.add, the pools integer sums); QGemm is a qnn.dense directly.
"""
from __future__ import annotations

import copy

import numpy as np

from ....graph import quantize_arith as arith
from ..registry import Unsupported, converter, get_converter
from .quantize import (_ONNX_TYPES, _dequantize_linear, _output_zero_point, _qnn_dense,
                       _quantize_linear, _scale)

_MS = "com.microsoft"
_TYPE_CODES = {name: code for code, name in _ONNX_TYPES.items()}


def _view(ctx, inputs: list, attrs: dict | None = None):
    """ctx with other inputs (and attributes): a standard op's converter reads them."""
    view = copy.copy(ctx)
    view.inputs = list(inputs)
    while view.inputs and view.inputs[-1] is None:
        view.inputs.pop()
    view.attrs = dict(ctx.attrs if attrs is None else attrs)
    return view


def _optional(ctx, i: int):
    return ctx.input(i) if ctx.has_input(i) else None


def dequantized(ctx, i: int):
    """Inputs i, i+1, i+2 (x, scale, optional zero point) dequantized to float32."""
    return _dequantize_linear(_view(ctx, [ctx.input(i), ctx.input(i + 1), _optional(ctx, i + 2)],
                                    {}))


def quantized(ctx, y, i: int, like: int):
    """y quantized by scale input i and (optional) zero point input i + 1; without a zero
    point, into the type of input `like` (the contrib ops' one type T)."""
    attrs = {} if ctx.has_input(i + 1) else {"output_dtype": _TYPE_CODES[ctx.dtype(like)]}
    return _quantize_linear(_view(ctx, [y, ctx.input(i), _optional(ctx, i + 1)], attrs))


def _float_op(ctx, op_type: str, inputs: list, attrs: dict, opset: int | None = None):
    """The standard op's converter on float inputs (one converter may serve several types)."""
    view = _view(ctx, inputs, attrs)
    view.op_type, view.opset = op_type, opset or ctx.opset
    return get_converter(op_type).fn(view)


@converter("QLinearAdd", "QLinearMul", domain=_MS)
def _qlinear_binary(ctx):
    op = {"QLinearAdd": "add", "QLinearMul": "multiply"}[ctx.op_type]
    return quantized(ctx, ctx.op(op, dequantized(ctx, 0), dequantized(ctx, 3)), 6, like=0)


def _unary(op_type: str, attrs=lambda ctx: {}):
    def convert(ctx):
        if ctx.attr("channels_last", 0):
            raise Unsupported("channels_last=1")
        y = _float_op(ctx, op_type, [dequantized(ctx, 0)], attrs(ctx))
        return quantized(ctx, y, 3, like=0)
    return convert


converter("QLinearGlobalAveragePool", domain=_MS)(_unary("GlobalAveragePool"))
converter("QLinearSigmoid", domain=_MS)(_unary("Sigmoid"))
converter("QLinearLeakyRelu", domain=_MS)(
    _unary("LeakyRelu", lambda ctx: {"alpha": ctx.attr("alpha", 0.01)}))
converter("QLinearAveragePool", domain=_MS)(_unary("AveragePool", lambda ctx: {
    k: v for k, v in ctx.attrs.items() if k != "channels_last"}))


@converter("QLinearSoftmax", domain=_MS)
def _qlinear_softmax(ctx):
    # `opset` says which Softmax: before 13 it flattens the axes after `axis`
    y = _float_op(ctx, "Softmax", [dequantized(ctx, 0)], {"axis": ctx.attr("axis", -1)},
                  opset=int(ctx.attr("opset", ctx.opset)))
    return quantized(ctx, y, 3, like=0)


@converter("QLinearConcat", domain=_MS)
def _qlinear_concat(ctx):
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per tensor."""
    if (ctx.num_inputs - 2) % 3 or ctx.num_inputs < 5:
        ctx.error(f"QLinearConcat takes Y_scale, Y_zero_point and triples (X, X_scale, "
                  f"X_zero_point); got {ctx.num_inputs} inputs")
    xs = [dequantized(ctx, i) for i in range(2, ctx.num_inputs, 3)]
    y = _float_op(ctx, "Concat", xs, {"axis": ctx.attr("axis")})
    return quantized(ctx, y, 0, like=2)


@converter("QGemm", domain=_MS)
def _qgemm(ctx):
    """alpha · (A − a_zero)(B − b_zero) · a_scale · b_scale + C, with C int32 in the product's
    scale; quantized by y_scale / y_zero_point when given, else float32."""
    if ctx.attr("transA", 0):
        raise Unsupported("transA=1")
    if not ctx.is_known(3):
        raise Unsupported("B computed at run time")
    b_index = 3
    b = ctx.static(3, "B")
    if ctx.attr("transB", 0):
        # qnn.dense wants B as (K, N) here: its converter transposes it back
        view = _view(ctx, ctx.inputs)
        view.inputs[3] = np.ascontiguousarray(np.asarray(b).T)
        ctx = view
    zero = ctx.input(5) if ctx.has_input(5) else None
    acc = _qnn_dense(ctx, ctx.input(0), b_index, _optional(ctx, 2), zero, 5)
    if acc is None:
        raise Unsupported("a per-row zero point of A")
    if ctx.has_input(6):
        acc = ctx.op("add", acc, ctx.input(6))
    scale = ctx.op("multiply", _scale(ctx, 1, "a_scale"), _scale(ctx, 4, "b_scale"))
    if ctx.attr("alpha", 1.0) != 1.0:
        scale = ctx.op("multiply", scale, np.asarray(ctx.attr("alpha"), "float32"))
    if not ctx.has_input(7):
        return ctx.op("multiply", ctx.op("cast", acc, dtype="float32"), scale)
    multiplier = ctx.op("divide", scale, _scale(ctx, 7, "y_scale"))
    zero_point, dtype = _output_zero_point(ctx, 8) if ctx.has_input(8) else (None, ctx.dtype(0))
    return arith.requantize(ctx.op, acc, multiplier, zero_point, dtype)
