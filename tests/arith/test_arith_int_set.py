"""eval_set, IntervalSet, union and intersect."""
import pytest

from kiln.arith import Analyzer, IntervalSet, eval_set, intersect, union
from kiln.tir import Range, SizeVar, Var, const, if_then_else, select
from kiln.tir import op


def test_affine_is_exact_with_signs():
    i, j, n = Var("i"), Var("j"), Var("n")
    s = eval_set(i * 4 - j + n, {i: IntervalSet(0, 7), j: IntervalSet(0, 3)})
    assert s.min_value is n - 3 and s.max_value is n + 28


def test_symbolic_domains():
    i, n = Var("i"), Var("n")
    s = eval_set(i * 2 + 1, {i: IntervalSet.from_range(Range(const(0), n))})
    assert s.min_value is const(1)
    assert s.max_value is n * 2 - 1
    # Coefficient with unknown sign: min/max of the two ends.
    m = Var("m")
    s = eval_set(i * m, {i: IntervalSet(0, 4)})
    assert s.min_value is Analyzer().simplify(op.min_(m * 4, 0))


def test_conv_window_relaxation():
    yo, yi, ry = Var("yo"), Var("yi"), Var("ry")
    idx = (yo * 4 + yi) * 2 + ry - 1
    s = eval_set(idx, {yi: IntervalSet(0, 3), ry: IntervalSet(0, 2)})
    assert s.min_value is yo * 8 - 1
    assert s.max_value is yo * 8 + 7
    assert s.to_range().extent is const(9)


def test_div_mod_min_max():
    i, n = Var("i"), Var("n")
    dom = {i: IntervalSet(0, 63)}
    s = eval_set(i // 8, dom)
    assert (s.min_value, s.max_value) == (const(0), const(7))
    s = eval_set(i % 16, {i: IntervalSet(0, 9)})
    assert (s.min_value, s.max_value) == (const(0), const(9))
    s = eval_set(i % 16, dom)
    assert (s.min_value, s.max_value) == (const(0), const(15))
    s = eval_set(op.min_(i, n), dom)
    assert s.min_value is Analyzer().simplify(op.min_(n, 0))
    assert s.max_value is Analyzer().simplify(op.min_(n, 63))


def test_select_is_union_and_unknown_is_everything():
    i, x = Var("i"), Var("x")
    dom = {i: IntervalSet(0, 9)}
    s = eval_set(select(x < 0, i, i + 20), dom)
    assert (s.min_value, s.max_value) == (const(0), const(29))
    s = eval_set(if_then_else(x < 0, i, 5), dom)
    assert (s.min_value, s.max_value) == (const(0), const(9))
    from kiln.tir import Buffer, BufferLoad
    A = Buffer.make("A", "int32", (10,))
    assert eval_set(BufferLoad(A, i), dom).is_everything()
    assert eval_set(i + 1, {i: IntervalSet.everything()}).is_everything()


def test_vars_outside_dom_stay_points():
    x = Var("x")
    s = eval_set(x * 2, {})
    assert s.is_single_point() and s.min_value is x * 2


def test_union_intersect_and_ranges():
    n = SizeVar("n")
    a, b = IntervalSet(0, 3), IntervalSet(2, 9)
    u, k = union([a, b]), intersect(a, b)
    assert (u.min_value, u.max_value) == (const(0), const(9))
    assert (k.min_value, k.max_value) == (const(2), const(3))
    s = union([IntervalSet(0, n), IntervalSet(n, n + 4)])
    assert s.min_value is const(0) and s.max_value is n + 4
    r = IntervalSet(1, n).to_range()
    assert r.min is const(1) and r.extent is n
    assert IntervalSet.single_point(n).is_single_point()
    assert IntervalSet.everything().is_everything()
    with pytest.raises(TypeError, match="unbounded"):
        IntervalSet(0, None).to_range()


def test_bad_domain_is_named():
    i = Var("i")
    with pytest.raises(TypeError, match="domain of i"):
        eval_set(i, {i: "0..3"})
