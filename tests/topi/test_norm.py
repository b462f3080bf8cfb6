"""layer_norm, group_norm, instance_norm (x86 norm schedule) and batch_norm (injective
schedule) against torch.nn.functional."""
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import kiln
from kiln import te
from kiln.topi import elemwise as ew
from kiln.topi import nn
from kiln.topi.utils import TopiError
from kiln.topi.x86.injective import schedule_injective
from kiln.topi.x86.norm import schedule_layer_norm


def run(schedule, outs, ins, arrays):
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    f = kiln.build(schedule(outs), list(ins) + list(outs), target="llvm")
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=o.dtype) for o in outs]
    f(*arrays, *results)
    return results if len(results) > 1 else results[0]


def params(*specs):
    """Placeholders from (shape, name) pairs."""
    return [te.placeholder(shape, name=name) for shape, name in specs]


def t64(a):
    return None if a is None else torch.from_numpy(a.astype("float64"))


# Two-pass statistics in float32 over <= 256 elements: rtol 1e-4 / atol 1e-5 against float64.
LN_CASES = [((6, 64), 1), ((5, 40), 1), ((3, 37), 1), ((2, 3, 5, 7), 2), ((4, 8, 16), 2), ((33,), 1)]


@pytest.mark.parametrize("shape,nd", LN_CASES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(shape, nd, affine, rng):
    norm_shape = shape[-nd:]
    x = te.placeholder(shape, name="x")
    g = te.placeholder(norm_shape, name="g") if affine else None
    b = te.placeholder(norm_shape, name="b") if affine else None
    y = nn.layer_norm(x, g, b, axis=tuple(range(len(shape) - nd, len(shape))), eps=1e-5)
    assert y.op.tag == "layer_norm"
    a = (rng.standard_normal(shape) * 3 + 1).astype("float32")
    gv = rng.standard_normal(norm_shape).astype("float32") if affine else None
    bv = rng.standard_normal(norm_shape).astype("float32") if affine else None
    ins, arrays = [x] + ([g, b] if affine else []), [a] + ([gv, bv] if affine else [])
    want = F.layer_norm(t64(a), norm_shape, t64(gv), t64(bv), 1e-5).numpy()
    np.testing.assert_allclose(run(schedule_layer_norm, y, ins, arrays), want, rtol=1e-4, atol=1e-5)


def test_layer_norm_onnx_axis_and_float64(rng):
    x = te.placeholder((3, 4, 10), "float64", name="x")
    y = nn.layer_norm(x, None, None, axis=1, eps=1e-6)     # ONNX: normalize axes 1..last
    a = rng.standard_normal((3, 4, 10))
    want = F.layer_norm(t64(a), (4, 10), eps=1e-6).numpy()
    np.testing.assert_allclose(run(schedule_layer_norm, y, [x], [a]), want, rtol=1e-12, atol=1e-12)


def test_layer_norm_fused_epilogue_parallel(rng):
    """gelu(layer_norm(x)) for 64 rows of 256: parallel rows, vectorized partial sums."""
    x, g, b = params(((64, 256), "x"), ((256,), "g"), ((256,), "b"))
    y = ew.gelu(nn.layer_norm(x, g, b))
    s = schedule_layer_norm(y)
    text = str(kiln.lower(s, [x, g, b, y]))
    assert "parallel" in text and "ramp(" in text and "layer_norm[" not in text
    a = rng.standard_normal((64, 256)).astype("float32")
    gv, bv = rng.standard_normal(256).astype("float32"), rng.standard_normal(256).astype("float32")
    want = F.gelu(F.layer_norm(t64(a), (256,), t64(gv), t64(bv))).numpy()
    got = run(schedule_layer_norm, y, [x, g, b], [a, gv, bv])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape,groups", [((2, 6, 4, 4), 3), ((1, 8, 5, 3), 2), ((2, 4, 7), 4),
                                          ((3, 5, 2, 2), 1)])
def test_group_norm(shape, groups, rng):
    c = shape[1]
    x, g, b = te.placeholder(shape, name="x"), te.placeholder((c,), name="g"), te.placeholder((c,), name="b")
    y = ew.relu(nn.group_norm(x, groups, g, b, eps=1e-5))
    a = (rng.standard_normal(shape) * 2).astype("float32")
    gv, bv = rng.standard_normal(c).astype("float32"), rng.standard_normal(c).astype("float32")
    want = F.relu(F.group_norm(t64(a), groups, t64(gv), t64(bv), 1e-5)).numpy()
    got = run(schedule_layer_norm, y, [x, g, b], [a, gv, bv])
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_instance_norm(rng):
    x, g, b = params(((2, 3, 6, 8), "x"), ((3,), "g"), ((3,), "b"))
    a = rng.standard_normal((2, 3, 6, 8)).astype("float32")
    gv, bv = rng.standard_normal(3).astype("float32"), rng.standard_normal(3).astype("float32")
    out, plain = run(schedule_layer_norm, [nn.instance_norm(x, g, b)], [x, g, b], [a, gv, bv]), \
        run(schedule_layer_norm, nn.instance_norm(x), [x], [a])
    want = F.instance_norm(t64(a), weight=t64(gv), bias=t64(bv)).numpy()
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(plain, F.instance_norm(t64(a)).numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("shape,axis", [((2, 3, 5, 7), 1), ((4, 37), 1), ((2, 5, 3), -1)])
def test_batch_norm_inference(shape, axis, rng):
    c = shape[axis]
    x = te.placeholder(shape, name="x")
    ps = [te.placeholder((c,), name=n) for n in ("g", "b", "m", "v")]
    a = rng.standard_normal(shape).astype("float32")
    gv, bv, mv = (rng.standard_normal(c).astype("float32") for _ in range(3))
    vv = rng.uniform(0.5, 2, c).astype("float32")
    y = ew.relu(nn.batch_norm(x, *ps, axis=axis, eps=1e-3))
    got = run(schedule_injective, y, [x, *ps], [a, gv, bv, mv, vv])
    ta = t64(np.moveaxis(a, axis, 1))
    want = F.relu(F.batch_norm(ta, t64(mv), t64(vv), t64(gv), t64(bv), training=False, eps=1e-3)).numpy()
    np.testing.assert_allclose(got, np.moveaxis(want, 1, axis), rtol=1e-5, atol=1e-6)


def test_errors():
    x = te.placeholder((2, 6, 4), name="x")
    with pytest.raises(TopiError, match="trailing axes"):
        nn.layer_norm(x, None, None, axis=(0, 2))
    with pytest.raises(TopiError, match="gamma has shape"):
        nn.layer_norm(x, te.placeholder((5,), name="g"), None)
    with pytest.raises(TopiError, match="cannot be split into 4 groups"):
        nn.group_norm(x, 4)
    with pytest.raises(TopiError, match="floating-point"):
        nn.layer_norm(te.placeholder((3,), "int32", name="i"))
    with pytest.raises(TopiError, match="expected one layer_norm"):
        schedule_layer_norm(ew.relu(x))
