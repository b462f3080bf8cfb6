"""GPU templates of the NCHW convolutions (kiln.topi.gpu.conv2d's direct schedule):
"conv2d_nchw.gpu" (groups 1), "group_conv2d_nchw.gpu" and "depthwise_conv2d_nchw.gpu".

Args: as the x86 NCHW templates': data shape (N, C, H, W), kernel shape (K, C / groups, KH,
KW), strides, padding (top, left, bottom, right), dilation, dtype; groups is C / kernel's
second axis.
Knobs (the paper's GPU convolution template):
- "tile_f", "tile_y", "tile_x": output channels, rows and columns split four ways, [blocks,
  virtual threads, threads, outputs per thread] (common.define_tile);
- "tile_rc", "tile_ry", "tile_rx": input channels (of a group; one for depthwise), kernel rows
  and kernel columns per shared-memory fetch;
- "auto_unroll_max_step": 0, 512 or 1500.
A config past the target's threads or shared memory per block fails to build (compile_error,
naming the limit). The fallback config is kiln.topi.gpu.conv2d.default_conv_tile; a model
compiled without a tuning log does not use this schedule at all (the generic one runs).

Example:
    >>> from kiln.autotvm import Task
    >>> t = Task("conv2d_nchw.gpu", [[1, 64, 56, 56], [64, 64, 3, 3], [1, 1], [1, 1, 1, 1],
    ...                              [1, 1], "float32"], "opencl")
    >>> sorted(t.config_space.knobs)
    ['auto_unroll_max_step', 'tile_f', 'tile_rc', 'tile_rx', 'tile_ry', 'tile_x', 'tile_y']
"""
from __future__ import annotations

from ....topi import tags
from ....topi.gpu.conv2d import (ConvTile, default_conv_tile, reduce_extents,
                                  schedule_conv2d_tile)
from ....topi.utils import get_const_tuple
from ...task import get_config, template
from ..conv2d_nchw import conv2d_nchw_args, template_conv
from ..registry import register_anchor
from .common import UNROLL_STEPS, define_tile, fit_tile, tile_of

__all__ = ["CONV2D_NCHW_GPU_TEMPLATE", "GROUP_CONV2D_NCHW_GPU_TEMPLATE",
           "DEPTHWISE_CONV2D_NCHW_GPU_TEMPLATE"]

CONV2D_NCHW_GPU_TEMPLATE = "conv2d_nchw.gpu"
GROUP_CONV2D_NCHW_GPU_TEMPLATE = "group_conv2d_nchw.gpu"
DEPTHWISE_CONV2D_NCHW_GPU_TEMPLATE = "depthwise_conv2d_nchw.gpu"
_TEMPLATES = {tags.CONV2D_NCHW: CONV2D_NCHW_GPU_TEMPLATE,
              tags.GROUP_CONV2D_NCHW: GROUP_CONV2D_NCHW_GPU_TEMPLATE,
              tags.DEPTHWISE_CONV2D_NCHW: DEPTHWISE_CONV2D_NCHW_GPU_TEMPLATE}
MAX_RC = 64                     # input channels per shared-memory fetch


def _knobs(cfg, op) -> ConvTile:
    """Declare the knobs on cfg (fallback: default_conv_tile); returns the tile."""
    _, f, h, w = (int(d) for d in get_const_tuple(op.output(0).shape))
    rc, ry, rx = reduce_extents(op)
    for name, extent in (("tile_f", f), ("tile_y", h), ("tile_x", w)):
        define_tile(cfg, name, extent)
    cfg.define_split("tile_rc", rc, num_outputs=2, policy="verbose", max_factor=MAX_RC)
    cfg.define_split("tile_ry", ry, num_outputs=2)
    cfg.define_split("tile_rx", rx, num_outputs=2)
    cfg.define_knob("auto_unroll_max_step", list(UNROLL_STEPS))
    if cfg.is_fallback:
        d = default_conv_tile(op)
        for name, tile, extent in (("tile_f", d.f, f), ("tile_y", d.y, h), ("tile_x", d.x, w)):
            cfg.fallback_with(name, fit_tile(tile, extent))
        for name, step in (("tile_rc", d.rc), ("tile_ry", d.ry), ("tile_rx", d.rx)):
            cfg.fallback_with(name, [-1, step])
    return conv_values(cfg)


def conv_values(cfg) -> ConvTile:
    """The ConvTile of a config of this template.

    Example:
        >>> conv_values(task.default_config())                 # doctest: +SKIP
        ConvTile(f=(1, 4, 2), y=(1, 4, 1), x=(1, 4, 1), rc=8, ry=1, rx=3, unroll=0)
    """
    return ConvTile(tile_of(cfg, "tile_f"), tile_of(cfg, "tile_y"), tile_of(cfg, "tile_x"),
                    cfg["tile_rc"].size[-1], cfg["tile_ry"].size[-1], cfg["tile_rx"].size[-1],
                    cfg["auto_unroll_max_step"].val)


def _scheduled(name, data_shape, kernel_shape, strides, padding, dilation, dtype):
    data, kernel, out = template_conv(name, _TEMPLATES, data_shape, kernel_shape, strides,
                                      padding, dilation, dtype)
    s = schedule_conv2d_tile([out], out.op, _knobs(get_config(), out.op))
    return s, [data, kernel, out]


@template(CONV2D_NCHW_GPU_TEMPLATE)
def conv2d_nchw_gpu(data_shape, kernel_shape, strides, padding, dilation, dtype="float32"):
    """conv2d_nchw (groups 1) with the GPU tile as knobs; returns (schedule, [data, kernel,
    out])."""
    return _scheduled(CONV2D_NCHW_GPU_TEMPLATE, data_shape, kernel_shape, strides, padding,
                      dilation, dtype)


@template(GROUP_CONV2D_NCHW_GPU_TEMPLATE)
def group_conv2d_nchw_gpu(data_shape, kernel_shape, strides, padding, dilation,
                          dtype="float32"):
    """Grouped conv2d_nchw (groups = C / kernel_shape[1]) with the GPU tile as knobs; returns
    (schedule, [data, kernel, out])."""
    return _scheduled(GROUP_CONV2D_NCHW_GPU_TEMPLATE, data_shape, kernel_shape, strides,
                      padding, dilation, dtype)


@template(DEPTHWISE_CONV2D_NCHW_GPU_TEMPLATE)
def depthwise_conv2d_nchw_gpu(data_shape, kernel_shape, strides, padding, dilation,
                              dtype="float32"):
    """Depthwise conv2d_nchw (kernel (C * multiplier, 1, KH, KW)) with the GPU tile as knobs;
    returns (schedule, [data, kernel, out])."""
    return _scheduled(DEPTHWISE_CONV2D_NCHW_GPU_TEMPLATE, data_shape, kernel_shape, strides,
                      padding, dilation, dtype)


for _tag, _name in _TEMPLATES.items():
    register_anchor(_tag, _name, conv2d_nchw_args, conv_values, target_key="gpu")
