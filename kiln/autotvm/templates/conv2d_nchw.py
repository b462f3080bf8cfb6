"""x86 templates of the NCHW convolutions (kiln.topi.nn.conv2d.conv2d_nchw, scheduled by
kiln.topi.x86.conv2d): "conv2d_nchw.x86" (groups 1), "group_conv2d_nchw.x86" and
"depthwise_conv2d_nchw.x86" (the depthwise convolutions a graph leaves in NCHW).

Args (all three): data shape (N, C, H, W), kernel shape (K, C / groups, KH, KW), strides,
padding (top, left, bottom, right), dilation, dtype; groups is C / kernel's second axis.
Knobs (the register tile of schedule_nchw_tile: channels x rows x vectorized columns):
- "tile_oc": output channels per tile (divisors of K up to 16; depthwise up to 4);
- "tile_y": output rows per tile (divisors of the height up to 4; depthwise up to 16);
- "tile_x": output columns per tile, the vectorized loop (8, 16, 32 capped at the width,
  and the whole width when it is at most 32; a non-divisor leaves a tail);
- "reduce_order": the order of the reduction loops over input channels (c), kernel rows (y)
  and columns (x): "cyx", "ycx", "yxc" (depthwise: "yx", "xy"), those that only move a
  loop of extent 1 left out;
- "unroll_kernel": which kernel loops are unrolled: "none", "rx", "ryrx" (those of
  extent 1 are not offered);
- "pad_at_tile": whether the padded input is computed per parallel block (rows of a row
  block, in cache) or once at the root (only offered when the convolution pads).
Fused into the parallel loop, the channel and row blocks are also the parallel grain.

The fallback config is the heuristic exactly (nchw_tile), so an untuned template builds the
same loop program as the topi schedule.

Example:
    >>> from kiln.autotvm.task import Task
    >>> t = Task("depthwise_conv2d_nchw.x86", [[1, 32, 28, 28], [32, 1, 3, 3], [1, 1],
    ...                                        [1, 1, 1, 1], [1, 1], "float32"])
    >>> sorted(t.config_space.knobs)
    ['pad_at_tile', 'reduce_order', 'tile_oc', 'tile_x', 'tile_y', 'unroll_kernel']
"""
from __future__ import annotations

from ... import te
from ...te.tensor import ComputeOp
from ...topi import tags
from ...topi.nn.conv2d import conv2d_nchw
from ...topi.utils import get_const_tuple
from ...topi.x86.conv2d import nchw_tile, schedule_nchw_tile
from ...topi.x86.utils import schedule_by_tag
from ..task import get_config, template
from .registry import const_ints, divisors, loads, register_anchor

__all__ = ["CONV2D_NCHW_TEMPLATE", "GROUP_CONV2D_NCHW_TEMPLATE",
           "DEPTHWISE_CONV2D_NCHW_TEMPLATE", "conv2d_nchw_x86", "group_conv2d_nchw_x86",
           "depthwise_conv2d_nchw_x86", "conv2d_nchw_args"]

CONV2D_NCHW_TEMPLATE = "conv2d_nchw.x86"
GROUP_CONV2D_NCHW_TEMPLATE = "group_conv2d_nchw.x86"
DEPTHWISE_CONV2D_NCHW_TEMPLATE = "depthwise_conv2d_nchw.x86"
_TEMPLATES = {tags.CONV2D_NCHW: CONV2D_NCHW_TEMPLATE,
              tags.GROUP_CONV2D_NCHW: GROUP_CONV2D_NCHW_TEMPLATE,
              tags.DEPTHWISE_CONV2D_NCHW: DEPTHWISE_CONV2D_NCHW_TEMPLATE}
# A depthwise tile reuses each kernel tap across rows, a channel tile across channels: the
# knobs give each room along its own reuse axis.
MAX_CHANNELS = {"depthwise": 4, "other": 16}
MAX_ROWS = {"depthwise": 16, "other": 4}
COLS = (8, 16, 32)              # one half, one, two float32 zmm vectors of columns
MAX_WHOLE_ROW = 32              # a narrower output may take its whole width as the tile
# reduction loop indices, outermost first: (rc, ry, rx) for plain / grouped, (ry, rx) depthwise
REDUCE_ORDERS = {"cyx": (0, 1, 2), "ycx": (1, 0, 2), "yxc": (1, 2, 0),
                 "yx": (0, 1), "xy": (1, 0)}


def conv2d_nchw_args(anchor_op) -> list | None:
    """The task args of an NCHW convolution anchor (plain, grouped or depthwise): [data shape,
    kernel shape, strides, padding, dilation, dtype]; None when the op is not one of them
    with constant shapes and the same input, kernel and output dtype.

    Example:
        >>> conv2d_nchw_args(conv.op)  # doctest: +SKIP
        [[1, 32, 28, 28], [32, 1, 3, 3], [1, 1], [1, 1, 1, 1], [1, 1], 'float32']
    """
    if not isinstance(anchor_op, ComputeOp) or anchor_op.tag not in _TEMPLATES:
        return None
    read = loads(anchor_op.body[0])
    if len(read) != 2:
        return None
    data, kernel = read                       # the compute reads the (padded) data first
    attrs = anchor_op.attrs
    strides, pads, dilation = (const_ints(attrs.get(k, ()))
                               for k in ("strides", "padding", "dilation"))
    data_shape = const_ints(get_const_tuple(data.shape))
    kernel_shape = const_ints(get_const_tuple(kernel.shape))
    if None in (strides, pads, dilation, data_shape, kernel_shape) or len(pads) != 4 \
            or len(data_shape) != 4 or len(kernel_shape) != 4:
        return None
    if any(pads):
        # The anchor reads the padded copy: the data is that copy without its border.
        if not (isinstance(data.op, ComputeOp) and tags.is_injective(data.op.tag)):
            return None
        top, left, bottom, right = pads
        data_shape[2] -= top + bottom
        data_shape[3] -= left + right
    dtype = data.dtype
    if anchor_op.output(0).dtype != dtype or kernel.dtype != dtype:
        return None
    return [data_shape, kernel_shape, strides, pads, dilation, dtype]


def _nchw_knobs(cfg, op) -> dict:
    """Declare the knobs on cfg (fallback: nchw_tile); returns schedule_nchw_tile's keyword
    arguments."""
    heuristic = nchw_tile(op)
    _, k, oh, ow = get_const_tuple(op.output(0).shape)
    kind = "depthwise" if op.tag == tags.DEPTHWISE_CONV2D_NCHW else "other"
    extents = get_const_tuple([iv.dom.extent for iv in op.reduce_axis])
    ry, rx = extents[-2:]
    # Orders that differ only in where a loop of extent 1 goes are one program: keep the first.
    orders: dict = {}
    for name, order in REDUCE_ORDERS.items():
        if len(order) == len(extents):
            orders.setdefault(tuple(i for i in order if extents[i] > 1), name)
    has_pad = any(isinstance(t.op, ComputeOp) and tags.is_injective(t.op.tag)
                  for t in op.input_tensors())
    whole = {ow} if ow <= MAX_WHOLE_ROW else set()

    cfg.define_knob("tile_oc", sorted(set(divisors(k, MAX_CHANNELS[kind]))
                                      | {heuristic["channels"]}))
    cfg.define_knob("tile_y", sorted(set(divisors(oh, MAX_ROWS[kind])) | {heuristic["rows"]}))
    cfg.define_knob("tile_x", sorted({min(c, ow) for c in COLS} | whole | {heuristic["cols"]}))
    cfg.define_knob("reduce_order", list(orders.values()))
    cfg.define_knob("unroll_kernel", ["none"] + (["rx"] if rx > 1 else [])
                    + (["ryrx"] if ry > 1 else []))
    cfg.define_knob("pad_at_tile", [heuristic["pad_at_tile"]]
                    + ([not heuristic["pad_at_tile"]] if has_pad else []))
    if cfg.is_fallback:
        cfg.fallback_with("tile_oc", heuristic["channels"])
        cfg.fallback_with("tile_y", heuristic["rows"])
        cfg.fallback_with("tile_x", heuristic["cols"])
        cfg.fallback_with("pad_at_tile", heuristic["pad_at_tile"])
    return nchw_values(cfg)


def nchw_values(cfg) -> dict:
    """schedule_nchw_tile's keyword arguments for a config of these templates.

    Example:
        >>> nchw_values(task.default_config())  # doctest: +SKIP
        {'channels': 1, 'rows': 7, 'cols': 16, 'pad_at_tile': True, 'reduce_order': (0, 1), 'unroll_reduce': ()}
    """
    order = REDUCE_ORDERS[cfg["reduce_order"].val]
    rx = len(order) - 1
    unroll = {"none": (), "rx": (rx,), "ryrx": (rx - 1, rx)}[cfg["unroll_kernel"].val]
    return {"channels": cfg["tile_oc"].val, "rows": cfg["tile_y"].val,
            "cols": cfg["tile_x"].val, "pad_at_tile": cfg["pad_at_tile"].val,
            "reduce_order": order, "unroll_reduce": unroll}


def template_conv(name, by_tag: dict, data_shape, kernel_shape, strides, padding, dilation,
                  dtype):
    """(data, kernel, out) of an NCHW convolution template `name` (plain, grouped or depthwise,
    by the shapes); `by_tag` names the template of each kind, and shapes that make another
    kind are an error naming its template.

    Example:
        >>> data, kernel, out = template_conv("conv2d_nchw.x86", _TEMPLATES, *args)  # doctest: +SKIP
    """
    if len(data_shape) != 4 or len(kernel_shape) != 4 or kernel_shape[1] < 1 \
            or data_shape[1] % kernel_shape[1]:
        raise ValueError(f"template '{name}': data (N, C, H, W) and kernel (K, C / groups, KH, "
                         f"KW) shapes do not fit: {data_shape} and {kernel_shape}")
    data = te.placeholder(data_shape, dtype, name="data")
    kernel = te.placeholder(kernel_shape, dtype, name="kernel")
    out = conv2d_nchw(data, kernel, strides, padding, dilation,
                      groups=data_shape[1] // kernel_shape[1])
    if by_tag[out.op.tag] != name:
        raise ValueError(f"template '{name}': these shapes make a {out.op.tag}; its template is "
                         f"'{by_tag[out.op.tag]}'")
    return data, kernel, out


def _scheduled(name, data_shape, kernel_shape, strides, padding, dilation, dtype):
    data, kernel, out = template_conv(name, _TEMPLATES, data_shape, kernel_shape, strides,
                                      padding, dilation, dtype)
    values = _nchw_knobs(get_config(), out.op)
    s = schedule_by_tag([out], {out.op.tag: lambda s, op, outs:
                                schedule_nchw_tile(s, op, outs, **values)})
    return s, [data, kernel, out]


@template(CONV2D_NCHW_TEMPLATE)
def conv2d_nchw_x86(data_shape, kernel_shape, strides, padding, dilation, dtype="float32"):
    """conv2d_nchw (groups 1) with its register tile, reduction order and unrolling as knobs;
    returns (schedule, [data, kernel, out])."""
    return _scheduled(CONV2D_NCHW_TEMPLATE, data_shape, kernel_shape, strides, padding,
                      dilation, dtype)


@template(GROUP_CONV2D_NCHW_TEMPLATE)
def group_conv2d_nchw_x86(data_shape, kernel_shape, strides, padding, dilation,
                          dtype="float32"):
    """Grouped conv2d_nchw (groups = C / kernel_shape[1]) with the knobs of conv2d_nchw.x86;
    returns (schedule, [data, kernel, out])."""
    return _scheduled(GROUP_CONV2D_NCHW_TEMPLATE, data_shape, kernel_shape, strides, padding,
                      dilation, dtype)


@template(DEPTHWISE_CONV2D_NCHW_TEMPLATE)
def depthwise_conv2d_nchw_x86(data_shape, kernel_shape, strides, padding, dilation,
                              dtype="float32"):
    """Depthwise conv2d_nchw (kernel (C * multiplier, 1, KH, KW)) with its row tile, padding
    placement and unrolling as knobs; returns (schedule, [data, kernel, out])."""
    return _scheduled(DEPTHWISE_CONV2D_NCHW_TEMPLATE, data_shape, kernel_shape, strides,
                      padding, dilation, dtype)


for _tag, _name in _TEMPLATES.items():
    register_anchor(_tag, _name, conv2d_nchw_args, nchw_values)
