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
