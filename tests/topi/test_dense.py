"""dense / matmul / batch_matmul with their x86 schedules, against numpy (float64 products).

Tolerances: float32 inputs in [-1, 1), k <= 130: rtol 1e-4, atol 1e-4; float64: rtol 1e-10,
atol 1e-12.
"""
import numpy as np
import pytest

import kiln
from kiln import te
from kiln.topi import tags
from kiln.topi.nn.dense import (batch_matmul, dense, matmul, pack_columns,
                                pack_weight_numpy)
from kiln.topi.utils import TopiError
from kiln.topi.x86.dense import schedule_batch_matmul, schedule_dense, schedule_matmul

RTOL = ATOL = 1e-4


def ref_dense(x, w, b=None):
    y = x.astype("float64") @ w.astype("float64").T
    return y if b is None else y + b


@pytest.mark.parametrize("m,n,k", [(1, 10, 7), (3, 40, 33), (17, 33, 64), (64, 48, 130)])
def test_dense_bias_relu(m, n, k, build_run, rand):
    x = te.placeholder((m, k), name="x")
    w = te.placeholder((n, k), name="w")
    b = te.placeholder((n,), name="b")
    y = dense(x, w, b)
    out = te.compute(y.shape, lambda i, j: te.max(y[i, j], 0.0), name="relu", tag=tags.ELEMWISE)
    xa, wa, ba = rand((m, k)), rand((n, k)), rand((n,))
    got = build_run(schedule_dense, out, [x, w, b], [xa, wa, ba])
    np.testing.assert_allclose(got, np.maximum(ref_dense(xa, wa, ba), 0), rtol=RTOL, atol=ATOL)


def test_dense_no_bias_is_output_and_tags(build_run, rand):
    x = te.placeholder((5, 20), name="x")
    w = te.placeholder((37, 20), name="w")
    y = dense(x, w)
    assert y.op.tag == tags.DENSE
    xa, wa = rand((5, 20)), rand((37, 20))
    got = build_run(schedule_dense, y, [x, w], [xa, wa])
    np.testing.assert_allclose(got, ref_dense(xa, wa), rtol=RTOL, atol=ATOL)


def test_dense_batched_and_vector_data(build_run, rand):
    x = te.placeholder((2, 3, 9), name="x")
    w = te.placeholder((11, 9), name="w")
    b = te.placeholder((11,), name="b")
    y = dense(x, w, b)
    xa, wa, ba = rand((2, 3, 9)), rand((11, 9)), rand((11,))
    got = build_run(schedule_dense, y, [x, w, b], [xa, wa, ba])
    np.testing.assert_allclose(got, xa @ wa.T + ba, rtol=RTOL, atol=ATOL)
    v = te.placeholder((9,), name="v")
    yv = dense(v, w)
    got = build_run(schedule_dense, yv, [v, w], [xa[0, 0], wa])
    np.testing.assert_allclose(got, wa @ xa[0, 0], rtol=RTOL, atol=ATOL)


def test_dense_prepacked_weight(build_run, rand):
    """The graph layer may pack a constant weight once and pass the panels."""
    w = te.placeholder((45, 16), name="w")
    packed = pack_columns(w, transposed=True)
    wa = rand((45, 16))
    panels = build_run(lambda outs: te.create_schedule([o.op for o in outs]), packed, [w], [wa])
    assert panels.shape == (2, 16, 32)
    np.testing.assert_array_equal(panels, pack_weight_numpy(wa))
    x = te.placeholder((4, 16), name="x")
    pw = te.placeholder(panels.shape, name="pw")
    y = dense(x, pw, units=45)
    xa = rand((4, 16))
    got = build_run(schedule_dense, y, [x, pw], [xa, panels])
    np.testing.assert_allclose(got, ref_dense(xa, wa), rtol=RTOL, atol=ATOL)


def test_dense_float64(build_run, rand):
    x = te.placeholder((6, 13), "float64", name="x")
    w = te.placeholder((21, 13), "float64", name="w")
    y = dense(x, w)
    xa, wa = rand((6, 13), "float64"), rand((21, 13), "float64")
    got = build_run(schedule_dense, y, [x, w], [xa, wa])
    np.testing.assert_allclose(got, ref_dense(xa, wa), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("ta", [False, True])
@pytest.mark.parametrize("tb", [False, True])
def test_matmul_transposes(ta, tb, build_run, rand):
    m, n, k = 13, 35, 24
    ashape = (k, m) if ta else (m, k)
    bshape = (n, k) if tb else (k, n)
    a = te.placeholder(ashape, name="a")
    b = te.placeholder(bshape, name="b")
    c = matmul(a, b, ta, tb)
    assert c.op.tag == tags.MATMUL and c.shape == (m, n)
    out = te.compute(c.shape, lambda i, j: c[i, j] * 2.0, name="scale", tag=tags.ELEMWISE)
    aa, ba = rand(ashape), rand(bshape)
    got = build_run(schedule_matmul, out, [a, b], [aa, ba])
    ref = (aa.T if ta else aa).astype("float64") @ (ba.T if tb else ba)
    np.testing.assert_allclose(got, 2 * ref, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("ba_,bb_,ta,tb", [(3, 3, False, False), (4, 1, False, True),
                                           (1, 2, True, False), (2, 2, True, True)])
def test_batch_matmul_broadcast_transposes(ba_, bb_, ta, tb, build_run, rand):
    m, n, k = 5, 19, 12
    ashape = (ba_, k, m) if ta else (ba_, m, k)
    bshape = (bb_, n, k) if tb else (bb_, k, n)
    a = te.placeholder(ashape, name="a")
    b = te.placeholder(bshape, name="b")
    c = batch_matmul(a, b, ta, tb)
    assert c.op.tag == tags.BATCH_MATMUL and c.shape == (max(ba_, bb_), m, n)
    aa, bv = rand(ashape), rand(bshape)
    got = build_run(schedule_batch_matmul, c, [a, b], [aa, bv])
    ref = np.matmul(aa.transpose(0, 2, 1) if ta else aa, bv.transpose(0, 2, 1) if tb else bv)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=ATOL)


def test_batch_matmul_float64_with_epilogue(build_run, rand):
    a = te.placeholder((2, 7, 9), "float64", name="a")
    b = te.placeholder((2, 9, 10), "float64", name="b")
    c = batch_matmul(a, b)
    out = te.compute(c.shape, lambda z, i, j: c[z, i, j] + 1.0, name="add1", tag=tags.ELEMWISE)
    aa, bv = rand((2, 7, 9), "float64"), rand((2, 9, 10), "float64")
    got = build_run(schedule_batch_matmul, out, [a, b], [aa, bv])
    np.testing.assert_allclose(got, aa @ bv + 1.0, rtol=1e-10, atol=1e-12)


def test_dense_matmul_errors():
    x = te.placeholder((4, 8), name="x")
    with pytest.raises(TopiError, match="8 input features"):
        dense(x, te.placeholder((3, 7)))
    with pytest.raises(TopiError, match="bias must have shape"):
        dense(x, te.placeholder((3, 8)), te.placeholder((4,)))
    with pytest.raises(TopiError, match="needs units="):
        dense(x, te.placeholder((1, 8, 16)))
    with pytest.raises(TopiError, match="inner dimensions differ"):
        matmul(x, te.placeholder((7, 3)))
    with pytest.raises(TopiError, match="neither is 1"):
        batch_matmul(te.placeholder((2, 3, 4)), te.placeholder((3, 4, 5)))
    with pytest.raises(TopiError, match="must be 3-D"):
        batch_matmul(x, te.placeholder((4, 5)))


def test_dense_reshaped_epilogue(build_run, rand):
    """An epilogue that remaps indices (reshape) keeps the dense at the root, tiled."""
    x = te.placeholder((6, 10), name="x")
    w = te.placeholder((20, 10), name="w")
    y = dense(x, w)
    r = te.compute((2, 3, 20), lambda a, b, c: y[a * 3 + b, c] - 1.0, name="reshape_sub",
                   tag=tags.INJECTIVE)
    xa, wa = rand((6, 10)), rand((20, 10))
    got = build_run(schedule_dense, r, [x, w], [xa, wa])
    np.testing.assert_allclose(got, (ref_dense(xa, wa) - 1.0).reshape(2, 3, 20),
                               rtol=RTOL, atol=ATOL)


def test_dense_symbolic_rows(rand):
    m = te.var("m")
    x = te.placeholder((m, 20), name="x")
    w = te.placeholder((37, 20), name="w")
    y = dense(x, w)
    f = kiln.build(schedule_dense(y), [x, w, y])
    wa = rand((37, 20))
    for rows in (1, 13):
        xa = rand((rows, 20))
        got = np.zeros((rows, 37), "float32")
        f(xa, wa, got)
        np.testing.assert_allclose(got, ref_dense(xa, wa), rtol=RTOL, atol=ATOL)
