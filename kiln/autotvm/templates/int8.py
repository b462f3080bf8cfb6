"""x86 templates of the integer kernels: "conv2d_nchwc_int8.x86" (kiln.topi.nn.conv2d_nchwc_int8,
scheduled by kiln.topi.x86.conv2d_int8) and "dense_int8.x86" (kiln.topi.x86.dense_int8).

conv2d_nchwc_int8 args: data shape [N, C/ic, H, W, ic] (before padding), packed kernel shape
[O/oc, C/ic, KH, KW, ic/g, oc, g], strides, padding (top, left, bottom, right), dilation, data
dtype, kernel dtype (int8 for `vpdpbusd` / `vpmaddubsw`, int16 for `vpmaddwd`), pad value (the
input zero point). Knobs: "tile_oc", "tile_y", "tile_x" (the register tile, as the float
blocked template's) and "reduce_order" (channel blocks, kernel rows and kernel columns; the
channel groups of a block stay innermost, under the tile, as the dot instruction needs).

dense_int8 args: data shape (M, K), packed weight shape (N/lanes, K/g, lanes, g), units, data
dtype, weight dtype. Knobs: "tile_y" (rows of the register tile, 1 .. 8) and "tile_x" (vectors
of lanes per tile: 1, 2, 3 or 4 that divide the weight's blocks).

The fallback configs are the schedules' heuristics exactly, so an untuned template builds the
loop program kiln.compile builds.

Example:
    >>> from kiln.autotvm.task import Task
    >>> t = Task("dense_int8.x86", [[16, 64], [4, 32, 8, 2], 32, "uint8", "int16"])
    >>> sorted(t.config_space.knobs)
    ['tile_x', 'tile_y']
"""
from __future__ import annotations

from ... import te
from ...te.tensor import ComputeOp
from ...target import current_target
from ...topi.nn.conv2d_nchwc_int8 import CONV2D_NCHWC_INT8, DATA_PAD, conv2d_nchwc_int8
from ...topi.utils import get_const_tuple
from ...topi.x86.conv2d_int8 import schedule_int8_tile
from ...topi.x86.dense_int8 import (DENSE_INT8_TAG, _schedule_dense_int8, dense_int8,
                                    dense_int8_panels)
from ...topi.x86.utils import schedule_by_tag
from ..task import get_config, template
from .conv2d_nchwc import REDUCE_ORDERS, define_tile_knobs
from .registry import const_ints, register_anchor

__all__ = ["CONV2D_NCHWC_INT8_TEMPLATE", "DENSE_INT8_TEMPLATE", "conv2d_nchwc_int8_args",
           "dense_int8_args"]

CONV2D_NCHWC_INT8_TEMPLATE = "conv2d_nchwc_int8.x86"
DENSE_INT8_TEMPLATE = "dense_int8.x86"
DENSE_ROWS = 8          # rows of a dense register tile a knob offers


def conv2d_nchwc_int8_args(anchor_op) -> list | None:
    """The task args of a conv2d_nchwc_int8 anchor (see the module docstring), or None.

    Example:
        >>> conv2d_nchwc_int8_args(conv.op)  # doctest: +SKIP
        [[1, 2, 14, 14, 16], [4, 2, 3, 3, 8, 8, 2], [1, 1], [1, 1, 1, 1], [1, 1], 'uint8', 'int16', 0]
    """
    if not isinstance(anchor_op, ComputeOp) or anchor_op.tag != CONV2D_NCHWC_INT8:
        return None
    *sources, kernel = anchor_op.input_tensors()
    if len(sources) != 1:
        return None
    data = sources[0]
    if isinstance(data.op, ComputeOp) and data.op.name == DATA_PAD:
        (data,) = data.op.input_tensors()
    attrs = anchor_op.attrs
    shapes = [const_ints(get_const_tuple(t.shape)) for t in (data, kernel)]
    window = [const_ints(attrs[k]) for k in ("strides", "padding", "dilation")]
    if None in shapes or None in window:
        return None
    return [*shapes, *window, data.dtype, kernel.dtype, int(attrs["pad_value"])]


@template(CONV2D_NCHWC_INT8_TEMPLATE)
def conv2d_nchwc_int8_x86(data_shape, kernel_shape, strides, padding, dilation, data_dtype,
                          kernel_dtype, pad_value=0):
    """conv2d_nchwc_int8 with its register tile and reduction order as knobs; returns
    (schedule, [data, kernel, out])."""
    data = te.placeholder(data_shape, data_dtype, name="data")
    kernel = te.placeholder(kernel_shape, kernel_dtype, name="kernel")
    out = conv2d_nchwc_int8(data, kernel, strides, padding, dilation, pad_value=pad_value)
    values = _conv_knobs(get_config(), out.op)
    s = schedule_by_tag([out], {CONV2D_NCHWC_INT8: lambda s, op, outs:
                                schedule_int8_tile(s, op, outs, **values)})
    return s, [data, kernel, out]


def _conv_knobs(cfg, op) -> dict:
    _, blocks, oh, ow, _ = get_const_tuple(op.output(0).shape)
    define_tile_knobs(cfg, blocks, oh, ow, current_target().vector_registers, row_tiles=False)
    return conv_int8_values(cfg)


def conv_int8_values(cfg) -> dict:
    """schedule_int8_tile's keyword arguments for a config of the conv template.

    Example:
        >>> conv_int8_values(task.default_config)  # doctest: +SKIP
        {'nblocks': 2, 'rows': 1, 'cols': 4, 'reduce_order': (0, 1, 2, 3)}
    """
    return {"nblocks": cfg["tile_oc"].val, "rows": cfg["tile_y"].val,
            "cols": cfg["tile_x"].val, "reduce_order": REDUCE_ORDERS[cfg["reduce_order"].val]}


def dense_int8_args(anchor_op) -> list | None:
    """The task args of a dense_int8 anchor (see the module docstring), or None.

    Example:
        >>> dense_int8_args(y.op)  # doctest: +SKIP
        [[128, 768], [96, 384, 8, 2], 768, 'uint8', 'int16']
    """
    if not isinstance(anchor_op, ComputeOp) or anchor_op.tag != DENSE_INT8_TAG:
        return None
    operand, packed = anchor_op.input_tensors()
    data = operand
    if isinstance(operand.op, ComputeOp) and operand.op.name == "data_widened":
        (data,) = operand.op.input_tensors()
    shapes = [const_ints(get_const_tuple(t.shape)) for t in (data, packed, anchor_op.output(0))]
    if None in shapes:
        return None
    return [shapes[0], shapes[1], shapes[2][1], data.dtype, packed.dtype]


@template(DENSE_INT8_TEMPLATE)
def dense_int8_x86(data_shape, packed_shape, units, data_dtype, weight_dtype):
    """dense_int8 with its register tile as knobs; returns (schedule, [data, packed, out])."""
    data = te.placeholder(data_shape, data_dtype, name="data")
    packed = te.placeholder(packed_shape, weight_dtype, name="packed")
    out = dense_int8(data, packed, units)
    cfg = get_config()
    blocks = packed_shape[0]
    cfg.define_knob("tile_y", list(range(1, DENSE_ROWS + 1)))
    cfg.define_knob("tile_x", [p for p in (1, 2, 3, 4) if blocks % p == 0])
    if cfg.is_fallback:
        cfg.fallback_with("tile_y", 4)
        cfg.fallback_with("tile_x", dense_int8_panels(blocks, 4,
                                                      current_target().vector_registers))
    rows, panels = dense_int8_values(cfg)
    s = schedule_by_tag([out], {DENSE_INT8_TAG: lambda s, op, outs:
                                _schedule_dense_int8(s, op, outs, rows, panels)})
    return s, [data, packed, out]


def dense_int8_values(cfg) -> tuple:
    """(rows, panels) of a config of the dense template.

    Example:
        >>> dense_int8_values(task.default_config)  # doctest: +SKIP
        (4, 2)
    """
    return cfg["tile_y"].val, cfg["tile_x"].val


register_anchor(CONV2D_NCHWC_INT8, CONV2D_NCHWC_INT8_TEMPLATE, conv2d_nchwc_int8_args,
                conv_int8_values)
register_anchor(DENSE_INT8_TAG, DENSE_INT8_TEMPLATE, dense_int8_args, dense_int8_values)
