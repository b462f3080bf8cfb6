"""Converters of the `quantized_decomposed` ops that PyTorch 2 export quantization (PT2E:
prepare_pt2e / convert_pt2e, e.g. with the X86InductorQuantizer) leaves in an exported graph.

They become qnn.quantize / qnn.dequantize around the float ops, the QDQ form that
FakeQuantizationToInteger turns into integer kernels. Scales and zero points that the graph
holds as Python numbers become constants; per-channel ones are the program's buffers.
Dynamic quantization (`choose_qparams`) computes its scale at run time and is not supported.
"""
from __future__ import annotations

import numpy as np

from ...graph import Expr, const
from .registry import Unsupported, converter, kiln_dtype

_Q = "quantized_decomposed"


def _param(n, v, dtype, what) -> Expr:
    if isinstance(v, Expr):
        if v.checked_type.ndim > 1:
            raise Unsupported(f"{what} of shape {v.checked_type.shape}")
        return n.cast(v, dtype)
    if isinstance(v, (int, float)):
        return const(np.asarray(v, dtype))
    raise Unsupported(f"{what} of type {type(v).__name__}")


def _operands(n, per_channel):
    """(scale, zero_point, axis, quant_min, quant_max, dtype) of either signature:
    (x, scale, zero_point, [axis,] quant_min, quant_max, dtype)."""
    rest = list(n.args[3:]) + [None] * 4
    axis = int(rest.pop(0)) if per_channel else -1
    scale = _param(n, n.arg(1), "float32", "scale")
    zero_point = _param(n, n.arg(2), "int32", "zero_point")
    return scale, zero_point, axis, rest[0], rest[1], rest[2]


def _quantize(n, per_channel):
    scale, zero_point, axis, qmin, qmax, dtype = _operands(n, per_channel)
    dtype = kiln_dtype(dtype)
    y = n.call("qnn.quantize", n.cast(n.input(0), "float32"), scale, zero_point, axis=axis,
               out_dtype=dtype)
    info = np.iinfo(dtype)
    lo = info.min if qmin is None else max(int(qmin), int(info.min))
    hi = info.max if qmax is None else min(int(qmax), int(info.max))
    if (lo, hi) == (info.min, info.max):
        return y
    # a narrower range (reduce_range, 7-bit weights) saturates again
    return n.call("clip", y, a_min=float(lo), a_max=float(hi))


def _dequantize(n, per_channel):
    scale, zero_point, axis, _, _, _ = _operands(n, per_channel)
    out = n.kwargs.get("out_dtype")
    return n.call("qnn.dequantize", n.input(0), scale, zero_point, axis=axis,
                  out_dtype="float32" if out is None else kiln_dtype(out))


@converter(f"{_Q}.quantize_per_tensor.default", f"{_Q}.quantize_per_tensor.tensor")
def _quantize_per_tensor(n):
    return _quantize(n, per_channel=False)


@converter(f"{_Q}.quantize_per_channel.default")
def _quantize_per_channel(n):
    return _quantize(n, per_channel=True)


@converter(f"{_Q}.dequantize_per_tensor.default", f"{_Q}.dequantize_per_tensor.tensor")
def _dequantize_per_tensor(n):
    return _dequantize(n, per_channel=False)


@converter(f"{_Q}.dequantize_per_channel.default")
def _dequantize_per_channel(n):
    return _dequantize(n, per_channel=True)


@converter(f"{_Q}.choose_qparams.tensor", f"{_Q}.choose_qparams_symmetric.tensor",
           f"{_Q}.choose_qparams_per_token_asymmetric.default")
def _choose_qparams(n):
    raise Unsupported("dynamic quantization (scales chosen at run time); quantize statically "
                      "with prepare_pt2e/convert_pt2e and calibration data")
