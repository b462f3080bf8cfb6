"""GPU schedule of dense / matmul / batch_matmul with their fused epilogues: the TVM paper's
GPU matrix multiply (§4.2) — a block of threads computes a tile of the output, each thread a
register tile of it, while the operands' slices pass through shared memory, fetched by all the
block's threads together, one step of the reduction at a time."""
from __future__ import annotations

from dataclasses import dataclass

from ... import te
from ...target import current_target
from .. import tags
from ..utils import get_const_tuple, tuned_values
from .generic import schedule_generic
from .tiling import cooperative_fetch, single_anchor, stage_operands

PRODUCTS = (tags.DENSE, tags.MATMUL, tags.BATCH_MATMUL)
K_TILE = 16
# (threads y, threads x, per-thread rows, per-thread columns), largest tile first: the first
# that gives enough blocks to fill a large GPU is used.
TILES = ((16, 16, 4, 4), (16, 16, 2, 4), (16, 16, 2, 2), (8, 16, 2, 2), (8, 8, 2, 2),
         (8, 8, 1, 1))
MIN_BLOCKS = 128


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


@dataclass(frozen=True)
class DenseTile:
    """One point of the GPU dense schedule. Along output rows (y) and columns (x): a block's
    virtual threads, threads and outputs per thread, (vthread, threads, inner) — the virtual
    threads' register tiles interleave, as the paper's §4.4 —; k_tile reduction steps per
    shared-memory fetch; the auto-unroll limit of a thread's loops (0: none)."""
    y: tuple
    x: tuple
    k_tile: int = K_TILE
    unroll: int = 0


def default_tile(prod) -> DenseTile:
    """The heuristic tile of a dense / matmul / batch_matmul compute (choose_tile).

    Example:
        >>> default_tile(y.op)                           # doctest: +SKIP
        DenseTile(y=(1, 8, 2), x=(1, 16, 2), k_tile=16, unroll=0)
    """
    shape = get_const_tuple(prod.output(0).shape)
    nbatch = 1
    for d in shape[:-2]:
        nbatch *= int(d)
    target = current_target()
    ty, tx, py, px = choose_tile(nbatch, int(shape[-2]), int(shape[-1]),
                                 target.max_num_threads if target.is_gpu else 256)
    return DenseTile((1, ty, py), (1, tx, px))


def schedule_dense(outs):
    """Shared-memory and register tiled schedule of a fused dense / matmul / batch_matmul:
    the tile a tuning log chose for it (autotvm's "dense.gpu" templates), else default_tile.

    Example:
        >>> y = topi.nn.dense(x, w, b)
        >>> s = schedule_dense([y])
    """
    outs = outs if isinstance(outs, (list, tuple)) else [outs]
    prod = single_anchor(outs, PRODUCTS)
    if prod is None:
        return schedule_generic(outs)
    return schedule_dense_tile(outs, prod, tuned_values(prod) or default_tile(prod))


def schedule_dense_tile(outs, prod, tile: DenseTile):
    """schedule_dense with a given tile; `prod` is the dense / matmul compute among `outs`'
    stages (the only one).

    Example:
        >>> s = schedule_dense_tile([y], y.op, DenseTile((2, 8, 2), (2, 8, 2)))  # doctest: +SKIP
    """
    s, out_stage, ls, (a_shared, b_shared) = stage_operands(outs, prod)
    out = out_stage.op.output(0)

    *batch, i, j = s[out].op.axis
    (vy_n, ty, py), (vx_n, tx, px) = tile.y, tile.x
    by, yi = s[out].split(i, factor=vy_n * ty * py)
    bx, xi = s[out].split(j, factor=vx_n * tx * px)
    vthreads = []                   # (loop, its axis); none where the tile has one
    if vy_n > 1:
        vy, yi = s[out].split(yi, nparts=vy_n)
        vthreads.append((vy, te.thread_axis((0, vy_n), "vthread", name="vy")))
    if vx_n > 1:
        vx, xi = s[out].split(xi, nparts=vx_n)
        vthreads.append((vx, te.thread_axis((0, vx_n), "vthread", name="vx")))
    tyv, yi = s[out].split(yi, nparts=ty)
    txv, xi = s[out].split(xi, nparts=tx)
    s[out].reorder(*batch, by, bx, *(loop for loop, _ in vthreads), tyv, txv, yi, xi)
    if batch:
        s[out].bind(s[out].fuse(*batch) if len(batch) > 1 else batch[0],
                    te.thread_axis("blockIdx.z"))
    s[out].bind(by, te.thread_axis("blockIdx.y"))
    s[out].bind(bx, te.thread_axis("blockIdx.x"))
    for loop, vthread in vthreads:
        s[out].bind(loop, vthread)
    thread_y = te.thread_axis((0, ty), "threadIdx.y")
    thread_x = te.thread_axis((0, tx), "threadIdx.x")
    s[out].bind(tyv, thread_y)
    s[out].bind(txv, thread_x)
    if tile.unroll:
        s[out].pragma(tyv, "auto_unroll_max_step", tile.unroll)

    ls.compute_at(s[out], txv)
    (k,) = ls.op.reduce_axis
    ko, ki = ls.split(k, factor=tile.k_tile)
    ls.reorder(ko, ki, *ls.op.axis)
    for st in (a_shared, b_shared):
        st.compute_at(ls, ko)
        cooperative_fetch(st, [(thread_x, tx), (thread_y, ty)])
    return s
