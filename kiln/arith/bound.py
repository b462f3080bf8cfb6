"""Constant integer bounds: closed intervals of Python ints, with +-math.inf when unbounded.

The interval arithmetic here is on mathematical integers (kiln assumes index arithmetic does
not overflow, as TVM does). The per-expression rules live in the Analyzer (they need the
bounds of variables); this module holds the value type and the arithmetic on intervals.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..tir import dtype as dt

INF = math.inf


@dataclass(frozen=True)
class ConstIntBound:
    """min_value <= x <= max_value for every value x of an expression.

    Example:
        >>> b = ConstIntBound(0, 15)
        >>> b.max_value - b.min_value
        15
    """

    min_value: int | float
    max_value: int | float

    def is_const(self) -> bool:
        return self.min_value == self.max_value

    def is_everything(self) -> bool:
        return self.min_value == -INF and self.max_value == INF

    def __repr__(self):
        return f"ConstIntBound[{self.min_value}, {self.max_value}]"


EVERYTHING = (-INF, INF)


def dtype_bound(dtype: str) -> tuple:
    """What a value of dtype can hold; int32/int64 count as unbounded (indices never wrap)."""
    base = dt.element_of(dtype)
    if base == "bool":
        return (0, 1)
    if base.startswith("uint"):
        return (0, (1 << dt.bits_of(base)) - 1)
    if base in ("int8", "int16"):
        bits = dt.bits_of(base)
        return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return EVERYTHING


def add(a, b):
    return (a[0] + b[0], a[1] + b[1])


def neg(a):
    return (-a[1], -a[0])


def _mul1(x, y):
    if x == 0 or y == 0:
        return 0
    return x * y


def mul(a, b):
    c = (_mul1(a[0], b[0]), _mul1(a[0], b[1]), _mul1(a[1], b[0]), _mul1(a[1], b[1]))
    return (min(c), max(c))


def scale(a, k: int):
    if k >= 0:
        return (_mul1(a[0], k), _mul1(a[1], k))
    return (_mul1(a[1], k), _mul1(a[0], k))


def union(a, b):
    return (min(a[0], b[0]), max(a[1], b[1]))


def intersect(a, b):
    return (max(a[0], b[0]), min(a[1], b[1]))


def _floor_q(x, y):
    """floor(x / y) for y > 0, either possibly infinite (the corner values of a division)."""
    if y == INF:
        return 0 if x >= 0 else -1
    if x in (INF, -INF):
        return x
    return x // y


def _trunc_q(x, y):
    if y == INF:
        return 0
    if x in (INF, -INF):
        return x
    q = abs(x) // y
    return q if x >= 0 else -q


def _nonzero(b):
    """A divisor's bounds without 0, which it cannot be (x / 0 is undefined): a symbolic size
    in [0, n] divides as one in [1, n]."""
    return (1, b[1]) if b[0] == 0 and b[1] > 0 else b


def _divide(a, b, q):
    b = _nonzero(b)
    if b[0] > 0:
        pass
    elif b[1] < 0:
        a, b = neg(a), neg(b)
    else:
        return EVERYTHING
    c = (q(a[0], b[0]), q(a[0], b[1]), q(a[1], b[0]), q(a[1], b[1]))
    return (min(c), max(c))


def floordiv(a, b):
    """Bounds of floordiv(x, y) for x in a, y in b."""
    return _divide(a, b, _floor_q)


def truncdiv(a, b):
    return _divide(a, b, _trunc_q)


def floormod(a, b):
    """Bounds of floormod(x, y) for x in a, y in b."""
    b = _nonzero(b)
    if b[0] > 0:
        if 0 <= a[0] and a[1] < b[0]:
            return a
        if b[0] == b[1] and a[0] != -INF and a[1] != INF and a[0] // b[0] == a[1] // b[0]:
            return (a[0] % b[0], a[1] % b[0])
        hi = b[1] - 1
        if a[0] >= 0:
            hi = min(hi, a[1])
        return (0, hi)
    if b[1] < 0:
        return (b[0] + 1, 0)
    return EVERYTHING


def truncmod(a, b):
    if b[1] < 0:
        b = neg(b)
    if b[0] <= 0:
        return EVERYTHING
    if a[0] >= 0:
        return floormod(a, b)
    if a[1] <= 0:
        return neg(floormod(neg(a), b))
    return (max(a[0], 1 - b[1]), min(a[1], b[1] - 1))


def to_bound(a) -> ConstIntBound:
    return ConstIntBound(a[0], a[1])
