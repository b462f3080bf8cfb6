"""EliminateCommonSubexpr and DeadCodeElimination (Before → Expected)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.graph import (Call, ExprMutator, Function, If, Let, Tuple, TupleGetItem, call, const,
                        post_order, structural_equal, var)
from kiln.graph.transform import dead_code_elimination, eliminate_common_subexpr, fold_constant


def _check(fn, before, expected):
    after = fn(before)
    assert structural_equal(after, expected), f"got\n{after}\nexpected\n{expected}"
    return after


def test_cse_merges_same_op_attrs_and_args():
    x = var("x", (2, 6))
    a1 = call("reshape", call("exp", x), newshape=(3, 4))
    a2 = call("reshape", call("exp", x), newshape=(3, 4))
    a3 = call("reshape", call("exp", x), newshape=(4, 3))     # other attrs: kept apart
    before = Function([x], Tuple([call("add", a1, a2), a3]))
    e = call("exp", x)
    r = call("reshape", e, newshape=(3, 4))
    expected = Function([x], Tuple([call("add", r, r), call("reshape", e, newshape=(4, 3))]))
    after = _check(eliminate_common_subexpr, before, expected)
    assert sum(1 for n in post_order(after) if getattr(n, "op", None) is e.op) == 1


def test_cse_merges_small_equal_constants_tuples_and_projections():
    x = var("x", (3,))
    t1 = call("split", x, indices_or_sections=3)
    t2 = call("split", x, indices_or_sections=3)
    before = Function([x], call("add", call("multiply", TupleGetItem(t1, 0), const(np.float32(2))),
                                call("multiply", TupleGetItem(t2, 0), const(np.float32(2)))))
    g = TupleGetItem(call("split", x, indices_or_sections=3), 0)
    m = call("multiply", g, const(np.float32(2)))
    _check(eliminate_common_subexpr, before, Function([x], call("add", m, m)))
    different = Function([x], call("add", call("multiply", x, const(np.float32(2))),
                                   call("multiply", x, const(np.float32(3)))))
    assert eliminate_common_subexpr(different) is different


def test_cse_skip():
    x = var("x", (3,))
    before = Function([x], call("add", call("exp", x), call("exp", x)))
    after = eliminate_common_subexpr(before, skip=lambda c: c.op.name == "exp")
    assert after is before


def test_dce_removes_unused_lets_and_constant_ifs():
    x = var("x", (3,))
    v1, v2 = var("v1", (3,)), var("v2", (3,))
    used = var("used", (3,))
    body = Let(v1, call("exp", x), Let(v2, call("tanh", v1),
                                       Let(used, call("negative", x), call("add", used, x))))
    _check(dead_code_elimination, Function([x], body),
           Function([x], Let(used, call("negative", x), call("add", used, x))))
    branch = If(const(np.bool_(True)), call("exp", x), call("tanh", x))
    _check(dead_code_elimination, Function([x], branch), Function([x], call("exp", x)))


def test_dce_turns_partly_used_split_into_slices():
    x = var("x", (6, 4))
    parts = call("split", x, indices_or_sections=(1, 4), axis=0)
    before = Function([x], call("add", TupleGetItem(parts, 2), TupleGetItem(parts, 2)))
    expected = Function([x], call("add", *[call("strided_slice", x, begin=(4,), end=(6,),
                                                strides=(1,), axes=(0,))] * 2))
    after = dead_code_elimination(before)
    assert after.checked_type == before.checked_type
    # both projections become slices of the same extent (CSE would merge them)
    assert structural_equal(eliminate_common_subexpr(after), eliminate_common_subexpr(expected))
    all_used = Function([x], Tuple([TupleGetItem(parts, k) for k in range(3)]))
    assert dead_code_elimination(all_used) is all_used
    projected = Function([x], TupleGetItem(Tuple([call("exp", x), call("tanh", x)]), 1))
    _check(dead_code_elimination, projected, Function([x], call("tanh", x)))


_UNARY = ("negative", "abs", "nn.relu")
_BINARY = ("add", "subtract", "multiply", "maximum")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_UNARY + _BINARY), st.integers(0, 1 << 16),
                          st.integers(0, 1 << 16)), min_size=1, max_size=25))
def test_cse_random_dags(program):
    """Random DAGs built with repeated sub-expressions: after CSE no two calls are equal, and the
    value is unchanged (both folded with numpy)."""
    x = var("x", (4,))
    nodes = [x]
    for name, i, j in program:
        a, b = nodes[i % len(nodes)], nodes[j % len(nodes)]
        nodes.append(call(name, a) if name in _UNARY else call(name, a, b))
    before = Function([x], Tuple(nodes[1:]))
    after = eliminate_common_subexpr(before)
    keys = [(n.op.name, tuple(id(a) for a in n.args)) for n in post_order(after) if isinstance(n, Call)]
    assert len(keys) == len(set(keys))
    data = np.array([-2.0, -0.5, 1.0, 3.0], "float32")

    def value(f):
        m = ExprMutator()
        m.memo[x] = const(data)
        return [c.data for c in fold_constant(m.visit(f.body)).fields]

    for got, want in zip(value(after), value(before)):
        np.testing.assert_array_equal(got, want)
