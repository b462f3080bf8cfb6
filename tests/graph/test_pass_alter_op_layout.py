"""AlterOpLayout for dense / matmul: structural (Before → Expected), folding of the packing at
compile time, and compiled results against numpy.

Tolerances: float32 products with k <= 64 and inputs ~N(0, 1): rtol 1e-5, atol 1e-5 against a
float64 numpy product; float64: rtol 1e-12, atol 1e-12.
"""
import numpy as np
import pytest

import kiln
from kiln.graph import (Constant, Function, GraphTypeError, IRModule, Tuple, call, const,
                        post_order, structural_equal, var)
from kiln.graph.transform import BindParams, PassContext, Sequential, default_pipeline
from kiln.graph.transform.alter_op_layout import AlterOpLayout, alter_dense_layout
from kiln.runtime import GraphExecutor
from kiln.target import Target
from kiln.topi.nn.dense import pack_weight_numpy

from pinned_targets import AVX512

RTOL = ATOL = 1e-5


def _check(before, expected, **kw):
    with Target(AVX512):            # the panel widths below are AVX-512's (16-lane registers)
        after = alter_dense_layout(before, **kw)
    assert structural_equal(after, expected), f"got\n{after}\nexpected\n{expected}"
    return after


def _packed(x, w, nr, transposed=True):
    units = w.data.shape[0] if transposed else w.data.shape[1]
    p = call("nn.dense_weight_pack", w, pack_width=nr, transposed=transposed)
    return call("nn.contrib_dense_pack", x, p, units=units)


def test_dense_with_constant_weight(rng):
    x = var("x", (2, 5, 64))
    w = const(rng.standard_normal((768, 64)).astype("float32"))
    b = const(rng.standard_normal(768).astype("float32"))
    before = Function([x], call("nn.relu", call("nn.bias_add", call("nn.dense", x, w), b, axis=2)))
    expected = Function([x], call("nn.relu", call("nn.bias_add", _packed(x, w, 32), b, axis=2)))
    _check(before, expected)


def test_pack_width_from_shapes_and_forced(rng):
    """45 units pack in panels of 16 (less padding than 32); a forced width wins."""
    x = var("x", (3, 8))
    w = const(rng.standard_normal((45, 8)).astype("float32"))
    before = Function([x], call("nn.dense", x, w))
    _check(before, Function([x], _packed(x, w, 16)))
    _check(before, Function([x], _packed(x, w, 32)), pack_width=32)


@pytest.mark.parametrize("tb", [False, True])
def test_matmul_with_constant_b(rng, tb):
    a = var("a", (4, 8))
    b = const(rng.standard_normal((20, 8) if tb else (8, 20)).astype("float32"))
    before = Function([a], call("nn.matmul", a, b, transpose_b=tb))
    _check(before, Function([a], _packed(a, b, 32, transposed=tb)))


def test_what_is_left_alone(rng):
    x, wv = var("x", (4, 8)), var("w", (6, 8))
    at = var("at", (8, 4))
    b = const(rng.standard_normal((8, 6)).astype("float32"))
    q, k = var("q", (2, 4, 8)), var("k", (2, 5, 8))
    before = Function([x, wv, at, q, k], Tuple([
        call("nn.dense", x, wv),                                   # weight not a constant
        call("nn.matmul", at, b, transpose_a=True),                # a transposed
        call("nn.batch_matmul", q, k, transpose_b=True),           # two activations
    ]))
    assert alter_dense_layout(before) is before


def test_pass_respects_opt_level_and_config(rng):
    x = var("x", (3, 8))
    w = const(rng.standard_normal((64, 8)).astype("float32"))
    mod = IRModule.from_expr(Function([x], call("nn.dense", x, w)))
    with PassContext(opt_level=2):
        assert Sequential([AlterOpLayout()])(mod) is mod
    with PassContext(opt_level=3, config={"AlterOpLayout.dense_pack_width": 16}):
        out = AlterOpLayout()(mod)
    assert structural_equal(out["main"], Function([x], _packed(x, w, 16)))


def test_pipeline_folds_the_packing(rng):
    """After the default pipeline the weight is a constant already in panel layout: no
    packing op is left for run time."""
    x, wv = var("x", (1, 6, 16)), var("w", (40, 16))
    wa = rng.standard_normal((40, 16)).astype("float32")
    mod = IRModule.from_expr(Function([x, wv], call("nn.dense", x, wv)))
    with PassContext(opt_level=3):
        out = default_pipeline()(BindParams({"w": wa})(mod))
    calls = [n for n in post_order(out["main"]) if hasattr(n, "op") and hasattr(n.op, "name")]
    assert [c.op.name for c in calls] == ["nn.contrib_dense_pack"]
    packed = calls[0].args[1]
    assert isinstance(packed, Constant)
    np.testing.assert_array_equal(packed.data, pack_weight_numpy(wa))


def _run(mod, params, inputs, disabled=()):
    with PassContext(opt_level=3, disabled_pass=disabled):
        lib = kiln.compile(mod, params=params)
    m = GraphExecutor(lib)
    m.run(**inputs)
    return [m.get_output(i).numpy() for i in range(m.get_num_outputs())]


@pytest.mark.parametrize("dtype,tol", [("float32", RTOL), ("float64", 1e-12)])
def test_compiled_mlp_matches_numpy(rng, dtype, tol):
    """dense + bias + relu, a matmul with a constant (k, n) operand, 3-d data and unit counts
    that are not multiples of the panel width, with and without the pass."""
    x = var("x", (2, 5, 24), dtype)
    w1, b1, w2 = var("w1", (45, 24), dtype), var("b1", (45,), dtype), var("w2", (45, 19), dtype)
    h = call("nn.relu", call("add", call("nn.dense", x, w1), b1))
    y = call("nn.matmul", call("reshape", h, newshape=(10, 45)), w2)
    mod = IRModule.from_expr(Function([x, w1, b1, w2], y))
    params = {"w1": rng.standard_normal((45, 24)).astype(dtype),
              "b1": rng.standard_normal(45).astype(dtype),
              "w2": rng.standard_normal((45, 19)).astype(dtype)}
    xa = rng.standard_normal((2, 5, 24)).astype(dtype)
    f64 = {k: v.astype("float64") for k, v in params.items()}
    ref = np.maximum(xa.astype("float64") @ f64["w1"].T + f64["b1"], 0).reshape(10, 45) @ f64["w2"]
    (got,) = _run(mod, params, {"x": xa})
    (plain,) = _run(mod, params, {"x": xa}, disabled=["AlterOpLayout"])
    assert got.dtype == dtype
    np.testing.assert_allclose(got, ref, rtol=tol, atol=tol * 10)
    np.testing.assert_allclose(plain, ref, rtol=tol, atol=tol * 10)


def test_type_errors(rng):
    x = var("x", (3, 8))
    w = const(np.zeros((40, 8), "float32"))
    packed = call("nn.dense_weight_pack", w, pack_width=16)
    assert packed.checked_type.shape == (3, 8, 16)
    with pytest.raises(GraphTypeError, match="cannot hold 50 units"):
        call("nn.contrib_dense_pack", x, packed, units=50)
    with pytest.raises(GraphTypeError, match="does not match"):
        call("nn.contrib_dense_pack", var("z", (3, 7)), packed, units=40)
    with pytest.raises(GraphTypeError, match="pack_width must be a positive int"):
        call("nn.dense_weight_pack", w, pack_width=0)
    with pytest.raises(GraphTypeError, match="must be 2-d"):
        call("nn.dense_weight_pack", const(np.zeros((2, 3, 4), "float32")), pack_width=16)
