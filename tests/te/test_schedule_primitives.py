"""Each schedule primitive keeps results equal to numpy and shows up in the loop program."""
import numpy as np
import pytest

import kiln
from kiln import te


def _mm(n=24, m=20, k=18):
    A = te.placeholder((n, k), name="A")
    B = te.placeholder((k, m), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def _check_mm(s, A, B, C, rng, target="llvm"):
    f = kiln.build(s, [A, B, C], target=target)
    n, k = (int(d) for d in A.shape)
    m = int(B.shape[1])
    a = rng.standard_normal((n, k)).astype("float32")
    b = rng.standard_normal((k, m)).astype("float32")
    c = np.zeros((n, m), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)
    return f


def test_split_nparts_fuse_reorder(rng):
    A, B, C = _mm()
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, nparts=5)
    f = s[C].fuse(io, ii)
    jo, ji = s[C].split(j, factor=7)
    s[C].reorder(jo, f, ji)
    text = str(kiln.lower(s, [A, B, C]))
    assert "i.outer.i.inner.fused" in text
    _check_mm(s, A, B, C, rng)


def test_tile_vectorize_unroll_parallel(rng):
    A, B, C = _mm(32, 32, 16)
    s = te.create_schedule(C.op)
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    (r,) = C.op.reduce_axis
    s[C].reorder(xo, yo, r, xi, yi)
    s[C].unroll(xi)
    s[C].vectorize(yi)
    s[C].parallel(xo)
    text = str(kiln.lower(s, [A, B, C]))
    assert "parallel" in text and "ramp(" in text     # vectorized into Ramp/Broadcast
    _check_mm(s, A, B, C, rng)


def test_split_tail_has_no_condition_in_main_loop(rng):
    n = te.var("n")
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    xo, xi = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(xi)
    func = kiln.lower(s, [A, B])
    text = str(func)
    # The vectorized main body is unguarded; the guard survives only in the tail.
    assert "ramp(" in text
    f = kiln.build(s, [A, B], target="llvm")
    for size in (1, 16, 37):
        a = rng.standard_normal(size).astype("float32")
        b = np.zeros(size, "float32")
        f(a, b)
        np.testing.assert_allclose(b, a * 2)


def test_compute_at_and_inline(rng):
    A = te.placeholder((20, 30), name="A")
    B = te.compute((20, 30), lambda i, j: A[i, j] + 1.0, name="B")
    C = te.compute((20, 30), lambda i, j: B[i, j] * 2.0, name="C")
    D = te.compute((20, 30), lambda i, j: C[i, j] - 3.0, name="D")
    s = te.create_schedule(D.op)
    xo, xi = s[D].split(D.op.axis[0], factor=6)
    s[C].compute_at(s[D], xo)
    s[B].compute_inline()
    text = str(kiln.lower(s, [A, D]))
    assert "allocate" in text and "B" not in text.split("def")[1].split(":")[0]
    f = kiln.build(s, [A, D], target="llvm")
    a = rng.standard_normal((20, 30)).astype("float32")
    d = np.zeros((20, 30), "float32")
    f(a, d)
    np.testing.assert_allclose(d, (a + 1) * 2 - 3, rtol=1e-6)


def test_compute_root_undoes_compute_at(rng):
    A = te.placeholder((10,), name="A")
    B = te.compute((10,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((10,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[B].compute_root()
    assert s[B].attach_type == "root"
    f = kiln.build(s, [A, C], target="llvm")
    a = rng.standard_normal(10).astype("float32")
    c = np.zeros(10, "float32")
    f(a, c)
    np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


def test_cache_read_and_cache_write(rng):
    A, B, C = _mm(16, 32, 24)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "local", [C])
    CC = s.cache_write(C, "local")
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 16)
    s[CC].compute_at(s[C], yo)
    s[AA].compute_at(s[CC], s[CC].op.reduce_axis[0])
    s[CC].vectorize(s[CC].op.axis[1])
    text = str(kiln.lower(s, [A, B, C]))
    assert "A.local" in text and "C.local" in text
    _check_mm(s, A, B, C, rng)


def test_rfactor_parallel_reduction(rng):
    A = te.placeholder((1000,), name="A")
    k = te.reduce_axis((0, 1000), name="k")
    S = te.compute((1,), lambda _: te.sum(A[k], axis=k), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, factor=16)
    SF = s.rfactor(S, ki)
    s[SF].vectorize(s[SF].op.axis[0])
    f = kiln.build(s, [A, S], target="llvm")
    a = rng.standard_normal(1000).astype("float32")
    out = np.zeros(1, "float32")
    f(a, out)
    np.testing.assert_allclose(out[0], a.sum(dtype="float64"), rtol=1e-4)


def test_rfactor_factor_axis(rng):
    A = te.placeholder((6, 40), name="A")
    k = te.reduce_axis((0, 40), name="k")
    S = te.compute((6,), lambda i: te.sum(A[i, k], axis=k), name="S")
    s = te.create_schedule(S.op)
    ko, ki = s[S].split(k, nparts=4)
    SF = s.rfactor(S, ko, factor_axis=1)
    assert tuple(int(d) for d in SF.shape) == (6, 4)
    f = kiln.build(s, [A, S], target="llvm")
    a = rng.standard_normal((6, 40)).astype("float32")
    out = np.zeros(6, "float32")
    f(a, out)
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_storage_align_pragma_scope(rng):
    A = te.placeholder((8, 10), name="A")
    B = te.compute((8, 10), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 10), lambda i, j: B[i, j] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[B].storage_align(B.op.axis[0], 16, 1)
    s[B].set_scope("local")
    s[C].pragma(C.op.axis[0], "auto_unroll_max_step", 8)
    text = str(kiln.lower(s, [A, C]))
    assert "scope='local'" in text
    assert "[136]" in text   # 8 rows with the row stride padded from 10 to 17 (17 % 16 == 1)
    f = kiln.build(s, [A, C], target="llvm")
    a = rng.standard_normal((8, 10)).astype("float32")
    c = np.zeros((8, 10), "float32")
    f(a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)


def test_bind_is_recorded_but_not_built_for_cpu():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    text = str(kiln.lower(s, [A, B]))
    assert "threadIdx.x" in text and "blockIdx.x" in text
    with pytest.raises(Exception, match="thread"):
        kiln.build(s, [A, B], target="llvm")
