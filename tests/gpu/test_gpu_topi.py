"""GPU operator schedules (kiln.topi.gpu) on OpenCL, against numpy: the dense / matmul /
batch_matmul schedule with fused epilogues at dividing and non-dividing sizes, and the generic
schedule of any group."""
import numpy as np
import pytest

import kiln
from kiln import te, topi
from kiln.target import Target

RTOL = 1e-5


def _run(s, tensors, arrays, out_shape, device):
    mod = kiln.build(s, tensors, target="opencl")
    args = [kiln.nd.array(a, device=device) for a in arrays]
    out = kiln.nd.empty(out_shape, "float32", device)
    mod(*args, out)
    return out.numpy()


@pytest.mark.parametrize("m,n,k", [(128, 192, 64), (37, 45, 50), (1, 10, 7), (200, 3, 33)])
def test_dense_bias_relu(opencl_device, rng, m, n, k):
    x = te.placeholder((m, k), name="x")
    w = te.placeholder((n, k), name="w")
    b = te.placeholder((n,), name="b")
    y = topi.relu(topi.nn.dense(x, w, b))
    with Target("opencl"):
        s = topi.gpu.schedule_dense([y])
    xv, wv, bv = (rng.standard_normal(sh).astype("float32") for sh in ((m, k), (n, k), (n,)))
    ref = np.maximum(xv.astype("float64") @ wv.T.astype("float64") + bv, 0)
    got = _run(s, [x, w, b, y], [xv, wv, bv], (m, n), opencl_device)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=RTOL * np.abs(ref).max())


@pytest.mark.parametrize("ta,tb", [(False, False), (False, True), (True, False)])
@pytest.mark.parametrize("ba,bb", [(3, 3), (1, 4)])
def test_batch_matmul(opencl_device, rng, ta, tb, ba, bb):
    m, n, k = 20, 33, 17
    a_shape = (ba, k, m) if ta else (ba, m, k)
    b_shape = (bb, n, k) if tb else (bb, k, n)
    A, B = te.placeholder(a_shape, name="A"), te.placeholder(b_shape, name="B")
    C = topi.nn.batch_matmul(A, B, transpose_a=ta, transpose_b=tb)
    with Target("opencl"):
        s = topi.gpu.schedule_dense([C])
    av, bv = rng.standard_normal(a_shape).astype("float32"), rng.standard_normal(b_shape).astype("float32")
    ref = (av.transpose(0, 2, 1) if ta else av).astype("float64") @ \
        (bv.transpose(0, 2, 1) if tb else bv).astype("float64")
    got = _run(s, [A, B, C], [av, bv], ref.shape, opencl_device)
    np.testing.assert_allclose(got, ref, rtol=RTOL, atol=RTOL * np.abs(ref).max())


def test_dense_tile_choice():
    from kiln.topi.gpu.dense import choose_tile
    assert choose_tile(1, 4096, 4096, 1024) == (16, 16, 4, 4)
    assert choose_tile(1, 128, 768, 1024) == (8, 16, 2, 2)      # BERT's projections: 96 blocks
    assert choose_tile(1, 128, 768, 64) == (8, 8, 2, 2)         # a 64-thread work-group limit


def test_generic_schedule_reduction_and_epilogue(opencl_device, rng):
    x = te.placeholder((5, 300), name="x")
    y = topi.nn.softmax(x, axis=1)
    s = topi.gpu.schedule_generic([y])
    xv = rng.standard_normal((5, 300)).astype("float32")
    e = np.exp(xv - xv.max(1, keepdims=True))
    got = _run(s, [x, y], [xv], (5, 300), opencl_device)
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=RTOL, atol=1e-7)
