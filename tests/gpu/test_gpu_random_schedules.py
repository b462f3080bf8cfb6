"""Random legal GPU schedules (tile sizes, bindings, shared / local staging, virtual threads,
cross-thread reductions) of a matmul, a conv2d, a softmax and row reductions, each compared
with numpy on an OpenCL device (PoCL here) and, where a CUDA GPU is, on it too. 205 schedules
per device and run."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import kiln
from kiln import te, topi
from matmul_schedules import matmul, paper_schedule

SETTINGS = dict(deadline=None, derandomize=True, suppress_health_check=list(HealthCheck),
                database=None)
RTOL = 1e-5


def _check(mod, device, arrays, out_index, ref):
    dev_arrays = [kiln.nd.array(a, device=device) for a in arrays]
    mod(*dev_arrays)
    out = dev_arrays[out_index].numpy()
    np.testing.assert_allclose(out, ref, rtol=RTOL, atol=RTOL * max(1.0, np.abs(ref).max()))


@pytest.fixture(params=["opencl", "cuda"])
def gpu(request, monkeypatch):
    # PoCL compiles each kernel twice (the program, then per work-group size): unoptimized,
    # ~200 small kernels take about a third of the time; the results are the same.
    monkeypatch.setenv("KILN_OPENCL_BUILD_OPTIONS", "-cl-opt-disable")
    return request.getfixturevalue(f"{request.param}_device")


pow2 = st.sampled_from([1, 2, 4, 8])


@settings(max_examples=60, **SETTINGS)
@given(n=st.integers(1, 70), m=st.integers(1, 70), l=st.integers(1, 40), ty=pow2, tx=pow2,
       vy=st.sampled_from([1, 2]), vx=st.sampled_from([1, 2]), py=st.sampled_from([1, 2, 4]),
       px=st.sampled_from([1, 2, 4]), k_tile=pow2, k_inner=st.sampled_from([1, 2]),
       local=st.booleans(), fused=st.booleans(), seed=st.integers(0, 2**16))
def test_random_matmul_schedules(gpu, n, m, l, ty, tx, vy, vx, py, px, k_tile, k_inner, local,
                                 fused, seed):
    A, B, C = matmul(n, m, l)
    s = paper_schedule(A, B, C, (ty, tx), (vy, vx), (py, px), k_tile, min(k_inner, k_tile),
                       local, fused)
    mod = kiln.build(s, [A, B, C], target=gpu.device_type)
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((l, n)).astype("float32")
    b = rng.standard_normal((l, m)).astype("float32")
    c = np.zeros((n, m), "float32")
    _check(mod, gpu, [a, b, c], 2, a.astype("float64").T @ b.astype("float64"))


def _conv_ref(x, w, stride, pad):
    n, c, h, wd = x.shape
    f, _, kh, kw = w.shape
    xp = np.pad(x.astype("float64"), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, f, oh, ow))
    for i in range(kh):
        for j in range(kw):
            patch = xp[:, :, i:i + stride * oh:stride, j:j + stride * ow:stride]
            out += np.einsum("nchw,fc->nfhw", patch, w[:, :, i, j].astype("float64"))
    return out


@settings(max_examples=55, **SETTINGS)
@given(c=st.integers(1, 9), f=st.integers(1, 12), hw=st.integers(3, 12),
       k=st.sampled_from([1, 3]), stride=st.sampled_from([1, 2]), pad=st.sampled_from([0, 1]),
       threads=st.sampled_from([4, 8, 16, 32]), vthreads=st.sampled_from([1, 2]),
       f_tile=st.sampled_from([1, 2, 4]), shared_weight=st.booleans(), local=st.booleans(),
       rc_tile=st.sampled_from([1, 2, 4]), seed=st.integers(0, 2**16))
def test_random_conv2d_schedules(gpu, c, f, hw, k, stride, pad, threads, vthreads, f_tile,
                                 shared_weight, local, rc_tile, seed):
    if hw + 2 * pad < k:
        return
    X = te.placeholder((1, c, hw, hw), name="X")
    W = te.placeholder((f, c, k, k), name="W")
    Y = topi.nn.conv2d_nchw(X, W, stride, pad, 1)
    s = te.create_schedule(Y.op)
    if Y.op.input_tensors()[0].op.name != "X":
        s[Y.op.input_tensors()[0]].compute_inline()       # the padding
    WS = s.cache_read(W, "shared", [Y]) if shared_weight else None
    YL = s.cache_write(Y, "local") if local else Y
    nn_, ff, yy, xx = s[Y].op.axis
    fo, fi = s[Y].split(ff, factor=f_tile * vthreads)
    fv, fi = s[Y].split(fi, nparts=vthreads)
    bx, tx = s[Y].split(s[Y].fuse(yy, xx), factor=threads)
    s[Y].reorder(nn_, fo, bx, fv, tx, fi)
    s[Y].bind(s[Y].fuse(nn_, fo), te.thread_axis("blockIdx.y"))
    s[Y].bind(bx, te.thread_axis("blockIdx.x"))
    s[Y].bind(fv, te.thread_axis((0, vthreads), "vthread", name="vf"))
    thread_x = te.thread_axis((0, threads), "threadIdx.x")
    s[Y].bind(tx, thread_x)
    if local:
        s[YL].compute_at(s[Y], tx)
    rc = s[YL].op.reduce_axis[0]
    rco, _ = s[YL].split(rc, factor=rc_tile)
    inner = s[YL].leaf_iter_vars
    inner = inner if local else inner[inner.index(tx) + 1:]       # the loops inside the threads
    s[YL].reorder(rco, *[iv for iv in inner if iv is not rco])
    if WS is not None:
        # the weights one step of rc needs, fetched by all threads of the block together
        s[WS].compute_at(s[YL], rco)
        _, wtx = s[WS].split(s[WS].fuse(*s[WS].op.axis), factor=threads)
        s[WS].bind(wtx, thread_x)
    mod = kiln.build(s, [X, W, Y], target=gpu.device_type)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, c, hw, hw)).astype("float32")
    w = rng.standard_normal((f, c, k, k)).astype("float32")
    ref = _conv_ref(x, w, stride, pad)
    _check(mod, gpu, [x, w, np.zeros(ref.shape, "float32")], 2, ref)


@settings(max_examples=45, **SETTINGS)
@given(rows=st.integers(1, 50), cols=st.integers(1, 90), threads=st.sampled_from([1, 4, 16, 64]),
       inline_exp=st.booleans(), local_reductions=st.booleans(), cross_thread=st.booleans(),
       seed=st.integers(0, 2**16))
def test_random_softmax_schedules(gpu, rows, cols, threads, inline_exp, local_reductions,
                                  cross_thread, seed):
    """A thread per row; or (cross_thread) a block per row, its threads sharing the columns
    of both reductions and of the output."""
    X = te.placeholder((rows, cols), name="X")
    k1 = te.reduce_axis((0, cols), name="k1")
    M = te.compute((rows,), lambda i: te.max(X[i, k1], axis=k1), name="M")
    E = te.compute((rows, cols), lambda i, j: te.exp(X[i, j] - M[i]), name="E")
    k2 = te.reduce_axis((0, cols), name="k2")
    S = te.compute((rows,), lambda i: te.sum(E[i, k2], axis=k2), name="S")
    Y = te.compute((rows, cols), lambda i, j: E[i, j] / S[i], name="Y")
    s = te.create_schedule(Y.op)
    if cross_thread:
        _softmax_block_per_row(s, Y, (M, S, E), threads, inline_exp)
    else:
        _softmax_thread_per_row(s, Y, (M, S, E), threads, inline_exp, local_reductions)
    mod = kiln.build(s, [X, Y], target=gpu.device_type)
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal((rows, cols)) * 3).astype("float32")
    e = np.exp(x.astype("float64") - x.max(axis=1, keepdims=True))
    _check(mod, gpu, [x, np.zeros_like(x)], 1, e / e.sum(axis=1, keepdims=True))


def _softmax_block_per_row(s, Y, stages, threads, inline_exp):
    M, S, E = stages
    i, j = s[Y].op.axis
    thread_x = te.thread_axis((0, threads), "threadIdx.x")
    s[Y].bind(i, te.thread_axis("blockIdx.x"))
    _, tx = s[Y].split(j, factor=threads)
    s[Y].bind(tx, thread_x)
    for T in (M, S):
        s[T].compute_at(s[Y], i)
        s[T].set_scope("local")
        _, rtx = s[T].split(s[T].op.reduce_axis[0], factor=threads)
        s[T].bind(rtx, thread_x)
    if inline_exp:
        s[E].compute_inline()
    else:
        # the row's exponentials in shared memory, each thread computing its columns
        s[E].compute_at(s[Y], i)
        s[E].set_scope("shared")
        _, etx = s[E].split(s[E].op.axis[1], factor=threads)
        s[E].bind(etx, thread_x)


def _softmax_thread_per_row(s, Y, stages, threads, inline_exp, local_reductions):
    M, S, E = stages
    i, j = s[Y].op.axis
    bx, tx = s[Y].split(i, factor=threads)
    s[Y].bind(bx, te.thread_axis("blockIdx.x"))
    s[Y].bind(tx, te.thread_axis((0, threads), "threadIdx.x"))
    for T in (M, S):
        s[T].compute_at(s[Y], tx)
        if not local_reductions:
            s[T].set_scope("local")
    if inline_exp:
        s[E].compute_inline()
    else:
        s[E].compute_at(s[Y], tx)


def _argmax_reducer():
    def fcombine(x, y):
        # The larger value, and of equal ones the first index (numpy's argmax), whatever
        # order the threads combine in.
        take_x = te.any(x[1] > y[1], te.all(x[1] == y[1], x[0] < y[0]))
        return te.select(take_x, x[0], y[0]), te.select(take_x, x[1], y[1])

    def fidentity(t0, t1):
        return te.const(-1, t0), te.min_value(t1)

    return te.comm_reducer(fcombine, fidentity, name="argmax")


@settings(max_examples=45, **SETTINGS)
@given(rows=st.integers(1, 12), cols=st.integers(1, 300),
       kind=st.sampled_from(["sum", "max", "argmax"]), tx=st.sampled_from([1, 2, 8, 32, 64]),
       ty=st.sampled_from([1, 2, 4]), use_rfactor=st.booleans(), fused=st.booleans(),
       seed=st.integers(0, 2**16))
def test_random_cross_thread_reductions(gpu, rows, cols, kind, tx, ty, use_rfactor, fused, seed):
    """A row reduction whose reduction axis is split over threadIdx.x (an all-reduce across
    the threads), rows over blockIdx.x and threadIdx.y; with the threads' shares computed by an
    rfactor stage or by the reduction itself; stored to global memory by one thread, or kept
    in every thread's registers and read there by the consumer."""
    X = te.placeholder((rows, cols), name="X")
    k = te.reduce_axis((0, cols), name="k")
    if kind == "argmax":
        R, _ = te.compute((rows,), lambda i: _argmax_reducer()((k.var, X[i, k]), axis=k),
                          name="R")
    else:
        fn = te.sum if kind == "sum" else te.max
        R = te.compute((rows,), lambda i: fn(X[i, k], axis=k), name="R")
    Y = te.compute((rows,), lambda i: R[i].astype("float32") * 2.0, name="Y")
    s = te.create_schedule(Y.op)
    ko, ki = s[R].split(s[R].op.reduce_axis[0], factor=tx)
    # No declared extent: rfactor makes an axis of the split's clipped extent (cols < tx).
    thread_x = te.thread_axis("threadIdx.x")
    if use_rfactor:
        RF = s.rfactor(R, ki)
        RF = RF[0] if isinstance(RF, list) else RF          # a tuple reduction's: one op
        red_axis = s[R].op.reduce_axis[0]
        s[R].bind(red_axis, thread_x)
        s[RF].compute_at(s[R], red_axis)
    else:
        s[R].bind(ki, thread_x)
    by, iy = s[Y].split(Y.op.axis[0], factor=ty)
    s[Y].bind(by, te.thread_axis("blockIdx.x"))
    s[Y].bind(iy, te.thread_axis((0, ty), "threadIdx.y"))
    if fused:
        s[R].compute_at(s[Y], iy)
        s[R].set_scope("local")
    else:
        ry, riy = s[R].split(s[R].op.axis[0], factor=ty)
        s[R].bind(ry, te.thread_axis("blockIdx.x"))
        s[R].bind(riy, te.thread_axis((0, ty), "threadIdx.y"))
    mod = kiln.build(s, [X, Y], target=gpu.device_type)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols)).astype("float32")
    if kind == "argmax":
        x[:, rng.integers(0, cols)] = x.max()          # ties: the first index must win
        ref = x.argmax(axis=1) * 2.0
    else:
        ref = (x.astype("float64").sum(axis=1) if kind == "sum" else x.max(axis=1)) * 2.0
    _check(mod, gpu, [x, np.zeros(rows, "float32")], 1, ref)
