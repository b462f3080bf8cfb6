"""Int8 dense on x86: data (M, K) uint8 or int8 times weights (N, K) int8, exact int32 sums,
through the target's int8 dot-product intrinsic (kiln/topi/x86/tensor_intrin.py).

The weights are packed once, ahead of time, as (N/lanes, K/group, lanes, group): output lane i
of a dot product finds its `group` consecutive k next to the other lanes', so one vector load
feeds all lanes and the data's `group` bytes are broadcast as one int32. On AVX2 the operands
are int16 (`vpmaddwd`), the data widened in a stage of its own; with VNNI they stay 8-bit
(`vpdpbusd`), which needs uint8 data.

The schedule is the float GEMM's register tile: `rows` rows by `panels` vectors of lanes, the
accumulators in a local stage kept in registers, k outermost inside the tile; the lane-and-group
loops are tensorized.

Example:
    >>> import numpy as np
    >>> from kiln import te
    >>> w = pack_int8_weight(np.ones((32, 64), "int8"), *int8_layout(Target("llvm -mcpu=haswell")))
    >>> w.shape, w.dtype
    ((4, 32, 8, 2), dtype('int16'))
"""
from __future__ import annotations

import numpy as np

from ... import te
from ...target import Target, current_target
from ..utils import tuned_values
from .tensor_intrin import int8_dot, packed_int8_dot
from .utils import anchor_host, schedule_by_tag

DENSE_INT8_TAG = "dense_int8"


def int8_layout(target: Target | None = None) -> tuple[int, int, str]:
    """(lanes, group, operand dtype) of the target's packed int8 weights."""
    _, lanes, group, dtype = int8_dot(target or current_target())
    return lanes, group, dtype


def pack_int8_weight(weight: np.ndarray, lanes: int, group: int, dtype: str) -> np.ndarray:
    """(N, K) int8 weights -> (ceil(N/lanes), ceil(K/group), lanes, group) in `dtype`, the rows
    and k past the ends zero (they add nothing).

    Example:
        >>> pack_int8_weight(np.arange(8, dtype="int8").reshape(2, 4), 2, 2, "int8")[0, 1]
        array([[2, 3],
               [6, 7]], dtype=int8)
    """
    weight = np.asarray(weight)
    if weight.ndim != 2 or weight.dtype != np.int8:
        raise ValueError(f"int8 dense weights are a 2-D int8 array (N, K), got {weight.dtype} "
                         f"{weight.shape}")
    n, k = weight.shape
    np_, kp = -(-n // lanes) * lanes, -(-k // group) * group
    padded = np.zeros((np_, kp), dtype)
    padded[:n, :k] = weight
    return np.ascontiguousarray(padded.reshape(np_ // lanes, lanes, kp // group, group)
                                .transpose(0, 2, 1, 3))


def dense_int8(data: te.Tensor, packed: te.Tensor, units: int) -> te.Tensor:
    """int32 (M, units) = data (M, K) · weightᵀ, the weights packed by pack_int8_weight.

    Example:
        >>> A = te.placeholder((64, 128), "uint8", name="A")          # doctest: +SKIP
        >>> W = te.placeholder((8, 32, 8, 2), "int16", name="W")      # doctest: +SKIP
        >>> C = dense_int8(A, W, 64)                                  # doctest: +SKIP
    """
    m, k = data.shape
    blocks, steps, lanes, group = packed.shape
    if data.dtype not in ("uint8", "int8"):
        raise ValueError(f"int8 dense: data is {data.dtype}; it takes uint8 or int8")
    if packed.dtype == "int8" and data.dtype != "uint8":
        raise ValueError("int8 dense with VNNI weights (int8, vpdpbusd) takes uint8 data; "
                         "shift int8 data by 128 (and compensate) or use int16 weights")
    if steps * group < k or blocks * lanes < units:
        raise ValueError(f"int8 dense: packed weights {packed.shape} cover {blocks * lanes} "
                         f"units and {steps * group} k, but the data has k = {k} and "
                         f"{units} units are asked for")
    operand = data
    # int16 operands (AVX2) widen the data; VNNI keeps uint8 data against int8 weights.
    wide = packed.dtype if packed.dtype == "int16" else data.dtype
    if data.dtype != wide or steps * group != k:
        # Widen and pad k to whole groups; zeros add nothing.
        operand = te.compute((m, steps * group), lambda i, j: te.if_then_else(
            j < k, data[i, j].astype(wide), te.const(0, wide)), name="data_widened")
    ko = te.reduce_axis((0, steps), name="ko")
    ki = te.reduce_axis((0, group), name="ki")
    return te.compute((m, units), lambda i, j: te.sum(
        operand[i, ko * group + ki].astype("int32")
        * packed[j // lanes, ko, j % lanes, ki].astype("int32"), axis=[ko, ki]),
        name="dense_int8", tag=DENSE_INT8_TAG)


def dense_int8_panels(blocks: int, rows: int, registers: int) -> int:
    """The most vectors of lanes (4, 3, 2, else 1) that divide the weight's `blocks` with the
    rows x panels accumulators in at most half the vector registers.

    Example:
        >>> dense_int8_panels(8, 4, 16), dense_int8_panels(6, 4, 32)
        (2, 3)
    """
    return next((p for p in (4, 3, 2) if blocks % p == 0 and p * rows <= registers // 2), 1)


def _schedule_dense_int8(s, anchor_op, outs, rows: int = 4, panels: int | None = None,
                         target=None):
    """The schedule of schedule_dense_int8 for one anchor (rows x panels: the register tile)."""
    target = target or current_target()
    operand, packed = anchor_op.input_tensors()
    blocks, _, lanes, group = (int(d) for d in packed.shape)
    intrin = packed_int8_dot(target, packed.dtype, lanes, group)
    if operand.op.name == "data_widened":
        i, j = s[operand].op.axis
        s[operand].parallel(i)
        jo, ji = s[operand].split(j, factor=lanes * 2)
        s[operand].vectorize(ji)
    if panels is None:
        panels = dense_int8_panels(blocks, rows, target.vector_registers)
    host, local = anchor_host(s, anchor_op, outs)
    hs = s[host]
    m, n = hs.op.axis[-2:]
    mo, no, mi, ni = hs.tile(m, n, rows, lanes * panels)
    outer = list(hs.op.axis[:-2])
    hs.parallel(hs.fuse(*outer, mo, no) if outer else hs.fuse(mo, no))
    hs.vectorize(ni)
    s[local].compute_at(hs, hs.leaf_iter_vars[0])
    lm, ln = s[local].op.axis
    ko, ki = s[local].op.reduce_axis
    lp, ll = s[local].split(ln, factor=lanes)
    s[local].reorder(ko, lm, lp, ll, ki)
    s[local].unroll(lm)
    s[local].unroll(lp)
    s[local].tensorize(ll, intrin)


def schedule_dense_int8(outs, rows: int = 4, panels: int | None = None, target=None):
    """The register-tile schedule of dense_int8 (with the elementwise ops after it computed on
    the tile), its dot products tensorized by the instruction the packed weight was made for
    (tensor_intrin.packed_int8_dot): `rows` rows by `panels` vectors of lanes (None: the most
    that divide the columns with the accumulators in at most half the vector registers;
    measured on AVX2 at 1024 x 1152 x 1024: 4 x 2 at 202 Gop/s against 167 for 4 x 3, 192
    for 2 x 4).

    Example:
        >>> s = schedule_dense_int8([C])  # doctest: +SKIP
    """
    def handler(s, op, o):
        tuned = tuned_values(op)
        if tuned is None:
            _schedule_dense_int8(s, op, o, rows, panels, target)
        else:
            _schedule_dense_int8(s, op, o, *tuned, target=target)
    return schedule_by_tag(outs, {DENSE_INT8_TAG: handler})
