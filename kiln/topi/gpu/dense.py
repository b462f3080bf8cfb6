"""GPU schedule of dense / matmul / batch_matmul with their fused epilogues: the TVM paper's
GPU matrix multiply (§4.2) — a block of threads computes a tile of the output, each thread a
register tile of it, while the operands' slices pass through shared memory, fetched by all the
block's threads together, one step of the reduction at a time."""
from __future__ import annotations

from ... import te
from ...target import current_target
from ...te.tensor import ComputeOp
from .. import tags
from ..utils import get_const_tuple
from .generic import schedule_generic

PRODUCTS = (tags.DENSE, tags.MATMUL, tags.BATCH_MATMUL)
K_TILE = 16
# (threads y, threads x, per-thread rows, per-thread columns), largest tile first: the first
# that gives enough blocks to fill a large GPU is used.
TILES = ((16, 16, 4, 4), (16, 16, 2, 4), (16, 16, 2, 2), (8, 16, 2, 2), (8, 8, 2, 2),
         (8, 8, 1, 1))
MIN_BLOCKS = 128


def _product(outs):
    found = []

    def visit(op, seen):
        if op in seen or not isinstance(op, ComputeOp):
            return
        seen.add(op)
        if op.tag in PRODUCTS:
            found.append(op)
        for t in op.input_tensors():
            visit(t.op, seen)

    seen: set = set()
    for o in outs:
        visit(o.op, seen)
    return found


def choose_tile(batch: int, m: int, n: int, max_threads: int):
    """(threads y, threads x, rows, columns) per thread for an m x n output (times batch).

    Example:
        >>> choose_tile(1, 4096, 4096, 1024)
        (16, 16, 4, 4)
        >>> choose_tile(1, 128, 768, 1024)
        (8, 16, 2, 2)
    """
    for ty, tx, py, px in TILES:
        if ty * tx > max_threads:
            continue
        blocks = batch * -(-m // (ty * py)) * -(-n // (tx * px))
        if blocks >= MIN_BLOCKS:
            return ty, tx, py, px
    return TILES[-1]


def schedule_dense(outs):
    """Shared-memory and register tiled schedule of a fused dense / matmul / batch_matmul.

    Example:
        >>> y = topi.nn.dense(x, w, b)
        >>> s = schedule_dense([y])
    """
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    products = _product(outs)
    if len(outs) != 1 or len(products) != 1:
        return schedule_generic(outs)
    (prod,) = products
    s = te.create_schedule([o.op for o in outs])
    if outs[0].op is prod:
        ls = s[s.cache_write(prod.output(0), "local")]
    else:
        ls = s[prod]
        ls.set_scope("local")
    a, b = ls.op.input_tensors()
    a_shared = s[s.cache_read(a, "shared", [ls])]
    b_shared = s[s.cache_read(b, "shared", [ls])]
    # (the cache stages rewired their readers: the output's op is read from the schedule)
    out_stage = s.outputs[0]
    keep = {out_stage, ls, a_shared, b_shared}
    for st in list(s.stages):
        if isinstance(st.op, ComputeOp) and st not in keep and not st.op.reduce_axis:
            st.compute_inline()
    out = out_stage.op.output(0)

    *batch, i, j = s[out].op.axis
    shape = get_const_tuple(out.shape)
    nbatch = 1
    for d in shape[:-2]:
        nbatch *= int(d)
    target = current_target()
    ty, tx, py, px = choose_tile(nbatch, int(shape[-2]), int(shape[-1]),
                                 target.max_num_threads if target.is_gpu else 256)
    by, yi = s[out].split(i, factor=ty * py)
    bx, xi = s[out].split(j, factor=tx * px)
    tyv, yi = s[out].split(yi, nparts=ty)
    txv, xi = s[out].split(xi, nparts=tx)
    s[out].reorder(*batch, by, bx, tyv, txv, yi, xi)
    if batch:
        s[out].bind(s[out].fuse(*batch) if len(batch) > 1 else batch[0],
                    te.thread_axis("blockIdx.z"))
    s[out].bind(by, te.thread_axis("blockIdx.y"))
    s[out].bind(bx, te.thread_axis("blockIdx.x"))
    thread_y = te.thread_axis((0, ty), "threadIdx.y")
    thread_x = te.thread_axis((0, tx), "threadIdx.x")
    s[out].bind(tyv, thread_y)
    s[out].bind(txv, thread_x)

    ls.compute_at(s[out], txv)
    (k,) = ls.op.reduce_axis
    ko, ki = ls.split(k, factor=K_TILE)
    ls.reorder(ko, ki, *ls.op.axis)
    for st in (a_shared, b_shared):
        st.compute_at(ls, ko)
        fused = st.fuse(*st.op.axis)
        rest, fx = st.split(fused, factor=tx)
        _, fy = st.split(rest, factor=ty)
        st.bind(fy, thread_y)
        st.bind(fx, thread_x)
    return s
