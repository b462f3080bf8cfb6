"""What the VDLA schedules of dense and conv2d share: the requantization after the
accumulators, and where each stage runs (on-chip scopes, DMA copies, the ALU, the tensorized
GEMM).

Example:
    >>> req, out = requantize(acc, 8, "C")                            # doctest: +SKIP
    >>> place(s, (A_buf, W_buf), acc, req, out, host, store, kc, lane)  # doctest: +SKIP
"""
from __future__ import annotations

from ... import te
from ...tir.op import call_intrin
from .intrin import SCOPES, gemm


def requantize(acc, shift: int, name: str, relu: bool = False):
    """(req, out): clip(acc >> shift, -128, 127) in the accumulators (with `relu`, clip to
    [0, 127]), then narrowed to int8 as the output `name`."""
    low = 0 if relu else -128
    req = te.compute(acc.shape, lambda *i: te.max(te.min(
        call_intrin("int32", "shift_right", acc(*i), shift), 127), low), name=f"{name}_req")
    out = te.compute(acc.shape, lambda *i: req(*i).astype("int8"), name=name)
    return req, out


def place(s, loads, acc, req, out, host, store, chunk, lane):
    """Input copies (data, weights) into the input and weight buffers at the reduction loop
    `chunk`; accumulators and their requantization computed at the output's loop `host` (the
    ALU's work); the output stored from loop `store`; the GEMM tensorized at `acc`'s `lane`."""
    for t, scope in zip(loads, ("inp", "wgt")):
        s[t].set_scope(SCOPES[scope])
        s[t].compute_at(s[acc], chunk)
        s[t].pragma(s[t].op.axis[0], "dma_copy")
    for t in (acc, req):
        s[t].set_scope(SCOPES["acc"])
        s[t].compute_at(s[out], host)
    s[req].pragma(s[req].op.axis[0], "alu")
    s[out].pragma(store, "dma_copy")
    s[acc].tensorize(lane, gemm())
