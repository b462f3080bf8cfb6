"""Reductions against numpy / torch, built with the x86 reduction schedule."""
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import kiln
from kiln import te
from kiln.topi import broadcast as bc
from kiln.topi import elemwise as ew
from kiln.topi import reduction as red
from kiln.topi.utils import TopiError
from kiln.topi.x86.reduction import schedule_reduce


def run(outs, ins, arrays, schedule=schedule_reduce):
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    f = kiln.build(schedule(outs), list(ins) + list(outs), target="llvm")
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=o.dtype) for o in outs]
    f(*arrays, *results)
    return results if len(results) > 1 else results[0]


OPS = {"sum": (red.sum, np.sum), "mean": (red.mean, np.mean), "max": (red.max, np.max),
       "min": (red.min, np.min), "prod": (red.prod, np.prod)}
# Innermost axis reduced (exact 16 / 8 lanes, odd), kept, several axes, everything.
AXES = [((6, 64), 1), ((6, 40), -1), ((5, 37), 1), ((5, 3, 37), 1), ((4, 3, 5), (0, 2)),
        ((4, 3, 5), (0, 1)), ((300,), None), ((2, 3, 4), None), ((33, 17), 0)]


@pytest.mark.parametrize("shape,axis", AXES)
@pytest.mark.parametrize("name", sorted(OPS))
@pytest.mark.parametrize("keepdims", [False, True])
def test_reduce_float32(name, shape, axis, keepdims, rng):
    op, ref = OPS[name]
    x = te.placeholder(shape, name="x")
    # prod over up to 300 elements: values near 1 keep it finite.
    a = (rng.uniform(0.9, 1.1, shape) if name == "prod" else rng.standard_normal(shape)).astype("float32")
    y = op(x, axis=axis, keepdims=keepdims)
    want = ref(a.astype("float64"), axis=axis, keepdims=keepdims)
    assert y.shape == want.shape
    # float32 accumulation over <= 300 terms (sequential or 16 partial sums) vs float64.
    np.testing.assert_allclose(run(y, [x], [a]), want, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("axis", [1, None])
def test_reduce_float64_tight(axis, rng):
    x = te.placeholder((7, 48), "float64", name="x")
    a = rng.standard_normal((7, 48))
    s, m = run([red.sum(x, axis), red.mean(x, axis)], [x], [a])
    np.testing.assert_allclose(s, a.sum(axis=axis), rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(m, a.mean(axis=axis), rtol=1e-13, atol=1e-13)


def test_integer_sum_max_mean(rng):
    x = te.placeholder((9, 33), "int32", name="x")
    a = rng.integers(-1000, 1000, (9, 33)).astype("int32")
    s, mx, mn = run([red.sum(x, 1), red.max(x, 0), red.mean(x, 1)], [x], [a])
    np.testing.assert_array_equal(s, a.sum(1))
    np.testing.assert_array_equal(mx, a.max(0))
    np.testing.assert_array_equal(mn, np.trunc(a.sum(1) / 33).astype("int32"))   # integer mean truncates


ARG_SHAPES = [((6, 64), 1), ((5, 37), -1), ((5, 3, 37), 1), ((33, 17), 0), ((4, 3, 5), None)]


@pytest.mark.parametrize("shape,axis", ARG_SHAPES)
@pytest.mark.parametrize("largest", [True, False])
def test_argmax_argmin_first_occurrence(shape, axis, largest, rng):
    x = te.placeholder(shape, name="x")
    a = rng.integers(-3, 3, shape).astype("float32")       # many ties
    op, ref = (red.argmax, np.argmax) if largest else (red.argmin, np.argmin)
    y = op(x, axis=axis)
    assert y.dtype == "int64"
    np.testing.assert_array_equal(run(y, [x], [a]), ref(a, axis=axis))


@pytest.mark.parametrize("largest", [True, False])
def test_arg_select_last_index_and_keepdims(largest, rng):
    x = te.placeholder((7, 48), name="x")
    a = rng.integers(-2, 2, (7, 48)).astype("float32")
    op = red.argmax if largest else red.argmin
    y = op(x, axis=1, keepdims=True, select_last_index=True)
    flipped = (np.argmax if largest else np.argmin)(a[:, ::-1], axis=1)
    np.testing.assert_array_equal(run(y, [x], [a]), (47 - flipped)[:, None])


def test_argmax_all_minus_infinity_and_int(rng):
    x = te.placeholder((3, 20), name="x")
    a = np.full((3, 20), -np.inf, "float32")
    a[1, 5] = 0
    np.testing.assert_array_equal(run(red.argmax(x, 1), [x], [a]), [0, 5, 0])
    xi = te.placeholder((4, 9), "int8", name="xi")
    ai = rng.integers(-128, 127, (4, 9)).astype("int8")
    t = torch.from_numpy(ai.astype("int64"))
    np.testing.assert_array_equal(run(red.argmin(xi, 0), [xi], [ai]), t.argmin(0).numpy())


def test_fused_injective_inputs_and_epilogue(rng):
    """relu(sum(exp(x) * 2, axis=-1) + 1): the exp / multiply are inlined into the reduction,
    the +1 / relu epilogue is the output stage and the sum is computed at its loop."""
    x = te.placeholder((20, 64), name="x")
    y = ew.relu(bc.add(red.sum(bc.multiply(ew.exp(x), 2.0), axis=-1), 1.0))
    s = schedule_reduce(y)
    text = str(kiln.lower(s, [x, y]))
    assert "exp[" not in text and "multiply[" not in text and "add[" not in text
    assert "ramp(" in text           # the 16 partial sums are a vector
    a = rng.standard_normal((20, 64)).astype("float32")
    want = np.maximum((np.exp(a.astype("float64")) * 2).sum(-1) + 1, 0)
    np.testing.assert_allclose(run(y, [x], [a]), want, rtol=1e-5)


def test_kept_inner_axis_is_vectorized_and_parallel(rng):
    x = te.placeholder((8, 32, 100), name="x")
    y = red.mean(x, axis=1)
    text = str(kiln.lower(schedule_reduce(y), [x, y]))
    assert "parallel" in text and "ramp(" in text
    a = rng.standard_normal((8, 32, 100)).astype("float32")
    np.testing.assert_allclose(run(y, [x], [a]), a.mean(1), rtol=1e-5, atol=1e-6)


def test_two_outputs_of_one_reduction(rng):
    x = te.placeholder((10, 32), name="x")
    s_ = red.sum(x, 1)
    outs = [ew.relu(s_), ew.negative(s_)]
    a = rng.standard_normal((10, 32)).astype("float32")
    r, n = run(outs, [x], [a])
    np.testing.assert_allclose(r, np.maximum(a.sum(1), 0), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(n, -a.sum(1), rtol=1e-5, atol=1e-6)


def test_errors():
    x = te.placeholder((3, 4), name="x")
    with pytest.raises(TopiError, match="axis 2 is out of range"):
        red.sum(x, 2)
    with pytest.raises(TopiError, match="names an axis twice"):
        red.max(x, (1, -1))
    with pytest.raises(TopiError, match="bool input"):
        red.argmax(te.placeholder((3,), "bool", name="m"))


@settings(max_examples=8, deadline=None)
@given(shape=st.lists(st.integers(1, 9), min_size=1, max_size=3), data=st.data())
def test_random_axes_property(shape, data):
    """Any axis subset of any small shape: sum and argmax agree with numpy."""
    shape = tuple(shape)
    axes = tuple(sorted(data.draw(st.sets(st.integers(0, len(shape) - 1), min_size=1))))
    keepdims = data.draw(st.booleans())
    a = np.random.default_rng(len(shape)).integers(-4, 4, shape).astype("float32")
    x = te.placeholder(shape, name="x")
    y = red.sum(x, axes, keepdims)
    np.testing.assert_allclose(run(y, [x], [a]), a.sum(axis=axes, keepdims=keepdims), atol=1e-5)
    if len(axes) == 1:
        i = red.argmax(x, axes[0], keepdims)
        want = np.argmax(a, axis=axes[0])
        np.testing.assert_array_equal(run(i, [x], [a]), np.expand_dims(want, axes[0]) if keepdims else want)


def test_symbolic_rows(rng):
    """A symbolic leading dimension: one kernel for any n."""
    n = te.var("n")
    x = te.placeholder((n, 20), name="x")
    outs = [red.mean(x, axis=0), red.sum(x, axis=1), red.argmax(x, axis=1)]
    fs = [kiln.build(schedule_reduce(y), [x, y], target="llvm") for y in outs]
    for rows in (1, 7, 40):
        a = rng.standard_normal((rows, 20)).astype("float32")
        for f, ref in zip(fs, (a.mean(0), a.sum(1), a.argmax(1))):
            out = np.zeros(ref.shape, ref.dtype)
            f(a, out)
            np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
