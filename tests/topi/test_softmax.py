"""softmax / log_softmax against torch, built with the x86 softmax schedule."""
import numpy as np
import pytest
import torch

import kiln
from kiln import te
from kiln.topi import broadcast as bc
from kiln.topi import elemwise as ew
from kiln.topi import nn
from kiln.topi.utils import TopiError
from kiln.topi.x86.softmax import schedule_softmax


def run(outs, ins, arrays):
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    f = kiln.build(schedule_softmax(outs), list(ins) + list(outs), target="llvm")
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=o.dtype) for o in outs]
    f(*arrays, *results)
    return results if len(results) > 1 else results[0]


def ref(a, axis, log):
    t = torch.from_numpy(a.astype("float64"))
    return (torch.log_softmax if log else torch.softmax)(t, axis).numpy()


# Innermost axis of 64 / 40 (16 / 8 vector partial results) or odd 37, a middle axis
# (vectorized trailing axes), the first axis, a 1-D input and a 1-wide axis.
CASES = [((6, 64), -1), ((5, 40), 1), ((3, 37), -1), ((2, 7, 3, 5), 1), ((9, 20), 0), ((37,), 0),
         ((4, 1), 1)]


@pytest.mark.parametrize("shape,axis", CASES)
@pytest.mark.parametrize("log", [False, True])
def test_softmax_float32(shape, axis, log, rng):
    x = te.placeholder(shape, name="x")
    y = (nn.log_softmax if log else nn.softmax)(x, axis)
    assert y.op.tag == ("log_softmax" if log else "softmax")
    a = (rng.standard_normal(shape) * 4).astype("float32")
    # float32 exp / log and sums over <= 64 terms: a few ulps relative.
    np.testing.assert_allclose(run(y, [x], [a]), ref(a, axis, log), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("log", [False, True])
def test_float64_tight(log, rng):
    x = te.placeholder((5, 48), "float64", name="x")
    a = rng.standard_normal((5, 48)) * 3
    np.testing.assert_allclose(run((nn.log_softmax if log else nn.softmax)(x), [x], [a]),
                               ref(a, -1, log), rtol=1e-12, atol=1e-14)


def test_numerically_stable_for_large_inputs(rng):
    x = te.placeholder((3, 32), name="x")
    a = (rng.standard_normal((3, 32)) * 5 + 1000).astype("float32")     # exp(1000) overflows
    s, l = run(nn.softmax(x), [x], [a]), run(nn.log_softmax(x), [x], [a])
    assert np.isfinite(s).all() and np.isfinite(l).all()
    np.testing.assert_allclose(s, ref(a, -1, False), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(l, ref(a, -1, True), rtol=1e-5, atol=1e-5)


def test_fused_input_and_epilogue_parallel_vectorized(rng):
    """softmax(x * 0.125 + mask) then relu: the scale and mask add are inlined into the
    softmax stages, the relu is the output with the softmax inlined into it."""
    x, m = te.placeholder((64, 128), name="x"), te.placeholder((128,), name="m")
    y = ew.relu(nn.softmax(bc.add(bc.multiply(x, 0.125), m), axis=-1))
    s = schedule_softmax(y)
    text = str(kiln.lower(s, [x, m, y]))
    assert "parallel" in text and "ramp(" in text
    assert "add[" not in text and "multiply[" not in text and "softmax[" not in text
    a = rng.standard_normal((64, 128)).astype("float32")
    mv = np.where(np.arange(128) % 3 == 0, -1e4, 0).astype("float32")
    want = np.maximum(ref(a * 0.125 + mv, -1, False), 0)
    np.testing.assert_allclose(run(y, [x, m], [a, mv]), want, rtol=1e-5, atol=1e-6)


def test_c_target(rng):
    x = te.placeholder((6, 48), name="x")
    y = nn.log_softmax(x)
    f = kiln.build(schedule_softmax(y), [x, y], target="c")
    a = rng.standard_normal((6, 48)).astype("float32")
    out = np.zeros((6, 48), "float32")
    f(a, out)
    np.testing.assert_allclose(out, ref(a, -1, True), rtol=1e-5, atol=1e-6)


def test_softmax_with_two_outputs(rng):
    x = te.placeholder((4, 24), name="x")
    y = nn.softmax(x)
    outs = [y, bc.multiply(y, 2.0)]
    a = rng.standard_normal((4, 24)).astype("float32")
    s, d = run(outs, [x], [a])
    np.testing.assert_allclose(s, ref(a, -1, False), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d, 2 * ref(a, -1, False), rtol=1e-5, atol=1e-6)


def test_errors():
    with pytest.raises(TopiError, match="floating-point"):
        nn.softmax(te.placeholder((3, 4), "int32", name="i"))
    with pytest.raises(TopiError, match="axis 2 is out of range"):
        nn.log_softmax(te.placeholder((3, 4), name="x"), 2)
    x = te.placeholder((3, 4), name="x")
    with pytest.raises(TopiError, match="expected one softmax"):
        schedule_softmax(ew.relu(x))
