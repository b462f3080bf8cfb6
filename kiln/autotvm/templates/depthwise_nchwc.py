"""The x86 template of the blocked depthwise convolution (kiln.topi.nn.conv2d_nchwc's
depthwise_conv2d_nchwc), "depthwise_conv2d_nchwc.x86".

Args: data shape [N, C/c, H, W, c], kernel shape [O/oc, 1, KH, KW, 1, oc], strides, padding
(top, left, bottom, right), dilation, dtype.
Knobs (the schedule of kiln.topi.x86.depthwise_nchwc):
- "tile_y": output rows per register tile (divisors of the height up to 16);
- "tile_x": output columns per register tile (1 .. 8: a non-divisor leaves a tail);
- "row_chunks": parallel tasks the row tiles of one channel block are cut into (divisors of
  the height, clipped to the number of row tiles: the heuristic's choice always divides it);
- "unroll_kernel": which kernel loops are unrolled around the tile ("both", "rx", "none");
- "pad_root": whether the padding is a padded copy at the root rather than inlined with its
  guards partitioned away (only offered when the convolution pads).

The fallback config is the heuristic exactly (depthwise_tile, row_chunks), so an untuned
template builds the same loop program as the topi schedule.

Example:
    >>> from kiln.autotvm.task import Task
    >>> t = Task("depthwise_conv2d_nchwc.x86", [[1, 2, 14, 14, 16], [2, 1, 3, 3, 1, 16],
    ...                                         [1, 1], [1, 1, 1, 1], [1, 1], "float32"])
    >>> sorted(t.config_space.knobs)
    ['pad_root', 'row_chunks', 'tile_x', 'tile_y', 'unroll_kernel']
"""
from __future__ import annotations

from ... import te
from ...topi.nn.conv2d_nchwc import DEPTHWISE_CONV2D_NCHWC, depthwise_conv2d_nchwc
from ...topi.utils import get_const_tuple
from ...topi.x86.depthwise_nchwc import (MAX_COLS, UNROLL_KERNEL, depthwise_heuristic,
                                         schedule_depthwise_tile)
from ...topi.x86.utils import schedule_by_tag
from ..task import get_config, template
from .conv2d_nchwc import blocked_conv_args
from .registry import divisors, register_anchor

__all__ = ["DEPTHWISE_CONV2D_NCHWC_TEMPLATE", "depthwise_conv2d_nchwc_x86",
           "depthwise_conv2d_nchwc_args", "depthwise_values"]

DEPTHWISE_CONV2D_NCHWC_TEMPLATE = "depthwise_conv2d_nchwc.x86"
MAX_ROWS = 16           # rows x cols beyond the 16-accumulator budget spill; a few may pay off


def depthwise_conv2d_nchwc_args(anchor_op) -> list | None:
    """The task args of a depthwise_conv2d_nchwc anchor: [data shape, kernel shape, strides,
    padding, dilation, dtype]; None when the op has symbolic shapes or mixed dtypes (no
    template applies then).

    Example:
        >>> depthwise_conv2d_nchwc_args(dw.op)  # doctest: +SKIP
        [[1, 4, 56, 56, 16], [4, 1, 3, 3, 1, 16], [1, 1], [1, 1, 1, 1], [1, 1], 'float32']
    """
    # The compute always reads a padded copy (inlined by the schedule).
    return blocked_conv_args(anchor_op, DEPTHWISE_CONV2D_NCHWC, lambda pads, width: True)


def _depthwise_knobs(cfg, op) -> dict:
    """Declare the knobs on cfg (fallback: the heuristic); returns schedule_depthwise_tile's
    keyword arguments."""
    _, _, oh, ow, _ = get_const_tuple(op.output(0).shape)
    padded = any(op.attrs["padding"])
    cfg.define_knob("tile_y", divisors(oh, MAX_ROWS))
    cfg.define_knob("tile_x", list(range(1, min(ow, MAX_COLS) + 1)))
    # Divisors of the height: with rows dividing it (as the heuristic's do), the row tiles
    # and every whole number of row tiles per chunk divide it too.
    cfg.define_knob("row_chunks", divisors(oh, oh))
    cfg.define_knob("unroll_kernel", list(UNROLL_KERNEL))
    cfg.define_knob("pad_root", [False, True] if padded else [False])
    if cfg.is_fallback:
        chosen = depthwise_heuristic(op)
        cfg.fallback_with("tile_y", chosen["rows"])
        cfg.fallback_with("tile_x", chosen["cols"])
        cfg.fallback_with("row_chunks", chosen["chunks"])
    return depthwise_values(cfg)


def depthwise_values(cfg) -> dict:
    """schedule_depthwise_tile's keyword arguments for a config of this template.

    Example:
        >>> depthwise_values(task.default_config())  # doctest: +SKIP
        {'rows': 2, 'cols': 7, 'chunks': 7, 'unroll_kernel': 'both', 'pad_root': False}
    """
    return {"rows": cfg["tile_y"].val, "cols": cfg["tile_x"].val,
            "chunks": cfg["row_chunks"].val, "unroll_kernel": cfg["unroll_kernel"].val,
            "pad_root": cfg["pad_root"].val}


@template(DEPTHWISE_CONV2D_NCHWC_TEMPLATE)
def depthwise_conv2d_nchwc_x86(data_shape, kernel_shape, strides, padding, dilation,
                               dtype="float32"):
    """Blocked depthwise conv2d (kiln.topi.nn.conv2d_nchwc.depthwise_conv2d_nchwc) with its
    register tile, row chunks, kernel unrolling and padding as knobs; returns (schedule,
    [data, kernel, out])."""
    data = te.placeholder(data_shape, dtype, name="data")
    kernel = te.placeholder(kernel_shape, dtype, name="kernel")
    out = depthwise_conv2d_nchwc(data, kernel, strides, padding, dilation)
    values = _depthwise_knobs(get_config(), out.op)
    s = schedule_by_tag([out], {DEPTHWISE_CONV2D_NCHWC: lambda s, op, outs:
                                schedule_depthwise_tile(s, op, outs, **values)})
    return s, [data, kernel, out]


register_anchor(DEPTHWISE_CONV2D_NCHWC, DEPTHWISE_CONV2D_NCHWC_TEMPLATE,
                depthwise_conv2d_nchwc_args, depthwise_values)
