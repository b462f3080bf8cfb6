"""Lane-wise rules for vectors made of Ramp and Broadcast (vectorized index arithmetic).

    ramp(a, s, n) + x n(b)   -> ramp(a + b, s, n)
    ramp(a, s, n) * x n(c)   -> ramp(a*c, s*c, n)
    ramp(a, s, n) // x n(c)  -> x n(a // c)       when the n lanes stay in one block of c
    ramp(a, s, n) % x n(c)   -> ramp(a % c, s, n)  (same condition)
"""
from __future__ import annotations

from ..tir.expr import Add, Broadcast, FloorDiv, FloorMod, IntImm, Mul, Ramp, Sub


def make_ramp(base, stride, lanes: int):
    if isinstance(stride, IntImm) and stride.value == 0:
        return Broadcast(base, lanes)
    return Ramp(base, stride, lanes)


def _neg(rw, x):
    return rw.simplify(Sub(IntImm(x.dtype, 0), x)) if x.dtype != "bool" else x


def arith(rw, cls, a, b):
    """Add/Sub/Mul of two simplified vectors."""
    s = rw.simplify
    if isinstance(a, Broadcast) and isinstance(b, Broadcast):
        return Broadcast(s(cls(a.value, b.value)), a.lanes)
    ra, rb = isinstance(a, Ramp), isinstance(b, Ramp)
    ba, bb = isinstance(a, Broadcast), isinstance(b, Broadcast)
    if cls is Add:
        if ra and bb:
            return make_ramp(s(Add(a.base, b.value)), a.stride, a.lanes)
        if ba and rb:
            return make_ramp(s(Add(a.value, b.base)), b.stride, b.lanes)
        if ra and rb:
            return make_ramp(s(Add(a.base, b.base)), s(Add(a.stride, b.stride)), a.lanes)
    elif cls is Sub:
        if ra and bb:
            return make_ramp(s(Sub(a.base, b.value)), a.stride, a.lanes)
        if ba and rb:
            return make_ramp(s(Sub(a.value, b.base)), _neg(rw, b.stride), b.lanes)
        if ra and rb:
            return make_ramp(s(Sub(a.base, b.base)), s(Sub(a.stride, b.stride)), a.lanes)
    elif cls is Mul:
        if ra and bb:
            return make_ramp(s(Mul(a.base, b.value)), s(Mul(a.stride, b.value)), a.lanes)
        if ba and rb:
            return make_ramp(s(Mul(a.value, b.base)), s(Mul(a.value, b.stride)), b.lanes)
    return cls(a, b)


def divmod_rule(rw, cls, a, b):
    """FloorDiv/FloorMod of simplified vectors."""
    s = rw.simplify
    if isinstance(a, Broadcast) and isinstance(b, Broadcast):
        return Broadcast(s(cls(a.value, b.value)), a.lanes)
    if isinstance(a, Ramp) and isinstance(b, Broadcast) and isinstance(b.value, IntImm) \
            and b.value.value > 0 and isinstance(a.stride, IntImm):
        c, stride, lanes = b.value, a.stride.value, a.lanes
        if stride % c.value == 0:
            if cls is FloorDiv:
                return make_ramp(s(FloorDiv(a.base, c)), IntImm(c.dtype, stride // c.value), lanes)
            return Broadcast(s(FloorMod(a.base, c)), lanes)
        if stride > 0:
            rem = s(FloorMod(a.base, c))
            if rw.bound(rem)[1] + stride * (lanes - 1) < c.value:
                if cls is FloorDiv:
                    return Broadcast(s(FloorDiv(a.base, c)), lanes)
                return Ramp(rem, a.stride, lanes)
    return cls(a, b)
