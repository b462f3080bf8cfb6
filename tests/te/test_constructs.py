"""Every tensor-expression construct, built for the LLVM target and compared with numpy."""
import math

import numpy as np
import pytest

import kiln
from kiln import te

N = 37   # not a multiple of any vector width: exercises tails


def build_run(outs, ins, arrays, out_dtypes=None, target="llvm", schedule=None):
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    s = schedule or te.create_schedule([o.op for o in outs])
    f = kiln.build(s, list(ins) + list(outs), target=target)
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=o.dtype) for o in outs]
    f(*arrays, *results)
    return results if len(results) > 1 else results[0]


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int16", "int32", "int64", "uint8"])
def test_elementwise_arith_per_dtype(dtype, rng):
    A = te.placeholder((N,), dtype, name="A")
    B = te.placeholder((N,), dtype, name="B")
    C = te.compute((N,), lambda i: A[i] * B[i] + A[i] - B[i] * 2, name="C")
    info = np.iinfo(dtype) if np.issubdtype(np.dtype(dtype), np.integer) else None
    if info is not None:
        lo, hi = max(info.min, -10), min(info.max, 10)
        a = rng.integers(lo, hi, N).astype(dtype)
        b = rng.integers(lo, hi, N).astype(dtype)
    else:
        a, b = rng.standard_normal(N).astype(dtype), rng.standard_normal(N).astype(dtype)
    assert C.dtype == dtype     # the Python constant 2 took the operand's dtype
    c = build_run(C, [A, B], [a, b])
    with np.errstate(over="ignore"):
        np.testing.assert_allclose(c, a * b + a - b * np.array(2, dtype), rtol=1e-6)


def test_float16_storage(rng):
    A = te.placeholder((N,), "float16", name="A")
    B = te.compute((N,), lambda i: A[i] * 2 + 1, name="B")
    assert B.dtype == "float16"
    a = rng.standard_normal(N).astype("float16")
    np.testing.assert_allclose(build_run(B, [A], [a]), a * np.float16(2) + np.float16(1), rtol=1e-3)


def test_bool_and_logic(rng):
    A = te.placeholder((N,), "float32", name="A")
    M = te.compute((N,), lambda i: te.any(A[i] > 0.5, te.all(A[i] < -0.5, i % 2 == 0)), name="M")
    assert M.dtype == "bool"
    a = rng.standard_normal(N).astype("float32")
    idx = np.arange(N)
    np.testing.assert_array_equal(build_run(M, [A], [a]), (a > 0.5) | ((a < -0.5) & (idx % 2 == 0)))


UNARY = {
    "exp": (te.exp, np.exp, (-20, 20)),
    "log": (te.log, np.log, (0.01, 100)),
    "sqrt": (te.sqrt, np.sqrt, (0, 100)),
    "rsqrt": (te.rsqrt, lambda x: 1 / np.sqrt(x), (0.01, 100)),
    "tanh": (te.tanh, np.tanh, (-10, 10)),
    "sigmoid": (te.sigmoid, lambda x: 1 / (1 + np.exp(-x)), (-30, 30)),
    "erf": (te.erf, np.vectorize(math.erf), (-5, 5)),
    "abs": (te.abs, np.abs, (-5, 5)),
    "floor": (te.floor, np.floor, (-5, 5)),
    "ceil": (te.ceil, np.ceil, (-5, 5)),
    "round": (te.round, np.round, (-5, 5)),
}


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_math(name, dtype, rng):
    fte, fnp, (lo, hi) = UNARY[name]
    A = te.placeholder((N,), dtype, name="A")
    B = te.compute((N,), lambda i: fte(A[i]), name="B")
    a = rng.uniform(lo, hi, N).astype(dtype)
    if name == "round":
        a = np.round(a * 4) / 4 + 0.01     # stay away from ties (round-half-even vs away)
    expected = fnp(a.astype("float64")).astype(dtype)
    np.testing.assert_allclose(build_run(B, [A], [a]), expected, rtol=2e-6 if dtype == "float32" else 1e-12, atol=1e-7)


def test_pow_fmod_binary_minmax(rng):
    A = te.placeholder((N,), name="A")
    B = te.placeholder((N,), name="B")
    P = te.compute((N,), lambda i: te.pow(A[i], B[i]), name="P")
    F = te.compute((N,), lambda i: te.fmod(A[i], B[i]), name="F")
    MX = te.compute((N,), lambda i: te.max(A[i], B[i]), name="MX")
    MN = te.compute((N,), lambda i: te.min(A[i], 0.25), name="MN")
    a = rng.uniform(0.1, 4, N).astype("float32")
    b = rng.uniform(0.5, 2, N).astype("float32")
    p, f, mx, mn = build_run([P, F, MX, MN], [A, B], [a, b])
    np.testing.assert_allclose(p, a ** b, rtol=1e-5)
    np.testing.assert_allclose(f, np.fmod(a, b), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(mx, np.maximum(a, b))
    np.testing.assert_array_equal(mn, np.minimum(a, np.float32(0.25)))


def test_integer_division_semantics():
    A = te.placeholder((N,), "int32", name="A")
    outs = [te.compute((N,), lambda i, f=f: f(A[i], 3), name=n) for n, f in
            [("fd", te.floordiv), ("fm", te.floormod), ("td", te.truncdiv), ("tm", te.truncmod)]]
    a = np.arange(-18, -18 + N, dtype="int32")
    fd, fm, td, tm = build_run(outs, [A], [a])
    np.testing.assert_array_equal(fd, a // 3)
    np.testing.assert_array_equal(fm, a % 3)
    np.testing.assert_array_equal(td, np.trunc(a / 3).astype("int32"))
    np.testing.assert_array_equal(tm, np.fmod(a, 3))


def test_if_then_else_select_and_padding(rng):
    A = te.placeholder((N,), name="A")
    P = te.compute((N + 4,), lambda i: te.if_then_else(te.all(i >= 2, i < N + 2), A[i - 2], -1.0), name="P")
    S = te.compute((N,), lambda i: te.select(A[i] > 0, A[i], A[i] * 0.1), name="S")
    a = rng.standard_normal(N).astype("float32")
    p, s_ = build_run([P, S], [A], [a])
    np.testing.assert_array_equal(p, np.pad(a, 2, constant_values=-1))
    np.testing.assert_allclose(s_, np.where(a > 0, a, a * np.float32(0.1)), rtol=1e-6)


def test_casts_and_const(rng):
    A = te.placeholder((N,), "int32", name="A")
    B = te.compute((N,), lambda i: A[i].astype("float32") * 0.5 + te.const(1, "float32"), name="B")
    C = te.compute((N,), lambda i: te.cast(B[i], "int8"), name="C")
    a = rng.integers(-50, 50, N).astype("int32")
    b, c = build_run([B, C], [A], [a])
    np.testing.assert_allclose(b, a * 0.5 + 1)
    np.testing.assert_array_equal(c, (a * 0.5 + 1).astype("int8"))


@pytest.mark.parametrize("reducer,ref", [(te.sum, np.sum), (te.max, np.max), (te.min, np.min),
                                         (te.prod, np.prod)])
def test_reductions(reducer, ref, rng):
    A = te.placeholder((5, 7), name="A")
    k = te.reduce_axis((0, 7), name="k")
    R = te.compute((5,), lambda i: reducer(A[i, k], axis=k), name="R")
    a = rng.uniform(0.5, 1.5, (5, 7)).astype("float32")
    np.testing.assert_allclose(build_run(R, [A], [a]), ref(a, axis=1), rtol=1e-6)


def test_reduction_where_and_two_axes(rng):
    A = te.placeholder((4, 6, 5), name="A")
    k1 = te.reduce_axis((0, 6), name="k1")
    k2 = te.reduce_axis((1, 5), name="k2")   # a reduce axis not starting at 0
    R = te.compute((4,), lambda i: te.sum(A[i, k1, k2], axis=[k1, k2], where=k1 > k2), name="R")
    a = rng.standard_normal((4, 6, 5)).astype("float32")
    mask = np.arange(6)[:, None] > np.arange(1, 5)[None, :]
    np.testing.assert_allclose(build_run(R, [A], [a]), (a[:, :, 1:] * mask).sum(axis=(1, 2)), rtol=1e-5, atol=1e-6)


def test_argmax_tuple_reduction(rng):
    def fcombine(x, y):
        take_x = x[1] >= y[1]
        return te.select(take_x, x[0], y[0]), te.select(take_x, x[1], y[1])

    def fidentity(t0, t1):
        return te.const(-1, t0), te.min_value(t1)

    argmax = te.comm_reducer(fcombine, fidentity, name="argmax")
    A = te.placeholder((6, 11), name="A")
    k = te.reduce_axis((0, 11), name="k")
    idx, val = te.compute((6,), lambda i: argmax((k.var, A[i, k]), axis=k), name="T")
    a = rng.standard_normal((6, 11)).astype("float32")
    i_, v_ = build_run([idx, val], [A], [a])
    np.testing.assert_array_equal(i_, a.argmax(axis=1))
    np.testing.assert_array_equal(v_, a.max(axis=1))


def test_multi_output_compute(rng):
    A = te.placeholder((N,), name="A")
    X, Y = te.compute((N,), lambda i: [A[i] + 1, A[i] * 2], name="XY")
    a = rng.standard_normal(N).astype("float32")
    x, y = build_run([X, Y], [A], [a])
    np.testing.assert_allclose(x, a + 1)
    np.testing.assert_allclose(y, a * 2)


def test_symbolic_shapes_and_tuple_indexing(rng):
    n, m = te.var("n"), te.size_var("m")
    A = te.placeholder((n, m), name="A")
    B = te.compute((m, n), lambda j, i: A[(i, j)] * 2.0, name="B")
    s = te.create_schedule(B.op)
    f = kiln.build(s, [A, B], target="llvm")
    for shape in [(3, 5), (17, 1), (1, 40)]:
        a = rng.standard_normal(shape).astype("float32")
        b = np.zeros(shape[::-1], "float32")
        f(a, b)
        np.testing.assert_allclose(b, a.T * 2)


def test_paper_transposed_matmul(rng):
    """The TVM paper's example: C[y, x] = sum_k A[k, y] * B[k, x], with symbolic m, n, h."""
    m, n, h = te.var("m"), te.var("n"), te.var("h")
    A = te.placeholder((h, m), name="A")
    B = te.placeholder((h, n), name="B")
    k = te.reduce_axis((0, h), name="k")
    C = te.compute((m, n), lambda y, x: te.sum(A[k, y] * B[k, x], axis=k), name="C")
    s = te.create_schedule(C.op)
    yo, xo, yi, xi = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 8)
    s[C].vectorize(xi)
    f = kiln.build(s, [A, B, C], target="llvm")
    a = rng.standard_normal((13, 21)).astype("float32")
    b = rng.standard_normal((13, 30)).astype("float32")
    c = np.zeros((21, 30), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a.T @ b, rtol=1e-5, atol=1e-5)


def test_design_md_example(rng):
    """The operator-level example of DESIGN.md, as written there."""
    n = te.var("n")
    A = te.placeholder((n, n), name="A"); B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 32, 32)
    s[C].vectorize(ji); s[C].parallel(io)
    text = str(kiln.lower(s, [A, B, C]))
    assert "parallel" in text and "for" in text
    f = kiln.build(s, [A, B, C], target="llvm")
    a = rng.standard_normal((70, 70)).astype("float32")
    b = rng.standard_normal((70, 70)).astype("float32")
    c = np.zeros((70, 70), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    ka, kb, kc = kiln.nd.array(a), kiln.nd.array(b), kiln.nd.empty((70, 70), "float32")
    f(ka, kb, kc)
    np.testing.assert_allclose(kc.numpy(), a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["llvm", "c"])
def test_targets_agree(target, rng):
    A = te.placeholder((N, 9), name="A")
    k = te.reduce_axis((0, 9), name="k")
    B = te.compute((N,), lambda i: te.sum(te.exp(A[i, k]), axis=k), name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(s[B].op.axis[0])
    a = rng.standard_normal((N, 9)).astype("float32")
    b = build_run(B, [A], [a], target=target, schedule=s)
    np.testing.assert_allclose(b, np.exp(a).sum(axis=1), rtol=1e-5)
