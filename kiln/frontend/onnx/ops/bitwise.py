"""Bitwise and bit-shift ONNX ops."""
from __future__ import annotations

from ..registry import converter
from .elementwise import binary

_BINARY = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}
_SHIFTS = {"LEFT": "left_shift", "RIGHT": "right_shift"}


def _integer_input(ctx, i: int):
    dtype = ctx.dtype(i)
    if not dtype.startswith(("int", "uint")):
        ctx.error(f"input {i} has element type {dtype}; {ctx.op_type} takes integers")
    return ctx.input(i)


@converter(*_BINARY)
def _bitwise(ctx):
    a, b = _integer_input(ctx, 0), _integer_input(ctx, 1)
    return binary(ctx, _BINARY[ctx.op_type], a, b)


@converter("BitwiseNot")
def _bitwise_not(ctx):
    return ctx.op("bitwise_not", _integer_input(ctx, 0))


@converter("BitShift")
def _bit_shift(ctx):
    direction = ctx.attr("direction")
    if direction not in _SHIFTS:
        ctx.error(f"direction must be 'LEFT' or 'RIGHT', got {direction!r}")
    x, y = _integer_input(ctx, 0), _integer_input(ctx, 1)
    return binary(ctx, _SHIFTS[direction], x, y)
