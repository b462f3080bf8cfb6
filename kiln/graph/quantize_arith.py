"""The arithmetic of affine quantization, written once for LegalizeQnn (graph calls) and the
ONNX importer (which folds it on values known at import).

Every function takes `op(name, *args, **attrs)`, the maker of one catalog call: kiln.graph.call,
or an importer's emitter that evaluates calls on numpy values. Rounding is half to even
("round"); results saturate to the integer type by clipping in floating point before the cast,
so the cast never sees a value out of range.

Example:
    >>> from kiln.graph import call, var
    >>> q = quantize(call, var("x", (4,)), np.float32(0.5), np.uint8(3), "uint8", "float32")
    >>> q.checked_type.dtype                                      # doctest: +SKIP
    'uint8'
"""
from __future__ import annotations

import numpy as np

RANGES = {"uint8": (0, 255), "int8": (-128, 127), "uint16": (0, 65535),
          "int16": (-32768, 32767),
          # 2^31 - 1 rounds up to 2^31 in float32: the largest float32 below it instead
          "int32": (-2 ** 31, 2 ** 31 - 128)}


def dtype_of(value) -> str:
    """The dtype of a numpy value or a typed graph expression."""
    if isinstance(value, (np.ndarray, np.generic)):
        return value.dtype.name
    return value.checked_type.dtype


def cast_to(op, value, dtype: str):
    """value as `dtype` (no call when it has it already)."""
    return value if dtype_of(value) == dtype else op("cast", value, dtype=dtype)


def saturate(op, value, dtype: str):
    """value (floating point, integral values) clipped to dtype's range, then cast to it."""
    lo, hi = RANGES[dtype]
    return op("cast", op("clip", value, a_min=float(lo), a_max=float(hi)), dtype=dtype)


def quantize(op, x, scale, zero_point, dtype: str, precision: str):
    """saturate(round_half_even(x / scale) + zero_point) as `dtype`, dividing in `precision`.

    Example:
        >>> y = quantize(call, x, scale, zp, "uint8", "float32")      # doctest: +SKIP
    """
    q = op("round", op("divide", cast_to(op, x, precision), cast_to(op, scale, precision)))
    # float16 holds integers exactly only up to 2048: add the zero point in float32.
    q = cast_to(op, q, "float32" if precision == "float16" else precision)
    if zero_point is not None:
        q = op("add", q, cast_to(op, zero_point, dtype_of(q)))
    return saturate(op, q, dtype)


def dequantize(op, x, scale, zero_point, out: str):
    """(x - zero_point) * scale as `out`; the difference is exact in float32 for 8- and 16-bit
    types, int32 and float64 scales compute in float64.

    Example:
        >>> y = dequantize(call, q, scale, zp, "float32")             # doctest: +SKIP
    """
    wide = "float64" in (dtype_of(scale), out) or dtype_of(x) == "int32"
    compute = "float64" if wide else "float32"
    y = cast_to(op, x, compute)
    if zero_point is not None:
        y = op("subtract", y, cast_to(op, zero_point, compute))
    return cast_to(op, op("multiply", y, cast_to(op, scale, compute)), out)


def requantize(op, acc, multiplier, zero_point, dtype: str, compute: str = "float64",
               round_first: bool = False):
    """saturate(round_half_even(acc * multiplier + zero_point)) as `dtype`, for an integer
    accumulator (or a value already scaled: multiplier None), in `compute` (float64 holds every
    int32 exactly; float32 is what ONNX Runtime's int8 kernels use, and vectorizes twice as
    wide). round_first adds the zero point after rounding, as QuantizeLinear does (and ONNX
    Runtime's kernels); the ONNX reference of QLinearConv / QLinearMatMul adds it before. The
    two differ only on exact ties.

    Example:
        >>> y = requantize(call, acc, multiplier, zp, "int8")         # doctest: +SKIP
    """
    y = cast_to(op, acc, compute)
    if multiplier is not None:
        y = op("multiply", y, cast_to(op, multiplier, compute))
    if round_first:
        y = op("round", y)
    if zero_point is not None:
        y = op("add", y, cast_to(op, zero_point, compute))
    return saturate(op, y if round_first else op("round", y), dtype)


def shifted(op, value, zero_point):
    """value - zero_point in int32 (exact for 8-bit operands)."""
    value = cast_to(op, value, "int32")
    if zero_point is None:
        return value
    return op("subtract", value, cast_to(op, zero_point, "int32"))


__all__ = ["RANGES", "cast_to", "dequantize", "dtype_of", "quantize", "requantize", "saturate",
           "shifted"]
