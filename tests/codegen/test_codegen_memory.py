"""Loads and stores: contiguous vectors, strided and indexed gathers/scatters, broadcasts,
guarded loads next to a protected page (an unguarded out-of-bounds read would crash), bool and
float16 storage. Results are exact (data movement only)."""
import ctypes
import mmap

import numpy as np
import pytest

from codegen_helpers import TARGETS, loop, run
from kiln.codegen import build_module
from kiln.tir import (Broadcast, Buffer, BufferLoad, BufferStore, Cast, PrimFunc, Ramp, Var,
                      const, op)

_keep = []


def guarded_array(values: np.ndarray) -> np.ndarray:
    """A copy of values ending exactly where an inaccessible page begins."""
    page = mmap.PAGESIZE
    nbytes = values.nbytes
    pages = (nbytes + page - 1) // page + 1
    region = mmap.mmap(-1, pages * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(base + (pages - 1) * page, page, 0) == 0
    offset = (pages - 1) * page - nbytes
    array = np.frombuffer(region, dtype=values.dtype, count=values.size, offset=offset)
    array[:] = values
    _keep.append(region)
    return array


@pytest.mark.parametrize("target", TARGETS)
def test_strided_gather_and_scatter(target, rng):
    n = 64
    X = Buffer.make("X", "float32", (2 * n,))
    Y = Buffer.make("Y", "float32", (2 * n,))
    i = Var("i")
    # Y[2k + 1] = X[2k] * 3 for k in a vector of 8: stride-2 gather and stride-2 scatter.
    src = Ramp(i * 16, const(2), 8)
    dst = Ramp(i * 16 + 1, const(2), 8)
    f = PrimFunc("strided", [X, Y], loop(i, n // 8, BufferStore(Y, BufferLoad(X, src) * 3.0, dst)))
    x = rng.standard_normal(2 * n).astype("float32")
    y = np.zeros(2 * n, "float32")
    run(f, target, x, y)
    expected = np.zeros(2 * n, "float32")
    expected[1::2] = x[0::2] * 3
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("stride,lanes", [(2, 16), (3, 16), (4, 16), (2, 8), (2, 32)])
def test_strided_load_ending_at_a_protected_page(target, stride, lanes, rng):
    # The last vector's span ends on the last element before an inaccessible page: a load
    # wider than the span (the LLVM back-end loads it contiguously and shuffles) would crash.
    n = 4
    span = (lanes - 1) * stride + 1
    size = (n - 1) * lanes * stride + span
    X = Buffer.make("X", "float32", (size,))
    Y = Buffer.make("Y", "float32", (n * lanes,))
    i = Var("i")
    f = PrimFunc("strided_load", [X, Y], loop(i, n, BufferStore(
        Y, BufferLoad(X, Ramp(i * (lanes * stride), const(stride), lanes)) + 1.0,
        Ramp(i * lanes, const(1), lanes))))
    x = guarded_array(rng.standard_normal(size).astype("float32"))
    y = np.zeros(n * lanes, "float32")
    mod = run(f, target, x, y)
    np.testing.assert_array_equal(y, x[::stride] + np.float32(1))
    if target == "llvm" and lanes * stride <= 64:
        assert "gather" not in mod.get_source()


@pytest.mark.parametrize("target", TARGETS)
def test_indexed_gather_and_scatter(target, rng):
    n = 32
    X = Buffer.make("X", "float64", (n,))
    IDX = Buffer.make("IDX", "int32", (n,))
    Y = Buffer.make("Y", "float64", (n,))
    Z = Buffer.make("Z", "float64", (n,))
    i = Var("i")
    lanes = Ramp(i * 8, const(1), 8)
    gather = BufferStore(Y, BufferLoad(X, BufferLoad(IDX, lanes)), lanes)
    scatter = BufferStore(Z, BufferLoad(X, lanes), BufferLoad(IDX, lanes))
    f = PrimFunc("perm", [X, IDX, Y, Z], loop(i, n // 8, gather))
    g = PrimFunc("inv_perm", [X, IDX, Y, Z], loop(i, n // 8, scatter))
    mod = build_module([f, g], target)
    x = rng.standard_normal(n)
    idx = rng.permutation(n).astype("int32")
    y, z = np.zeros(n), np.zeros(n)
    mod["perm"](x, idx, y, z)
    np.testing.assert_array_equal(y, x[idx])
    mod["inv_perm"](x, idx, y, z)
    expected = np.zeros(n)
    expected[idx] = x
    np.testing.assert_array_equal(z, expected)


@pytest.mark.parametrize("target", TARGETS)
def test_broadcast_of_scalar_parameter_and_ramp_values(target, rng):
    n = 48
    X = Buffer.make("X", "float32", (n,))
    Y = Buffer.make("Y", "float32", (n,))
    K = Buffer.make("K", "int32", (n,))
    s = Var("s", "float32")
    i = Var("i")
    lanes = Ramp(i * 16, const(1), 16)
    body = [BufferStore(Y, BufferLoad(X, lanes) * Broadcast(s, 16) + 1.0, lanes),
            # integer Ramp as a value, with a non-constant base and stride
            BufferStore(K, Ramp(i * 3, i + 1, 16), lanes)]
    from kiln.tir import SeqStmt
    f = PrimFunc("scale", [X, s, Y, K], loop(i, n // 16, SeqStmt.flatten(*body)))
    x = rng.standard_normal(n).astype("float32")
    y, k = np.zeros(n, "float32"), np.zeros(n, "int32")
    run(f, target, x, 2.5, y, k)
    # a*b + c may be contracted into one fused multiply-add (both back-ends allow it)
    separate = x * np.float32(2.5) + np.float32(1)
    fused = (x.astype("float64") * 2.5 + 1).astype("float32")
    assert np.all((y == separate) | (y == fused))
    blocks = np.arange(n) // 16
    np.testing.assert_array_equal(k, blocks * 3 + (blocks + 1) * (np.arange(n) % 16))


@pytest.mark.parametrize("target", TARGETS)
def test_if_then_else_guards_out_of_bounds_scalar_load(target, rng):
    n, padded = 37, 48
    X = Buffer.make("X", "float32", (n,))
    Y = Buffer.make("Y", "float32", (padded,))
    i = Var("i")
    value = op.if_then_else(i < n, BufferLoad(X, i) * 2.0, const(-1.0))
    f = PrimFunc("pad", [X, Y], loop(i, padded, BufferStore(Y, value, i)))
    x = guarded_array(rng.standard_normal(n).astype("float32"))
    y = np.zeros(padded, "float32")
    run(f, target, x, y)
    np.testing.assert_array_equal(y, np.concatenate([x * 2, -np.ones(padded - n, "float32")]))


@pytest.mark.parametrize("target", TARGETS)
def test_vector_if_then_else_masks_out_of_bounds_lanes(target, rng):
    n, padded = 37, 48
    X = Buffer.make("X", "float32", (n,))
    IDX = Buffer.make("IDX", "int32", (padded,))
    Y = Buffer.make("Y", "float32", (padded,))
    Z = Buffer.make("Z", "float32", (padded,))
    i = Var("i")
    lanes = Ramp(i * 16, const(1), 16)
    inside = lanes < Broadcast(const(n), 16)
    contiguous = op.if_then_else(inside, BufferLoad(X, lanes), Broadcast(const(0.5), 16))
    # gather through indices that run past the end on the lanes the mask turns off
    gathered = op.if_then_else(inside, BufferLoad(X, BufferLoad(IDX, lanes)), Broadcast(const(0.0), 16))
    from kiln.tir import SeqStmt
    body = SeqStmt.flatten(BufferStore(Y, contiguous, lanes), BufferStore(Z, gathered, lanes))
    f = PrimFunc("pad16", [X, IDX, Y, Z], loop(i, padded // 16, body))
    x = guarded_array(rng.standard_normal(n).astype("float32"))
    idx = np.concatenate([rng.integers(0, n, n), np.full(padded - n, 1 << 20)]).astype("int32")
    y, z = np.zeros(padded, "float32"), np.zeros(padded, "float32")
    run(f, target, x, idx, y, z)
    np.testing.assert_array_equal(y, np.concatenate([x, np.full(padded - n, 0.5, "float32")]))
    np.testing.assert_array_equal(z, np.concatenate([x[idx[:n]], np.zeros(padded - n, "float32")]))


@pytest.mark.parametrize("target", TARGETS)
def test_if_then_else_evaluates_only_the_taken_branch_division(target):
    n = 16
    X = Buffer.make("X", "int32", (n,))
    Y = Buffer.make("Y", "int32", (n,))
    i = Var("i")
    x = BufferLoad(X, i)
    # 100 / x would trap (SIGFPE) for x == 0 if both branches were evaluated.
    f = PrimFunc("safe_div", [X, Y], loop(i, n, BufferStore(
        Y, op.if_then_else(x != 0, op.truncdiv(const(100), x), const(-7)), i)))
    xs = np.arange(-8, 8, dtype="int32")
    y = np.zeros(n, "int32")
    run(f, target, xs, y)
    safe = np.where(xs == 0, 1, xs)
    np.testing.assert_array_equal(y, np.where(xs == 0, -7, np.fix(100 / safe).astype("int32")))


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("lanes", [1, 8])
def test_bool_and_float16_storage(target, lanes, rng):
    n = 64
    B = Buffer.make("B", "bool", (n,))
    H = Buffer.make("H", "float16", (n,))
    O = Buffer.make("O", "float16", (n,))
    M = Buffer.make("M", "bool", (n,))
    i = Var("i")
    idx = i if lanes == 1 else Ramp(i * lanes, const(1), lanes)
    h = BufferLoad(H, idx)
    dtype = "float16" if lanes == 1 else f"float16x{lanes}"
    zero = const(0.0, dtype)
    from kiln.tir import SeqStmt, Select
    body = SeqStmt.flatten(
        BufferStore(O, Select(BufferLoad(B, idx), h * h + h, Cast(dtype, Cast(
            "float32" if lanes == 1 else f"float32x{lanes}", h) * 0.5)), idx),
        BufferStore(M, op.logical_not(BufferLoad(B, idx)) & (h > zero), idx))
    f = PrimFunc("half", [B, H, O, M], loop(i, n // lanes, body))
    b = random_array_bool(rng, n)
    hv = rng.uniform(-4, 4, n).astype("float16")
    o, m = np.zeros(n, "float16"), np.zeros(n, bool)
    run(f, target, b, hv, o, m)
    expected = np.where(b, hv * hv + hv, (hv.astype("float32") * 0.5).astype("float16"))
    # h*h + h may be contracted to one fused operation (native float16 FMA, e.g. AVX512-FP16),
    # which skips numpy's rounding of h*h: that rounding's error is up to half a float16 ulp
    # of |h*h|, not of the result (h near -1.44: h*h ~ 2.07, the sum ~ 0.60). Allow half an
    # ulp of each of the two roundings and of the result's (a float16 ulp of x is at most
    # 2^-10 |x|).
    got, want = o.astype("float32"), expected.astype("float32")
    square = np.where(b, hv.astype("float32") ** 2, 0.0)
    bound = 2.0 ** -11 * (square + 2 * np.abs(want))
    assert np.all(np.abs(got - want) <= bound), np.abs(got - want) - bound
    np.testing.assert_array_equal(m, ~b & (hv > 0))


def random_array_bool(rng, n):
    return rng.integers(0, 2, n).astype(bool)
