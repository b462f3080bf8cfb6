"""Property: simplify never changes the value of an integer expression over bounded variables.

Expressions are random trees of +, -, *, floordiv/floormod/truncdiv/truncmod by constants and by
a positive variable, min/max, select/if_then_else, comparisons and logic. Each is evaluated
before and after simplification (arith_eval.py: floor semantics for FloorDiv/FloorMod, C
truncation for Div/Mod) at sampled points of the domain; values must be equal exactly.
"""
import os
import sys

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kiln.arith import Analyzer
from kiln.tir import Var, const, if_then_else, select
from kiln.tir import op

sys.path.insert(0, os.path.dirname(__file__))
from arith_eval import evaluate  # noqa: E402

X, Y, Z = Var("x"), Var("y"), Var("z")
BOUNDS = {X: (0, 15), Y: (-8, 8), Z: (1, 6)}

leaves = st.one_of(st.sampled_from([X, Y, Z]), st.integers(-10, 10).map(const))
divisors = st.sampled_from([2, 3, 4, 8, 16, -4])


def _extend(children):
    pair = st.tuples(children, children)
    return st.one_of(
        pair.map(lambda t: t[0] + t[1]),
        pair.map(lambda t: t[0] - t[1]),
        st.tuples(children, st.integers(-4, 8)).map(lambda t: t[0] * t[1]),
        st.tuples(children, children).map(lambda t: t[0] * t[1]),
        st.tuples(children, divisors).map(lambda t: op.floordiv(t[0], t[1])),
        st.tuples(children, divisors).map(lambda t: op.floormod(t[0], t[1])),
        st.tuples(children, st.sampled_from([2, 3, 4, -3])).map(lambda t: op.truncdiv(t[0], t[1])),
        st.tuples(children, st.sampled_from([2, 3, 4, -3])).map(lambda t: op.truncmod(t[0], t[1])),
        children.map(lambda a: op.floordiv(a, Z)),
        children.map(lambda a: op.floormod(a, Z)),
        pair.map(lambda t: op.min_(t[0], t[1])),
        pair.map(lambda t: op.max_(t[0], t[1])),
        st.tuples(children, children, children, children).map(
            lambda t: select(t[0] < t[1], t[2], t[3])),
        st.tuples(children, children, children, children).map(
            lambda t: if_then_else(t[0] >= t[1], t[2], t[3])),
        st.tuples(children, st.integers(1, 8), st.integers(0, 7)).map(
            lambda t: t[0] * t[1] + t[2]),
    )


int_exprs = st.recursive(leaves, _extend, max_leaves=12)

_COMPARE = [lambda a, b: a < b, lambda a, b: a <= b, lambda a, b: a > b,
            lambda a, b: a >= b, lambda a, b: a == b, lambda a, b: a != b]
atoms = st.tuples(int_exprs, int_exprs, st.sampled_from(_COMPARE)).map(lambda t: t[2](t[0], t[1]))
bool_exprs = st.recursive(atoms, lambda c: st.one_of(
    st.tuples(c, c).map(lambda t: t[0] & t[1]),
    st.tuples(c, c).map(lambda t: t[0] | t[1]),
    c.map(lambda a: ~a)), max_leaves=4)

points = st.lists(st.tuples(st.integers(0, 15), st.integers(-8, 8), st.integers(1, 6)),
                  min_size=12, max_size=12)


def _check(expr, pts):
    ana = Analyzer()
    for v, b in BOUNDS.items():
        ana.bind(v, b)
    simplified = ana.simplify(expr)
    for x, y, z in pts:
        env = {X: x, Y: y, Z: z}
        try:
            want = evaluate(expr, env)
        except ZeroDivisionError:
            continue
        got = evaluate(simplified, env)
        assert int(got) == int(want), f"{expr}  =>  {simplified}  at {env}: {want} != {got}"
    # Simplifying again changes nothing.
    assert ana.simplify(simplified) is simplified


_SETTINGS = settings(max_examples=300, deadline=None, derandomize=True,
                     suppress_health_check=[HealthCheck.too_slow])


@_SETTINGS
@given(int_exprs, points)
def test_simplify_preserves_integer_values(expr, pts):
    _check(expr, pts)


@_SETTINGS
@given(bool_exprs, points)
def test_simplify_preserves_conditions(expr, pts):
    _check(expr, pts)
