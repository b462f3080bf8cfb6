"""Analyzer: bindings, scopes, constraints and proofs."""
import math

import pytest

from kiln.arith import Analyzer, ConstIntBound, IntervalSet
from kiln.tir import IRError, Range, SizeVar, Var, const
from kiln.tir import op


def test_bind_forms():
    i, j, k, m, n = (Var(c) for c in "ijkmn")
    ana = Analyzer()
    ana.bind(i, Range(const(2), const(4)))
    ana.bind(j, (0, 9))
    ana.bind(k, IntervalSet(-3, 3))
    ana.bind(m, (0, math.inf))
    ana.bind(n, const(7))
    assert ana.const_int_bound(i) == ConstIntBound(2, 5)
    assert ana.const_int_bound(j) == ConstIntBound(0, 9)
    assert ana.const_int_bound(k) == ConstIntBound(-3, 3)
    assert ana.const_int_bound(m) == ConstIntBound(0, math.inf)
    assert ana.const_int_bound(n) == ConstIntBound(7, 7)
    with pytest.raises(IRError, match="Range, an IntervalSet"):
        ana.bind(i, "zero to four")
    with pytest.raises(IRError, match="needs a Var"):
        ana.bind(const(1), (0, 1))


def test_rebinding_replaces_and_clears_the_memo():
    i = Var("i")
    ana = Analyzer()
    ana.bind(i, (0, 3))
    assert ana.simplify(i < 4) is const(True)
    ana.bind(i, (0, 7))
    assert ana.simplify(i < 4) is (i < 4)


def test_scope_forgets():
    i = Var("i")
    ana = Analyzer()
    with ana.scope():
        ana.bind(i, (0, 3))
        assert ana.can_prove(i < 4)
    assert not ana.can_prove(i < 4)


def test_constraint_symbolic():
    i, n = Var("i"), Var("n")
    ana = Analyzer()
    with ana.constraint(i < n - 3):
        assert ana.can_prove(i + 3 < n)
        assert ana.can_prove(i < n)
        assert not ana.can_prove(i + 4 < n)
        assert ana.simplify(op.min_(i + 3, n)) is i + 3
    assert not ana.can_prove(i + 3 < n)


def test_constraint_constant_and_conjunction():
    i = Var("i")
    ana = Analyzer()
    ana.bind(i, (0, 100))
    with ana.constraint((i >= 10) & (i < 20)):
        assert ana.const_int_bound(i) == ConstIntBound(10, 19)
        assert ana.simplify((i - 10) // 10) is const(0)
    with ana.constraint(~(i < 50)):
        assert ana.can_prove(i >= 50)


def test_constraint_on_opaque_condition():
    from kiln.tir import Buffer, BufferLoad
    M = Buffer.make("M", "bool", (8,))
    i = Var("i")
    c = BufferLoad(M, i)
    ana = Analyzer()
    with ana.constraint(c):
        assert ana.can_prove(c)
        assert ana.simplify(~c) is const(False)
    assert not ana.can_prove(c)


def test_split_loop_guard_is_proved_in_the_main_range():
    n = SizeVar("n")
    io, ii = Var("io"), Var("ii")
    ana = Analyzer()
    ana.bind(io, Range(const(0), n // 32))
    ana.bind(ii, Range(const(0), const(32)))
    assert ana.can_prove(io * 32 + ii < n)
    ana2 = Analyzer()
    ana2.bind(io, Range(const(0), (n + 31) // 32))
    ana2.bind(ii, Range(const(0), const(32)))
    assert not ana2.can_prove(io * 32 + ii < n)


def test_tail_range_with_min_extent():
    n = SizeVar("n")
    io, ii = Var("io"), Var("ii")
    ana = Analyzer()
    ana.bind(io, Range(n // 32, (n + 31) // 32 - n // 32))
    ana.bind(ii, Range(const(0), op.min_(n - io * 32, 32)))
    assert ana.can_prove(io * 32 + ii < n)
    assert ana.simplify(op.min_(n - io * 32, 32)) is n - io * 32


def test_can_prove_equal():
    x, y = Var("x"), Var("y")
    ana = Analyzer()
    assert ana.can_prove_equal(x * 2 + y - x, x + y)
    assert not ana.can_prove_equal(x, y)
    a = Var("a", "float32")
    assert ana.can_prove_equal(a + 1.0, a + 1.0)


def test_constraint_needs_a_condition():
    x = Var("x")
    with pytest.raises(IRError, match="boolean condition"):
        with Analyzer().constraint(x + 1):
            pass
