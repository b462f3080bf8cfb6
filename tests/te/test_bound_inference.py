"""Bound inference: a stage computed at a consumer's loop gets exactly the region it needs."""
import numpy as np

import kiln
from kiln import te
from kiln.tir import Allocate, post_order_visit


def _allocs(func):
    found = {}

    def fn(n):
        if isinstance(n, Allocate):
            found[n.buffer.name] = int(n.extent)
    post_order_visit(func.body, fn)
    return found


def test_stencil_region_at_consumer_loop(rng):
    A = te.placeholder((50,), name="A")
    B = te.compute((51,), lambda i: A[te.min(i, 49)] * 2.0, name="B")
    C = te.compute((50,), lambda i: B[i] + B[i + 1], name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=8)
    s[B].compute_at(s[C], xo)
    func = kiln.lower(s, [A, C])
    assert _allocs(func) == {"B": 9}          # 8 outputs need B[i .. i+8]
    f = kiln.build(s, [A, C])
    a = rng.standard_normal(50).astype("float32")
    c = np.zeros(50, "float32")
    f(a, c)
    b = np.append(a, a[-1]) * 2
    np.testing.assert_allclose(c, b[:-1] + b[1:], rtol=1e-6)


def test_tile_region_2d():
    A = te.placeholder((64, 64), name="A")
    B = te.compute((64, 64), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((64, 64), lambda i, j: B[i, j] * 2.0, name="C")
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[B].compute_at(s[C], yo)
    assert _allocs(kiln.lower(s, [A, C])) == {"B": 64}


def test_padded_input_region_in_conv_row(rng):
    """Padding computed per output row: 3 padded rows of the input for a 3x3 kernel."""
    H = 10
    X = te.placeholder((H, H), name="X")
    P = te.compute((H + 2, H + 2), lambda y, x: te.if_then_else(
        te.all(y >= 1, y < H + 1, x >= 1, x < H + 1), X[y - 1, x - 1], 0.0), name="P")
    ry = te.reduce_axis((0, 3), name="ry")
    rx = te.reduce_axis((0, 3), name="rx")
    Y = te.compute((H, H), lambda y, x: te.sum(P[y + ry, x + rx], axis=[ry, rx]), name="Y")
    s = te.create_schedule(Y.op)
    s[P].compute_at(s[Y], Y.op.axis[0])
    func = kiln.lower(s, [X, Y])
    assert _allocs(func) == {"P": 3 * (H + 2)}
    f = kiln.build(s, [X, Y])
    x = rng.standard_normal((H, H)).astype("float32")
    y = np.zeros((H, H), "float32")
    f(x, y)
    xp = np.pad(x, 1)
    ref = sum(xp[dy:dy + H, dx:dx + H] for dy in range(3) for dx in range(3))
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-5)


def test_region_clipped_at_split_tail():
    """The last tile of a non-dividing split must not compute past the producer's domain."""
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((10,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    xo, xi = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], xo)
    func = kiln.lower(s, [A, C])
    assert _allocs(func) == {"B": 4}
    f = kiln.build(s, [A, C])
    a = np.arange(10, dtype="float32")
    c = np.zeros(10, "float32")
    f(a, c)
    np.testing.assert_allclose(c, a * 2 + 1)


def test_temporaries_are_reused(rng):
    """A chain of root stages needs only two buffers: D reuses B once C has consumed B."""
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((64,), lambda i: B[i] + 1.0, name="C")
    D = te.compute((64,), lambda i: C[i] * 3.0, name="D")
    E = te.compute((64,), lambda i: D[i] - 1.0, name="E")
    s = te.create_schedule(E.op)
    assert len(_allocs(kiln.lower(s, [A, E]))) == 2
    f = kiln.build(s, [A, E])
    a = rng.standard_normal(64).astype("float32")
    e = np.zeros(64, "float32")
    f(a, e)
    np.testing.assert_allclose(e, ((a * 2 + 1) * 3) - 1, rtol=1e-6)
