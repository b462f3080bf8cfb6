"""The x86 template of the Winograd convolution in the blocked layout (kiln.topi.nn.winograd),
"conv2d_winograd_nchwc.x86".

Args: data shape [N, C/ic, H, W, ic], transformed kernel shape [a, a, O/oc, C/ic, ic, oc]
(a = m + 2: the shape carries the output tile m, which the graph pass ConvertConvLayout chose
when it transformed the weight at compile time), padding (top, left, bottom, right), dtype.
Strides and dilation are 1 (Winograd needs them so).
Knobs (the schedule of kiln.topi.x86.winograd):
- "tile_oc": output channel blocks per register tile of the batched GEMM (1, 2, 4: those
  dividing the blocks);
- "tile_p": Winograd tiles per register tile of the GEMM (1 .. MAX_GEMM_TILES: a non-divisor
  leaves a tail);
- "gemm_order": the GEMM's parallel loop over channel-block tiles outside the loop over tile
  groups ("fp": each kernel panel reused across tiles) or inside it ("pf": each input tile
  reused across channel blocks);
- "unroll_rci": whether the GEMM's loop over the lanes of an input channel block is unrolled;
- "input_tiles": Winograd tiles per parallel task of the input transform (divisors of the
  tile count up to 32, and the tiles of one row, the heuristic's choice).

The fallback config is the heuristic exactly (winograd_gemm_tile, a row of tiles per input
transform task), so an untuned template builds the same loop program as the topi schedule.

Example:
    >>> from kiln.autotvm.task import Task
    >>> t = Task("conv2d_winograd_nchwc.x86", [[1, 4, 14, 14, 16], [6, 6, 4, 4, 16, 16],
    ...                                        [1, 1, 1, 1], "float32"])
    >>> sorted(t.config_space.knobs)
    ['gemm_order', 'input_tiles', 'tile_oc', 'tile_p', 'unroll_rci']
"""
from __future__ import annotations

from ... import te
from ...te.tensor import ComputeOp
from ...topi.nn.winograd import (CONV2D_WINOGRAD_NCHWC, conv2d_winograd_nchwc, winograd_stages,
                                 winograd_tiles)
from ...topi.utils import get_const_tuple
from ...topi.x86.utils import schedule_by_tag
from ...topi.x86.winograd import (GEMM_ORDERS, MAX_GEMM_TILES, schedule_winograd_tile,
                                  winograd_heuristic)
from ..task import get_config, template
from .registry import const_ints, divisors, register_anchor

__all__ = ["CONV2D_WINOGRAD_NCHWC_TEMPLATE", "conv2d_winograd_nchwc_x86",
           "conv2d_winograd_nchwc_args", "winograd_values", "direct_flop"]

CONV2D_WINOGRAD_NCHWC_TEMPLATE = "conv2d_winograd_nchwc.x86"
MAX_INPUT_TILES = 32    # tiles per input-transform task offered besides a row of tiles


def conv2d_winograd_nchwc_args(anchor_op) -> list | None:
    """The task args of a conv2d_winograd_nchwc anchor (the output transform): [data shape,
    transformed kernel shape, padding, dtype]; None when the op has symbolic shapes or mixed
    dtypes (no template applies then).

    Example:
        >>> conv2d_winograd_nchwc_args(y.op)  # doctest: +SKIP
        [[1, 4, 14, 14, 16], [6, 6, 4, 4, 16, 16], [1, 1, 1, 1], 'float32']
    """
    if not isinstance(anchor_op, ComputeOp) or anchor_op.tag != CONV2D_WINOGRAD_NCHWC:
        return None
    try:
        stages = winograd_stages(anchor_op)
    except ValueError:          # not the stages conv2d_winograd_nchwc builds
        return None
    v, kernel, padded = stages.input, stages.kernel, stages.padded
    if kernel.ndim != 6 or not all(isinstance(t.op, ComputeOp) for t in
                                   (stages.output_rows, stages.gemm, v, stages.input_columns)):
        return None
    pads = const_ints(anchor_op.attrs.get("padding", ()))
    kernel_shape = const_ints(get_const_tuple(kernel.shape))
    v_shape = const_ints(get_const_tuple(v.shape))
    out_shape = const_ints(get_const_tuple(anchor_op.output(0).shape))
    if None in (pads, kernel_shape, v_shape, out_shape) or len(pads) != 4:
        return None
    top, left, bottom, right = pads
    n, _, oh, ow, _ = out_shape
    _, _, cb, _, ic = v_shape
    # The compute pads to whole tiles; the data is what a 3x3 stride-1 window over the
    # declared padding needs for this output.
    data_shape = [n, cb, oh + 2 - top - bottom, ow + 2 - left - right, ic]
    dtype = padded.dtype
    if anchor_op.output(0).dtype != dtype or kernel.dtype != dtype:
        return None
    return [data_shape, kernel_shape, pads, dtype]


def _winograd_knobs(cfg, op) -> dict:
    """Declare the knobs on cfg (fallback: the heuristic); returns schedule_winograd_tile's
    keyword arguments."""
    _, _, ob, ntiles, _ = get_const_tuple(winograd_stages(op).gemm.shape)
    _, _, oh, ow, _ = get_const_tuple(op.output(0).shape)
    row = winograd_tiles(oh, ow, op.attrs["tile"])[1]
    cfg.define_knob("tile_oc", [b for b in (1, 2, 4) if ob % b == 0])
    cfg.define_knob("tile_p", list(range(1, min(ntiles, MAX_GEMM_TILES) + 1)))
    cfg.define_knob("gemm_order", list(GEMM_ORDERS))
    cfg.define_knob("unroll_rci", [False, True])
    cfg.define_knob("input_tiles", sorted(set(divisors(ntiles, MAX_INPUT_TILES)) | {row}))
    if cfg.is_fallback:
        chosen = winograd_heuristic(op)
        cfg.fallback_with("tile_oc", chosen["nblocks"])
        cfg.fallback_with("tile_p", chosen["cols"])
        cfg.fallback_with("input_tiles", chosen["input_tiles"])
    return winograd_values(cfg)


def winograd_values(cfg) -> dict:
    """schedule_winograd_tile's keyword arguments for a config of this template.

    Example:
        >>> winograd_values(task.default_config())  # doctest: +SKIP
        {'nblocks': 2, 'cols': 8, 'input_tiles': 4, 'gemm_order': 'fp', 'unroll_rci': False}
    """
    return {"nblocks": cfg["tile_oc"].val, "cols": cfg["tile_p"].val,
            "input_tiles": cfg["input_tiles"].val, "gemm_order": cfg["gemm_order"].val,
            "unroll_rci": cfg["unroll_rci"].val}


def direct_flop(data_shape, kernel_shape, padding, dtype="float32") -> int:
    """Multiply-adds x 2 of the 3x3 stride-1 direct convolution this Winograd task computes:
    the figure its GFLOPS are quoted in (the Winograd program does fewer multiplies, and its
    transforms' select chains would count as many more operations).

    Example:
        >>> direct_flop([1, 4, 14, 14, 16], [6, 6, 4, 4, 16, 16], [1, 1, 1, 1])
        14450688
    """
    n, cb, h, w, ic = data_shape
    _, _, ob, _, _, oc = kernel_shape
    top, left, bottom, right = padding
    oh, ow = h + top + bottom - 2, w + left + right - 2
    return 2 * n * oh * ow * ob * oc * cb * ic * 9


@template(CONV2D_WINOGRAD_NCHWC_TEMPLATE, flop=direct_flop)
def conv2d_winograd_nchwc_x86(data_shape, kernel_shape, padding, dtype="float32"):
    """Winograd conv2d (kiln.topi.nn.winograd.conv2d_winograd_nchwc, tile m from the kernel
    shape) with the batched GEMM's register tile and loop order and the input transform's
    task size as knobs; returns (schedule, [data, transformed kernel, out])."""
    data = te.placeholder(data_shape, dtype, name="data")
    kernel = te.placeholder(kernel_shape, dtype, name="kernel")
    out = conv2d_winograd_nchwc(data, kernel, 1, padding)
    values = _winograd_knobs(get_config(), out.op)
    s = schedule_by_tag([out], {CONV2D_WINOGRAD_NCHWC: lambda s, op, outs:
                                schedule_winograd_tile(s, op, outs, **values)})
    return s, [data, kernel, out]


register_anchor(CONV2D_WINOGRAD_NCHWC, CONV2D_WINOGRAD_NCHWC_TEMPLATE,
                conv2d_winograd_nchwc_args, winograd_values)
