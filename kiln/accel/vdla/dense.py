"""Int8 dense (matrix product) with requantization on VDLA: its compute, packed layouts and
schedule.

y = clip((x · wᵀ) >> shift, -128, 127) for x (M × K) and w (N × K), int8. Data live in DRAM
as whole buffer entries: x as (M, K/16, 16), w as (N/16, K/16, 16, 16), y as (M, N/16, 16).
The schedule tiles the output into `rows` × `blocks` × 16, accumulates it in the accumulator
buffer over chunks of `chunk` k blocks loaded by DMA, requantizes it on the ALU and stores it.
With `vthreads` > 1 the tile's rows are split among virtual threads, each with its own
buffers, so that VDLA's load module fills one thread's buffers while the GEMM core works on
another's (latency hiding).

Example:
    >>> s, args = schedule_dense(64, 64, 256)
    >>> f = kiln.build(s, args, target="vdla")  # doctest: +SKIP
"""
from __future__ import annotations

from ... import te
from .isa import VDLAConfig
from .placement import place, requantize
from .reference import gemm_reference as reference, pack_data, pack_weight  # noqa: F401


def dense(m: int, n: int, k: int, shift: int = 8):
    """The tensors of the requantized product: (A, W, C_buf, C_req, C), for the target's
    VDLA (VDLAConfig()'s blocks)."""
    config = VDLAConfig()
    bi, bo = config.block_in, config.block_out
    if k % bi or n % bo:
        raise ValueError(f"VDLA dense: k ({k}) must be a multiple of {bi} and n ({n}) of {bo}")
    A = te.placeholder((m, k // bi, bi), "int8", name="A")
    W = te.placeholder((n // bo, k // bi, bo, bi), "int8", name="W")
    A_buf = te.compute(A.shape, lambda *i: A(*i), name="A_buf")
    W_buf = te.compute(W.shape, lambda *i: W(*i), name="W_buf")
    ko = te.reduce_axis((0, k // bi), name="ko")
    ki = te.reduce_axis((0, bi), name="ki")
    C_buf = te.compute((m, n // bo, bo), lambda i, j, c: te.sum(
        A_buf[i, ko, ki].astype("int32") * W_buf[j, ko, c, ki].astype("int32"), axis=[ko, ki]),
        name="C_buf")
    C_req, C = requantize(C_buf, shift, "C")
    return A, W, C_buf, C_req, C


def schedule_dense(m: int, n: int, k: int, rows: int = 16, blocks: int = 2, chunk: int = 2,
                   vthreads: int = 1, shift: int = 8):
    """(schedule, [A, W, C]) of the tiled product for target "vdla"; `rows` must divide m,
    `blocks` n / 16, `chunk` k / 16, and `vthreads` rows.

    Example:
        >>> s, args = schedule_dense(128, 64, 512, rows=64, blocks=4, chunk=2, vthreads=2)
    """
    config = VDLAConfig()
    bi, bo = config.block_in, config.block_out
    if m % rows or (n // bo) % blocks or (k // bi) % chunk or rows % vthreads:
        raise ValueError(f"VDLA dense {m}x{n}x{k}: tiles of {rows} rows, {blocks} blocks, "
                         f"{chunk} k blocks and {vthreads} virtual threads do not divide it")
    A, W, C_buf, C_req, C = dense(m, n, k, shift)
    A_buf, W_buf = C_buf.op.input_tensors()
    s = te.create_schedule(C.op)
    i, j, c = C.op.axis
    io, ii = s[C].split(i, factor=rows)
    jo, ji = s[C].split(j, factor=blocks)
    s[C].reorder(io, jo, ii, ji, c)
    host, store = jo, ii
    if vthreads > 1:
        tv, store = s[C].split(ii, nparts=vthreads)
        s[C].bind(tv, te.thread_axis("vthread"))
        host = tv
    bi_, bj, bc = s[C_buf].op.axis
    ko, ki = s[C_buf].op.reduce_axis
    kc, kb = s[C_buf].split(ko, factor=chunk)
    s[C_buf].reorder(kc, bi_, bj, kb, bc, ki)
    place(s, (A_buf, W_buf), C_buf, C_req, C, host, store, kc, bc)
    return s, [A, W, C]
