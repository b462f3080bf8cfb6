"""Elementwise topi operators, built with the x86 injective schedule, against numpy / torch."""
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import te, topi
from kiln.topi import elemwise as ew
from kiln.topi.utils import TopiError
from kiln.topi.x86.injective import schedule_injective

SHAPE = (3, 37)     # 111 elements: a vector tail of 15 lanes


def run(outs, ins, arrays, schedule=schedule_injective):
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    s = schedule(outs)
    f = kiln.build(s, list(ins) + list(outs), target="llvm")
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=o.dtype) for o in outs]
    f(*arrays, *results)
    return results if len(results) > 1 else results[0]


def torch_ref(fn, a):
    return fn(torch.from_numpy(a.astype("float64"))).numpy()


# (topi op, reference on float64 numpy, input range); float32 results are compared with
# rtol 2e-6 / atol 1e-6 (a few ulps of the vectorized math), float64 ones with 1e-12.
CASES = {
    "relu": (ew.relu, lambda a: np.maximum(a, 0), (-3, 3)),
    "leaky_relu": (lambda x: ew.leaky_relu(x, 0.2),
                   lambda a: torch_ref(lambda t: F.leaky_relu(t, 0.2), a), (-3, 3)),
    "clip": (lambda x: ew.clip(x, -0.5, 1.25), lambda a: np.clip(a, -0.5, 1.25), (-3, 3)),
    "relu6": (ew.relu6, lambda a: np.clip(a, 0, 6), (-3, 9)),
    "gelu": (ew.gelu, lambda a: torch_ref(F.gelu, a), (-6, 6)),
    "gelu_tanh": (lambda x: ew.gelu(x, "tanh"),
                  lambda a: torch_ref(lambda t: F.gelu(t, approximate="tanh"), a), (-6, 6)),
    "silu": (ew.silu, lambda a: torch_ref(F.silu, a), (-20, 20)),
    "sigmoid": (ew.sigmoid, lambda a: torch_ref(torch.sigmoid, a), (-20, 20)),
    "tanh": (ew.tanh, np.tanh, (-10, 10)),
    "exp": (ew.exp, np.exp, (-10, 10)),
    "log": (ew.log, np.log, (0.01, 100)),
    "sqrt": (ew.sqrt, np.sqrt, (0, 100)),
    "rsqrt": (ew.rsqrt, lambda a: 1 / np.sqrt(a), (0.01, 100)),
    "erf": (ew.erf, np.vectorize(math.erf), (-4, 4)),
    "hardswish": (ew.hardswish, lambda a: torch_ref(F.hardswish, a), (-5, 5)),
    "hardsigmoid": (ew.hardsigmoid, lambda a: torch_ref(F.hardsigmoid, a), (-5, 5)),
    "abs": (ew.abs, np.abs, (-3, 3)),
    "negative": (ew.negative, np.negative, (-3, 3)),
    "floor": (ew.floor, np.floor, (-3, 3)),
    "ceil": (ew.ceil, np.ceil, (-3, 3)),
    "round": (ew.round, np.round, (-3, 3)),
    "identity": (ew.identity, lambda a: a, (-3, 3)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_unary_float32(name, rng):
    op, ref, (lo, hi) = CASES[name]
    x = te.placeholder(SHAPE, "float32", name="x")
    y = op(x)
    assert y.dtype == "float32" and y.op.tag == "elemwise"
    a = rng.uniform(lo, hi, SHAPE).astype("float32")
    a[0, :4] = [-3.0, 3.0, 0.5, -0.5]        # PyTorch's hard* breakpoints and rounding ties
    a[0, :4] = np.clip(a[0, :4], lo, hi)
    expected = ref(a.astype("float64"))
    np.testing.assert_allclose(run(y, [x], [a]), expected, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["gelu", "gelu_tanh", "silu", "exp", "tanh", "hardswish"])
def test_unary_float64(name, rng):
    op, ref, (lo, hi) = CASES[name]
    x = te.placeholder((5, 7), "float64", name="x")
    a = rng.uniform(lo, hi, (5, 7))
    np.testing.assert_allclose(run(op(x), [x], [a]), ref(a), rtol=1e-12, atol=1e-14)


def test_gelu_forms_are_distinct(rng):
    x = te.placeholder((64,), name="x")
    a = rng.uniform(-4, 4, 64).astype("float32")
    exact, approx = run([ew.gelu(x), ew.gelu(x, "tanh")], [x], [a])
    assert np.abs(exact - approx).max() > 1e-5     # the tanh form is an approximation
    with pytest.raises(TopiError, match="approximate"):
        ew.gelu(x, "fast")


def test_prelu_channel_and_shared_slope(rng):
    x = te.placeholder((2, 3, 5, 4), name="x")
    w = te.placeholder((3,), name="w")
    w1 = te.placeholder((1,), name="w1")
    y, y1 = ew.prelu(x, w, axis=1), ew.prelu(x, w1)
    assert y.op.tag == "broadcast"
    a = rng.standard_normal((2, 3, 5, 4)).astype("float32")
    wa, w1a = rng.uniform(0, 0.5, 3).astype("float32"), np.array([0.25], "float32")
    r, r1 = run([y, y1], [x, w, w1], [a, wa, w1a])
    np.testing.assert_allclose(r, F.prelu(torch.from_numpy(a), torch.from_numpy(wa)).numpy(), rtol=1e-6)
    np.testing.assert_allclose(r1, F.prelu(torch.from_numpy(a), torch.from_numpy(w1a)).numpy(), rtol=1e-6)
    with pytest.raises(TopiError, match="slope has 4 elements"):
        ew.prelu(x, te.placeholder((4,), name="w4"))


@pytest.mark.parametrize("dtype", ["int32", "int8"])
def test_integer_relu_clip_abs(dtype, rng):
    x = te.placeholder((50,), dtype, name="x")
    a = rng.integers(-100, 100, 50).astype(dtype)
    r, c, ab, neg = run([ew.relu(x), ew.clip(x, -5, 7), ew.abs(x), ew.negative(x)], [x], [a])
    np.testing.assert_array_equal(r, np.maximum(a, 0))
    np.testing.assert_array_equal(c, np.clip(a, -5, 7))
    np.testing.assert_array_equal(ab, np.abs(a))
    np.testing.assert_array_equal(neg, -a)


@pytest.mark.parametrize("src,dst", [("float32", "int32"), ("float32", "float64"), ("int32", "float32"),
                                     ("float32", "bool"), ("int64", "int8"), ("float32", "float16")])
def test_cast(src, dst, rng):
    x = te.placeholder((40,), src, name="x")
    a = (rng.uniform(-100, 100, 40) if src.startswith("float") else rng.integers(-300, 300, 40)).astype(src)
    a[:3] = [0, 0.5, -0.5] if src.startswith("float") else [0, 1, -1]
    y = ew.cast(x, dst)
    assert y.dtype == dst
    with np.errstate(invalid="ignore", over="ignore"):
        np.testing.assert_array_equal(run(y, [x], [a]), a.astype(dst))


def test_float_only_errors_name_the_op():
    x = te.placeholder((4,), "int32", name="x")
    for op in (ew.sigmoid, ew.gelu, ew.tanh, ew.hardswish):
        with pytest.raises(TopiError, match=op.__name__ if op is not ew.gelu else "gelu"):
            op(x)
    with pytest.raises(TopiError, match="must be a te.Tensor"):
        ew.relu(np.zeros(3))
    with pytest.raises(TopiError, match="a_min"):
        ew.clip(te.placeholder((4,), name="y"), 2.0, 1.0)
    with pytest.raises(TopiError, match="bound 0.5 is not an integer"):
        ew.clip(x, 0.5, 3)


def test_chain_inlined_into_one_vectorized_parallel_loop(rng):
    shape = (64, 300)         # big enough for the parallel loop
    x = te.placeholder(shape, name="x")
    y = ew.hardswish(ew.leaky_relu(ew.gelu(x), 0.1))
    s = schedule_injective(y)
    text = str(kiln.lower(s, [x, y]))
    assert "parallel" in text and "ramp(" in text
    assert "gelu[" not in text and "leaky_relu[" not in text      # intermediate stages inlined
    a = rng.standard_normal(shape).astype("float32")
    t = torch.from_numpy(a.astype("float64"))
    ref = F.hardswish(F.leaky_relu(F.gelu(t), 0.1)).numpy()
    np.testing.assert_allclose(run(y, [x], [a]), ref, rtol=2e-6, atol=1e-6)


@pytest.mark.parametrize("shape", [(), (1,), (5,), (16,), (17,), (2, 1, 3)])
def test_tiny_and_odd_shapes(shape, rng):
    x = te.placeholder(shape, name="x")
    a = rng.standard_normal(shape).astype("float32")
    np.testing.assert_allclose(run(ew.silu(x), [x], [a]), torch_ref(F.silu, a), rtol=2e-6, atol=1e-7)


def test_c_target_matches(rng):
    x = te.placeholder((33,), name="x")
    y = ew.gelu(x)
    s = schedule_injective(y)
    f = kiln.build(s, [x, y], target="c")
    a = rng.standard_normal(33).astype("float32")
    out = np.zeros(33, "float32")
    f(a, out)
    np.testing.assert_allclose(out, torch_ref(F.gelu, a), rtol=2e-6, atol=1e-6)


def test_topi_package_exports():
    assert topi.tags.is_injective(ew.relu(te.placeholder((2,))).op.tag)
