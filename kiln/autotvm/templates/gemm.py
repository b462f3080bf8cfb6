"""x86 templates of the GEMM anchors (kiln.topi.x86.dense's schedule): "dense_pack.x86",
"matmul.x86", "batch_matmul.x86".

Args: dense — data shape, weight shape ((units, in), or packed panels (units / NR, in, NR)),
units, dtype; matmul and batch_matmul — a shape, b shape, transpose_a, transpose_b, dtype.
Knobs (NR, the panel width, is fixed by the packing the graph chose):
- "tile_y": MR, the register tile's rows (1 .. 16);
- "k_unroll": k steps unrolled per iteration of the k loop (divisors of k among 1, 2, 4, 8, 16);
- "col_parallel": whether the threads take column tiles instead of (batches and) row tiles;
- "tile_x": packed panels (NR columns each) per register tile, 1 or 2;
- "prefetch": column tiles ahead whose packed panels are prefetched while the current tile
  runs (0, 1, 2; only where the right operand is packed and there are several column tiles).
  Off by default: it pays where the weights come from memory (BERT's 768->3072 dense with its
  weights evicted: 2.38 -> 1.81 ms on a 2-core Xeon) and can cost where they are cached
  (its 3072->768 dense, warm: 1.59 -> 1.66 ms), so the tuner decides.

The fallback config is the heuristic exactly (gemm_rows, gemm_k_unroll, gemm_col_parallel).

Example:
    >>> from kiln.autotvm.task import Task
    >>> sorted(Task("dense_pack.x86", [[12, 40], [20, 40], 20, "float32"]).config_space.knobs)
    ['col_parallel', 'k_unroll', 'prefetch', 'tile_x', 'tile_y']
"""
from __future__ import annotations

from ... import te
from ...te.tensor import ComputeOp
from ...topi import tags
from ...topi.nn.dense import PACK_TAG, batch_matmul, dense, matmul
from ...topi.utils import get_const_tuple, traverse_inline
from ...topi.x86.dense import (gemm_col_parallel, gemm_k_unroll, gemm_panel_operand,
                               gemm_panel_width, gemm_rows, schedule_gemm_tile)
from ..task import get_config, template
from .registry import const_ints, loads, register_anchor

__all__ = ["DENSE_PACK_TEMPLATE", "MATMUL_TEMPLATE", "BATCH_MATMUL_TEMPLATE", "dense_pack_x86",
           "matmul_x86", "batch_matmul_x86", "dense_pack_args", "matmul_args"]

DENSE_PACK_TEMPLATE = "dense_pack.x86"
MATMUL_TEMPLATE = "matmul.x86"
BATCH_MATMUL_TEMPLATE = "batch_matmul.x86"
MAX_ROWS = 16
K_UNROLLS = (1, 2, 4, 8, 16)
PREFETCH_AHEAD = (0, 1, 2)     # column tiles ahead whose panels are prefetched (0: none)


def _operands(anchor_op, tag):
    """(a, b as given to the compute — unpacked when the compute packs it itself), or None."""
    if not isinstance(anchor_op, ComputeOp) or anchor_op.tag != tag:
        return None
    read = loads(anchor_op.body[0])
    if len(read) != 2:
        return None
    a, b = read                    # the bodies read the left operand first
    if isinstance(b.op, ComputeOp):
        if b.op.tag != PACK_TAG or len(b.op.input_tensors()) != 1:
            return None
        (b,) = b.op.input_tensors()
    dtype = a.dtype
    if anchor_op.output(0).dtype != dtype or b.dtype != dtype:
        return None
    return a, b


def dense_pack_args(anchor_op) -> list | None:
    """The task args of a dense anchor: [data shape, weight shape, units, dtype]; the weight
    is the (units, in) operand that the compute packs itself, or the packed panels it was
    given. None when shapes are not constant or dtypes differ.

    Example:
        >>> dense_pack_args(y.op)  # doctest: +SKIP
        [[128, 768], [24, 768, 32], 768, 'float32']
    """
    ops = _operands(anchor_op, tags.DENSE)
    if ops is None:
        return None
    data_shape, weight_shape, out_shape = (const_ints(get_const_tuple(t.shape))
                                           for t in (*ops, anchor_op.output(0)))
    if None in (data_shape, weight_shape, out_shape) or len(weight_shape) not in (2, 3):
        return None
    return [data_shape, weight_shape, out_shape[-1], ops[0].dtype]


def matmul_args(anchor_op) -> list | None:
    """The task args of a matmul or batch_matmul anchor: [a shape, b shape, transpose_a,
    transpose_b, dtype]; None when shapes are not constant or dtypes differ.

    Example:
        >>> matmul_args(scores.op)  # doctest: +SKIP
        [[12, 128, 64], [12, 128, 64], False, True, 'float32']
    """
    tag = getattr(anchor_op, "tag", None)
    ops = _operands(anchor_op, tag) if tag in (tags.MATMUL, tags.BATCH_MATMUL) else None
    if ops is None or "transpose_a" not in anchor_op.attrs:
        return None
    a_shape, b_shape = (const_ints(get_const_tuple(t.shape)) for t in ops)
    if None in (a_shape, b_shape):
        return None
    return [a_shape, b_shape, bool(anchor_op.attrs["transpose_a"]),
            bool(anchor_op.attrs["transpose_b"]), ops[0].dtype]


def _gemm_knobs(cfg, op) -> dict:
    """Declare the knobs on cfg (fallback: the heuristic); returns schedule_gemm_tile's
    keyword arguments."""
    shape = get_const_tuple(op.output(0).shape)
    mr = gemm_rows(op)
    (k,) = op.reduce_axis
    (kext,) = get_const_tuple((k.dom.extent,))
    rows = [1] if len(shape) == 1 else list(range(1, min(shape[-2], MAX_ROWS) + 1))
    cfg.define_knob("tile_y", sorted(set(rows) | {mr}))
    cfg.define_knob("k_unroll", [u for u in K_UNROLLS if isinstance(kext, int) and kext % u == 0])
    cfg.define_knob("col_parallel", [False] if len(shape) == 1 else [False, True])
    wide = len(shape) > 1 and isinstance(shape[-1], int) and shape[-1] > gemm_panel_width(op)
    cfg.define_knob("tile_x", [1, 2] if wide else [1])
    # Last, so that records from before it (without it) keep their indices: candidate 0 is off.
    panels = gemm_panel_operand(op) is not None and wide
    cfg.define_knob("prefetch", PREFETCH_AHEAD if panels else [0])
    if cfg.is_fallback:
        cfg.fallback_with("tile_y", mr)
        cfg.fallback_with("k_unroll", gemm_k_unroll(op))
        cfg.fallback_with("col_parallel", gemm_col_parallel(op, mr))
    return gemm_values(cfg)


def gemm_values(cfg) -> dict:
    """schedule_gemm_tile's keyword arguments for a config of these templates.

    Example:
        >>> gemm_values(task.default_config)  # doctest: +SKIP
        {'mr': 8, 'k_unroll': 4, 'col_parallel': False, 'panels': 1, 'prefetch': 0}
    """
    return {"mr": cfg["tile_y"].val, "k_unroll": cfg["k_unroll"].val,
            "col_parallel": cfg["col_parallel"].val, "panels": cfg["tile_x"].val,
            "prefetch": cfg["prefetch"].val}


def _scheduled(out, tag, operands):
    values = _gemm_knobs(get_config(), out.op)
    s = te.create_schedule(out.op)
    traverse_inline(s, [out.op], lambda op: schedule_gemm_tile(s, op, [out], **values)
                    if op.tag == tag else None)
    return s, [*operands, out]


@template(DENSE_PACK_TEMPLATE)
def dense_pack_x86(data_shape, weight_shape, units, dtype="float32"):
    """dense (kiln.topi.nn.dense) with the GEMM tile as knobs; a 3-D weight is already
    packed. Returns (schedule, [data, weight, out])."""
    data = te.placeholder(data_shape, dtype, name="data")
    weight = te.placeholder(weight_shape, dtype, name="weight")
    out = dense(data, weight, units=units if len(weight_shape) == 3 else None)
    return _scheduled(out, tags.DENSE, [data, weight])


@template(MATMUL_TEMPLATE)
def matmul_x86(a_shape, b_shape, transpose_a=False, transpose_b=False, dtype="float32"):
    """matmul (kiln.topi.nn.matmul) with the GEMM tile as knobs; returns (schedule, [a, b,
    out])."""
    a = te.placeholder(a_shape, dtype, name="a")
    b = te.placeholder(b_shape, dtype, name="b")
    return _scheduled(matmul(a, b, transpose_a, transpose_b), tags.MATMUL, [a, b])


@template(BATCH_MATMUL_TEMPLATE)
def batch_matmul_x86(a_shape, b_shape, transpose_a=False, transpose_b=False, dtype="float32"):
    """batch_matmul (kiln.topi.nn.batch_matmul) with the GEMM tile as knobs; returns
    (schedule, [a, b, out])."""
    a = te.placeholder(a_shape, dtype, name="a")
    b = te.placeholder(b_shape, dtype, name="b")
    return _scheduled(batch_matmul(a, b, transpose_a, transpose_b), tags.BATCH_MATMUL, [a, b])


register_anchor(tags.DENSE, DENSE_PACK_TEMPLATE, dense_pack_args, gemm_values)
register_anchor(tags.MATMUL, MATMUL_TEMPLATE, matmul_args, gemm_values)
register_anchor(tags.BATCH_MATMUL, BATCH_MATMUL_TEMPLATE, matmul_args, gemm_values)
