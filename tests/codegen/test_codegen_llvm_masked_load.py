"""A masked vector load of a lane count that is not a power of two, in a loop.

LLVM 22's X86 back-end miscompiled one (found by tests/te/test_random_schedules.py::
test_conv2d_padded): a padded input computed at an output row, its 9-wide row vectorized, read
X through a 9-lane masked load; with loop strength reduction on, the last lane of some rows
came out wrong (max error 0.09; right at -opt-level=0 or with -disable-lsr). kiln widens such
loads to a power of two lanes with the extra lanes masked off. This sweeps row widths 5-16
(vector widths 7-18) and both strides against numpy."""
import numpy as np
import pytest

import kiln
from kiln import te


def _conv_row_vectorized(h, stride, ci=2, co=1, pad=1, kk=3):
    X = te.placeholder((1, ci, h, h), name="X")
    W = te.placeholder((co, ci, kk, kk), name="W")
    P = te.compute((1, ci, h + 2 * pad, h + 2 * pad), lambda b, c, y, x: te.if_then_else(
        te.all(y >= pad, y < h + pad, x >= pad, x < h + pad), X[b, c, y - pad, x - pad], 0.0),
        name="P")
    oh = (h + 2 * pad - kk) // stride + 1
    rc = te.reduce_axis((0, ci), name="rc")
    ry = te.reduce_axis((0, kk), name="ry")
    rx = te.reduce_axis((0, kk), name="rx")
    Y = te.compute((1, co, oh, oh), lambda b, f, y, x: te.sum(
        P[b, rc, y * stride + ry, x * stride + rx] * W[f, rc, ry, rx], axis=[rc, ry, rx]),
        name="Y")
    s = te.create_schedule(Y.op)
    b, c, y, x = s[P].op.axis
    s[P].fuse(b, c)
    s[P].vectorize(x)
    s[P].compute_at(s[Y], s[Y].op.axis[2])
    return s, (X, W, Y), oh


@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("h", range(5, 17))
def test_masked_row_loads(h, stride, rng):
    s, (X, W, Y), oh = _conv_row_vectorized(h, stride)
    f = kiln.build(s, [X, W, Y], target="llvm")
    x = rng.standard_normal((1, 2, h, h)).astype("float32")
    w = rng.standard_normal((1, 2, 3, 3)).astype("float32")
    y = np.zeros((1, 1, oh, oh), "float32")
    f(x, w, y)
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (1, 1), (1, 1)))
    ref = np.zeros((1, 1, oh, oh))
    for i in range(3):
        for j in range(3):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * oh:stride]
            ref += np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j])
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)
