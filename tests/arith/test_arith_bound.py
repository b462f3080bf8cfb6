"""const_int_bound cases, and the bounds' agreement with exhaustive evaluation."""
import math
import os
import sys

import numpy as np

from kiln.arith import Analyzer, ConstIntBound
from kiln.tir import Cast, SizeVar, Var, if_then_else, select
from kiln.tir import op

sys.path.insert(0, os.path.dirname(__file__))
from arith_eval import evaluate  # noqa: E402


def test_affine_and_products():
    i, j = Var("i"), Var("j")
    ana = Analyzer()
    ana.bind(i, (0, 7))
    ana.bind(j, (-2, 3))
    assert ana.const_int_bound(i * 4 + j) == ConstIntBound(-2, 31)
    assert ana.const_int_bound(i - j) == ConstIntBound(-3, 9)
    assert ana.const_int_bound(i * j) == ConstIntBound(-14, 21)
    # Cancellation is seen through the canonical form.
    assert ana.const_int_bound(i * 3 - i * 3 + 1) == ConstIntBound(1, 1)


def test_unbounded_vars_use_infinity():
    x = Var("x")
    b = Analyzer().const_int_bound(x + 1)
    assert b.min_value == -math.inf and b.max_value == math.inf
    assert Analyzer().const_int_bound(SizeVar("n")) == ConstIntBound(0, math.inf)
    assert Analyzer().const_int_bound(Var("u", "uint8")) == ConstIntBound(0, 255)
    assert Analyzer().const_int_bound(Cast("int8", x)) == ConstIntBound(-128, 127)


def test_division_remainder_min_max_select():
    i, x = Var("i"), Var("x")
    ana = Analyzer()
    ana.bind(i, (0, 63))
    assert ana.const_int_bound(i // 8) == ConstIntBound(0, 7)
    assert ana.const_int_bound(i % 8) == ConstIntBound(0, 7)
    assert ana.const_int_bound(x % 8) == ConstIntBound(0, 7)
    assert ana.const_int_bound((i - 70) // 8) == ConstIntBound(-9, -1)
    assert ana.const_int_bound(op.truncdiv(i - 70, 8)) == ConstIntBound(-8, 0)
    assert ana.const_int_bound(op.truncmod(i - 70, 8)) == ConstIntBound(-7, 0)
    assert ana.const_int_bound(op.min_(i, 10)) == ConstIntBound(0, 10)
    assert ana.const_int_bound(op.max_(i, 10)) == ConstIntBound(10, 63)
    assert ana.const_int_bound(select(x < 0, i, 100)) == ConstIntBound(0, 100)
    assert ana.const_int_bound(if_then_else(x < 0, i - 5, i)) == ConstIntBound(-5, 63)
    assert ana.const_int_bound(i < 3) == ConstIntBound(0, 1)


def test_paired_divisions_are_bounded_together():
    n = Var("n")
    ana = Analyzer()
    assert ana.const_int_bound((n + 31) // 32 - n // 32) == ConstIntBound(0, 1)
    assert ana.const_int_bound((n + 64) // 32 - n // 32) == ConstIntBound(2, 2)


def test_bounds_contain_every_value():
    i, j = Var("i"), Var("j")
    exprs = [i * 3 - j, (i * 5 + j) // 7, (i - j) % 6, op.min_(i, j) * 2 - op.max_(i, 4),
             op.truncdiv(i - j * 3, 4), op.truncmod(i * 2 - 9, 5), select(i < j, i, j + 1)]
    ana = Analyzer()
    ana.bind(i, (0, 12))
    ana.bind(j, (-4, 5))
    for e in exprs:
        b = ana.const_int_bound(e)
        values = np.array([evaluate(e, {i: a, j: c}) for a in range(0, 13) for c in range(-4, 6)])
        # Tolerance: exact integers; the bound must contain the observed range.
        assert b.min_value <= values.min() and values.max() <= b.max_value, (e, b)


def test_unsigned_wrap_around_is_respected():
    x = Var("x", "uint32")
    ana = Analyzer()
    ana.bind(x, (0, 3))
    # x - 1 wraps for x == 0: nothing below the type's range is claimed.
    assert ana.const_int_bound(x - 1) == ConstIntBound(0, 2**32 - 1)
    assert not ana.can_prove(x - 1 < 5)
    assert ana.can_prove(x < 5)
    assert ana.simplify(x // 4).value == 0
