"""Property test: random legal schedules never change what a computation produces.

Five workloads (matmul, padded conv2d, softmax, a producer/consumer chain, a reduction with
rfactor), each scheduled by random sequences of primitives, built for the LLVM target and
compared with numpy. 100 schedules each, 500 in all.
"""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kiln
from kiln import te
from random_schedule import random_loop_primitives, random_placement

SETTINGS = settings(max_examples=100, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
RTOL = 1e-5   # float32; sums here have at most a few hundred terms
ATOL = 1e-5


def _schedule_all(data, s, stages, steps_max=4):
    for stage in stages:
        random_loop_primitives(data, s, stage, data.draw(st.integers(0, steps_max)))
    for stage in reversed(stages[:-1]):
        random_placement(data, s, stage)


def _run(s, args, inputs, out_shapes):
    f = kiln.build(s, args, target="llvm")
    outs = [np.zeros(shape, dtype="float32") for shape in out_shapes]
    f(*inputs, *outs)
    return outs


@SETTINGS
@given(st.data())
def test_matmul(data):
    m, n, k = (data.draw(st.integers(1, 24)) for _ in range(3))
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    stages = [s[C]]
    if data.draw(st.booleans()):
        CC = s.cache_write(C, "local")
        stages = [s[CC], s[C]]
    _schedule_all(data, s, stages)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = rng.standard_normal((m, k), dtype="float32")
    b = rng.standard_normal((k, n), dtype="float32")
    (c,) = _run(s, [A, B, C], [a, b], [(m, n)])
    np.testing.assert_allclose(c, a @ b, rtol=RTOL, atol=ATOL)


def _conv_reference(x, w, pad, stride):
    n, ci, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - kh) // stride + 1
    ow = (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, co, oh, ow), dtype="float64")
    for y in range(oh):
        for x_ in range(ow):
            patch = xp[:, :, y * stride:y * stride + kh, x_ * stride:x_ * stride + kw]
            out[:, :, y, x_] = np.einsum("nchw,ochw->no", patch, w)
    return out


@SETTINGS
@given(st.data())
def test_conv2d_padded(data):
    ci, co = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    h = data.draw(st.integers(3, 9))
    stride = data.draw(st.sampled_from([1, 2]))
    pad, kk = 1, 3
    X = te.placeholder((1, ci, h, h), name="X")
    W = te.placeholder((co, ci, kk, kk), name="W")
    P = te.compute((1, ci, h + 2 * pad, h + 2 * pad),
                   lambda b, c, y, x: te.if_then_else(
                       te.all(y >= pad, y < h + pad, x >= pad, x < h + pad),
                       X[b, c, y - pad, x - pad], 0.0), name="P")
    oh = (h + 2 * pad - kk) // stride + 1
    rc = te.reduce_axis((0, ci), name="rc")
    ry = te.reduce_axis((0, kk), name="ry")
    rx = te.reduce_axis((0, kk), name="rx")
    Y = te.compute((1, co, oh, oh), lambda b, f, y, x: te.sum(
        P[b, rc, y * stride + ry, x * stride + rx] * W[f, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
    s = te.create_schedule(Y.op)
    _schedule_all(data, s, [s[P], s[Y]], steps_max=3)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    x = rng.standard_normal((1, ci, h, h), dtype="float32")
    w = rng.standard_normal((co, ci, kk, kk), dtype="float32")
    (y,) = _run(s, [X, W, Y], [x, w], [(1, co, oh, oh)])
    np.testing.assert_allclose(y, _conv_reference(x, w, pad, stride), rtol=1e-4, atol=1e-4)


@SETTINGS
@given(st.data())
def test_softmax(data):
    m, n = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 20))
    A = te.placeholder((m, n), name="A")
    k1 = te.reduce_axis((0, n), name="k1")
    mx = te.compute((m,), lambda i: te.max(A[i, k1], axis=k1), name="mx")
    ex = te.compute((m, n), lambda i, j: te.exp(A[i, j] - mx[i]), name="ex")
    k2 = te.reduce_axis((0, n), name="k2")
    sm = te.compute((m,), lambda i: te.sum(ex[i, k2], axis=k2), name="sm")
    out = te.compute((m, n), lambda i, j: ex[i, j] / sm[i], name="out")
    s = te.create_schedule(out.op)
    stages = [s[mx], s[ex], s[sm], s[out]]
    for stage in stages:
        random_loop_primitives(data, s, stage, data.draw(st.integers(0, 3)))
    # Placements that keep every producer inside the loops of all of its consumers.
    placement = data.draw(st.sampled_from(["root", "inline_ex", "all_at_out"]))
    if placement != "root":
        loop = data.draw(st.sampled_from(s[out].leaf_iter_vars))
        if placement == "inline_ex":
            s[ex].compute_inline()
        else:
            s[ex].compute_at(s[out], loop)
        s[mx].compute_at(s[out], loop)
        s[sm].compute_at(s[out], loop)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = rng.standard_normal((m, n), dtype="float32") * 3
    (o,) = _run(s, [A, out], [a], [(m, n)])
    e = np.exp(a - a.max(axis=1, keepdims=True))
    np.testing.assert_allclose(o, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


@SETTINGS
@given(st.data())
def test_producer_consumer_chain(data):
    m, n = data.draw(st.integers(1, 12)), data.draw(st.integers(1, 12))
    A = te.placeholder((m, n + 1), name="A")
    B = te.compute((m, n + 1), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    C = te.compute((m, n), lambda i, j: B[i, j] + B[i, j + 1], name="C")
    D = te.compute((m, n), lambda i, j: C[i, j] * 3.0, name="D")
    s = te.create_schedule(D.op)
    _schedule_all(data, s, [s[B], s[C], s[D]])
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = rng.standard_normal((m, n + 1), dtype="float32")
    (d,) = _run(s, [A, D], [a], [(m, n)])
    b = a * 2 + 1
    np.testing.assert_allclose(d, (b[:, :-1] + b[:, 1:]) * 3, rtol=RTOL, atol=ATOL)


@SETTINGS
@given(st.data())
def test_rfactor_reduction(data):
    m, k = data.draw(st.integers(1, 8)), data.draw(st.integers(1, 40))
    A = te.placeholder((m, k), name="A")
    r = te.reduce_axis((0, k), name="r")
    S = te.compute((m,), lambda i: te.sum(A[i, r], axis=r), name="S")
    s = te.create_schedule(S.op)
    ro, ri = s[S].split(r, factor=data.draw(st.integers(1, 8)))
    SF = s.rfactor(S, data.draw(st.sampled_from([ro, ri])))
    stages = [s[SF], s[S]]
    for stage in stages:
        random_loop_primitives(data, s, stage, data.draw(st.integers(0, 4)))
    if data.draw(st.booleans()):
        s[SF].compute_at(s[S], data.draw(st.sampled_from(s[S].leaf_iter_vars)))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    a = rng.standard_normal((m, k), dtype="float32")
    (out,) = _run(s, [A, S], [a], [(m,)])
    np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5, atol=1e-5)
