"""The hand-written GEMM schedule used by bench/gemm.py and `make demo`.

C[m, n] = sum_k A[m, k] * B[k, n]. Blocking for the memory hierarchy:
- registers: an MR x NR accumulator tile (cache_write, rows unrolled, columns vectorized:
  MR * NR/16 zmm registers) stays in registers while k runs, unrolled by 4;
- L1/L2: B is packed into panels of NR columns ([N/NR, K, NR]), so the micro-kernel reads one
  contiguous panel (K*NR*4 bytes, L2-resident) and MR rows of A per tile;
- threads: row tiles are distributed over the pool; the packing is parallel too.
"""
from __future__ import annotations

from kiln import te


def gemm_schedule(m, n, k, mr=8, nr=32, dtype="float32"):
    A = te.placeholder((m, k), dtype, name="A")
    B = te.placeholder((k, n), dtype, name="B")
    nb = (n + nr - 1) // nr
    packed = te.compute((nb, k, nr), lambda x, y, z: te.if_then_else(
        x * nr + z < n, B[y, x * nr + z], te.const(0, dtype)), name="packedB")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * packed[j // nr, r, j % nr], axis=r),
                   name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    mo, no, mi, ni = s[C].tile(C.op.axis[0], C.op.axis[1], mr, nr)
    s[CC].compute_at(s[C], no)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(ck, factor=4)
    s[CC].reorder(ko, ki, ci, cj)
    s[CC].unroll(ki)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    s[C].vectorize(ni)
    s[C].parallel(mo)
    px, py, pz = s[packed].op.axis
    s[packed].vectorize(pz)
    s[packed].parallel(px)
    return s, [A, B, C]
