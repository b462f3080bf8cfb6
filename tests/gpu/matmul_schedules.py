"""The TVM paper's GPU matrix multiply (§4.2, Fig. 7 style), written with kiln.te: C = A^T B
with shared-memory tiles fetched cooperatively, per-thread register tiles, thread binding and
a virtual-thread split. Parameters make it the space the hypothesis tests draw from."""
from kiln import te


def matmul(n, m, l, dtype="float32"):
    A = te.placeholder((l, n), dtype, name="A")
    B = te.placeholder((l, m), dtype, name="B")
    k = te.reduce_axis((0, l), name="k")
    C = te.compute((n, m), lambda y, x: te.sum(A[k, y] * B[k, x], axis=k), name="C")
    return A, B, C


def paper_schedule(A, B, C, threads=(8, 8), vthreads=(2, 2), per_thread=(4, 4), k_tile=8,
                   k_inner=1, local=True, fetch_fused=True, align=None):
    """Block tile = vthreads * threads * per_thread on each axis; k in steps of k_tile. With
    align=(factor, offset), the shared tiles' rows are padded by storage_align."""
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    readers = [C]
    if local:
        AL = s.cache_read(AA, "local", [C])
        BL = s.cache_read(BB, "local", [C])
    CC = s.cache_write(C, "local")
    ty_n, tx_n = threads
    vy_n, vx_n = vthreads
    block_y = te.thread_axis("blockIdx.y")
    block_x = te.thread_axis("blockIdx.x")
    thread_y = te.thread_axis((0, ty_n), "threadIdx.y")
    thread_x = te.thread_axis((0, tx_n), "threadIdx.x")
    vy = te.thread_axis((0, vy_n), "vthread", name="vy")
    vx = te.thread_axis((0, vx_n), "vthread", name="vx")
    by, yi = s[C].split(C.op.axis[0], factor=vy_n * ty_n * per_thread[0])
    bx, xi = s[C].split(C.op.axis[1], factor=vx_n * tx_n * per_thread[1])
    s[C].reorder(by, bx, yi, xi)
    s[C].bind(by, block_y)
    s[C].bind(bx, block_x)
    tyz, yi = s[C].split(yi, nparts=vy_n)
    ty, yi = s[C].split(yi, nparts=ty_n)
    txz, xi = s[C].split(xi, nparts=vx_n)
    tx, xi = s[C].split(xi, nparts=tx_n)
    s[C].reorder(tyz, txz, ty, tx, yi, xi)
    s[C].bind(tyz, vy)
    s[C].bind(txz, vx)
    s[C].bind(ty, thread_y)
    s[C].bind(tx, thread_x)
    s[CC].compute_at(s[C], tx)
    yo, xo = CC.op.axis
    ko, ki = s[CC].split(CC.op.reduce_axis[0], factor=k_tile)
    kt, ki = s[CC].split(ki, factor=k_inner)
    s[CC].reorder(ko, kt, ki, yo, xo)
    s[AA].compute_at(s[CC], ko)
    s[BB].compute_at(s[CC], ko)
    if local:
        s[AL].compute_at(s[CC], kt)
        s[BL].compute_at(s[CC], kt)
    for T in (AA, BB):
        if align is not None:
            s[T].storage_align(s[T].op.axis[0], *align)
        if fetch_fused:
            fused = s[T].fuse(*s[T].op.axis)
            rest, txx = s[T].split(fused, factor=tx_n)
            rest, tyy = s[T].split(rest, factor=ty_n)
        else:
            tyy, rest = s[T].split(s[T].op.axis[0], nparts=ty_n)
            txx, rest = s[T].split(rest, nparts=tx_n)
        s[T].bind(tyy, thread_y)
        s[T].bind(txx, thread_x)
    return s
