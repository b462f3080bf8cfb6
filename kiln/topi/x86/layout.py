"""x86 schedule of layout_transform between NCHW and the blocked NCHW{b}c layout.

A transform is a transpose of b channels against the pixels of a row: NCHW is contiguous
along W, NCHW{b}c along the channel block. The generic injective schedule writes one output
vector per 16-lane gather, which runs at gather throughput (2x slower than ONNX Runtime).
Here each tile of b channels x t pixels of one row is first copied into a small "local"
buffer with contiguous vector loads along the input's contiguous axis, then written out in
the output's order. Both copies are fully unrolled, so LLVM promotes the tile to registers
and turns the transpose into shuffles, and SLP merges the output's scalar stores into
contiguous vector stores. t always divides W: no guarded tail, no read past a row.

Injective producers fused before the transform (relu, add ...) are computed into the tile
(the transform's direct producer becomes the tile stage, the rest is inlined into it).
Anything else (several outputs, block to block, symbolic shapes) gets the injective schedule.

Example:
    >>> from kiln import te
    >>> from kiln.topi.nn.conv2d_nchwc import layout_transform
    >>> y = layout_transform(te.placeholder((1, 64, 56, 56), name="x"), "NCHW", "NCHW16c")
    >>> s = schedule_layout_transform([y])
"""
from __future__ import annotations

from dataclasses import dataclass

from ... import te
from .. import tags
from ..utils import as_tensor_list, get_const_tuple, is_const_int, prod
from .injective import PARALLEL_MIN_ELEMENTS, schedule_injective

# Pixels per tile, best first: measured on 64x56x56, 128x28x28 and 32x112x112 float32
# (NCHW16c), 8 beats 14, 16 and 28, and 4 beats 7, 14 and 28; a 16 x 8 tile transposes in
# the zmm registers without spilling.
PREFERRED_WIDTHS = (8, 4)
# A row that no preferred width divides is one tile when it stays this small (W = 7, 13, 14).
MAX_TILE_ELEMENTS = 256
# Wider channel blocks would unroll into very long straight-line code.
MAX_BLOCK = 32


@dataclass(frozen=True)
class TransformPlan:
    """How a plain NCHW <-> NCHW{b}c group is tiled.

    `to_blocked` is the direction, `block` the channel block b, `width` the pixels per tile
    (a divisor of W), `source` the tensor whose tile is staged in registers (the group's
    input, or the fused producer computed per tile), `inline` the other producers to inline.
    """

    to_blocked: bool
    block: int
    width: int
    source: object
    inline: tuple
    parallel: bool


def tile_width(row: int, block: int) -> int:
    """Pixels per tile for a row of `row` pixels and a channel block of `block`: a preferred
    width that divides the row, else the whole row when the tile stays small, else the
    largest divisor of the row below 8 (always a divisor: the tile loops need no guard).

    Example:
        >>> tile_width(56, 16), tile_width(28, 16), tile_width(7, 16), tile_width(34, 16)
        (8, 4, 7, 2)
    """
    for width in PREFERRED_WIDTHS:
        if row % width == 0:
            return width
    if row * block <= MAX_TILE_ELEMENTS:
        return row
    return next(d for d in range(PREFERRED_WIDTHS[0], 0, -1) if row % d == 0)


def _producers_to_inline(start_ops) -> tuple | None:
    """The injective computes reachable from `start_ops`, or None when a non-injective
    compute (one this schedule cannot inline) is among them."""
    seen, todo, found = set(), list(start_ops), []
    while todo:
        op = todo.pop()
        if op in seen or not isinstance(op, te.ComputeOp):
            continue
        seen.add(op)
        if not tags.is_injective(op.tag):
            return None
        found.append(op)
        todo.extend(t.op for t in op.input_tensors())
    return tuple(found)


def plan_layout_transform(outs) -> TransformPlan | None:
    """The tiling of a fused group whose single output moves data between NCHW and
    NCHW{b}c, or None when the group is anything else (block to block, several outputs,
    symbolic shapes, a non-injective producer).

    Example:
        >>> plan_layout_transform([y]).width  # doctest: +SKIP
        8
    """
    outs = as_tensor_list(outs)
    if len(outs) != 1 or not isinstance(outs[0].op, te.ComputeOp):
        return None
    out = outs[0]
    inputs = out.op.input_tensors()
    if len(inputs) != 1 or not tags.is_injective(out.op.tag):
        return None
    src = inputs[0]
    # Constant sizes, but for a batch (the first axis) that may be symbolic: it only counts
    # the rows the parallel loop runs over.
    if not all(is_const_int(d) for shape in (out.shape, src.shape) for d in shape[1:]) or \
            out.shape[0] is not src.shape[0] and not (is_const_int(out.shape[0])
                                                       and is_const_int(src.shape[0])):
        return None
    oshape, ishape = get_const_tuple(out.shape), get_const_tuple(src.shape)
    if len(oshape) == 5 and len(ishape) == 4:
        to_blocked, blocked, plain = True, oshape, ishape
    elif len(oshape) == 4 and len(ishape) == 5:
        to_blocked, blocked, plain = False, ishape, oshape
    else:
        return None
    n, cb, h, w, block = blocked
    if tuple(plain[1:]) != (cb * block, h, w) or block > MAX_BLOCK or \
            is_const_int(n) and plain[0] != n:
        return None
    if isinstance(src.op, te.ComputeOp):
        if not tags.is_injective(src.op.tag):
            return None
        inline = _producers_to_inline([t.op for t in src.op.input_tensors()])
        if inline is None:
            return None
    else:
        inline = ()
    return TransformPlan(to_blocked, block, tile_width(w, block), src, inline,
                         not is_const_int(n) or prod(oshape) >= PARALLEL_MIN_ELEMENTS)


def _tile_stage(s, out, plan):
    """The stage that holds one tile: a cache of the input placeholder, or the producer."""
    if isinstance(plan.source.op, te.ComputeOp):
        for op in plan.inline:
            s[op].compute_inline()
        stage = s[plan.source]
        stage.set_scope("local")
        return stage
    return s[s.cache_read(plan.source, "local", [out])]


def schedule_layout_transform(outs):
    """Schedule a fused group ending in layout_transform (NCHW <-> NCHW{b}c) as register-
    transposed tiles; other groups get the injective schedule.

    Before (injective): one 16-lane gather per output vector, a guarded tail on W.
    After, for NCHW -> NCHW16c with W = 56:

        for n.cb.y in range(N*C/16*H) parallel:
          for x.outer in range(7):
            A.local[16 x 8] = 16 contiguous 8-wide loads       (unrolled)
            out[..., x.outer*8 : +8, 0:16] = transposed tile     (unrolled -> shuffles)

    Example:
        >>> s = schedule_layout_transform([y])  # doctest: +SKIP
    """
    outs = as_tensor_list(outs)
    plan = plan_layout_transform(outs)
    if plan is None:
        return schedule_injective(outs)
    out = outs[0]
    s = te.create_schedule(out.op)
    tile = _tile_stage(s, out, plan)
    stage = s[out]
    if plan.to_blocked:
        n, cb, y, x, ci = stage.op.axis
        xo, xi = stage.split(x, factor=plan.width)
        stage.reorder(n, cb, y, xo, xi, ci)
        inner = (xi, ci)
        tn, tc, ty, tx = tile.op.axis
        tile_vector, tile_unroll = tx, tc
    else:
        n, c, y, x = stage.op.axis
        cb, ci = stage.split(c, factor=plan.block)
        xo, xi = stage.split(x, factor=plan.width)
        stage.reorder(n, cb, y, xo, ci, xi)
        inner = (ci, xi)
        tn, tcb, ty, tx, tci = tile.op.axis
        tile_vector, tile_unroll = tci, tx
    for axis in inner:
        stage.unroll(axis)
    rows = stage.fuse(n, cb, y)
    if plan.parallel:
        stage.parallel(rows)
    tile.compute_at(stage, xo)
    tile.vectorize(tile_vector)
    tile.unroll(tile_unroll)
    return s
