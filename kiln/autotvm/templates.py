"""x86 schedule templates of kiln.topi's anchors, and the hook through which kiln.compile's
topi schedules use a dispatched config.

- "conv2d_nchwc.x86" (args: data shape, kernel shape, strides, padding (top, left, bottom,
  right), dilation, dtype): the blocked convolution's register tile — channel blocks per tile
  "tile_oc" (1, or 2 when they divide the blocks), rows "tile_y" (divisors of the output
  height up to 16), columns "tile_x" (1 .. 14: divisors of the width, or any value with a
  tail) — and "pad_root" (whether a padded copy is its own stage at the root, or inlined).
- "dense_pack.x86" (args: data shape, weight shape — (units, in), or packed panels
  (units / NR, in, NR) — units, dtype): the GEMM tile's rows "tile_y" (MR, 1 .. 16; NR is the
  panel width the packed weight fixes).

The fallback config of each is today's heuristic exactly (channel_tile / gemm_rows), so an
untuned template builds the same loop program as the topi schedule. The args of a task are
computed from the anchor op by one function per template (`conv2d_nchwc_args`,
`dense_pack_args`), used both here and by the hook, so keys agree.

Example:
    >>> from kiln.autotvm.task import Task
    >>> t = Task("conv2d_nchwc.x86", [[1, 1, 8, 8, 16], [2, 1, 3, 3, 16, 16], [1, 1],
    ...                               [1, 1, 1, 1], [1, 1], "float32"])
    >>> sorted(t.config_space.knobs)
    ['pad_root', 'tile_oc', 'tile_x', 'tile_y']
"""
from __future__ import annotations

import warnings

from .. import te
from ..target import current_target
from ..te.tensor import ComputeOp
from ..tir import expr as E
from ..tir.functor import post_order_visit
from ..topi import tags
from ..topi.nn.conv2d_nchwc import CONV2D_NCHWC, conv2d_nchwc, pads_in_place
from ..topi.nn.dense import PACK_TAG, dense
from ..topi.utils import get_const_tuple, traverse_inline
from ..topi.x86.conv2d_nchwc import MAX_COLS, channel_tile, schedule_blocked_tile
from ..topi.x86.dense import gemm_rows, schedule_gemm_tile
from ..topi.x86.utils import schedule_by_tag
from .task import DispatchContext, _canon_args, _lookup, get_config, task_key, template

__all__ = ["CONV2D_NCHWC_TEMPLATE", "DENSE_PACK_TEMPLATE", "conv2d_nchwc_x86", "dense_pack_x86",
           "conv2d_nchwc_args", "dense_pack_args", "anchor_task_args",
           "dispatched_conv2d_nchwc", "dispatched_dense_pack"]

CONV2D_NCHWC_TEMPLATE = "conv2d_nchwc.x86"
DENSE_PACK_TEMPLATE = "dense_pack.x86"
MAX_ROWS = 16           # rows of a register tile a knob offers (the accumulator budget is 28)


def _ints(values):
    """The values as Python ints, or None when one is not a constant."""
    out = []
    for v in values:
        if isinstance(v, E.IntImm):
            v = v.value
        if isinstance(v, bool) or not isinstance(v, int):
            return None
        out.append(int(v))
    return out


def _divisors(n: int, limit: int) -> list:
    return [d for d in range(1, min(n, limit) + 1) if n % d == 0]


# ------------------------------------------------------------------------------ task args
def conv2d_nchwc_args(anchor_op) -> list | None:
    """The task args of a conv2d_nchwc anchor: [data shape, kernel shape, strides, padding,
    dilation, dtype]; None when the op is not a plain conv2d_nchwc with constant shapes and
    the same input and output dtype (no template applies then).

    Example:
        >>> conv2d_nchwc_args(conv.op)  # doctest: +SKIP
        [[1, 4, 56, 56, 16], [4, 4, 3, 3, 16, 16], [1, 1], [1, 1, 1, 1], [1, 1], 'float32']
    """
    if not isinstance(anchor_op, ComputeOp) or anchor_op.tag != CONV2D_NCHWC:
        return None
    inputs = anchor_op.input_tensors()
    kernels = [t for t in inputs if t.ndim == 6]
    datas = [t for t in inputs if t.ndim == 5]
    if len(kernels) != 1 or len(datas) != 1:
        return None
    attrs = anchor_op.attrs
    strides, pads, dilation = (_ints(attrs.get(k, ())) for k in ("strides", "padding", "dilation"))
    out_shape = _ints(get_const_tuple(anchor_op.output(0).shape))
    data_shape = _ints(get_const_tuple(datas[0].shape))
    kernel_shape = _ints(get_const_tuple(kernels[0].shape))
    if None in (strides, pads, dilation, out_shape, data_shape, kernel_shape) or len(pads) != 4:
        return None
    if any(pads) and not pads_in_place(pads, out_shape[3]):
        # The anchor reads the padded copy: the data is that copy without its border.
        top, left, bottom, right = pads
        data_shape[2] -= top + bottom
        data_shape[3] -= left + right
    dtype = datas[0].dtype
    if anchor_op.output(0).dtype != dtype or kernels[0].dtype != dtype:
        return None
    return [data_shape, kernel_shape, strides, pads, dilation, dtype]


def _loads(expr) -> list:
    """Tensors read by a value expression, in order of first read."""
    found: dict = {}

    def fn(n):
        if isinstance(n, E.ProducerLoad):
            found.setdefault(n.producer, None)

    if isinstance(expr, E.Reduce):
        for src in expr.source:
            post_order_visit(src, fn)
    else:
        post_order_visit(expr, fn)
    return list(found)


def dense_pack_args(anchor_op) -> list | None:
    """The task args of a dense anchor: [data shape, weight shape, units, dtype]; the weight
    is the (units, in) operand that the compute packs itself, or the packed panels it was
    given. None when shapes are not constant or dtypes differ.

    Example:
        >>> dense_pack_args(y.op)  # doctest: +SKIP
        [[128, 768], [24, 768, 32], 768, 'float32']
    """
    if not isinstance(anchor_op, ComputeOp) or anchor_op.tag != tags.DENSE:
        return None
    loads = _loads(anchor_op.body[0])
    if len(loads) != 2:
        return None
    data, packed = loads               # dense's body reads data first, then the panels
    weight = packed
    if isinstance(packed.op, ComputeOp):
        if packed.op.tag != PACK_TAG or len(packed.op.input_tensors()) != 1:
            return None
        (weight,) = packed.op.input_tensors()
    data_shape = _ints(get_const_tuple(data.shape))
    weight_shape = _ints(get_const_tuple(weight.shape))
    out_shape = _ints(get_const_tuple(anchor_op.output(0).shape))
    if None in (data_shape, weight_shape, out_shape) or len(weight_shape) not in (2, 3):
        return None
    dtype = data.dtype
    if anchor_op.output(0).dtype != dtype or weight.dtype != dtype:
        return None
    return [data_shape, weight_shape, out_shape[-1], dtype]


_ARGS = {CONV2D_NCHWC: (CONV2D_NCHWC_TEMPLATE, conv2d_nchwc_args),
         tags.DENSE: (DENSE_PACK_TEMPLATE, dense_pack_args)}


def anchor_task_args(anchor_op) -> tuple | None:
    """(template name, args) of an anchor op that has an x86 template, else None.

    Example:
        >>> anchor_task_args(conv.op)[0]  # doctest: +SKIP
        'conv2d_nchwc.x86'
    """
    entry = _ARGS.get(getattr(anchor_op, "tag", None))
    if entry is None:
        return None
    name, fn = entry
    args = fn(anchor_op)
    return None if args is None else (name, args)


# ------------------------------------------------------------------------------ templates
def _conv_knobs(cfg, op) -> tuple:
    """Declare the conv knobs on cfg (fallback: channel_tile); returns the chosen values."""
    _, blocks, oh, ow, _ = get_const_tuple(op.output(0).shape)
    has_pad = any(isinstance(t.op, ComputeOp) and tags.is_injective(t.op.tag) and t.ndim == 5
                  for t in op.input_tensors())
    cfg.define_knob("tile_oc", [1, 2] if blocks % 2 == 0 else [1])
    cfg.define_knob("tile_y", _divisors(oh, MAX_ROWS))
    cfg.define_knob("tile_x", list(range(1, min(ow, MAX_COLS) + 1)))
    cfg.define_knob("pad_root", [True, False] if has_pad else [True])
    if cfg.is_fallback:
        nblocks, rows, cols = channel_tile(blocks, oh, ow)
        cfg.fallback_with("tile_oc", nblocks)
        cfg.fallback_with("tile_y", rows)
        cfg.fallback_with("tile_x", cols)
    return (cfg["tile_oc"].val, cfg["tile_y"].val, cfg["tile_x"].val, cfg["pad_root"].val)


@template(CONV2D_NCHWC_TEMPLATE)
def conv2d_nchwc_x86(data_shape, kernel_shape, strides, padding, dilation, dtype="float32"):
    """Blocked conv2d (kiln.topi.nn.conv2d_nchwc) with its register tile as knobs; returns
    (schedule, [data, kernel, out])."""
    data = te.placeholder(data_shape, dtype, name="data")
    kernel = te.placeholder(kernel_shape, dtype, name="kernel")
    out = conv2d_nchwc(data, kernel, strides, padding, dilation)
    values = _conv_knobs(get_config(), out.op)
    s = schedule_by_tag([out], {CONV2D_NCHWC: lambda s, op, outs:
                                schedule_blocked_tile(s, op, outs, *values)})
    return s, [data, kernel, out]


def _dense_knobs(cfg, op) -> int:
    shape = get_const_tuple(op.output(0).shape)
    default = gemm_rows(op)
    rows = [1] if len(shape) == 1 else list(range(1, min(shape[-2], MAX_ROWS) + 1))
    cfg.define_knob("tile_y", sorted(set(rows) | {default}))
    if cfg.is_fallback:
        cfg.fallback_with("tile_y", default)
    return cfg["tile_y"].val


@template(DENSE_PACK_TEMPLATE)
def dense_pack_x86(data_shape, weight_shape, units, dtype="float32"):
    """dense (kiln.topi.nn.dense) with MR, the register tile's rows, as a knob; a 3-D weight
    is already packed. Returns (schedule, [data, weight, out])."""
    data = te.placeholder(data_shape, dtype, name="data")
    weight = te.placeholder(weight_shape, dtype, name="weight")
    out = dense(data, weight, units=units if len(weight_shape) == 3 else None)
    mr = _dense_knobs(get_config(), out.op)
    s = te.create_schedule(out.op)
    traverse_inline(s, [out.op], lambda op: schedule_gemm_tile(s, op, [out], mr)
                    if op.tag == tags.DENSE else None)
    return s, [data, weight, out]


# ------------------------------------------------------------------------------ the hook
def _dispatched(name: str, args):
    """The config the current DispatchContext answers for (name, args, current target), or
    None — then the caller uses its heuristic, and the context hears of the fallback."""
    ctx = DispatchContext.current()
    if ctx is None or args is None:
        return None
    target = current_target()
    args = _canon_args(name, args)
    key = task_key(name, args, target)
    record = ctx.query(key)
    if record is not None:
        try:
            return _lookup(name).space(key, args, target).from_json(record)
        except ValueError as exc:
            warnings.warn(f"template '{name}': the logged config for {key} does not fit its "
                          f"space ({exc}); using the default config", stacklevel=3)
    ctx.on_fallback(key)
    return None


def dispatched_conv2d_nchwc(anchor_op) -> tuple | None:
    """(blocks, rows, cols, pad_root) that the current dispatch context chose for this
    conv2d_nchwc anchor, or None (no context, no answer, or no template for the op).

    Example:
        >>> with ApplyFixedConfigs({key: cfg}):  # doctest: +SKIP
        ...     dispatched_conv2d_nchwc(conv.op)
        (1, 2, 7, True)
    """
    cfg = _dispatched(CONV2D_NCHWC_TEMPLATE, conv2d_nchwc_args(anchor_op))
    if cfg is None:
        return None
    return (cfg["tile_oc"].val, cfg["tile_y"].val, cfg["tile_x"].val, cfg["pad_root"].val)


def dispatched_dense_pack(anchor_op) -> int | None:
    """MR that the current dispatch context chose for this dense anchor, or None.

    Example:
        >>> with ApplyFixedConfigs({key: cfg}):  # doctest: +SKIP
        ...     dispatched_dense_pack(y.op)
        4
    """
    cfg = _dispatched(DENSE_PACK_TEMPLATE, dense_pack_args(anchor_op))
    return None if cfg is None else cfg["tile_y"].val
