"""VDLA's GEMM as a tensor intrinsic, and the memory scopes of its on-chip buffers.

One GEMM micro-op: out[j] += sum over k of inp[k] * wgt[j, k], int8 into int32, for
block_out j and block_in k. The operands are one entry each of the input, weight and
accumulator buffers: a schedule puts them there with cache_read / set_scope (the scopes below)
and tensorizes the stage's last axis and its innermost reduction axis.

Example:
    >>> gemm()
    TensorIntrin(vdla_gemm: out[16] <- inp[16], wgt[16, 16])
"""
from __future__ import annotations

from ... import te
from ...tir.expr import BufferLoad, Call
from ...tir.op import convert
from ...tir.stmt import Evaluate, SeqStmt
from .isa import VDLAConfig

SCOPES = {"inp": "local.inp_buffer", "wgt": "local.wgt_buffer", "acc": "local.acc_buffer"}
BUFFER_OF_SCOPE = {v: k for k, v in SCOPES.items()}
GEMM_CALL = "vdla_gemm"


def gemm_call(acc: BufferLoad, inp=None, wgt=None):
    """The statement the code generator turns into one GEMM micro-op: the operands are loads
    of their first elements (buffer and offset); without inputs it resets the accumulator."""
    reset = inp is None
    operands = (acc, convert(0), convert(0)) if reset else (acc, inp, wgt)
    return Evaluate(Call("int32", GEMM_CALL, operands + (convert(int(reset)),)))


def gemm(config: VDLAConfig = VDLAConfig()) -> te.TensorIntrin:
    """The GEMM micro-op of `config` as a tensor intrinsic."""
    bi, bo = config.block_in, config.block_out
    inp = te.placeholder((bi,), "int8", name="inp")
    wgt = te.placeholder((bo, bi), "int8", name="wgt")
    k = te.reduce_axis((0, bi), name="k")
    out = te.compute((bo,), lambda j: te.sum(inp[k].astype("int32") * wgt[j, k].astype("int32"),
                                             axis=k), name="out")
    binds = {inp: te.decl_buffer(inp.shape, "int8", "inp", offset_factor=bi, scope=SCOPES["inp"]),
             wgt: te.decl_buffer(wgt.shape, "int8", "wgt", offset_factor=bi * bo,
                                 scope=SCOPES["wgt"]),
             out: te.decl_buffer(out.shape, "int32", "out", offset_factor=bo, scope=SCOPES["acc"])}

    def lower(ins, outs):
        x, w = ins
        (acc,) = outs
        # The reset names no input: its loops lie outside the reduction's.
        reset = gemm_call(acc.vload([0]))
        update = gemm_call(acc.vload([0]), x.vload([0]), w.vload([0, 0]))
        return SeqStmt.flatten(reset, update), reset, update

    return te.decl_tensor_intrin(out.op, lower, binds=binds, name="vdla_gemm")
