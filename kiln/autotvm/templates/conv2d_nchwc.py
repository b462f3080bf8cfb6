"""The x86 template of the blocked convolution (kiln.topi.nn.conv2d_nchwc), "conv2d_nchwc.x86".

Args: data shape, kernel shape, strides, padding (top, left, bottom, right), dilation, dtype.
Knobs (the schedule of kiln.topi.x86.conv2d_nchwc):
- "tile_oc": output channel blocks per register tile (1, 2, 4: those dividing the blocks; and
  the heuristic's, where it is another: a pass tile of 3, 5 or 6 blocks on AVX-512 — records
  of such a conv written before that candidate existed no longer fit the space, and the
  dispatcher says so and uses the default);
- "tile_y": output rows per tile (divisors of the height up to 16);
- "tile_x": output columns per tile (1 .. 14: a non-divisor leaves a tail);
- "reduce_order": the order of the reduction loops over input channel blocks (c), kernel rows
  (y) and columns (x), the channels of a block always innermost ("cyx", "ycx", "yxc");
- "unroll_rx": whether the kernel-column loop is unrolled;
- "pad_root": whether a padded copy is its own stage at the root, or inlined (only offered
  when the convolution has a padded copy);
- "pass_blocks": for a 1x1 convolution computed as a row of pixels where the heuristic runs
  it in passes over input channel blocks (pixel_pass_tile), 0 (one pass) or the heuristic's
  blocks per pass; else only 0. It is the last knob: records written before it existed
  read as 0, what they measured.

The fallback config is the heuristic exactly (default_tile), so an untuned template builds the
same loop program as the topi schedule.

Example:
    >>> from kiln.autotvm.task import Task
    >>> t = Task("conv2d_nchwc.x86", [[1, 1, 8, 8, 16], [2, 1, 3, 3, 16, 16], [1, 1],
    ...                               [1, 1, 1, 1], [1, 1], "float32"])
    >>> sorted(t.config_space.knobs)
    ['pad_root', 'pass_blocks', 'reduce_order', 'tile_oc', 'tile_x', 'tile_y', 'unroll_rx']
"""
from __future__ import annotations

from ... import te
from ...te.tensor import ComputeOp
from ...topi import tags
from ...topi.nn.conv2d_nchwc import CONV2D_NCHWC, conv2d_nchwc, pads_in_place, reduction_op
from ...topi.utils import get_const_tuple
from ...topi.x86.conv2d_nchwc import MAX_COLS, channel_tile, default_tile, schedule_blocked_tile
from ...topi.x86.utils import schedule_by_tag
from ..task import get_config, template
from .registry import const_ints, divisors, register_anchor

__all__ = ["CONV2D_NCHWC_TEMPLATE", "conv2d_nchwc_x86", "conv2d_nchwc_args", "blocked_conv_args"]

CONV2D_NCHWC_TEMPLATE = "conv2d_nchwc.x86"
MAX_ROWS = 16           # rows of a register tile a knob offers (the accumulator budget is 28)
# (channel blocks, ry, rx, channels of a block) -> reduction loop indices, outermost first
REDUCE_ORDERS = {"cyx": (0, 1, 2, 3), "ycx": (1, 0, 2, 3), "yxc": (1, 2, 0, 3)}


def blocked_conv_args(anchor_op, tag: str, reads_copy) -> list | None:
    """Task args of a blocked-layout convolution anchor tagged `tag`: [data shape, kernel
    shape, strides, padding, dilation, dtype]; None for another op, symbolic shapes or mixed
    dtypes. reads_copy(pads, out_width) says whether the anchor reads a padded copy (then the
    data is that copy without its border).

    Example:
        >>> blocked_conv_args(conv.op, CONV2D_NCHWC, lambda p, w: False)  # doctest: +SKIP
        [[1, 4, 56, 56, 16], [4, 4, 3, 3, 16, 16], [1, 1], [1, 1, 1, 1], [1, 1], 'float32']
    """
    if not isinstance(anchor_op, ComputeOp) or anchor_op.tag != tag:
        return None
    inputs = anchor_op.input_tensors()
    kernels = [t for t in inputs if t.ndim == 6]
    datas = [t for t in inputs if t.ndim == 5]
    if len(kernels) != 1 or len(datas) != 1:
        return None
    attrs = anchor_op.attrs
    strides, pads, dilation = (const_ints(attrs.get(k, ()))
                               for k in ("strides", "padding", "dilation"))
    out_shape = const_ints(get_const_tuple(anchor_op.output(0).shape))
    data_shape = const_ints(get_const_tuple(datas[0].shape))
    kernel_shape = const_ints(get_const_tuple(kernels[0].shape))
    if None in (strides, pads, dilation, out_shape, data_shape, kernel_shape) or len(pads) != 4:
        return None
    if any(pads) and reads_copy(pads, out_shape[3]):
        top, left, bottom, right = pads
        data_shape[2] -= top + bottom
        data_shape[3] -= left + right
    dtype = datas[0].dtype
    if anchor_op.output(0).dtype != dtype or kernels[0].dtype != dtype:
        return None
    return [data_shape, kernel_shape, strides, pads, dilation, dtype]


def conv2d_nchwc_args(anchor_op) -> list | None:
    """The task args of a conv2d_nchwc anchor (see blocked_conv_args); outputs too wide for
    in-place padding read a padded copy.

    Example:
        >>> conv2d_nchwc_args(conv.op)  # doctest: +SKIP
        [[1, 4, 56, 56, 16], [4, 4, 3, 3, 16, 16], [1, 1], [1, 1, 1, 1], [1, 1], 'float32']
    """
    return blocked_conv_args(anchor_op, CONV2D_NCHWC,
                             lambda pads, width: not pads_in_place(pads, width))


def _conv_knobs(cfg, op) -> dict:
    """Declare the knobs on cfg (fallback: default_tile); returns schedule_blocked_tile's
    keyword arguments. A 1x1 convolution computed as a row of pixels tiles that row: rows 1,
    columns pixels."""
    _, blocks, oh, ow, _ = get_const_tuple(op.output(0).shape)
    has_pad = any(isinstance(t.op, ComputeOp) and tags.is_injective(t.op.tag) and t.ndim == 5
                  for t in op.input_tensors())
    tile = default_tile(op)
    define_tile_knobs(cfg, blocks, oh, ow, tile=(tile["nblocks"], tile["rows"], tile["cols"]))
    cfg.define_knob("unroll_rx", [False, True])
    cfg.define_knob("pad_root", [True, False] if has_pad else [True])
    passes = tile.get("pass_blocks", 0)
    cfg.define_knob("pass_blocks", [0, passes] if passes else [0])
    if cfg.is_fallback:
        cfg.fallback_with("pass_blocks", passes)
    return conv_values(cfg)


def define_tile_knobs(cfg, blocks: int, oh: int, ow: int, registers: int | None = None,
                      row_tiles: bool = True, tile: tuple | None = None) -> None:
    """The blocked convolutions' register-tile knobs ("tile_oc", "tile_y", "tile_x") and
    "reduce_order" on cfg; the fallback is `tile` (channel blocks, rows, columns), default
    channel_tile's tile (`registers`, `row_tiles`: channel_tile's arguments), whose channel
    blocks "tile_oc" offers besides 1, 2 and 4.

    Example:
        >>> define_tile_knobs(cfg, 4, 56, 56)  # doctest: +SKIP
    """
    if tile is None:
        tile = channel_tile(blocks, oh, ow, registers, row_tiles)
    nblocks, rows, cols = tile
    cfg.define_knob("tile_oc", sorted({b for b in (1, 2, 4) if blocks % b == 0} | {nblocks}))
    cfg.define_knob("tile_y", divisors(oh, MAX_ROWS))
    cfg.define_knob("tile_x", list(range(1, min(ow, MAX_COLS) + 1)))
    cfg.define_knob("reduce_order", list(REDUCE_ORDERS))
    if cfg.is_fallback:
        cfg.fallback_with("tile_oc", nblocks)
        cfg.fallback_with("tile_y", rows)
        cfg.fallback_with("tile_x", cols)


def conv_values(cfg) -> dict:
    """schedule_blocked_tile's keyword arguments for a config of this template.

    Example:
        >>> conv_values(task.default_config)  # doctest: +SKIP
        {'nblocks': 2, 'rows': 1, 'cols': 14, 'pad_root': True, 'reduce_order': (0, 1, 2, 3), 'unroll_rx': False, 'pass_blocks': 0}
    """
    return {"nblocks": cfg["tile_oc"].val, "rows": cfg["tile_y"].val, "cols": cfg["tile_x"].val,
            "pad_root": cfg["pad_root"].val,
            "reduce_order": REDUCE_ORDERS[cfg["reduce_order"].val],
            "unroll_rx": cfg["unroll_rx"].val, "pass_blocks": cfg["pass_blocks"].val}


@template(CONV2D_NCHWC_TEMPLATE)
def conv2d_nchwc_x86(data_shape, kernel_shape, strides, padding, dilation, dtype="float32"):
    """Blocked conv2d (kiln.topi.nn.conv2d_nchwc) with its register tile and reduction loop
    order as knobs; returns (schedule, [data, kernel, out])."""
    data = te.placeholder(data_shape, dtype, name="data")
    kernel = te.placeholder(kernel_shape, dtype, name="kernel")
    out = conv2d_nchwc(data, kernel, strides, padding, dilation)
    values = _conv_knobs(get_config(), reduction_op(out))
    s = schedule_by_tag([out], {CONV2D_NCHWC: lambda s, op, outs:
                                schedule_blocked_tile(s, op, outs, **values)})
    return s, [data, kernel, out]


register_anchor(CONV2D_NCHWC, CONV2D_NCHWC_TEMPLATE, conv2d_nchwc_args, conv_values)
