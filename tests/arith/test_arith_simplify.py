"""Structural checks of Analyzer.simplify: the result is the identical (hash-consed) node."""
import pytest

from kiln.arith import Analyzer, simplify
from kiln.tir import (LT, Broadcast, Buffer, BufferLoad, Cast, FloorDiv, FloorMod, IntImm, Max, Min,
                      Ramp, Range, SizeVar, Var, const, if_then_else, likely, select)
from kiln.tir import op


@pytest.fixture
def v():
    return {name: Var(name) for name in ("i", "j", "k", "x", "y", "n", "m", "f", "fo", "fi")}


def bound(ana, var, lo, hi):
    ana.bind(var, (lo, hi))
    return ana


# ------------------------------------------------------------------ canonical sums
def test_like_terms_collect_and_order_is_stable(v):
    i, j = v["i"], v["j"]
    a = simplify(j + i * 2 + 3 + i * 2 - 1)
    b = simplify(2 + i * 4 + j)
    assert a is b
    assert a is i * 4 + j + 2
    assert simplify(i - i) is const(0)
    assert simplify((i + j) * 3 - j * 3) is i * 3


def test_conv_index_expands_to_one_affine_form(v):
    yo, yi, ry = Var("yo"), Var("yi"), Var("ry")
    e = ((yo * 4 + yi) * 2 + ry - 1) * 58
    assert simplify(e) is yo * 464 + yi * 116 + ry * 58 - 58


def test_symbolic_strides_distribute(v):
    i, j, n = v["i"], v["j"], v["n"]
    assert simplify((i * n + j) * 4 - j * 4) is simplify(i * n * 4)
    assert simplify(n * i + j) is simplify(j + i * n)


def test_commuted_operands_meet(v):
    x, y = v["x"], v["y"]
    assert simplify(x + y) is simplify(y + x)
    assert simplify(x * y) is simplify(y * x)
    assert simplify(op.min_(x, y)) is simplify(op.min_(y, x))


def test_floats_fold_but_do_not_reassociate():
    a = Var("a", "float32")
    assert simplify(const(1.5) + const(2.0)) is const(3.5)
    e = (a + 1.0) + 2.0
    assert simplify(e) is e
    assert simplify(a * 1.0 - 0.0) is a * 1.0 - 0.0


# ------------------------------------------------------------------ division and remainder
def test_split_of_a_fused_index(v):
    fo, fi = v["fo"], v["fi"]
    ana = bound(bound(Analyzer(), fi, 0, 3), fo, 0, 63)
    assert ana.simplify((fo * 4 + fi) // 16) is FloorDiv(fo, const(4))
    assert ana.simplify((fo * 4 + fi) % 16) is FloorMod(fo, const(4)) * 4 + fi
    f = fo * 4 + fi
    assert ana.simplify((f // 16) * 16 + f % 16) is fo * 4 + fi


def test_div_mod_removed_by_bounds(v):
    i, j = v["i"], v["j"]
    ana = bound(Analyzer(), j, 0, 3)
    assert ana.simplify((i * 4 + j) // 4) is i
    assert ana.simplify((i * 4 + j) % 4) is j
    assert ana.simplify((i * 8 + j + 4) // 8) is i
    assert ana.simplify(j // 4) is const(0)
    assert ana.simplify(j % 4) is j


def test_div_mod_pairs_fuse(v):
    x = v["x"]
    assert simplify((x // 8) * 8 + x % 8) is x
    assert simplify(x - (x // 8) * 8) is FloorMod(x, const(8))
    assert simplify((x // 8) * 8 - x) is simplify(-FloorMod(x, const(8)))
    assert simplify((x + 3) // 4 * 4 + (x + 3) % 4) is x + 3


def test_nested_div_mod(v):
    x = v["x"]
    assert simplify(x % 8 % 4) is FloorMod(x, const(4))
    assert simplify(x // 4 // 8) is FloorDiv(x, const(32))
    assert simplify((x * 32 + v["y"]) // 16) is x * 2 + FloorDiv(v["y"], const(16))
    assert simplify((x * 2 + 1) // 4) is FloorDiv(x, const(2))
    assert simplify((x * 2 + 1) % 4) is FloorMod(x, const(2)) * 2 + 1


def test_truncating_div_mod_on_non_negative_operands(v):
    i, j = v["i"], v["j"]
    ana = bound(bound(Analyzer(), i, 0, 100), j, 0, 3)
    assert ana.simplify(op.truncdiv(i * 4 + j, 4)) is i
    assert ana.simplify(op.truncmod(i * 4 + j, 4)) is j
    # Sign unknown: stays a truncating division.
    x = v["x"]
    e = simplify(op.truncdiv(x, 4))
    assert type(e).__name__ == "Div"


def test_symbolic_divisor(v):
    i, j, n = v["i"], v["j"], v["n"]
    ana = Analyzer()
    ana.bind(n, (1, None))
    ana.bind(j, Range(const(0), n))
    assert ana.simplify((i * n + j) // n) is i
    assert ana.simplify((i * n + j) % n) is j


def test_negative_constants_in_division(v):
    x = v["x"]
    assert simplify((x - 1) // 4) is FloorDiv(x + 3, const(4)) - 1
    assert simplify(FloorDiv(const(-7), const(2))) is const(-4)
    assert simplify(op.truncdiv(const(-7), const(2))) is const(-3)
    assert simplify(op.truncmod(const(-7), const(2))) is const(-1)


# ------------------------------------------------------------------ min / max
def test_min_max_rules(v):
    x, y = v["x"], v["y"]
    assert simplify(op.min_(x + 3, x + 1)) is x + 1
    assert simplify(op.max_(x + 3, x + 1)) is x + 3
    assert simplify(op.max_(op.max_(x, 3), 5)) is Max(x, const(5))
    assert simplify(op.min_(op.min_(x, 3), op.min_(5, y))) is simplify(Min(Min(x, y), const(3)))
    assert simplify(op.min_(x, op.max_(x, y))) is x
    assert simplify(op.max_(x, op.min_(x, y))) is x
    assert simplify(op.min_(x + 2, y + 2)) is Min(x, y) + 2


def test_min_max_decided_by_bounds(v):
    i = v["i"]
    ana = bound(Analyzer(), i, 0, 15)
    assert ana.simplify(op.min_(i, 16)) is i
    assert ana.simplify(op.max_(i, 0)) is i
    assert ana.simplify(op.min_(op.max_(i, 20), 3)) is const(3)


def test_floordiv_distributes_over_min_and_max(v):
    """The tile of a clamped index: min(4*t + 3, 13) // 4 is min(t, 3), which a bound on t
    folds to t (a Winograd tile's rows at a cut edge)."""
    t, x = v["i"], v["x"]
    assert simplify(op.floordiv(op.min_(t * 4 + 3, 13), 4)) is simplify(Min(t, const(3)))
    assert simplify(op.floordiv(op.max_(x, 2), 2)) is simplify(Max(op.floordiv(x, 2), const(1)))
    ana = bound(Analyzer(), t, 0, 3)
    assert ana.simplify(op.floordiv(op.min_(t * 4 + 3, 13), 4) - t) is const(0)


# ------------------------------------------------------------------ comparisons and logic
def test_comparisons_are_moved_to_canonical_form(v):
    x, n = v["x"], v["n"]
    assert simplify(x * 4 < 8) is (x < 2)
    assert simplify(x <= n) is (x < n + 1)
    assert simplify(x + 3 < n) is (x < n - 3)
    assert simplify(n > x + 3) is (x < n - 3)
    assert simplify(x * 2 == 3) is const(False)
    assert simplify(x * 2 == 4) is (x == 2)
    assert simplify(x != x) is const(False)


def test_comparisons_decided_by_bounds(v):
    i = v["i"]
    ana = bound(Analyzer(), i, 0, 31)
    assert ana.simplify(i < 32) is const(True)
    assert ana.simplify(i >= 32) is const(False)
    assert ana.simplify(i == -1) is const(False)
    assert ana.simplify(i < 31) is (i < 31)


def test_likely_keeps_its_wrapper_unless_decided(v):
    io, ii, n = Var("io"), Var("ii"), v["n"]
    ana = bound(bound(Analyzer(), ii, 0, 31), io, 0, 7)
    assert ana.simplify(likely(io * 32 + ii < 256)) is const(True)
    kept = ana.simplify(likely(io * 32 + ii < n))
    assert kept is likely(io * 32 + ii < n)


def test_and_or_not(v):
    x = v["x"]
    assert simplify((x < 5) & (x < 3)) is (x < 3)
    assert simplify((x < 5) | (x < 3)) is (x < 5)
    assert simplify((x < 5) & (x >= 5)) is const(False)
    assert simplify((x < 5) | (x >= 5)) is const(True)
    assert simplify(~(x < 5)) is LT(const(4), x)
    assert simplify(~~(x == 2)) is (x == 2)
    assert simplify((x == 2) & (x != 2)) is const(False)


def test_select_and_if_then_else(v):
    x, y = v["x"], v["y"]
    ana = bound(Analyzer(), x, 0, 9)
    assert ana.simplify(select(x < 10, x, y)) is x
    assert ana.simplify(if_then_else(x >= 10, y, x + 1)) is x + 1
    assert ana.simplify(select(y < 3, x, x)) is x
    # Inside the true branch the condition is known.
    e = ana.simplify(if_then_else(y < 3, op.min_(y, 5), 0))
    assert e is if_then_else(y < 3, y, 0)


def test_cast_of_constants_and_round_trip(v):
    x = v["x"]
    assert simplify(Cast("int64", const(3))) is IntImm("int64", 3)
    assert simplify(Cast("float32", const(2))) is const(2.0)
    assert simplify(Cast("int32", Cast("int64", x))) is x


# ------------------------------------------------------------------ vectors
def test_ramp_broadcast_arithmetic(v):
    x = v["x"]
    r = Ramp(x * 4, const(1), 4)
    assert simplify(r + Broadcast(const(3), 4)) is Ramp(x * 4 + 3, const(1), 4)
    assert simplify(r * Broadcast(const(2), 4)) is Ramp(x * 8, const(2), 4)
    assert simplify(Broadcast(x, 4) + Broadcast(const(1), 4)) is Broadcast(x + 1, 4)
    assert simplify(r - r) is Broadcast(const(0), 4)
    assert simplify(FloorDiv(r, Broadcast(const(4), 4))) is Broadcast(x, 4)
    assert simplify(FloorMod(r, Broadcast(const(4), 4))) is Ramp(const(0), const(1), 4)
    assert simplify(FloorDiv(Ramp(x, const(8), 4), Broadcast(const(4), 4))) is \
        Ramp(FloorDiv(x, const(4)), const(2), 4)


def test_loads_and_lets_are_simplified_inside():
    A = Buffer.make("A", "float32", (64,))
    i = Var("i")
    assert simplify(BufferLoad(A, i * 2 + i - i * 3 + 5)) is BufferLoad(A, const(5))
    t = Var("t")
    from kiln.tir import Let
    assert simplify(Let(t, const(3), t * 2)) is const(6)


def test_size_vars_are_non_negative():
    n = SizeVar("n")
    assert simplify(n >= 0) is const(True)
    assert simplify(op.max_(n, 0)) is n
