"""SimplifyExpr: reshape / transpose chains, identity casts, neutral constants (Before → Expected)."""
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from kiln.graph import Call, Function, call, const, post_order, structural_equal, var
from kiln.graph.transform import fold_constant, simplify_expr


def _check(before, expected):
    after = simplify_expr(before)
    assert structural_equal(after, expected), f"got\n{after}\nexpected\n{expected}"


def test_reshape_chains_merge_or_vanish():
    x = var("x", (2, 3, 4))
    chain = call("reshape", call("expand_dims", call("reshape", x, newshape=(6, 4)), axis=0),
                 newshape=(4, -1))
    _check(Function([x], call("exp", chain)),
           Function([x], call("exp", call("reshape", x, newshape=(4, 6)))))
    back = call("squeeze", call("expand_dims", x, axis=1), axis=(1,))
    _check(Function([x], call("exp", back)), Function([x], call("exp", x)))
    _check(Function([x], call("reshape", x, newshape=(2, -1, 4))), Function([x], x))
    single = Function([x], call("expand_dims", x, axis=0))
    assert simplify_expr(single) is single


def test_transpose_chains_compose():
    x = var("x", (2, 3, 4))
    t = call("transpose", call("transpose", x, axes=(1, 2, 0)), axes=(2, 0, 1))
    _check(Function([x], call("exp", t)), Function([x], call("exp", x)))
    t = call("transpose", call("transpose", x, axes=(1, 0, 2)), axes=(0, 2, 1))
    # y = x.transpose(1, 0, 2) → (3, 2, 4); z = y.transpose(0, 2, 1) → x.transpose(1, 2, 0)
    _check(Function([x], t), Function([x], call("transpose", x, axes=(1, 2, 0))))
    _check(Function([x], call("transpose", call("transpose", x), axes=None)), Function([x], x))
    _check(Function([x], call("transpose", x, axes=(0, 1, 2))), Function([x], x))


def test_identity_cast_and_neutral_constants():
    x = var("x", (2, 3))
    zero, one = const(np.float32(0)), const(np.float32(1))
    body = call("divide", call("multiply", one, call("subtract", call("add", zero, x), zero)), one)
    _check(Function([x], call("cast", body, dtype="float32")), Function([x], x))
    ones = const(np.ones((2, 3), "float32"))
    _check(Function([x], call("multiply", x, ones)), Function([x], x))


def test_rewrites_that_must_not_fire():
    x = var("x", (2, 3))
    zero = const(np.float32(0))
    kept = [
        call("subtract", zero, x),                               # 0 - x is -x
        call("divide", const(np.float32(1)), x),                 # 1 / x
        call("add", x, const(np.zeros((4, 2, 3), "float32"))),  # broadcast grows the result
        call("cast", x, dtype="float64"),
        call("multiply", x, const(np.float32(2))),
        call("add", x, const(np.array([0, 1, 0], "float32"))),
    ]
    for body in kept:
        f = Function([x], body)
        assert simplify_expr(f) is f, body


def test_deep_chain_without_recursion():
    x = var("x", (4, 4))
    y = x
    for k in range(5000):
        y = call("transpose", y) if k % 2 else call("reshape", y, newshape=(16,) if k % 4 else (4, 4))
    out = simplify_expr(Function([x], y))
    assert len(post_order(out)) < 20


_RESHAPE_LIKE = ("reshape", "squeeze", "expand_dims")


@st.composite
def _chains(draw):
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=3)))
    steps = []
    cur = shape
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["reshape", "transpose", "expand_dims", "squeeze"]))
        if kind == "transpose":
            perm = tuple(draw(st.permutations(range(len(cur)))))
            steps.append(("transpose", {"axes": perm}))
            cur = tuple(cur[p] for p in perm)
        elif kind == "expand_dims":
            axis = draw(st.integers(0, len(cur)))
            steps.append(("expand_dims", {"axis": axis}))
            cur = cur[:axis] + (1,) + cur[axis:]
        elif kind == "squeeze" and 1 in cur and len(cur) > 1:
            axis = cur.index(1)
            steps.append(("squeeze", {"axis": (axis,)}))
            cur = cur[:axis] + cur[axis + 1:]
        else:
            n = int(np.prod(cur))
            new = draw(st.sampled_from([(n,), (1, n), (n, 1), cur]))
            steps.append(("reshape", {"newshape": new}))
            cur = new
    return shape, steps


@settings(max_examples=60, deadline=None)
@given(_chains())
def test_random_layout_chains_keep_values(case):
    """Simplified chains compute the same array (checked by folding both with numpy)."""
    shape, steps = case
    data = np.arange(int(np.prod(shape)), dtype="float32").reshape(shape)
    x = var("x", shape)
    y = x
    for name, attrs in steps:
        y = call(name, y, **attrs)
    before = Function([x], y)
    after = simplify_expr(before)
    for n in post_order(after):
        if isinstance(n, Call):
            # no two layout ops of the same family follow each other after simplification
            inner = n.args[0]
            same = (n.op.name in _RESHAPE_LIKE and isinstance(inner, Call)
                    and inner.op.name in _RESHAPE_LIKE)
            assert not same and not (n.op.name == "transpose" and isinstance(inner, Call)
                                     and inner.op.name == "transpose"), after
    bind = {x: const(data)}

    def value(f):
        from kiln.graph import ExprMutator
        m = ExprMutator()
        m.memo.update(bind)
        return fold_constant(m.visit(f.body)).data

    np.testing.assert_array_equal(value(after), value(before))
