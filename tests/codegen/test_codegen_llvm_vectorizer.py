"""Loops kiln leaves scalar whose indices LLVM rewrites into masks: the results must not depend
on what LLVM's vectorizers make of them.

LLVM 22's loop vectorizer turned the index r*4 + (ij % 4) of a fused loop (InstCombine makes it
`or disjoint (ij & 3), r << 2`) into consecutive loads, so every second row of a matmul read the
wrong part of B (max error 11 on values ~5); kiln now leaves LLVM's loop vectorizer off
(kiln.codegen.llvm.jit). Found by tests/te/test_random_schedules.py.

Tolerance: float32 sums of at most 17 products of standard-normal values: rtol 1e-5, atol 1e-5.
"""
import numpy as np
import pytest

import kiln
from kiln import te

RTOL = ATOL = 1e-5


def _matmul(m, n, k):
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="r")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C, r


@pytest.mark.parametrize("m,n,k", [(6, 4, 17), (5, 8, 3), (9, 2, 11), (4, 16, 7)])
def test_reduction_outside_a_fused_loop(m, n, k):
    """for r: for ij in fused(i, j): C[ij] += A[ij // n, r] * B[r, ij % n]."""
    A, B, C, r = _matmul(m, n, k)
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    s[C].reorder(r, s[C].fuse(i, j))
    f = kiln.build(s, [A, B, C], target="llvm")
    rng = np.random.default_rng(m * 100 + n)
    a = rng.standard_normal((m, k), dtype="float32")
    b = rng.standard_normal((k, n), dtype="float32")
    c = np.zeros((m, n), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("n", [2, 4, 8])
def test_masked_gather_of_a_fused_copy(n):
    """out[ij] = x[ij % n, ij // n] (a transpose through one fused loop): masked and shifted
    indices of one induction variable."""
    m = 6
    x = te.placeholder((n, m), name="x")
    y = te.compute((m, n), lambda i, j: x[j, i] * 2.0, name="y")
    s = te.create_schedule(y.op)
    s[y].fuse(*y.op.axis)
    f = kiln.build(s, [x, y], target="llvm")
    xa = np.arange(n * m, dtype="float32").reshape(n, m)
    out = np.zeros((m, n), "float32")
    f(xa, out)
    np.testing.assert_array_equal(out, xa.T * 2.0)


def test_slp_vectorizer_invalid_ir_is_caught_and_rebuilt():
    """Three stencil stages at the root (the default schedule): LLVM 22's SLP vectorizer made
    IR whose shufflevector used a load before it was defined, and machine code generation
    aborted the whole process. kiln verifies the optimized module and optimizes it again
    without the SLP vectorizer; the kernel computes what numpy does."""
    A = te.placeholder((12, 12), name="A")
    B = te.compute((10, 10), lambda y, x: A[y + 2, x + 1] * 2.0 + A[y, x], name="B")
    C = te.compute((8, 8), lambda y, x: B[y, x] * 3.0 + B[y + 2, x + 2], name="C")
    D = te.compute((6, 6), lambda y, x: C[y + 1, x + 2] - C[y, x + 1], name="D")
    f = kiln.build(te.create_schedule(D.op), [A, D], target="llvm")
    a = np.random.default_rng(0).standard_normal((12, 12)).astype("float32")
    b = a[2:12, 1:11] * 2 + a[:10, :10]
    c = b[:8, :8] * 3 + b[2:10, 2:10]
    want = c[1:7, 2:8] - c[:6, 1:7]
    got = np.zeros((6, 6), "float32")
    f(a, got)
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)
